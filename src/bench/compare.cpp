#include "bench/compare.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>

namespace clef::bench {

using Json = nlohmann::ordered_json;

namespace {

// id -> every valid answers object of the run.
std::map<std::string, std::vector<const Json*>> answers_by_id(const Json& report,
                                                              const char* name) {
  if (!report.is_object() || !report.contains("requests") || !report["requests"].is_array())
    throw std::runtime_error(std::string(name) +
                             " is not a clefserve bench report (no requests array)");
  std::map<std::string, std::vector<const Json*>> out;
  for (const auto& r : report["requests"]) {
    if (!r.is_object() || !r.contains("id") || !r["id"].is_string())
      throw std::runtime_error(std::string(name) + ": a request has no string id");
    auto& slot = out[r["id"].get<std::string>()];
    if (r.value("outcome", "") == "ok" && r.contains("answer") && r["answer"].is_object())
      slot.push_back(&r["answer"]);
  }
  return out;
}

std::string decision(const Json& a) {
  const std::string type = a.value("type", "");
  if (type == "noul" && a.contains("noul") && a["noul"].is_number())
    return a["noul"].get<double>() > 0.5 ? "yes" : "no";
  if (type == "choice" && a.contains("choice")) return a["choice"].dump();
  if (type == "score" && a.contains("probabilities") && a["probabilities"].is_object()) {
    std::string best;
    double bp = -1;
    for (const auto& [k, v] : a["probabilities"].items()) {
      if (v.is_number() && v.get<double>() > bp) {
        bp = v.get<double>();
        best = k;
      }
    }
    return best;
  }
  return a.dump();
}

double num_or_nan(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : std::nan("");
}

}  // namespace

CompareResult compare_reports(const Json& a, const Json& b, const CompareGates& gates) {
  const auto A = answers_by_id(a, "A");
  const auto B = answers_by_id(b, "B");
  CompareResult res;
  for (const auto& [id, list] : A) {
    auto it = B.find(id);
    const bool in_b = it != B.end() && !it->second.empty();
    if (gates.b_subset && it == B.end()) {
      res.not_asked_in_b += !list.empty();
      continue;
    }
    if (list.empty() || !in_b) {
      res.only_in_a += !list.empty() && !in_b;
      continue;
    }
    ++res.items_compared;
    const Json& first = *list.front();
    for (const auto& [qid, qa0] : first.items()) {
      ++res.questions_compared;
      bool flipped = false;
      for (const Json* x : list) {
        for (const Json* y : it->second) {
          const std::string where = id + "/" + qid;
          if (!x->contains(qid) || !y->contains(qid)) {
            flipped = true;
            continue;
          }
          const Json& qa = (*x)[qid];
          const Json& qb = (*y)[qid];
          if (qa.value("type", "") != qb.value("type", "") || decision(qa) != decision(qb))
            flipped = true;
          // Probability drift over every probability the answer reports.
          auto drift = [&](double pa, double pb) {
            const double d = std::isnan(pa) || std::isnan(pb) ? INFINITY : std::fabs(pa - pb);
            if (res.max_probability_where.empty() || d > res.max_probability_drift) {
              res.max_probability_drift = d;
              res.max_probability_where = where;
            }
          };
          if (qa.value("type", "") == "noul") drift(num_or_nan(qa, "noul"), num_or_nan(qb, "noul"));
          if (qa.contains("probabilities") && qa["probabilities"].is_object()) {
            const Json& pa = qa["probabilities"];
            const Json* pb = qb.contains("probabilities") ? &qb["probabilities"] : nullptr;
            for (const auto& [k, v] : pa.items()) {
              const double vb = pb && pb->contains(k) ? num_or_nan(*pb, k.c_str()) : std::nan("");
              drift(v.is_number() ? v.get<double>() : std::nan(""), vb);
            }
            if (pb && pb->size() != pa.size()) drift(0.0, std::nan(""));
          }
          if (qa.value("type", "") == "score") {
            const double sa = num_or_nan(qa, "score"), sb = num_or_nan(qb, "score");
            const double d = std::isnan(sa) || std::isnan(sb) ? INFINITY : std::fabs(sa - sb);
            if (res.max_score_where.empty() || d > res.max_score_drift) {
              res.max_score_drift = d;
              res.max_score_where = where;
            }
          }
        }
      }
      if (flipped) {
        ++res.flips;
        if (res.flip_details.size() < 10) res.flip_details.push_back(id + "/" + qid);
      }
    }
  }
  for (const auto& [id, list] : B) {
    auto it = A.find(id);
    if (!list.empty() && (it == A.end() || it->second.empty())) ++res.only_in_b;
  }
  if (res.items_compared == 0) res.failed_gates.push_back("no item has valid answers in both runs");
  if (res.only_in_a || res.only_in_b)
    res.failed_gates.push_back(std::to_string(res.only_in_a) + " item(s) answered only in A, " +
                               std::to_string(res.only_in_b) + " only in B");
  if (res.max_probability_drift > gates.max_probability_drift)
    res.failed_gates.push_back("probability drift " + std::to_string(res.max_probability_drift) +
                               " > " + std::to_string(gates.max_probability_drift));
  if (res.max_score_drift > gates.max_score_drift)
    res.failed_gates.push_back("score drift " + std::to_string(res.max_score_drift) + " > " +
                               std::to_string(gates.max_score_drift));
  if (res.flips > gates.max_flips)
    res.failed_gates.push_back(std::to_string(res.flips) + " decision flip(s) > " +
                               std::to_string(gates.max_flips));
  return res;
}

std::string compare_summary(const CompareResult& r, const CompareGates& g) {
  const std::string not_asked =
      g.b_subset ? ", not asked in B " + std::to_string(r.not_asked_in_b) : "";
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "items compared %zu (questions %zu), answered only in A %zu, only in B %zu%s\n"
                "max probability drift %.6g (gate %.6g)%s%s\nmax score drift %.6g (gate %.6g)%s%s\n"
                "decision flips %lld (gate %lld)\n",
                r.items_compared, r.questions_compared, r.only_in_a, r.only_in_b, not_asked.c_str(),
                r.max_probability_drift, g.max_probability_drift,
                r.max_probability_where.empty() ? "" : " at ", r.max_probability_where.c_str(),
                r.max_score_drift, g.max_score_drift, r.max_score_where.empty() ? "" : " at ",
                r.max_score_where.c_str(), r.flips, g.max_flips);
  std::string out = buf;
  for (const auto& f : r.flip_details) out += "  flip: " + f + "\n";
  if (r.passed()) {
    out += "PASS\n";
  } else {
    for (const auto& f : r.failed_gates) out += "FAIL: " + f + "\n";
  }
  return out;
}

}  // namespace clef::bench
