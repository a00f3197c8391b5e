// Our rounded systemone() response vs the reference's, as tests/golden/README.md ("What matches
// means") defines it for the CPU float32 engine: the same response except where a value sits on a
// rounding boundary. The engine's float32 sums run in an order that depends on the machine and the
// thread count (OpenBLAS kernels), which moves the unrounded values by up to ~1e-5 here (the
// contract allows |dp| <= 1e-4), so a value near a 4-decimal boundary may round either way; only
// that case may differ, and only by one unit of the 4th decimal. Header-only, like cli_runner.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/golden_models.h"
#include "json/value.h"

namespace clef::testsupport {

// option id -> the reference's unrounded fp32 probability, per question id (GoldenRecord's form).
using ReferenceProbabilities = std::map<std::string, std::map<std::string, double>>;

namespace rounded_detail {

inline std::string num(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

inline std::string kind_name(json::Kind k) {
  switch (k) {
    case json::Kind::Null:
      return "null";
    case json::Kind::Bool:
      return "bool";
    case json::Kind::Int:
      return "int";
    case json::Kind::Float:
      return "float";
    case json::Kind::String:
      return "string";
    case json::Kind::Array:
      return "array";
    case json::Kind::Object:
      return "object";
  }
  return "?";
}

// One question's probabilities in model order (option ids from our raw member).
struct QuestionProbs {
  std::vector<std::string> ids;
  std::vector<double> ours, reference;
};

class Comparator {
 public:
  Comparator(const json::Value& ours, const json::Value& reference,
             const ReferenceProbabilities& ref_probs, std::vector<std::string>* accepted)
      : ref_probs_(ref_probs), accepted_(accepted) {
    if (ours.is_object()) raw_ = ours.find("raw");
    if (reference.is_object()) ref_answers_ = reference.find("answers");
    if (!raw_ || !raw_->is_object())
      out_.push_back("response.raw: ours has no raw member (decide with raw=true)");
  }

  void compare(const std::string& path, const json::Value& a, const json::Value& b) {
    if (a.kind() != b.kind()) {
      // A rounded 0.0/1.0 is still a float; an int where the reference has a float is a mismatch.
      out_.push_back(path + ": ours is " + kind_name(a.kind()) + " " + json::dumps(a) +
                     ", reference is " + kind_name(b.kind()) + " " + json::dumps(b));
      return;
    }
    switch (a.kind()) {
      case json::Kind::Null:
        return;
      case json::Kind::Bool:
        if (a.as_bool() != b.as_bool()) differ(path, a, b);
        return;
      case json::Kind::Int:
        if (a.int_text() != b.int_text()) differ(path, a, b);
        return;
      case json::Kind::String:
        if (a.as_string() != b.as_string()) differ(path, a, b);
        return;
      case json::Kind::Float:
        compare_float(path, a.as_double(), b.as_double());
        return;
      case json::Kind::Array: {
        const auto& x = a.items();
        const auto& y = b.items();
        if (x.size() != y.size())
          out_.push_back(path + ": ours has " + std::to_string(x.size()) +
                         " items, reference has " + std::to_string(y.size()));
        for (size_t i = 0; i < std::min(x.size(), y.size()); ++i)
          compare(path + "[" + std::to_string(i) + "]", x[i], y[i]);
        return;
      }
      case json::Kind::Object:
        compare_object(path, a, b);
        return;
    }
  }

  std::vector<std::string> take() { return std::move(out_); }

 private:
  void differ(const std::string& path, const json::Value& a, const json::Value& b) {
    out_.push_back(path + ": ours " + json::dumps(a) + ", reference " + json::dumps(b));
  }

  void compare_object(const std::string& path, const json::Value& a, const json::Value& b) {
    // Ours without what the reference never emits: the raw member we asked for and the note of a
    // state cut (the reference cuts silently).
    std::vector<const json::Member*> mine;
    for (const auto& m : a.members()) {
      if (path == "response" && m.first == "raw") continue;
      if (path == "response.usage" && m.first == "truncated_state_tokens") continue;
      mine.push_back(&m);
    }
    std::vector<std::string> common_ours, common_ref;
    for (const auto* m : mine) {
      if (b.find(m->first))
        common_ours.push_back(m->first);
      else
        out_.push_back(path + "." + m->first + ": ours has it, the reference does not");
    }
    for (const auto& m : b.members()) {
      bool found = false;
      for (const auto* o : mine) found = found || o->first == m.first;
      if (found)
        common_ref.push_back(m.first);
      else
        out_.push_back(path + "." + m.first + ": missing from ours (reference " +
                       json::dumps(m.second) + ")");
    }
    if (common_ours != common_ref) {
      std::string o, r;
      for (const auto& k : common_ours) o += (o.empty() ? "" : ",") + k;
      for (const auto& k : common_ref) r += (r.empty() ? "" : ",") + k;
      out_.push_back(path + ": key order differs: ours [" + o + "], reference [" + r + "]");
    }
    for (const auto* m : mine)
      if (const json::Value* theirs = b.find(m->first))
        compare(path + "." + m->first, m->second, *theirs);
  }

  void compare_float(const std::string& path, double ours, double ref) {
    // Byte for byte as printed (Python repr), so -0.0 vs 0.0 counts as a difference too.
    if (json::python_float_repr(ours) == json::python_float_repr(ref)) return;
    const std::string head = path + ": ours " + json::python_float_repr(ours) + ", reference " +
                             json::python_float_repr(ref);
    const long long ko = std::llround(ours * 1e4), kr = std::llround(ref * 1e4);
    if (std::fabs(ours - ko * 1e-4) > 1e-12 || std::fabs(ref - kr * 1e-4) > 1e-12) {
      out_.push_back(head + " (not both 4-decimal values)");
      return;
    }
    if (std::llabs(ko - kr) != 1) {
      out_.push_back(
          head + " (" + std::to_string(std::llabs(ko - kr)) +
          " units of the 4th decimal apart; at most 1, and only on a rounding boundary)");
      return;
    }
    std::string why;
    const auto unrounded = unrounded_pair(path, &why);
    if (!unrounded) {
      out_.push_back(head + " (one unit apart, but " + why + ")");
      return;
    }
    const auto [uo, ur] = *unrounded;
    const std::string values = " (unrounded: ours " + num(uo) + ", reference " + num(ur) + ")";
    constexpr double kSlack = 1e-9;  // the decimal boundary itself is not exactly representable
    const double boundary = (static_cast<double>(std::min(ko, kr)) + 0.5) * 1e-4;
    if (boundary < std::min(uo, ur) - kSlack || boundary > std::max(uo, ur) + kSlack) {
      out_.push_back(head + values + ": one unit apart, but the rounding boundary " +
                     num(boundary) + " is not between the unrounded values");
      return;
    }
    // Each rounded value must be its own unrounded value rounded, or the exception proves nothing.
    if (std::fabs(ours - uo) > 0.5e-4 + kSlack || std::fabs(ref - ur) > 0.5e-4 + kSlack) {
      out_.push_back(head + values + ": a rounded value is not its unrounded value rounded");
      return;
    }
    if (accepted_)
      accepted_->push_back(head + values + ": accepted, the unrounded values straddle " +
                           num(boundary));
  }

  // The unrounded quantity behind response.answers.<q>.<field>[.<option>], ours and the
  // reference's, computed as src/answer/answer.cpp computes it from the probabilities.
  std::optional<std::pair<double, double>> unrounded_pair(const std::string& path,
                                                          std::string* why) {
    const std::string prefix = "response.answers.";
    if (path.compare(0, prefix.size(), prefix) != 0) {
      *why = "it is not an answer's number";
      return std::nullopt;
    }
    // Question and option ids may hold '.', so match the field names against the raw member's ids.
    if (!raw_ || !raw_->is_object()) {
      *why = "ours has no raw member";
      return std::nullopt;
    }
    const std::string rest = path.substr(prefix.size());
    for (const auto& [qid, raw_q] : raw_->members()) {
      if (rest.compare(0, qid.size() + 1, qid + ".") != 0) continue;
      const std::string field = rest.substr(qid.size() + 1);
      const auto probs = question_probs(qid, raw_q, why);
      if (!probs) return std::nullopt;
      const std::string type = question_type(qid);
      auto index_of = [&](const std::string& oid) -> std::optional<size_t> {
        for (size_t i = 0; i < probs->ids.size(); ++i)
          if (probs->ids[i] == oid) return i;
        return std::nullopt;
      };
      if (field.compare(0, 14, "probabilities.") == 0 && (type == "choice" || type == "score")) {
        if (const auto i = index_of(field.substr(14)))
          return std::make_pair(probs->ours[*i], probs->reference[*i]);
      } else if (field == "noul" && type == "noul") {
        return std::make_pair(probs->ours[0], probs->reference[0]);
      } else if (field == "confidence" && (type == "choice" || type == "score")) {
        // For a choice this is p[choice], which is the max p.
        return std::make_pair(*std::max_element(probs->ours.begin(), probs->ours.end()),
                              *std::max_element(probs->reference.begin(), probs->reference.end()));
      } else if (field == "score" && type == "score") {
        double so = 0.0, sr = 0.0;
        for (size_t i = 0; i < probs->ids.size(); ++i) {
          so += static_cast<double>(i) * probs->ours[i];
          sr += static_cast<double>(i) * probs->reference[i];
        }
        return std::make_pair(so, sr);
      }
      continue;  // a longer question id may share this prefix
    }
    *why = "no unrounded quantity is known for it";
    return std::nullopt;
  }

  std::string question_type(const std::string& qid) const {
    if (!ref_answers_) return "";
    const json::Value* q = ref_answers_->find(qid);
    const json::Value* t = q && q->is_object() ? q->find("type") : nullptr;
    return t && t->is_string() ? t->as_string() : "";
  }

  std::optional<QuestionProbs> question_probs(const std::string& qid, const json::Value& raw_q,
                                              std::string* why) const {
    const json::Value* ids = raw_q.is_object() ? raw_q.find("option_ids") : nullptr;
    const json::Value* p = raw_q.is_object() ? raw_q.find("probabilities") : nullptr;
    const auto ref = ref_probs_.find(qid);
    if (!ids || !ids->is_array() || !p || !p->is_object() || ref == ref_probs_.end()) {
      *why = "question " + qid + " lacks raw option_ids/probabilities or reference probabilities";
      return std::nullopt;
    }
    QuestionProbs out;
    for (const auto& id : ids->items()) {
      const json::Value* mine = id.is_string() ? p->find(id.as_string()) : nullptr;
      const auto theirs = id.is_string() ? ref->second.find(id.as_string()) : ref->second.end();
      if (!mine || !mine->is_number() || theirs == ref->second.end()) {
        *why = "option " + json::dumps(id) + " of " + qid + " lacks a raw or reference probability";
        return std::nullopt;
      }
      out.ids.push_back(id.as_string());
      out.ours.push_back(mine->as_double());
      out.reference.push_back(theirs->second);
    }
    if (out.ids.empty() || out.ids.size() != ref->second.size()) {
      *why = "the options of " + qid + " differ from the reference's";
      return std::nullopt;
    }
    return out;
  }

  const ReferenceProbabilities& ref_probs_;
  std::vector<std::string>* accepted_;
  const json::Value* raw_ = nullptr;
  const json::Value* ref_answers_ = nullptr;
  std::vector<std::string> out_;
};

}  // namespace rounded_detail

// Every way `ours` (a response decided with raw=true) differs from `reference` (the reference's
// rounded response), one readable line each; empty when they match. Structure, key order,
// strings (the chosen option included), integers and bools must be identical, and every float
// equal as printed, except that a float may be one unit of the 4th decimal off when the boundary
// between the two rounded values lies between our unrounded value of that quantity and the
// reference's (inclusive, 1e-9 slack), and each rounded value is its own unrounded one rounded.
// Ignored: ours' "raw" member and its usage.truncated_state_tokens note. `accepted`, when given,
// receives a line per boundary difference that was let through.
inline std::vector<std::string> rounded_response_mismatches(
    const json::Value& ours, const json::Value& reference, const ReferenceProbabilities& ref_probs,
    std::vector<std::string>* accepted = nullptr) {
  rounded_detail::Comparator c(ours, reference, ref_probs, accepted);
  c.compare("response", ours, reference);
  return c.take();
}

inline std::vector<std::string> rounded_response_mismatches(
    const json::Value& ours, const testing::GoldenRecord& record,
    std::vector<std::string>* accepted = nullptr) {
  return rounded_response_mismatches(ours, record.response, record.probabilities, accepted);
}

// The mismatches one per line, for an assertion message.
inline std::string mismatch_lines(const std::vector<std::string>& mismatches) {
  std::string s;
  for (const auto& m : mismatches) s += "\n  " + m;
  return s;
}

}  // namespace clef::testsupport
