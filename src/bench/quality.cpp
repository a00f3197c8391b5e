#include "bench/quality.h"

#include <cmath>

namespace clef::bench {

using Json = nlohmann::ordered_json;

namespace {

// Highest probability; ties go to the earliest key in `order`.
std::optional<std::string> argmax(const std::vector<std::string>& order, const Json& probs) {
  if (!probs.is_object()) return std::nullopt;
  std::optional<std::string> best;
  double best_p = -1.0;
  for (const auto& key : order) {
    auto it = probs.find(key);
    if (it == probs.end() || !it->is_number()) return std::nullopt;
    const double p = it->get<double>();
    if (p > best_p) {
      best_p = p;
      best = key;
    }
  }
  return best;
}

}  // namespace

std::optional<std::string> decision_of(const QuestionSpec& q, const Json& answer) {
  if (!answer.is_object()) return std::nullopt;
  switch (q.type) {
    case QuestionType::Noul: {
      auto p = answer.find("noul");
      if (p == answer.end() || !p->is_number()) return std::nullopt;
      return p->get<double>() > 0.5 ? "yes" : "no";
    }
    case QuestionType::Choice:
    case QuestionType::Score: {
      auto probs = answer.find("probabilities");
      if (probs == answer.end()) return std::nullopt;
      return argmax(q.tie_order, *probs);
    }
  }
  return std::nullopt;
}

void QualityCounts::add(const QualityCounts& o) {
  choice_n += o.choice_n;
  choice_ok += o.choice_ok;
  noul_n += o.noul_n;
  noul_ok += o.noul_ok;
  score_n += o.score_n;
  score_ok += o.score_ok;
  score_abs_err_sum += o.score_abs_err_sum;
  unanswered += o.unanswered;
}

QualityCounts score_item(const Item& item, const Json* answers) {
  QualityCounts c;
  for (const auto& q : item.questions) {
    if (!q.expected_label && !q.expected_level) continue;
    const Json* a = nullptr;
    if (answers && answers->is_object()) {
      auto it = answers->find(q.id);
      if (it != answers->end()) a = &*it;
    }
    auto decision = a ? decision_of(q, *a) : std::nullopt;
    const bool has_score = a && a->contains("score") && a->at("score").is_number();
    if (!decision || (q.type == QuestionType::Score && !has_score)) {
      ++c.unanswered;
      continue;
    }
    switch (q.type) {
      case QuestionType::Noul:
        ++c.noul_n;
        c.noul_ok += *decision == *q.expected_label;
        break;
      case QuestionType::Choice:
        ++c.choice_n;
        c.choice_ok += *decision == *q.expected_label;
        break;
      case QuestionType::Score: {
        ++c.score_n;
        c.score_ok += *decision == std::to_string(*q.expected_level);
        // The server's own sum i*p_i (from unrounded p, rounded to 4 decimals).
        const double score = a->at("score").get<double>();
        c.score_abs_err_sum += std::fabs(score - static_cast<double>(*q.expected_level));
        break;
      }
    }
  }
  return c;
}

Json quality_json(const QualityCounts& c) {
  auto ratio = [](size_t ok, size_t n) { return n ? Json(static_cast<double>(ok) / n) : Json(); };
  Json j = Json::object();
  j["choice_acc"] = ratio(c.choice_ok, c.choice_n);
  j["noul_acc"] = ratio(c.noul_ok, c.noul_n);
  j["score_acc"] = ratio(c.score_ok, c.score_n);
  j["score_mae"] = c.score_n ? Json(c.score_abs_err_sum / static_cast<double>(c.score_n)) : Json();
  j["n_choice"] = c.choice_n;
  j["n_noul"] = c.noul_n;
  j["n_score"] = c.score_n;
  j["unanswered"] = c.unanswered;
  return j;
}

}  // namespace clef::bench
