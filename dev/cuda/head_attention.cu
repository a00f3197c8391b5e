// Workbench: the joint head's batch attention (engine/cuda/head_attention.h). Checks a mixed
// packing against the double-precision reference (clef_engine_ref), then times the Clef-flash head
// (16 heads x 64) on what a forward runs: a request's options over its memory (evidence layers),
// its questions over it (decoder cross-attention), and a concurrency-16 group of 7 requests of
// ~1000 tokens. Achieved bandwidth counts K and V read once (fp32 [T, 2W]), the floor of any form.
#include <cstdio>

#include "common.h"
#include "engine/cuda/head_attention.h"
#include "support/ref/head_ref.h"

using namespace clef::engine::cuda;
using namespace clef::dev;

namespace {

constexpr int kHeads = 16, kHd = 64, kW = kHeads * kHd;

struct Packing {
  std::vector<int> nq, k0, nk;
  int queries = 0, keys = 0;
};
Packing packing(const std::vector<int>& nq, const std::vector<int>& nk) {
  Packing p;
  p.nq = nq;
  p.nk = nk;
  for (size_t r = 0; r < nk.size(); ++r) {
    p.k0.push_back(p.keys);
    p.keys += nk[r];
    p.queries += nq[r];
  }
  return p;
}

// The plan's tables on the device plus the partial scratch.
struct Launch {
  Buf table, ml, acc;
  HeadAttnTables t;
  explicit Launch(const Packing& pk) {
    const HeadAttnPlan p = plan_head_attention(pk.nq, pk.k0, pk.nk);
    std::vector<int32_t> v = p.items;
    v.insert(v.end(), p.combine.begin(), p.combine.end());
    table = Buf(v.size() * 4);
    DEV_CUDA_CHECK(cudaMemcpy(table.get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
    ml = Buf(size_t(2) * p.parts * kHeads * 4);
    acc = Buf(size_t(p.parts) * kHeads * kHd * 4);
    t = {table.get<int32_t>(), table.get<int32_t>() + p.items.size(), p.item_count(),
         p.query_count(), p.parts};
  }
  void run(const Buf& q, const Buf& kv, Buf& out) const {
    head_attention(q.get<float>(), kW, kv.get<float>(), kv.get<float>() + kW, 2 * kW, kHeads, kHd,
                   0.125f, t, ml.get<float>(), acc.get<float>(), out.get<float>(), kW, 0);
  }
};

bool check_packing(std::mt19937_64& rng) {
  const Packing pk = packing({10, 3, 40, 1}, {361, 64, 2000, 1});
  auto q = randn(rng, size_t(pk.queries) * kW, 1.5f);
  auto kv = randn(rng, size_t(pk.keys) * 2 * kW);
  auto dq = to_device<float>(q), dkv = to_device<float>(kv);
  auto out = poisoned<float>(size_t(pk.queries) * kW);
  Launch(pk).run(dq, dkv, out);
  const auto ref = clef::engine::ref::head_attention_ref(q, kv, pk.nq, pk.k0, pk.nk, kHeads, kHd);
  return check("head_attention", "mixed", to_host<float>(out, ref.size()),
               std::vector<float>(ref.begin(), ref.end()), 2e-5);
}

}  // namespace

int main() {
  print_device();
  auto rng = make_rng();
  if (!checks_pass("head_attention", [&] { return check_packing(rng); })) return 1;
  struct Row {
    std::string what;
    Packing pk;
  };
  std::vector<Row> rows;
  for (int T : bench_tokens()) {
    rows.push_back({"10 options, 1 request", packing({10}, {T})});
    rows.push_back({"3 questions, 1 request", packing({3}, {T})});
  }
  rows.push_back(
      {"70 options, 7 requests", packing(std::vector<int>(7, 10), std::vector<int>(7, 1000))});
  Timer timer;
  print_header(timer);
  for (const Row& r : rows) {
    auto q = to_device<float>(randn(rng, size_t(r.pk.queries) * kW));
    auto kv = to_device<float>(randn(rng, size_t(r.pk.keys) * 2 * kW));
    Buf out(size_t(r.pk.queries) * kW * 4);
    const Launch l(r.pk);
    const double us = timer.median_us([&] { l.run(q, kv, out); });
    print_row("head_attn", r.what, r.pk.keys, us, double(r.pk.keys) * 2 * kW * 4, kHbm);
  }
  return 0;
}
