// `clefserve bench compare A.json B.json`: did two runs give the same answers? Per item and
// question, the largest probability difference (noul: p(true); choice/score: every option), the
// score difference and decision flips (noul side of 0.5, choice label, score argmax level), over
// all valid answers of each run.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace clef::bench {

struct CompareGates {
  double max_probability_drift = 0.002;
  double max_score_drift = 0.002;
  long long max_flips = 0;
  // B ran a sub-manifest of A's (e.g. public231-short of public231-shape): A's items that B never
  // asked for are left out, not failed. An item B asked for and did not answer still fails.
  bool b_subset = false;
};

struct CompareResult {
  size_t items_compared = 0;
  size_t questions_compared = 0;
  size_t only_in_a = 0, only_in_b = 0;  // items with valid answers in one run only
  size_t not_asked_in_b = 0;            // b_subset: A's items absent from B's requests
  double max_probability_drift = 0.0;
  std::string max_probability_where;
  double max_score_drift = 0.0;
  std::string max_score_where;
  long long flips = 0;
  std::vector<std::string> flip_details;  // first few
  std::vector<std::string> failed_gates;  // empty = pass
  bool passed() const { return failed_gates.empty(); }
};

// Throws std::runtime_error when a report is not a bench report.
CompareResult compare_reports(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b,
                              const CompareGates& gates);
std::string compare_summary(const CompareResult& r, const CompareGates& gates);

}  // namespace clef::bench
