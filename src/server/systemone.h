// POST /v1/systemone: one request from its read body to its answer, on the worker pool (parse,
// validate, encode), the InferenceQueue's engine worker (forward) and the pool again (format).
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "server/core.h"
#include "server/http_util.h"
#include "server/inference_queue.h"
#include "server/net.h"
#include "server/request_context.h"
#include "service/decider.h"

namespace clef::server::detail {

// A job on the worker pool: one /v1/systemone request from its body to its answer. It keeps the
// event loop alive (work guard) until the answer is posted back to the connection.
struct SystemOneJob {
  std::shared_ptr<Connection> conn;
  std::string body;
  RequestContext ctx;
  Reply reply;
  service::Prepared prepared;
  std::optional<QueueResult> result;
  std::exception_ptr error;
  std::shared_ptr<std::atomic<bool>> cancelled;  // set by the event loop when the client leaves
  net::executor_work_guard<net::io_context::executor_type> work;
};

void handle_systemone(Core& core, const std::shared_ptr<SystemOneJob>& job);
void finish_systemone(Core& core, const std::shared_ptr<SystemOneJob>& job);
void complete(Core& core, const std::shared_ptr<SystemOneJob>& job);

}  // namespace clef::server::detail
