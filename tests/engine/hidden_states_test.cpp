// Per-layer hidden states of the three debug requests of each golden model vs the reference's
// float32 tensors (tests/golden/models/<m>.debug{0,1,2}.safetensors): max |diff| / max |ref| <=
// 1e-4 per tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/cpu/backbone.h"
#include "engine/golden_models.h"
#include "model/safetensors.h"

namespace clef {
namespace {

void check_model(const std::string& name) {
  auto release = testing::load_golden_model(name);
  const auto records = testing::load_golden(name);
  int checked = 0;
  for (const auto& r : records) {
    if (r.debug_tensors.empty()) continue;
    SCOPED_TRACE(name + " " + r.debug_tensors);
    auto file = model::SafetensorsFile::open(testing::golden_dir() + "/" + r.debug_tensors);
    const model::Tensor* ids_t = file->find("input_ids");
    ASSERT_NE(ids_t, nullptr);
    ASSERT_EQ(ids_t->dtype, model::DType::I64);
    std::vector<int64_t> ids64(ids_t->numel());
    std::memcpy(ids64.data(), ids_t->data, ids64.size() * sizeof(int64_t));
    // Our encoder must give the same ids (checked here so a mismatch is not blamed on the engine).
    const auto req = encoding::validate_request(r.request);
    const auto enc =
        encoding::encode_request(req, *release->tokenizer, testing::golden_encode_options(r));
    ASSERT_EQ(enc.input_ids.size(), ids64.size());
    std::vector<int32_t> ids(ids64.begin(), ids64.end());
    EXPECT_EQ(enc.input_ids, ids);

    std::vector<std::vector<float>> hidden;
    const std::vector<float> last = engine::cpu::run_backbone(*release, ids, 0, &hidden);
    const int L = release->text.num_hidden_layers;
    ASSERT_EQ(static_cast<int>(hidden.size()), L + 1);
    for (int k = 0; k <= L + 1; ++k) {
      const std::string tname = k <= L ? "hidden_" + std::to_string(k) : "last_hidden_state";
      const std::vector<float>& mine = k <= L ? hidden[k] : last;
      const std::vector<float> ref = testing::f32_tensor(*file, tname);
      ASSERT_EQ(mine.size(), ref.size()) << tname;
      double max_diff = 0.0, max_ref = 0.0;
      for (size_t i = 0; i < ref.size(); ++i) {
        max_diff = std::max(max_diff, std::fabs(static_cast<double>(mine[i]) - ref[i]));
        max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
      }
      ASSERT_GT(max_ref, 0.0) << tname;
      EXPECT_LE(max_diff / max_ref, 1e-4)
          << tname << " max diff " << max_diff << " scale " << max_ref;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

TEST(CpuBackboneHiddenStates, TinyR2) {
  check_model("tiny-r2");
}
TEST(CpuBackboneHiddenStates, TinyR3) {
  check_model("tiny-r3");
}

}  // namespace
}  // namespace clef
