// Shared by tests/engine and tests/service: the golden tiny models and their reference_fp32 records
// (tests/golden/models/<m>.expected.jsonl, produced by Cloudflare's reference; see
// tests/golden/README.md).
#pragma once

#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "encoding/encode.h"
#include "encoding/request.h"
#include "json/value.h"
#include "model/release.h"
#include "model/safetensors.h"

namespace clef::testing {

inline std::string golden_dir() {
  return std::string(CLEF_SOURCE_DIR) + "/tests/golden/models";
}

struct GoldenRecord {
  int line = 0;
  json::Value request;
  int32_t max_length = 16384;
  int64_t input_tokens = 0;
  std::map<std::string, std::vector<double>> logits;                   // model order
  std::map<std::string, std::map<std::string, double>> probabilities;  // option id -> p
  // reference_bf16's probabilities (the reference's own bf16 run: its noise); empty when absent.
  std::map<std::string, std::map<std::string, double>> probabilities_bf16;
  json::Value response;       // rounded systemone() answer
  std::string debug_tensors;  // "" when absent
};

inline const json::Value& member(const json::Value& v, const std::string& key) {
  const json::Value* m = v.find(key);
  if (!m) throw std::runtime_error("fixture record has no '" + key + "'");
  return *m;
}

inline std::vector<GoldenRecord> load_golden(const std::string& model) {
  std::ifstream in(golden_dir() + "/" + model + ".expected.jsonl");
  if (!in) throw std::runtime_error("cannot open the golden records of " + model);
  std::vector<GoldenRecord> out;
  std::string line;
  for (int n = 0; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    json::ParseError err;
    auto v = json::parse(line, &err);
    if (!v) throw std::runtime_error(model + " line " + std::to_string(n) + ": " + err.message);
    GoldenRecord r;
    r.line = n;
    r.request = member(*v, "request");
    if (const json::Value* ml = v->find("max_length"))
      r.max_length = static_cast<int32_t>(*ml->as_int64());
    const json::Value& ref = member(*v, "reference_fp32");
    r.input_tokens = *member(ref, "input_tokens").as_int64();
    for (const auto& [qid, arr] : member(ref, "logits").members())
      for (const auto& x : arr.items()) r.logits[qid].push_back(x.as_double());
    for (const auto& [qid, obj] : member(ref, "probabilities").members())
      for (const auto& [oid, p] : obj.members()) r.probabilities[qid][oid] = p.as_double();
    r.response = member(ref, "response");
    if (const json::Value* b = v->find("reference_bf16"))
      for (const auto& [qid, obj] : member(*b, "probabilities").members())
        for (const auto& [oid, p] : obj.members()) r.probabilities_bf16[qid][oid] = p.as_double();
    if (const json::Value* d = v->find("debug_tensors")) r.debug_tensors = d->as_string();
    out.push_back(std::move(r));
  }
  return out;
}

using Probabilities = std::map<std::string, std::map<std::string, double>>;

// reference_bf16's probabilities, one map per fixture record (in load_golden's order).
inline std::vector<Probabilities> load_reference_bf16(const std::string& model) {
  std::vector<Probabilities> out;
  for (auto& r : load_golden(model)) out.push_back(std::move(r.probabilities_bf16));
  return out;
}

// The fixtures were made with the reference's silent state cut, i.e. truncation "allow".
inline encoding::EncodeOptions golden_encode_options(const GoldenRecord& r) {
  encoding::EncodeOptions o;
  o.max_length = r.max_length;
  o.truncation = encoding::Truncation::Allow;
  return o;
}

inline std::shared_ptr<const model::Release> load_golden_model(const std::string& model) {
  static std::map<std::string, std::shared_ptr<const model::Release>> cache;  // test-only reuse
  auto& slot = cache[model];
  if (!slot) slot = model::Release::load(golden_dir() + "/" + model);
  return slot;
}

// Every golden record of `model` encoded as the reference encoded it, in file order.
inline std::vector<encoding::EncodedRequest> encode_golden(const std::string& model) {
  const auto release = load_golden_model(model);
  std::vector<encoding::EncodedRequest> out;
  for (const auto& r : load_golden(model))
    out.push_back(encoding::encode_request(encoding::validate_request(r.request),
                                           *release->tokenizer, golden_encode_options(r)));
  return out;
}

// A float32 tensor of a record's debug_tensors file (hidden states), its raw values: no bf16
// loading rule. Throws when the file has no such tensor or it is not F32.
inline std::vector<float> f32_tensor(const model::SafetensorsFile& f, const std::string& name) {
  const model::Tensor* t = f.find(name);
  if (!t) throw std::runtime_error(f.path() + " has no " + name);
  if (t->dtype != model::DType::F32) throw std::runtime_error(name + " is not F32");
  std::vector<float> out(t->numel());
  std::memcpy(out.data(), t->data, out.size() * sizeof(float));
  return out;
}

}  // namespace clef::testing
