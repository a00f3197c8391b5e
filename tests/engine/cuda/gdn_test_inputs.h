// Random inputs of the chunked gated delta rule (engine/cuda/gdn/gdn.h) for the GPU tests: on the
// device in both forms of GdnInputs, and on the host as the reference reads them. The forms carry
// the same q, k, v: q = float(xq rq), k = float(xk rk) (support/ref/random_inputs.h
// GdnFactoredRows), v bf16-exact, so every path is compared against one truth.
#pragma once

#include <cmath>
#include <random>
#include <vector>

#include "engine/cuda/gdn/gdn.h"
#include "engine/cuda/gpu_test_util.h"
#include "engine/cuda/kernel_path.h"

namespace clef::gputest {

// Head counts and dims of a GDN test case.
struct GdnHeads {
  int Hk, Hv, dk, dv;
};

struct GdnTestInputs {
  // host, what ref::gated_delta_rule_ref reads: q, k [T, Hk, d], v [T, Hv, dv], g, beta [T, Hv]
  std::vector<float> q, k, v, g, beta;
  engine::cuda::DeviceBuffer dq, dk, dv;               // fp32 form: q, k, v
  engine::cuda::DeviceBuffer dxq, dxk, dxv, drq, drk;  // bf16 form: x (bf16) and factors (fp32)
  engine::cuda::DeviceBuffer dg, dbeta;                // both forms

  // One form only (the other's pointers null): the bf16 one (tensor-core path) or the fp32 one.
  engine::cuda::GdnInputs form(bool bf16_form) const {
    engine::cuda::GdnInputs in;
    if (bf16_form) {
      in.xq = dxq.get<__nv_bfloat16>(), in.xk = dxk.get<__nv_bfloat16>();
      in.xv = dxv.get<__nv_bfloat16>();
      in.rq = drq.get<float>(), in.rk = drk.get<float>();
    } else {
      in.q = dq.get<float>(), in.k = dk.get<float>(), in.v = dv.get<float>();
    }
    in.g = dg.get<float>(), in.beta = dbeta.get<float>();
    return in;
  }
  // The form gdn_chunked takes for these head dims, output storage and path.
  engine::cuda::GdnInputs form_for(int dk_, int dv_, bool bf16,
                                   engine::cuda::KernelPath path) const {
    return form(engine::cuda::gdn_takes_bf16_inputs(dk_, dv_, bf16, path));
  }
};

// g in [g_min, 0], beta in [0, 1].
inline GdnTestInputs gdn_test_inputs(std::mt19937_64& rng, int T, int Hk, int Hv, int dk, int dv,
                                     float g_min) {
  const size_t heads = size_t(T) * Hk;
  const auto q = engine::ref::gdn_factored_rows(rng, heads, dk, 1.0 / std::sqrt(double(dk)));
  const auto k = engine::ref::gdn_factored_rows(rng, heads, dk, 1.0);
  GdnTestInputs in;
  in.q = q.q, in.k = k.q;
  in.v = randn(rng, size_t(T) * Hv * dv);
  round_all_bf16(in.v);
  in.g = randu(rng, size_t(T) * Hv, g_min, 0.0f);
  in.beta = randu(rng, size_t(T) * Hv, 0.0f, 1.0f);
  in.dq = to_device<float>(in.q), in.dk = to_device<float>(in.k), in.dv = to_device<float>(in.v);
  in.dxq = to_device<__nv_bfloat16>(q.x), in.dxk = to_device<__nv_bfloat16>(k.x);
  in.dxv = to_device<__nv_bfloat16>(in.v);
  in.drq = to_device<float>(q.r), in.drk = to_device<float>(k.r);
  in.dg = to_device<float>(in.g), in.dbeta = to_device<float>(in.beta);
  return in;
}

}  // namespace clef::gputest
