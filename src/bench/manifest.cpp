#include "bench/manifest.h"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/pinning.h"

namespace clef::bench {

// ordered_json keeps member order, so a manifest's request is sent with its keys in the order the
// file wrote them (question and option order carry meaning).
using Json = nlohmann::ordered_json;

bool Item::has_expected() const {
  for (const auto& q : questions) {
    if (q.expected_label || q.expected_level) return true;
  }
  return false;
}

namespace {

struct LineError {
  std::string why;
};

QuestionSpec read_question(const std::string& qid, const Json& q) {
  if (!q.is_object()) throw LineError{"question '" + qid + "' is not an object"};
  auto t = q.find("type");
  if (t == q.end() || !t->is_string()) throw LineError{"question '" + qid + "' has no string type"};
  QuestionSpec spec;
  spec.id = qid;
  const std::string type = t->get<std::string>();
  auto criteria = q.find("criteria");
  if (type == "noul") {
    spec.type = QuestionType::Noul;
  } else if (type == "choice") {
    spec.type = QuestionType::Choice;
    if (criteria == q.end() || !criteria->is_object() || criteria->empty())
      throw LineError{"choice question '" + qid + "' needs a non-empty criteria object"};
    for (const auto& [key, value] : criteria->items()) spec.options.push_back(key);
  } else if (type == "score") {
    spec.type = QuestionType::Score;
    if (criteria == q.end() || !criteria->is_array() || criteria->empty())
      throw LineError{"score question '" + qid + "' needs a non-empty criteria array"};
    for (size_t i = 0; i < criteria->size(); ++i) spec.options.push_back(std::to_string(i));
  } else {
    throw LineError{"question '" + qid + "' has unknown type '" + type + "'"};
  }
  spec.tie_order = spec.options;
  return spec;
}

// JevBench's `labels` give the tie order; options it does not name keep their request order after
// them.
void apply_labels(QuestionSpec& spec, const Json& labels) {
  if (spec.type != QuestionType::Choice || !labels.is_array()) return;
  std::vector<std::string> order;
  std::set<std::string> options(spec.options.begin(), spec.options.end()), seen;
  for (const auto& l : labels) {
    if (l.is_string() && options.count(l.get<std::string>()) &&
        seen.insert(l.get<std::string>()).second)
      order.push_back(l.get<std::string>());
  }
  for (const auto& o : spec.options) {
    if (!seen.count(o)) order.push_back(o);
  }
  spec.tie_order = std::move(order);
}

void apply_expected(QuestionSpec& spec, const Json& e) {
  if (e.is_null()) return;  // JevBench: a score item without a level is not scored
  switch (spec.type) {
    case QuestionType::Noul:
      if (e.is_boolean()) {
        spec.expected_label = e.get<bool>() ? "yes" : "no";
      } else if (e.is_string() && (e == "yes" || e == "no")) {
        spec.expected_label = e.get<std::string>();
      } else {
        throw LineError{"noul question '" + spec.id +
                        "': expected must be \"yes\", \"no\" or a bool"};
      }
      return;
    case QuestionType::Choice: {
      if (!e.is_string())
        throw LineError{"choice question '" + spec.id + "': expected must be an option key"};
      const auto label = e.get<std::string>();
      bool found = false;
      for (const auto& o : spec.options) found = found || o == label;
      if (!found)
        throw LineError{"choice question '" + spec.id + "': expected '" + label +
                        "' is not one of its options"};
      spec.expected_label = label;
      return;
    }
    case QuestionType::Score: {
      long long level = -1;
      if (e.is_number_integer()) {
        level = e.get<long long>();
      } else if (e.is_number_float() && std::isfinite(e.get<double>()) &&
                 e.get<double>() == std::floor(e.get<double>()) &&
                 std::fabs(e.get<double>()) < 1e15) {
        level = static_cast<long long>(e.get<double>());  // 2.0 written by a float-minded tool
      } else if (e.is_string() && !e.get<std::string>().empty() &&
                 e.get<std::string>().find_first_not_of("0123456789") == std::string::npos &&
                 e.get<std::string>().size() < 10) {
        level = std::stoll(e.get<std::string>());
      } else {
        throw LineError{"score question '" + spec.id +
                        "': expected must be an integer level or null"};
      }
      if (level < 0 || level >= static_cast<long long>(spec.options.size()))
        throw LineError{"score question '" + spec.id + "': expected level " +
                        std::to_string(level) + " is outside 0.." +
                        std::to_string(spec.options.size() - 1)};
      spec.expected_level = level;
      return;
    }
  }
}

std::string id_text(const Json& id, size_t line_no) {
  if (id.is_string()) return id.get<std::string>();
  if (id.is_number_integer()) return id.dump();
  if (id.is_null()) return "line-" + std::to_string(line_no);
  throw LineError{"id must be a string or an integer"};
}

std::string tier_of(const Json& rec, const std::string& id, const std::string& key) {
  if (key == "id-prefix") {
    auto dash = id.find('-');
    return dash == std::string::npos || dash == 0 ? std::string("all") : id.substr(0, dash);
  }
  auto field = [&](const char* name) -> std::optional<std::string> {
    auto it = rec.find(name);
    if (it != rec.end() && it->is_string() && !it->get<std::string>().empty())
      return it->get<std::string>();
    return std::nullopt;
  };
  if (!key.empty()) return field(key.c_str()).value_or("all");
  if (auto t = field("tier")) return *t;
  if (auto s = field("split")) return *s;
  return "all";
}

Item read_item(const Json& rec, size_t line_no, const ManifestOptions& opts) {
  if (!rec.is_object()) throw LineError{"a line must be a JSON object"};
  Item item;
  auto id = rec.find("id");
  item.id = id_text(id == rec.end() ? Json() : *id, line_no);
  item.tier = tier_of(rec, item.id, opts.tier_key);
  const Json* expected = rec.contains("expected") ? &rec["expected"] : nullptr;

  Json request;
  if (rec.contains("request")) {
    request = rec["request"];
    if (!request.is_object()) throw LineError{"\"request\" must be an object"};
    if (opts.override_model || !request.contains("model")) request["model"] = opts.model;
    auto qs = request.find("questions");
    if (qs == request.end() || !qs->is_object() || qs->empty())
      throw LineError{"\"request\" needs a non-empty questions object"};
    for (const auto& [qid, q] : qs->items()) item.questions.push_back(read_question(qid, q));
    if (expected && !expected->is_null()) {
      if (expected->is_object()) {
        for (const auto& [qid, e] : expected->items()) {
          QuestionSpec* target = nullptr;
          for (auto& q : item.questions) target = q.id == qid ? &q : target;
          if (!target) throw LineError{"expected names unknown question '" + qid + "'"};
          apply_expected(*target, e);
        }
      } else if (item.questions.size() == 1) {
        apply_expected(item.questions[0], *expected);
      } else {
        throw LineError{"expected must be an object {question id: value} for several questions"};
      }
    }
  } else {
    if (!rec.contains("state"))
      throw LineError{"a JevBench record needs \"state\" (or use \"request\")"};
    if (!rec.contains("question")) throw LineError{"a JevBench record needs \"question\""};
    request = Json::object();
    request["model"] = opts.model;
    request["state"] = rec["state"];
    request["questions"] = Json::object();
    request["questions"]["decision"] = rec["question"];
    item.questions.push_back(read_question("decision", rec["question"]));
    if (rec.contains("labels")) apply_labels(item.questions[0], rec["labels"]);
    if (expected) apply_expected(item.questions[0], *expected);
  }
  const auto& model = request["model"];
  item.model = model.is_string() ? model.get<std::string>() : model.dump();
  item.body = request.dump();
  return item;
}

}  // namespace

Manifest parse_manifest(const std::string& text, const std::string& path,
                        const ManifestOptions& opts) {
  Manifest m;
  m.path = path;
  m.sha256 = model::sha256_hex(text);
  std::istringstream in(text);
  std::string line;
  std::set<std::string> ids;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    try {
      Item item = read_item(Json::parse(line), line_no, opts);
      if (!ids.insert(item.id).second) throw LineError{"duplicate id '" + item.id + "'"};
      m.items.push_back(std::move(item));
    } catch (const LineError& e) {
      throw ManifestError(where + e.why);
    } catch (const Json::exception& e) {
      throw ManifestError(where + "invalid JSON (" + e.what() + ")");
    }
  }
  if (m.items.empty()) throw ManifestError(path + ": no items");
  return m;
}

Manifest load_manifest(const std::string& path, const ManifestOptions& opts) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ManifestError(path + ": cannot open the manifest");
  std::ostringstream buf;
  buf << f.rdbuf();
  if (f.bad()) throw ManifestError(path + ": read error");
  return parse_manifest(buf.str(), path, opts);
}

}  // namespace clef::bench
