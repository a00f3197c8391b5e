// libFuzzer: raw file bytes -> sniff -> probe -> decode -> resize -> patchify, and the same bytes
// as a request string (data URI / raw base64). Invariants for any input: no crash, no UB, refusals
// only as MediaError, a decoded image exactly as large as its header said and within the pixel
// limit. Seeds (fuzz/corpus/image): the files of tests/golden/media/encode-media-tiny-r2m.jsonl
// cases 4 (png_tiny), 8 (png_palette), 7 (png_gray), 13 image 1 (jpeg_small) and 9 (webp_lossy),
// decoded from their base64.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "media/image.h"
#include "media/patchify.h"
#include "media/processor.h"
#include "media/visual_input.h"

namespace {

// Small enough that a fuzzed header cannot make an iteration slow.
constexpr uint64_t kMaxPixels = 1u << 20;

void check(bool ok) {
  if (!ok) std::abort();
}

void run(const clef::media::EncodedImage& file) {
  const clef::media::ImageInfo info = clef::media::probe_image(file, kMaxPixels);
  const clef::media::Image img = clef::media::decode_image(file, kMaxPixels);
  check(img.width == info.width && img.height == info.height);
  check(static_cast<uint64_t>(img.width) * static_cast<uint64_t>(img.height) <= kMaxPixels);
  check(img.rgb.size() == static_cast<size_t>(img.width) * static_cast<size_t>(img.height) * 3);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    run(clef::media::identify_image(std::vector<uint8_t>(data, data + size)));
  } catch (const clef::media::MediaError&) {
  }
  try {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const clef::media::ImagePlan plan =
        clef::media::plan_image(text, clef::media::kImageBudget, kMaxPixels);
    // The resize target can be large (min_pixels); render only small plans.
    if (plan.grid.patches() <= 4096) {
      clef::media::VisualInput visual;
      clef::media::render_image(plan, kMaxPixels, visual.frames);
      visual.image_grids = {plan.grid};
      check(static_cast<int64_t>(visual.frames.size()) == clef::media::frames_bytes(visual));
      const std::vector<float> rows = clef::media::pixel_rows(visual);
      check(rows.size() == static_cast<size_t>(plan.grid.patches()) * clef::media::kPatchValues);
    }
  } catch (const clef::media::MediaError&) {
  }
  return 0;
}
