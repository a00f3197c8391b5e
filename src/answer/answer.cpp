// Option logits -> System One answer JSON (docs/spec/encoding.md §6).
#include "answer/answer.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace clef::answer {
namespace {

json::Value rounded(double x) {
  return json::Value::floating(json::python_round(x, 4));
}

}  // namespace

std::vector<float> softmax_f32(const std::vector<float>& logits) {
  // As torch's CPU softmax over the last dim: max, exp(x - max), a sequential sum, then a multiply
  // by the reciprocal of the sum (this reproduces the reference's fp32 probabilities bit for bit in
  // most cases; the rest differ by 1 ulp, from its vectorised exp).
  std::vector<float> p(logits.size());
  if (logits.empty()) return p;
  float m = logits[0];
  for (float x : logits) m = std::fmax(m, x);
  float sum = 0.0f;
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::exp(logits[i] - m);
    sum += p[i];
  }
  const float inv = 1.0f / sum;
  for (float& x : p) x *= inv;
  return p;
}

json::Value make_response(const encoding::ValidatedRequest& req,
                          const encoding::EncodedRequest& enc,
                          const std::vector<std::vector<float>>& logits, bool raw) {
  if (logits.size() != req.questions.size())
    throw std::invalid_argument("make_response: " + std::to_string(logits.size()) +
                                " logit rows for " + std::to_string(req.questions.size()) +
                                " questions");
  json::Value answers = json::Value::object();
  json::Value raw_out = json::Value::object();
  for (size_t k = 0; k < req.questions.size(); ++k) {
    const encoding::Question& q = req.questions[k];
    if (logits[k].size() != q.options.size())
      throw std::invalid_argument("make_response: question " + q.id + " has " +
                                  std::to_string(q.options.size()) + " options but " +
                                  std::to_string(logits[k].size()) + " logits");
    const std::vector<float> pf = softmax_f32(logits[k]);
    std::vector<double> p(pf.begin(), pf.end());
    for (double x : p)
      if (!std::isfinite(x))
        throw std::runtime_error("non-finite probability for question " + q.id);

    json::Value a = json::Value::object();
    a.set("type", json::Value::string(encoding::question_type_name(q.type)));
    switch (q.type) {
      case encoding::QuestionType::Noul:
        a.set("noul", rounded(p[0]));  // options are (true, false)
        break;
      case encoding::QuestionType::Choice: {
        // Highest p; a tie goes to the earliest key in REQUEST order (Python max over the dict).
        size_t best = q.request_order[0];
        for (size_t idx : q.request_order)
          if (p[idx] > p[best]) best = idx;
        json::Value probs = json::Value::object();
        for (size_t idx : q.request_order) probs.set(q.options[idx].id, rounded(p[idx]));
        a.set("choice", json::Value::string(q.options[best].id));
        a.set("confidence", rounded(p[best]));
        a.set("probabilities", std::move(probs));
        break;
      }
      case encoding::QuestionType::Score: {
        double score = 0.0, confidence = p[0];
        for (size_t i = 0; i < p.size(); ++i) {
          score += static_cast<double>(i) * p[i];
          if (p[i] > confidence) confidence = p[i];
        }
        json::Value legend = json::Value::object();
        json::Value probs = json::Value::object();
        for (size_t i = 0; i < p.size(); ++i) {
          legend.set(q.options[i].id, q.options[i].description);  // criteria[i], unchanged
          probs.set(q.options[i].id, rounded(p[i]));
        }
        a.set("score", rounded(score));
        a.set("confidence", rounded(confidence));
        a.set("legend", std::move(legend));
        a.set("probabilities", std::move(probs));
        break;
      }
    }
    answers.set(q.id, std::move(a));

    if (raw) {
      json::Value ids = json::Value::array();
      json::Value lg = json::Value::array();
      json::Value probs = json::Value::object();
      for (size_t i = 0; i < q.options.size(); ++i) {
        ids.push_back(json::Value::string(q.options[i].id));
        lg.push_back(json::Value::floating(logits[k][i]));
        probs.set(q.options[i].id, json::Value::floating(p[i]));
      }
      json::Value r = json::Value::object();
      r.set("option_ids", std::move(ids));
      r.set("logits", std::move(lg));
      r.set("probabilities", std::move(probs));
      raw_out.set(q.id, std::move(r));
    }
  }

  json::Value usage = json::Value::object();
  usage.set("input_tokens", json::Value::integer(static_cast<int64_t>(enc.input_ids.size())));
  usage.set("output_tokens", json::Value::integer(0));
  if (enc.truncated_state_tokens > 0)
    usage.set("truncated_state_tokens", json::Value::integer(enc.truncated_state_tokens));

  json::Value out = json::Value::object();
  out.set("model", json::Value::string(req.model));
  out.set("answers", std::move(answers));
  out.set("usage", std::move(usage));
  if (raw) out.set("raw", std::move(raw_out));
  return out;
}

}  // namespace clef::answer
