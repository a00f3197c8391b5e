// Quality scoring of docs/spec/benchmark.md against a manifest's expected values: choice_acc,
// noul_acc (yes when p(true) > 0.5), score_acc (argmax level) and score_mae (|sum i*p_i -
// expected|), ties going to the first label in the item's tie order (JevBench `labels`).
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/manifest.h"

namespace clef::bench {

// The decision an answer makes for a question: the chosen label (noul "yes"/"no", choice key, score
// level as its decimal text). nullopt when the answer lacks what is needed (never after
// check_response).
std::optional<std::string> decision_of(const QuestionSpec& q, const nlohmann::ordered_json& answer);

struct QualityCounts {
  size_t choice_n = 0, choice_ok = 0;
  size_t noul_n = 0, noul_ok = 0;
  size_t score_n = 0, score_ok = 0;
  double score_abs_err_sum = 0.0;
  size_t unanswered = 0;  // questions with an expected value whose item never got a valid answer
  void add(const QualityCounts& o);
};

// Scores one item; `answers` is the response's answers object, or nullptr when the item had no
// valid answer.
QualityCounts score_item(const Item& item, const nlohmann::ordered_json* answers);

// {"choice_acc", "noul_acc", "score_acc", "score_mae" (null when there is nothing to score),
// "n_choice",
//  "n_noul", "n_score", "unanswered"}
nlohmann::ordered_json quality_json(const QualityCounts& c);

}  // namespace clef::bench
