#include "bench/response_check.h"

#include <cmath>
#include <set>

namespace clef::bench {

using Json = nlohmann::ordered_json;

namespace {

bool is_probability(const Json& v) {
  if (!v.is_number()) return false;
  const double x = v.get<double>();
  return std::isfinite(x) && x >= 0.0 && x <= 1.0;
}

// Checks a {"key": p} object against the expected key set; empty string when fine.
std::string check_distribution(const Json& probs, const std::vector<std::string>& keys,
                               const std::string& where) {
  if (!probs.is_object()) return where + ": probabilities is not an object";
  if (probs.size() != keys.size())
    return where + ": " + std::to_string(probs.size()) + " probabilities for " +
           std::to_string(keys.size()) + " options";
  double sum = 0.0;
  for (const auto& k : keys) {
    auto it = probs.find(k);
    if (it == probs.end()) return where + ": no probability for option '" + k + "'";
    if (!is_probability(*it))
      return where + ": probability of '" + k + "' is not a finite number in [0, 1]";
    sum += it->get<double>();
  }
  if (std::fabs(sum - 1.0) > kProbabilitySumTolerance)
    return where + ": probabilities sum to " + std::to_string(sum);
  return {};
}

std::string check_answer(const QuestionSpec& q, const Json& a) {
  const std::string where = "answer '" + q.id + "'";
  if (!a.is_object()) return where + " is not an object";
  auto type = a.find("type");
  if (type == a.end() || !type->is_string() ||
      type->get<std::string>() != encoding::question_type_name(q.type))
    return where + ": type is not \"" + encoding::question_type_name(q.type) + "\"";
  switch (q.type) {
    case QuestionType::Noul: {
      auto p = a.find("noul");
      if (p == a.end() || !is_probability(*p))
        return where + ": noul is not a finite number in [0, 1]";
      return {};
    }
    case QuestionType::Choice: {
      auto c = a.find("choice");
      if (c == a.end() || !c->is_string()) return where + ": choice is not a string";
      bool known = false;
      for (const auto& o : q.options) known = known || o == c->get<std::string>();
      if (!known) return where + ": choice '" + c->get<std::string>() + "' is not an option";
      auto conf = a.find("confidence");
      if (conf == a.end() || !is_probability(*conf)) return where + ": confidence is not in [0, 1]";
      auto probs = a.find("probabilities");
      return probs == a.end() ? where + ": no probabilities"
                              : check_distribution(*probs, q.options, where);
    }
    case QuestionType::Score: {
      auto s = a.find("score");
      const double top = static_cast<double>(q.options.size() - 1);
      if (s == a.end() || !s->is_number() || !std::isfinite(s->get<double>()) ||
          s->get<double>() < 0.0 || s->get<double>() > top + 1e-4)
        return where + ": score is not a finite number in [0, " +
               std::to_string(q.options.size() - 1) + "]";
      auto conf = a.find("confidence");
      if (conf == a.end() || !is_probability(*conf)) return where + ": confidence is not in [0, 1]";
      auto probs = a.find("probabilities");
      return probs == a.end() ? where + ": no probabilities"
                              : check_distribution(*probs, q.options, where);
    }
  }
  return where + ": unknown question type";
}

}  // namespace

std::string check_response(const Item& item, const std::string& body, CheckedResponse* out) {
  Json doc;
  try {
    doc = Json::parse(body);
  } catch (const Json::exception& e) {
    return std::string("body is not JSON (") + e.what() + ")";
  }
  if (!doc.is_object()) return "body is not a JSON object";
  auto model = doc.find("model");
  if (model == doc.end() || !model->is_string() || model->get<std::string>() != item.model)
    return "model is not echoed (expected \"" + item.model + "\")";
  auto answers = doc.find("answers");
  if (answers == doc.end() || !answers->is_object()) return "no answers object";
  if (answers->size() != item.questions.size())
    return std::to_string(answers->size()) + " answers for " +
           std::to_string(item.questions.size()) + " questions";
  size_t k = 0;
  for (const auto& [qid, a] : answers->items()) {
    const QuestionSpec& q = item.questions[k++];
    if (qid != q.id)
      return "answer '" + qid + "' where question '" + q.id + "' was expected (order)";
    if (auto why = check_answer(q, a); !why.empty()) return why;
  }
  auto usage = doc.find("usage");
  if (usage == doc.end() || !usage->is_object()) return "no usage object";
  auto tokens = usage->find("input_tokens");
  if (tokens == usage->end() || !tokens->is_number_integer() || tokens->get<long long>() < 0)
    return "usage.input_tokens is not a non-negative integer";
  if (out) {
    out->input_tokens = tokens->get<long long>();
    out->answers = std::move(*answers);
  }
  return {};
}

}  // namespace clef::bench
