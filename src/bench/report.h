// The campaign report (docs/spec/benchmark.md): report.json with every number, the evidence and
// every request; report.md, a short Markdown table; latency.svg.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/evidence.h"
#include "bench/manifest.h"
#include "bench/runner.h"

namespace clef::bench {

inline constexpr const char* kClockName = "post_to_body_json_and_schema_validation";

struct ReportInputs {
  const Manifest* manifest = nullptr;
  const CampaignResult* campaign = nullptr;
  const ServerEvidence* server = nullptr;
  std::string url;
  std::string model;
  RunOptions run;
  std::optional<double> cold_start_ms;  // set when --spawn started the server
  // --gemm-floor-tokens-per-s: the GEMM floor's tokens/s at this run's batch size (`clefserve
  // profile --batch`); the report then gives the GEMM-bound ceiling, that rate over the mean
  // request's input tokens, and this run's fraction of it.
  std::optional<double> gemm_floor_tokens_per_s;
  std::string spawn_command;
};

nlohmann::ordered_json build_report(const ReportInputs& in);
std::string report_markdown(const nlohmann::ordered_json& report);
std::string report_svg(const nlohmann::ordered_json& report);

// Writes DIR/report.json, DIR/report.md and DIR/latency.svg (creating DIR). Throws
// std::runtime_error.
void write_report_files(const nlohmann::ordered_json& report, const std::string& dir);

}  // namespace clef::bench
