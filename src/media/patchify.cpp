#include "media/patchify.h"

#include "media/parallel.h"

#include <openssl/evp.h>

#include <array>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

namespace clef::media {
namespace {

constexpr int kPatch = 16;
constexpr int kMerge = 2;
constexpr int kTemporal = 2;

// The 256 possible normalised values, each computed exactly as the reference does.
std::array<float, 256> normalised_table() {
  std::array<float, 256> t{};
  for (int x = 0; x < 256; ++x) t[x] = (static_cast<float>(x) - 127.5f) / 127.5f;
  return t;
}

// Σ patches of the grids, once each is one patchify makes (t >= 1 slices of an even h x w >= 2 x 2)
// and the frames hold exactly their bytes; throws std::invalid_argument otherwise (before any
// size is computed from a grid).
int64_t checked_patches(const VisualInput& visual) {
  int64_t patches = 0;
  for (const auto* gs : {&visual.image_grids, &visual.video_grids})
    for (const Grid& g : *gs) {
      if (g.t < 1 || g.h < 2 || g.w < 2 || g.h % kMerge != 0 || g.w % kMerge != 0)
        throw std::invalid_argument(
            "pixel rows: a grid that is not t >= 1 slices of an even h x w");
      patches += g.patches();
    }
  if (static_cast<int64_t>(visual.frames.size()) != frames_bytes(visual))
    throw std::invalid_argument("pixel rows: " + std::to_string(visual.frames.size()) +
                                " frame bytes where the grids take " +
                                std::to_string(frames_bytes(visual)));
  return patches;
}

}  // namespace

Grid patch_grid(size_t frames, int h, int w) {
  if (frames == 0 || frames % kTemporal != 0)
    throw std::invalid_argument("patchify: needs an even, non-zero number of frames");
  if (h <= 0 || w <= 0 || h % (kPatch * kMerge) != 0 || w % (kPatch * kMerge) != 0)
    throw std::invalid_argument("patchify: sizes must be positive multiples of 32");
  return {static_cast<int32_t>(frames / kTemporal), h / kPatch, w / kPatch};
}

Grid patchify(const std::vector<const uint8_t*>& frames, int h, int w, std::vector<float>& out) {
  const Grid grid = patch_grid(frames.size(), h, w);
  const size_t base = out.size();
  out.resize(base + static_cast<size_t>(grid.patches()) * kPatchValues);
  return patchify_into(frames, h, w, out.data() + base);
}

Grid patchify_into(const std::vector<const uint8_t*>& frames, int h, int w, float* rows) {
  const Grid grid = patch_grid(frames.size(), h, w);
  const std::array<float, 256> norm = normalised_table();
  const size_t stride = static_cast<size_t>(w) * 3;
  const int bh = grid.h / kMerge, bw = grid.w / kMerge;
  // Row order (t, by, bx, dy, dx); values within a row (channel, temporal, y, x). Each (t, by) band
  // of merge blocks owns a contiguous run of rows, so bands are filled in parallel.
  parallel_items(static_cast<size_t>(grid.t) * bh, [&](size_t band) {
    const int t = static_cast<int>(band / bh), by = static_cast<int>(band % bh);
    float* row = rows + band * static_cast<size_t>(bw) * kMerge * kMerge * kPatchValues;
    for (int bx = 0; bx < bw; ++bx)
      for (int dy = 0; dy < kMerge; ++dy)
        for (int dx = 0; dx < kMerge; ++dx) {
          const int y0 = (by * kMerge + dy) * kPatch;
          const int x0 = (bx * kMerge + dx) * kPatch;
          for (int c = 0; c < 3; ++c)
            for (int k = 0; k < kTemporal; ++k) {
              const uint8_t* f = frames[static_cast<size_t>(t) * kTemporal + k];
              // An image's second temporal slice is the same frame: a copy of the slice before.
              if (k > 0 && f == frames[static_cast<size_t>(t) * kTemporal + k - 1]) {
                std::memcpy(row, row - kPatch * kPatch, sizeof(float) * kPatch * kPatch);
                row += kPatch * kPatch;
                continue;
              }
              for (int y = 0; y < kPatch; ++y) {
                const uint8_t* px =
                    f + static_cast<size_t>(y0 + y) * stride + static_cast<size_t>(x0) * 3 + c;
                for (int x = 0; x < kPatch; ++x) *row++ = norm[px[x * 3]];
              }
            }
        }
  });
  return grid;
}

int64_t frames_bytes(const VisualInput& visual) {
  int64_t bytes = 0;
  for (const Grid& g : visual.image_grids) bytes += frame_bytes(g) * kImageFramesPerGroup * g.t;
  for (const Grid& g : visual.video_grids) bytes += frame_bytes(g) * kVideoFramesPerGroup * g.t;
  return bytes;
}

void pixel_rows_into(const VisualInput& visual, float* rows) {
  checked_patches(visual);
  const uint8_t* f = visual.frames.data();
  auto grid_rows = [&](const Grid& g, int per_group) {
    const size_t bytes = static_cast<size_t>(frame_bytes(g));
    std::vector<const uint8_t*> slices;  // 2 per temporal group; an image's are its one frame
    for (int32_t t = 0; t < g.t; ++t)
      for (int k = 0; k < kTemporal; ++k)
        slices.push_back(f + (static_cast<size_t>(t) * per_group + k % per_group) * bytes);
    patchify_into(slices, g.h * kPatch, g.w * kPatch, rows);
    f += static_cast<size_t>(g.t) * per_group * bytes;
    rows += static_cast<size_t>(g.patches()) * kPatchValues;
  };
  for (const Grid& g : visual.image_grids) grid_rows(g, kImageFramesPerGroup);
  for (const Grid& g : visual.video_grids) grid_rows(g, kVideoFramesPerGroup);
}

std::vector<float> pixel_rows(const VisualInput& visual) {
  std::vector<float> rows(static_cast<size_t>(checked_patches(visual)) * kPatchValues);
  pixel_rows_into(visual, rows.data());
  return rows;
}

std::string sha256_f32le(const float* values, size_t count) {
  static_assert(sizeof(float) == 4);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("sha256: OpenSSL init failed");
  // The build targets little-endian hosts only (x86-64, aarch64): the bytes are the LE bytes.
  if (EVP_DigestUpdate(ctx.get(), values, count * sizeof(float)) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), digest, &len) != 1)
    throw std::runtime_error("sha256: OpenSSL digest failed");
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 15];
  }
  return hex;
}

}  // namespace clef::media
