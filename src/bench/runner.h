// The closed-loop campaign (docs/spec/benchmark.md): `concurrency` workers, each with its own
// keep-alive connection, send the next request only when their previous answer arrived; first
// `warmup` requests (not counted), then `traversals` passes over every item. Each request is
// clocked from just before the POST until its body was received, parsed and schema-checked.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/manifest.h"
#include "bench/target.h"

namespace clef::bench {

enum class Outcome { Ok, HttpStatus, Transport, InvalidBody };
const char* outcome_name(Outcome o);

struct RequestRecord {
  size_t item = 0;    // index into the manifest
  int traversal = 0;  // 0-based; -1 for warm-up
  double latency_ms = 0.0;
  int http_status = 0;  // 0 when no response arrived
  Outcome outcome = Outcome::Transport;
  std::string error;               // why it failed (empty when ok)
  long long input_tokens = -1;     // usage.input_tokens of a valid answer
  nlohmann::ordered_json answers;  // the valid answer's "answers" object, else null
  // The server's own times from its Server-Timing header (ms): absent when it sent no header or the
  // header lacks that metric. latency_ms - server_total_ms is what the path outside the server's
  // clock (network, HTTP, the bench's JSON checks) costs.
  bool server_timing_sent = false;
  std::optional<double> server_total_ms, server_queue_ms, server_forward_ms;
};

struct RunOptions {
  int concurrency = 1;
  int warmup = 5;
  int traversals = 3;
  ClientOptions client;
};

struct CampaignResult {
  std::vector<RequestRecord> warmup;
  std::vector<RequestRecord> measured;  // in planned order: traversal-major, manifest order
  double measured_wall_s = 0.0;         // first measured POST to last measured answer
  // The server's /metrics just before the first measured POST and just after the last answer
  // (bench/server_batches.h reads them); empty, with metrics_error saying why, when unreadable.
  std::string metrics_before, metrics_after, metrics_error;
  std::string start_utc, end_utc;
};

// Never throws for server-side trouble: every request ends as a record with its outcome.
CampaignResult run_campaign(const Manifest& m, const Target& t, const RunOptions& opts,
                            std::FILE* progress);

// One clocked request on `cli`.
RequestRecord timed_request(httplib::Client& cli, const Target& t, const httplib::Headers& headers,
                            const Item& item);

std::string utc_now_iso8601();

}  // namespace clef::bench
