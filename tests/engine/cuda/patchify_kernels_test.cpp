// The device patchify (engine/cuda/kernels/patchify.h) against its CPU reference, BITWISE: the
// rows media::pixel_rows makes of the same uint8 frames (= media::patchify_into per grid), cast
// to bf16 with round to nearest even (model::float_to_bf16) in the bf16 engine. Fresh random
// frames; images of 32x32, 64x96 and 1024x1024, a 4-frame video (2 groups of distinct frames) and
// all of them in one request (each grid's frames and rows at their offsets); float32 and bf16,
// both kernel paths, and buffers offset off the vec8 alignment (Auto then runs the generic kernel).
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/gpu_test_util.h"
#include "engine/cuda/kernel_path.h"
#include "engine/cuda/kernels/patchify.h"
#include "media/patchify.h"
#include "model/bf16.h"

namespace clef {
namespace {

using namespace clef::engine::cuda;
using bf16 = __nv_bfloat16;

constexpr KernelPath kPaths[] = {KernelPath::Generic, KernelPath::Auto};

media::VisualInput random_input(std::mt19937_64& rng, const std::vector<media::Grid>& images,
                                const std::vector<media::Grid>& videos) {
  media::VisualInput v;
  v.image_grids = images;
  v.video_grids = videos;
  v.frames.resize(static_cast<size_t>(media::frames_bytes(v)));
  for (uint8_t& x : v.frames) x = static_cast<uint8_t>(rng() & 255u);
  return v;
}

// The reference rows as the storage type's bit patterns.
template <typename E>
std::vector<uint8_t> reference_bytes(const media::VisualInput& v) {
  const std::vector<float> rows = media::pixel_rows(v);
  std::vector<uint8_t> out(rows.size() * sizeof(E));
  if constexpr (std::is_same_v<E, float>) {
    std::memcpy(out.data(), rows.data(), out.size());
  } else {
    for (size_t i = 0; i < rows.size(); ++i) {
      const uint16_t b = model::float_to_bf16(rows[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  }
  return out;
}

// Runs patchify_rows with the frames `frame_off` bytes and the rows `row_off` elements into their
// device buffers (both poisoned around the rows); returns the rows' bytes and checks the poison
// beyond them is untouched.
template <typename E>
std::vector<uint8_t> device_bytes(const media::VisualInput& v, KernelPath path, int frame_off,
                                  int row_off) {
  const size_t n = media::pixel_rows(v).size(), tail = 64;
  DeviceBuffer frames(v.frames.size() + frame_off), rows((row_off + n + tail) * sizeof(E));
  CLEF_CUDA_CHECK(cudaMemcpy(frames.get<uint8_t>() + frame_off, v.frames.data(), v.frames.size(),
                             cudaMemcpyHostToDevice));
  CLEF_CUDA_CHECK(cudaMemset(rows.get(), 0xa5, rows.bytes()));
  patchify_rows<E>(v, frames.get<uint8_t>() + frame_off, rows.get<E>() + row_off, path, 0);
  CLEF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> all(rows.bytes());
  CLEF_CUDA_CHECK(cudaMemcpy(all.data(), rows.get(), all.size(), cudaMemcpyDeviceToHost));
  size_t poison_changed = 0;
  for (size_t i = 0; i < row_off * sizeof(E); ++i) poison_changed += all[i] != 0xa5;
  for (size_t i = (row_off + n) * sizeof(E); i < all.size(); ++i) poison_changed += all[i] != 0xa5;
  EXPECT_EQ(poison_changed, 0u) << "bytes written outside the rows";
  return std::vector<uint8_t>(all.begin() + row_off * sizeof(E),
                              all.begin() + (row_off + n) * sizeof(E));
}

template <typename E>
void check_bitwise(const media::VisualInput& v, const std::string& what) {
  const std::vector<uint8_t> want = reference_bytes<E>(v);
  for (KernelPath path : kPaths)
    for (const auto& [frame_off, row_off] : {std::pair{0, 0}, std::pair{1, 0}, std::pair{0, 1}}) {
      SCOPED_TRACE(what + (std::is_same_v<E, float> ? " fp32 " : " bf16 ") +
                   patchify_rows_variant(path) + " frames+" + std::to_string(frame_off) + " rows+" +
                   std::to_string(row_off));
      const std::vector<uint8_t> got = device_bytes<E>(v, path, frame_off, row_off);
      ASSERT_EQ(got.size(), want.size());
      size_t bad = 0, first = got.size();
      for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != want[i]) {
          ++bad;
          first = std::min(first, i);
        }
      EXPECT_EQ(bad, 0u) << "first differing byte " << first << " (row "
                         << first / sizeof(E) / media::kPatchValues << ")";
    }
}

struct Case {
  const char* name;
  std::vector<media::Grid> images, videos;
};

const Case kCases[] = {
    {"image 32x32", {{1, 2, 2}}, {}},
    {"image 64x96", {{1, 4, 6}}, {}},
    {"image 1024x1024", {{1, 64, 64}}, {}},
    {"video 4 frames 64x96", {}, {{2, 4, 6}}},
    {"request: 3 images + video", {{1, 2, 2}, {1, 4, 6}, {1, 64, 64}}, {{2, 4, 6}}},
};

TEST(PatchifyKernel, MatchesPixelRowsBitwiseFp32) {
  CLEF_REQUIRE_GPU();
  std::mt19937_64 rng = gputest::fresh_rng();
  for (const Case& c : kCases) check_bitwise<float>(random_input(rng, c.images, c.videos), c.name);
}

TEST(PatchifyKernel, MatchesPixelRowsBitwiseBf16) {
  CLEF_REQUIRE_GPU();
  std::mt19937_64 rng = gputest::fresh_rng();
  for (const Case& c : kCases) check_bitwise<bf16>(random_input(rng, c.images, c.videos), c.name);
}

// Every byte value (a frame holding 0..255 in each channel, twice over) through both casts: the
// normalisation table's 256 entries, exactly.
TEST(PatchifyKernel, EveryByteValue) {
  CLEF_REQUIRE_GPU();
  media::VisualInput v;
  v.image_grids = {{1, 2, 2}};
  v.frames.resize(static_cast<size_t>(media::frames_bytes(v)));
  for (size_t i = 0; i < v.frames.size(); ++i) v.frames[i] = static_cast<uint8_t>(i / 3 + i % 3);
  check_bitwise<float>(v, "ramp");
  check_bitwise<bf16>(v, "ramp");
}

}  // namespace
}  // namespace clef
