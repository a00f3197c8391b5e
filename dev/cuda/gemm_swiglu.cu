// workbench_gemm_swiglu: the MLP's gate_up GEMM with SwiGLU in its epilogue (perf-log v29d route
// 3), a Hopper GEMM of our own (TMA + wgmma, sm_90a), against what the engine runs today: the
// fastest of cuBLASLt's heuristic answers for gate_up [M, 2I] = x [M, K] W^T, then swiglu_vec8.
// The fused kernel never writes gate_up's [M, 2I] bf16 (344 MB at 7k rows) nor reads it back.
//
// Layout: W's rows are regrouped once (host side, at load in an engine) into blocks of 256: the
// block's 128 gate rows, then the same features' 128 up rows. A CTA tile is 128 rows x one such
// block, so every thread's accumulators hold gate and up of the same features (the m64n256
// fragment puts column c and c + 128 in one thread) and the epilogue forms
// bf16(bf16(silu(bf16(g))) * bf16(u)), the swiglu kernel's arithmetic on the GEMM's rounded output.
// The only difference from the unfused path is the fp32 accumulation order inside the GEMM.
//
// Kernel: persistent (one CTA an SM), 384 threads: warpgroup 0 a TMA producer (one thread), two
// consumer warpgroups of 64 rows each running m64n256k16 wgmmas from 128B-swizzled K-major tiles;
// BK 64, 4 stages (192 KiB). Tiles ordered in bands of 16 row tiles, the weight block outer within
// a band, so a wave's A rows (16 MB) and weight blocks (~2 MB each) stay in L2.
//
// Usage: CLEF_BENCH_MS=384,1024,7040 workbench_gemm_swiglu (the default M list). Checks first (the
// fused output against a double-precision host reference on sampled rows and against the
// cuBLASLt + swiglu output everywhere), then times. Draft: written in session 36, not yet run.
#include <cublasLt.h>
#include <cuda.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "common.h"
#include "engine/cuda/attention/wgmma_ops.cuh"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/kernels/elementwise.h"

namespace clef::dev {
// A named namespace (not an anonymous one): the device helpers are unused in the passes for
// targets without sm_90a features, and unused internal functions would warn there.
namespace swiglu_gemm {

using bf16 = __nv_bfloat16;
constexpr int BM = 128, BN = 256, BK = 64, kStages = 4, kBand = 16;
constexpr int kThreads = 384;
constexpr int kABytes = BM * BK * 2, kBBytes = BN * BK * 2;
constexpr size_t kSmem = size_t(kStages) * (kABytes + kBBytes) + 1024 + 2 * kStages * 8;

#define LT_CHECK(call)                                                                       \
  do {                                                                                       \
    cublasStatus_t st_ = (call);                                                             \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                      \
      std::fprintf(stderr, "cuBLASLt error %d in %s (%s:%d)\n", int(st_), #call, __FILE__, \
                   __LINE__);                                                                \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Until the phase of parity `parity` has completed (a fresh barrier: parity 1 passes at once).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
// K-major tile of 128-byte rows under the 128B swizzle (TMA's CU_TENSOR_MAP_SWIZZLE_128B): 8-row
// groups 1024 bytes apart (SBO); LBO unused; the k16 step advances the start by 32 bytes.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins the accumulators after a wait: the wgmmas wrote them asynchronously, and without this the
// compiler may read them before the wait.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}

struct TileOrder {
  int tm, tn;  // row tiles (ceil(M / BM)), weight blocks (2I / BN)
  __device__ void at(int t, int& m, int& n) const {
    const int band = t / (kBand * tn), first = band * kBand;
    const int rows = min(kBand, tm - first), i = t - band * kBand * tn;
    n = i / rows;
    m = first + i % rows;
  }
};

__global__ void __launch_bounds__(kThreads, 1)
    gemm_swiglu_kernel(const __grid_constant__ CUtensorMap map_a,
                       const __grid_constant__ CUtensorMap map_w, bf16* __restrict__ out, int M,
                       int K, int I) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                             ~uintptr_t(1023));
  const uint32_t a0 = smem_u32(base), w0 = a0 + kStages * kABytes;
  const uint32_t full = w0 + kStages * kBBytes, empty = full + kStages * 8;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, 2);  // one arrive a consumer warpgroup
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const TileOrder order{(M + BM - 1) / BM, 2 * I / BN};
  const int tiles = order.tm * order.tn, kt_n = K / BK;
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x != 0) return;
    int s = 0;
    uint32_t phase = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      int tm, tn;
      order.at(t, tm, tn);
      for (int kt = 0; kt < kt_n; ++kt) {
        mbar_wait(empty + 8 * s, phase ^ 1);
        mbar_expect_tx(full + 8 * s, kABytes + kBBytes);
        tma_load_2d(a0 + s * kABytes, &map_a, kt * BK, tm * BM, full + 8 * s);
        tma_load_2d(w0 + s * kBBytes, &map_w, kt * BK, tn * BN, full + 8 * s);
        if (++s == kStages) s = 0, phase ^= 1;
      }
    }
    return;
  }
  setmaxnreg_inc<232>();
  const int c = wg - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  float d[128];
  int s = 0;
  uint32_t phase = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int tm, tn;
    order.at(t, tm, tn);
    int prev = -1;
    for (int kt = 0; kt < kt_n; ++kt) {
      mbar_wait(full + 8 * s, phase);
      wgmma_fence();
      const uint32_t a = a0 + s * kABytes + c * 64 * 128, w = w0 + s * kBBytes;
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk)
        engine::cuda::wgmma::ss_m64n256k16(d, desc_sw128(a + 32 * kk), desc_sw128(w + 32 * kk),
                                           kt > 0 || kk > 0);
      wgmma_commit();
      wgmma_wait<1>();  // the previous stage's products are done: release it
      if (prev >= 0 && threadIdx.x % 128 == 0) mbar_arrive(empty + 8 * prev);
      prev = s;
      if (++s == kStages) s = 0, phase ^= 1;
    }
    wgmma_wait<0>();
    fence_regs(d);
    if (prev >= 0 && threadIdx.x % 128 == 0) mbar_arrive(empty + 8 * prev);
    // Epilogue: fragment (j, e) of n8 tile j is row 16 warp + lane / 4 (+ 8 for e >= 2), column
    // 8 j + 2 (lane % 4) + e % 2; gate columns are tiles 0..15, up the same features in 16..31.
    const int f0 = tn * (BN / 2);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = tm * BM + c * 64 + 16 * warp + lane / 4 + 8 * half;
      if (row >= M) continue;
      bf16* o = out + static_cast<size_t>(row) * I + f0 + 2 * (lane % 4);
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        float r[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float g = __bfloat162float(__float2bfloat16(d[4 * j + 2 * half + e]));
          const float u = __bfloat162float(__float2bfloat16(d[4 * (j + 16) + 2 * half + e]));
          const float sg =
              __bfloat162float(__float2bfloat16(engine::cuda::silu_rounded_to<bf16>(g)));
          r[e] = sg * u;
        }
        *reinterpret_cast<__nv_bfloat162*>(o + 8 * j) = __floats2bfloat162_rn(r[0], r[1]);
      }
    }
  }
#else
  (void)map_a, (void)map_w, (void)out, (void)M, (void)K, (void)I;
#endif
}

// ---- host ----------------------------------------------------------------------------------------
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_fn() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  DEV_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                  cudaEnableDefault, &q));
  if (!fn || q != cudaDriverEntryPointSuccess) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled not available\n");
    std::exit(2);
  }
  return reinterpret_cast<EncodeTiled>(fn);
}

// A row-major bf16 matrix [rows, cols] read as (cols, rows) boxes of 64 x box_rows, 128B swizzle;
// rows past the end read as zero.
CUtensorMap tile_map(const bf16* p, int rows, int cols, int box_rows) {
  CUtensorMap m{};
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * 2};
  const cuuint32_t box[2] = {BK, cuuint32_t(box_rows)}, elem[2] = {1, 1};
  const CUresult r = encode_fn()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(p),
                                 dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed (%d)\n", int(r));
    std::exit(2);
  }
  return m;
}

void launch_fused(const CUtensorMap& ma, const CUtensorMap& mw, bf16* out, int M, int K, int I,
                  int sms) {
  const int tiles = (M + BM - 1) / BM * (2 * I / BN);
  gemm_swiglu_kernel<<<std::min(tiles, sms), kThreads, kSmem>>>(ma, mw, out, M, K, I);
}

// W [2I, K] (gate rows, then up rows) regrouped into blocks of BN rows: 128 gate, 128 up.
void regroup(const bf16* w, bf16* wg, int I, int K) {
  const size_t blk = size_t(BN / 2) * K;
  for (int b = 0; b < I / (BN / 2); ++b) {
    DEV_CUDA_CHECK(cudaMemcpy(wg + 2 * b * blk, w + b * blk, blk * 2, cudaMemcpyDeviceToDevice));
    DEV_CUDA_CHECK(cudaMemcpy(wg + (2 * b + 1) * blk, w + size_t(I) * K + b * blk, blk * 2,
                              cudaMemcpyDeviceToDevice));
  }
}

// cuBLASLt gate_up [M, 2I] = x W^T (the engine's column-major form: C^T = W x^T), the fastest of
// the heuristic's first 8 answers at this M.
struct LtGemm {
  cublasLtHandle_t lt{};
  cublasLtMatmulDesc_t op{};
  cublasLtMatrixLayout_t a{}, b{}, c{};
  cublasLtMatmulAlgo_t algo{};
  Buf ws{size_t(64) << 20};
  float one = 1.0f, zero = 0.0f;
  LtGemm(int M, int N, int K) {
    LT_CHECK(cublasLtCreate(&lt));
    LT_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, K, N, K));
    LT_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, K, M, K));
    LT_CHECK(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, N, M, N));
  }
  ~LtGemm() {
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(lt);
  }
  void run(const bf16* w, const bf16* x, bf16* gu, const cublasLtMatmulAlgo_t& al) {
    LT_CHECK(cublasLtMatmul(lt, op, &one, w, a, x, b, &zero, gu, c, gu, c, &al, ws.get(),
                            ws.bytes(), 0));
  }
  // Picks `algo`; returns its median µs.
  double pick(Timer& timer, const bf16* w, const bf16* x, bf16* gu) {
    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t bytes = ws.bytes();
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &bytes, sizeof bytes));
    cublasLtMatmulHeuristicResult_t res[8];
    int n = 0;
    LT_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, 8, res, &n));
    cublasLtMatmulPreferenceDestroy(pref);
    double best = 1e30;
    for (int i = 0; i < n; ++i) {
      const double us = timer.median_us([&] { run(w, x, gu, res[i].algo); }, 2, 7);
      if (us < best) best = us, algo = res[i].algo;
    }
    return best;
  }
};

float silu_host(float g) { return g / (1.0f + std::exp(-g)); }

std::vector<int> bench_ms() {
  std::vector<int> ms;
  const char* e = std::getenv("CLEF_BENCH_MS");
  std::string s = e ? e : "384,1024,7040";
  size_t p = 0;
  while (p < s.size()) {
    const size_t q = s.find(',', p);
    ms.push_back(std::atoi(s.substr(p, q - p).c_str()));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  return ms;
}

}  // namespace swiglu_gemm
}  // namespace clef::dev

int main() {
  using namespace clef::dev;
  using namespace clef::dev::swiglu_gemm;
  print_device();
  int sms = 0;
  DEV_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  DEV_CUDA_CHECK(cudaFuncSetAttribute(gemm_swiglu_kernel,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  auto rng = make_rng();
  const int K = kHidden, I = kInter;
  const std::vector<int> ms = bench_ms();
  const int Mmax = *std::max_element(ms.begin(), ms.end());
  // x ~ N(0, 1) (a normed hidden row), W ~ N(0, 1/sqrt(K)): gate/up values of order 1.
  const std::vector<float> hw = rand_e<bf16>(rng, size_t(2) * I * K, 1.0f / 64.0f);
  const std::vector<float> hx = rand_e<bf16>(rng, size_t(Mmax) * K);
  Buf w = to_device<bf16>(hw), x = to_device<bf16>(hx), wg(size_t(2) * I * K * 2);
  regroup(w.get<bf16>(), wg.get<bf16>(), I, K);
  Buf gu(size_t(Mmax) * 2 * I * 2), ref(size_t(Mmax) * I * 2), out(size_t(Mmax) * I * 2);
  Timer timer;
  bool ok = true;
  struct Row {
    int M;
    double lt, sw, fused;
  };
  std::vector<Row> rows;
  for (int M : ms) {
    const CUtensorMap ma = tile_map(x.get<bf16>(), M, K, BM);
    const CUtensorMap mw = tile_map(wg.get<bf16>(), 2 * I, K, BN);
    LtGemm lt(M, 2 * I, K);
    const double lt_us = lt.pick(timer, w.get<bf16>(), x.get<bf16>(), gu.get<bf16>());
    auto unfused = [&] {
      lt.run(w.get<bf16>(), x.get<bf16>(), gu.get<bf16>(), lt.algo);
      clef::engine::cuda::swiglu<bf16>(gu.get<bf16>(), ref.get<bf16>(), M, I,
                                       clef::engine::cuda::KernelPath::Auto, 0);
    };
    unfused();
    DEV_CUDA_CHECK(cudaMemset(out.get(), 0xFF, size_t(M) * I * 2));
    launch_fused(ma, mw, out.get<bf16>(), M, K, I, sms);
    DEV_CUDA_CHECK(cudaGetLastError());
    if (!skip_check()) {
      const std::vector<float> got = to_host<bf16>(out, size_t(M) * I);
      const std::vector<float> want = to_host<bf16>(ref, size_t(M) * I);
      size_t equal = 0;
      for (size_t i = 0; i < got.size(); ++i) equal += got[i] == want[i];
      std::printf("M %d: fused vs cuBLASLt + swiglu: %zu of %zu equal (%.2f %%)\n", M, equal,
                  got.size(), 100.0 * equal / got.size());
      ok &= check("M " + std::to_string(M) + " vs unfused", "out", got, want, 1e-2);
      // Host reference in double on sampled rows (first, last, the last row tile, random).
      std::vector<int> sample = {0, M - 1, std::max(0, M - BM + 7), M / 2};
      std::vector<float> g2, r2;
      for (int m : sample) {
        for (int f = 0; f < I; ++f) {
          double sg = 0, su = 0;
          const float* xr = &hx[size_t(m) * K];
          const float* wgr = &hw[size_t(f) * K];
          const float* wur = &hw[size_t(I + f) * K];
          for (int k = 0; k < K; ++k) sg += double(xr[k]) * wgr[k], su += double(xr[k]) * wur[k];
          const float g = clef::engine::ref::round_bf16(float(sg));
          const float u = clef::engine::ref::round_bf16(float(su));
          r2.push_back(clef::engine::ref::round_bf16(
              clef::engine::ref::round_bf16(silu_host(g)) * u));
          g2.push_back(got[size_t(m) * I + f]);
        }
      }
      ok &= check("M " + std::to_string(M) + " vs host", "out", g2, r2, 1e-2);
      if (!ok) break;
    }
    const double sw_us = timer.median_us([&] {
      clef::engine::cuda::swiglu<bf16>(gu.get<bf16>(), ref.get<bf16>(), M, I,
                                       clef::engine::cuda::KernelPath::Auto, 0);
    });
    const double f_us =
        timer.median_us([&] { launch_fused(ma, mw, out.get<bf16>(), M, K, I, sms); });
    rows.push_back({M, lt_us, sw_us, f_us});
  }
  if (!ok) {
    std::printf("gemm_swiglu: MISMATCH, nothing timed\n");
    return 1;
  }
  print_header(timer);
  for (const Row& r : rows) {
    const double flops = 2.0 * r.M * 2.0 * I * K;
    print_row("gemm_swiglu", "cublaslt gate_up (best of 8)", r.M, r.lt, flops, kBf16Tensor);
    print_row("gemm_swiglu", "swiglu_vec8", r.M, r.sw, double(r.M) * 3 * I * 2, kHbm);
    print_row("gemm_swiglu", "fused (tma wgmma)", r.M, r.fused, flops, kBf16Tensor);
    std::printf("M %d: unfused %.1f us, fused %.1f us (%.3f of unfused; GEMM alone %.3f)\n", r.M,
                r.lt + r.sw, r.fused, r.fused / (r.lt + r.sw), r.fused / r.lt);
  }
  return 0;
}
