#include "cli/profile_invariance.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>

#include "cli/synthetic_request.h"
#include "service/decider.h"
#ifdef CLEF_HAVE_CUDA
#include "engine/cuda/cuda_engine.h"
#endif

namespace clef::cli {
namespace {

// Largest |a - b| and how many values differ at all.
struct Diff {
  double max_abs = 0;
  size_t differ = 0, n = 0;
  void add(float x, float y) {
    ++n;
    if (x == y || (std::isnan(x) && std::isnan(y))) return;
    ++differ;
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(x - y)));
  }
};

// Every option logit of two answers to the same request; `same_shape` false where their question
// or option counts differ.
Diff logits_diff(const engine::ForwardOutput& a, const engine::ForwardOutput& b, bool& same_shape) {
  Diff d;
  same_shape = a.logits.size() == b.logits.size();
  for (size_t q = 0; q < std::min(a.logits.size(), b.logits.size()); ++q) {
    same_shape &= a.logits[q].size() == b.logits[q].size();
    for (size_t k = 0; k < std::min(a.logits[q].size(), b.logits[q].size()); ++k)
      d.add(a.logits[q][k], b.logits[q][k]);
  }
  return d;
}

void print_row(const char* what, int seq, int len, const Diff& d) {
  std::printf("| %s | %d | %d | %.3g | %zu of %zu |\n", what, seq, len, d.max_abs, d.differ, d.n);
}

}  // namespace

int run_invariance_check(const InvarianceArgs& a, const std::shared_ptr<const model::Release>& r,
                         engine::Engine& eng) {
  if (a.lengths.size() < 2) throw std::runtime_error("--invariance: give two or more --lengths");
  bool all_equal = true;
  std::printf(
      "\n| compared | sequence | tokens | max abs diff | values that differ "
      "|\n|---|---:|---:|---:|---:|\n");
  // 1. The served path: each request's option logits alone and inside the pack.
  std::vector<service::Prepared> ps;
  for (int L : a.lengths) {
    service::DeciderOptions o;
    o.encode.max_length = L;
    o.encode.truncation = encoding::Truncation::Allow;
    service::Decider d(r, o);
    ps.push_back(d.prepare(request_of_length(d, r->name, L)));
  }
  std::vector<const encoding::EncodedRequest*> batch;
  for (const auto& p : ps) batch.push_back(&p.encoded);
  const std::vector<engine::ForwardOutput> packed = eng.forward(batch);
  // Determinism: the same pack again gives the same bits.
  const std::vector<engine::ForwardOutput> again = eng.forward(batch);
  for (size_t i = 0; i < ps.size(); ++i) {
    bool same_shape = true;
    const Diff d = logits_diff(packed.at(i), again.at(i), same_shape);
    all_equal &= d.differ == 0 && same_shape;
    print_row("logits, the pack twice", static_cast<int>(i),
              static_cast<int>(batch[i]->input_ids.size()), d);
  }
  for (size_t i = 0; i < ps.size(); ++i) {
    bool same_shape = true;
    const Diff d = logits_diff(eng.forward({batch[i]}).at(0), packed.at(i), same_shape);
    if (!same_shape) throw std::runtime_error("--invariance: question counts differ");
    all_equal &= d.differ == 0;
    print_row("logits (served path)", static_cast<int>(i),
              static_cast<int>(batch[i]->input_ids.size()), d);
  }
  // 2. The backbone's rows after each layer count, random ids (seeded), alone against packed
  // (the CUDA engine's diagnostics; the CPU engine's answers are compared above only).
#ifdef CLEF_HAVE_CUDA
  if (auto* c = dynamic_cast<engine::cuda::CudaEngine*>(&eng)) {
    std::mt19937 rng(a.seed);
    const int vocab = std::min(r->text.vocab_size > 0 ? r->text.vocab_size : 1000, 100000);
    std::uniform_int_distribution<int> tok(0, vocab - 1);
    std::vector<std::vector<int32_t>> seqs;
    for (int L : a.lengths) {
      seqs.emplace_back(L);
      for (auto& t : seqs.back()) t = tok(rng);
    }
    const int H = r->text.hidden_size;
    for (int layers : a.layers) {
      const std::vector<float> p = c->packed_hidden_state(seqs, layers);
      size_t row0 = 0;
      char what[64];
      std::snprintf(what, sizeof what, layers < 0 ? "hidden, all layers" : "hidden after %d layers",
                    layers);
      for (size_t i = 0; i < seqs.size(); ++i) {
        const std::vector<float> alone = c->packed_hidden_state({seqs[i]}, layers);
        Diff d;
        for (size_t j = 0; j < alone.size(); ++j) d.add(alone[j], p[row0 * H + j]);
        all_equal &= d.differ == 0;
        print_row(what, static_cast<int>(i), static_cast<int>(seqs[i].size()), d);
        row0 += seqs[i].size();
      }
    }
  } else
#endif
  {
    std::printf("hidden rows: not compared (the CUDA engine's diagnostic)\n");
  }
  std::printf("%s\n", all_equal ? "invariance: every value equal bit for bit"
                                : "invariance: some values differ");
  return all_equal ? 0 : 3;
}

}  // namespace clef::cli
