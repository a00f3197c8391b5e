#include "server/systemone.h"

#include "encoding/encode.h"
#include "encoding/request.h"
#include "json/value.h"
#include "server/connection.h"

namespace clef::server::detail {

// Worker pool: the body was read completely by the event loop; parse, then the decider validates,
// checks the model name and encodes, then the queue.
// No shutting-down check: a request that got this far is in flight and is finished in the drain.
void handle_systemone(Core& core, const std::shared_ptr<SystemOneJob>& job) {
  const auto handler_start = Clock::now();
  auto done = [&](Reply r) {
    job->reply = std::move(r);
    complete(core, job);
  };
  json::ParseError perr;
  auto body = json::parse(job->body, &perr);
  if (!body) return done(detail_reply(400, "Malformed JSON: " + perr.message));
  std::string().swap(job->body);

  try {
    job->prepared = core.decider->prepare(*body);
  } catch (const encoding::RequestError& e) {
    if (e.status == 422) return done(validation_reply(e.error));
    return done(detail_reply(e.status, e.error.msg));
  }
  job->ctx.encode_ms = ms_between(handler_start, Clock::now());
  // The engine worker calls back; the answer is formatted on the pool again, not on the engine's
  // thread.
  const bool queued = core.queue.submit(
      job->prepared.encoded,
      [&core, job](QueueResult* r, std::exception_ptr err) {
        if (r) job->result = std::move(*r);
        job->error = err;
        core.pool.post([&core, job] { finish_systemone(core, job); });
      },
      job->cancelled);
  if (!queued) {
    Reply r = detail_reply(429, "The request queue is full; retry later");
    r.headers.emplace_back("Retry-After", "1");
    return done(std::move(r));
  }
}

void finish_systemone(Core& core, const std::shared_ptr<SystemOneJob>& job) {
  auto& ctx = job->ctx;
  json::Value answer;
  try {
    if (job->error) std::rethrow_exception(job->error);
    const QueueResult& out = *job->result;
    const auto answer_start = Clock::now();
    ctx.queue_ms = out.queue_s * 1e3;
    ctx.forward_ms = out.forward_s * 1e3;
    answer = core.decider->finish(job->prepared, out.output);
    ctx.answer_ms = ms_between(answer_start, Clock::now());
  } catch (const Cancelled&) {
    // Dropped before its batch: the connection logs it as 499 (there is no one to answer).
    job->reply = detail_reply(499, "Client closed the connection");
    return complete(core, job);
  } catch (const std::exception& e) {
    // Engine failures and non-finite probabilities: logged with the id, never sent to the client.
    core.log.error("internal_error", {{"id", ctx.id}, {"error", e.what()}});
    job->reply = detail_reply(500, "Internal Server Error (request id " + ctx.id + ")");
    return complete(core, job);
  }
  const auto& enc = job->prepared.encoded;
  ctx.input_tokens = static_cast<int64_t>(enc.input_ids.size());
  ctx.truncated_state_tokens = enc.truncated_state_tokens;
  core.metrics.add_tokens(enc.input_ids.size(), static_cast<size_t>(enc.truncated_state_tokens));
  Reply r = json_reply(200, json::dumps(answer));
  if (enc.truncated_state_tokens > 0)
    r.headers.emplace_back("X-Clef-State-Truncated", std::to_string(enc.truncated_state_tokens));
  job->reply = std::move(r);
  complete(core, job);
}

// Back to the event loop with the answer.
void complete(Core& core, const std::shared_ptr<SystemOneJob>& job) {
  net::post(core.ioc, [job] {
    auto conn = std::move(job->conn);
    conn->ctx() = job->ctx;
    conn->reply(std::move(job->reply));
  });
}

}  // namespace clef::server::detail
