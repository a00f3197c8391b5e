// FP8 (HF fine-grained e4m3) releases: the e4m3 conversions over all 256 codes and against a
// brute-force nearest-value search, a hand-made block with known values, make-model --dtype fp8
// (codes and scales recomputed from the bf16 release of the same seed), the loader's refusals, and
// hash/--verify on an FP8 folder.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "model/bf16.h"
#include "model/fp8.h"
#include "model/make_model.h"
#include "model/pinning.h"
#include "model_test_util.h"

namespace clef::model {
namespace {

using testing::edit_json;
using testing::load_error;
using testing::ScratchDir;

// The e4m3 value of a code from the format's definition, in double (independent of fp8.h).
double e4m3_reference(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? m / 8.0 * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -mag : mag;
}

TEST(E4m3, AllCodesDecodeAsTheFormatDefines) {
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_to_float(static_cast<uint8_t>(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), e4m3_reference(c)) << c;
    EXPECT_EQ(float_to_e4m3(v), c) << "round trip of code " << c;  // -0 -> 0x80 included
  }
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x01), 0x1.0p-9f);
  EXPECT_EQ(e4m3_to_float(0x08), 0x1.0p-6f);
  EXPECT_EQ(e4m3_to_float(0xfe), -448.0f);
}

// Nearest finite e4m3 code to x by exhaustive search; ties go to the even code; beyond 448 ±448.
uint8_t nearest_code(float x) {
  const double a = std::fabs(static_cast<double>(x));
  int best = 0;
  for (int c = 1; c <= 0x7e; ++c) {
    const double d = std::fabs(e4m3_reference(c) - a), db = std::fabs(e4m3_reference(best) - a);
    if (d < db || (d == db && (c & 1) == 0)) best = c;
  }
  return static_cast<uint8_t>((std::signbit(x) ? 0x80 : 0) | best);
}

TEST(E4m3, EncodeIsNearestEvenAndSaturates) {
  std::vector<float> xs;
  for (int c = 0; c < 0x7e; ++c) {  // every midpoint between neighbours, and one float either side
    const float mid = static_cast<float>((e4m3_reference(c) + e4m3_reference(c + 1)) / 2);
    xs.insert(xs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)});
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> ex(-14.0f, 10.0f);
  for (int i = 0; i < 20000; ++i) xs.push_back(std::exp2(ex(rng)) * (i & 1 ? -1.0f : 1.0f));
  xs.insert(xs.end(), {0.0f, -0.0f, 1e-30f, 0x1.0p-10f, 0x1.8p-10f, 447.9f, 448.0f, 463.9f, 464.0f,
                       464.1f, 500.0f, 1e30f, std::numeric_limits<float>::max()});
  for (float x : xs) {
    for (float y : {x, -x}) ASSERT_EQ(float_to_e4m3(y), nearest_code(y)) << y;
  }
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_TRUE(std::isnan(e4m3_to_float(float_to_e4m3(std::nanf("")))));
  // Ties: 0x1.0p-10 is halfway between 0 and the smallest subnormal -> 0 (even); 1.5·2^-10 -> 1
  // is not a tie (it is nearer 2^-9); 3·2^-10 between codes 1 and 2 -> 2.
  EXPECT_EQ(float_to_e4m3(0x1.0p-10f), 0);
  EXPECT_EQ(float_to_e4m3(0x1.8p-9f), 2);
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7e);  // halfway to "480", past the largest finite: saturate
}

TEST(BlockScales, AHandMadeWeightDequantisesExactly) {
  // [130, 200]: a 2x2 grid whose last row and column blocks are partial.
  const int64_t N = 130, K = 200;
  std::vector<uint8_t> codes(N * K);
  for (int64_t i = 0; i < N * K; ++i) codes[i] = static_cast<uint8_t>(i % 255);  // skips NaN 0xff
  for (int64_t i = 0; i < N * K; ++i)
    if ((codes[i] & 0x7f) == 0x7f) codes[i] = 0x38;
  const float f32_scales[4] = {0.5f, 3.0f, 0x1.0p-12f, 1.25f};  // exact products with e4m3 values
  std::vector<uint16_t> bf16_scales;
  for (float s : f32_scales) bf16_scales.push_back(float_to_bf16(s));  // all exact in bf16
  for (DType sd : {DType::F32, DType::BF16}) {
    Tensor t;
    t.name = "w";
    t.dtype = DType::F8_E4M3;
    t.shape = {N, K};
    t.data = codes.data();
    t.nbytes = codes.size();
    auto bs = std::make_shared<BlockScales>();
    bs->dtype = sd;
    bs->data = sd == DType::F32 ? reinterpret_cast<const uint8_t*>(f32_scales)
                                : reinterpret_cast<const uint8_t*>(bf16_scales.data());
    bs->rows = 2;
    bs->cols = 2;
    t.scales = bs;
    const std::vector<float> all = t.to_float();
    for (int64_t r = 0; r < N; ++r) {
      for (int64_t c = 0; c < K; ++c) {
        const double want = e4m3_reference(codes[r * K + c]) * f32_scales[(r / 128) * 2 + c / 128];
        ASSERT_EQ(static_cast<double>(all[r * K + c]), want) << r << "," << c;
        ASSERT_EQ(static_cast<double>(t.at(static_cast<size_t>(r * K + c))), want);
      }
    }
    std::vector<float> part(333);  // an unaligned range crossing a row and a block edge
    t.to_float(part.data(), 127 * K + 100, part.size());
    for (size_t k = 0; k < part.size(); ++k) ASSERT_EQ(part[k], all[127 * K + 100 + k]);
  }
  Tensor bare;
  bare.name = "bare";
  bare.dtype = DType::F8_E4M3;
  bare.shape = {1, 1};
  bare.data = codes.data();
  bare.nbytes = 1;
  EXPECT_THROW(bare.to_float(), std::runtime_error);  // no scales: refused, not garbage
}

struct Fp8Releases {
  ScratchDir tmp;
  std::string bf16, fp8;
};

const Fp8Releases& releases() {
  static Fp8Releases* r = [] {
    auto* p = new Fp8Releases();
    MakeModelOptions o;
    o.seed = 5;
    o.out_dir = p->tmp / "bf16";
    make_model(o);
    p->bf16 = o.out_dir;
    o.dtype = "fp8";
    o.out_dir = p->tmp / "fp8";
    make_model(o);
    p->fp8 = o.out_dir;
    return p;
  }();
  return *r;
}

std::string copy_fp8(const ScratchDir& tmp) {
  const std::string dst = tmp / "fp8";
  std::filesystem::copy(releases().fp8, dst, std::filesystem::copy_options::recursive);
  return dst;
}

bool is_big_projection(const std::string& n) {
  for (const char* p : {"in_proj_qkv.", "in_proj_z.", "out_proj.", "q_proj.", "k_proj.", "v_proj.",
                        "o_proj.", "gate_proj.", "up_proj.", "down_proj."})
    if (n.find(p) != std::string::npos) return true;
  return false;
}

TEST(MakeModelFp8, BigProjectionsAreTheBf16ReleaseQuantisedPerBlock) {
  auto b = Release::load(releases().bf16), f = Release::load(releases().fp8);
  EXPECT_FALSE(b->quantization.fp8);
  ASSERT_TRUE(f->quantization.fp8);
  EXPECT_EQ(f->quantization.block, 128);
  int fp8_tensors = 0;
  for (const auto& [name, t] : f->backbone_tensors()) {
    const Tensor& ref = b->backbone(name);
    const bool big = name.rfind("layers.", 0) == 0 && is_big_projection(name);
    ASSERT_EQ(t.dtype == DType::F8_E4M3, big) << name;
    if (!big) {  // everything else is the bf16 release's bytes
      ASSERT_EQ(t.nbytes, ref.nbytes);
      EXPECT_EQ(std::memcmp(t.data, ref.data, t.nbytes), 0) << name;
      continue;
    }
    ++fp8_tensors;
    ASSERT_TRUE(t.scales) << name;
    EXPECT_EQ(t.scales->dtype, DType::F32);
    const int64_t N = t.shape[0], K = t.shape[1];
    ASSERT_EQ(t.scales->rows, (N + 127) / 128);
    ASSERT_EQ(t.scales->cols, (K + 127) / 128);
    const std::vector<float> v = ref.to_float();
    for (int64_t br = 0; br < t.scales->rows; ++br) {
      for (int64_t bc = 0; bc < t.scales->cols; ++bc) {
        float amax = 0;
        for (int64_t r = br * 128; r < std::min(N, br * 128 + 128); ++r)
          for (int64_t c = bc * 128; c < std::min(K, bc * 128 + 128); ++c)
            amax = std::max(amax, std::fabs(v[r * K + c]));
        const float s = amax / 448.0f;
        ASSERT_EQ(t.scales->at(br, bc), s) << name;
        for (int64_t r = br * 128; r < std::min(N, br * 128 + 128); ++r)
          for (int64_t c = bc * 128; c < std::min(K, bc * 128 + 128); ++c)
            ASSERT_EQ(t.data[r * K + c], nearest_code(v[r * K + c] / s)) << name << " " << r;
      }
    }
  }
  EXPECT_EQ(fp8_tensors, 6 * 6 + 2 * 7);  // tiny: 6 GDN layers x 6, 2 attention layers x 7
}

TEST(MakeModelFp8, ConfigIsHfFineGrainedFp8) {
  auto j = nlohmann::json::parse(testing::read_file(releases().fp8 + "/config.json"));
  const auto& q = j.at("quantization_config");
  EXPECT_EQ(q.at("quant_method"), "fp8");
  EXPECT_EQ(q.at("fmt"), "e4m3");
  EXPECT_EQ(q.at("activation_scheme"), "dynamic");
  EXPECT_EQ(q.at("weight_block_size"), nlohmann::json::array({128, 128}));
  const auto& keep = q.at("modules_to_not_convert");
  EXPECT_NE(std::find(keep.begin(), keep.end(), "lm_head"), keep.end());
  EXPECT_NE(
      std::find(keep.begin(), keep.end(), "model.language_model.layers.0.linear_attn.in_proj_a"),
      keep.end());
}

TEST(MakeModelFp8, HashAndVerifyCoverTheFp8Folder) {
  ScratchDir tmp;
  const std::string dir = copy_fp8(tmp);
  const auto files = release_files(dir);
  EXPECT_NE(std::find(files.begin(), files.end(), "model.safetensors"), files.end());
  const std::string sums = tmp / "SHA256SUMS";
  testing::write_file(sums, format_sha256sum(hash_release(dir)));
  EXPECT_EQ(verify_release(dir, sums), files.size());
  LoadOptions lo;
  lo.verify_file = sums;
  EXPECT_TRUE(Release::load(dir, lo)->weights_sha256_verified);
  // One flipped code byte in an FP8 weight is caught.
  std::string bytes = testing::read_file(dir + "/model.safetensors");
  bytes[bytes.size() / 2] ^= 1;
  testing::write_file(dir + "/model.safetensors", bytes);
  EXPECT_NE(load_error([&] { verify_release(dir, sums); }).find("model.safetensors"),
            std::string::npos);
}

TEST(MakeModelFp8, RealisticFp8IsDeterministicFromTheSeedAcrossThreadCounts) {
  ScratchDir tmp;
  MakeModelOptions o;
  o.dtype = "fp8";
  o.weights = "realistic";
  o.seed = 9;
  std::vector<std::string> hashes;
  for (int threads : {1, 3}) {
    o.threads = threads;
    o.out_dir = tmp / ("r" + std::to_string(threads));
    make_model(o);
    hashes.push_back(format_sha256sum(hash_release(o.out_dir)));
  }
  EXPECT_EQ(hashes[0], hashes[1]);
  o.seed = 10;
  o.out_dir = tmp / "other";
  make_model(o);
  EXPECT_NE(format_sha256sum(hash_release(o.out_dir)), hashes[0]);
  EXPECT_TRUE(Release::load(tmp / "r1")->quantization.fp8);
}

TEST(Fp8Loader, RefusesOtherQuantisationFormsByName) {
  ScratchDir tmp;
  const std::string dir = copy_fp8(tmp);
  const std::string cfg = dir + "/config.json";
  const std::string original = testing::read_file(cfg);
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* says;
  } cases[] = {{"quant_method", "gptq", "quant_method \"gptq\""},
               {"fmt", "e5m2", "fmt \"e5m2\""},
               {"weight_block_size", {64, 64}, "weight_block_size [64,64]"},
               {"weight_block_size", nullptr, "weight_block_size missing"},
               {"activation_scheme", "static", "activation_scheme \"static\""},
               {"modules_to_not_convert", 3, "modules_to_not_convert must be a list"},
               {"bits", 8, "unknown key \"bits\""}};
  for (const Case& c : cases) {
    testing::write_file(cfg, original);
    edit_json(cfg, [&](nlohmann::json& j) { j["quantization_config"][c.key] = c.value; });
    const std::string e = load_error([&] { Release::load(dir); });
    EXPECT_NE(e.find(c.says), std::string::npos) << e;
    EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  }
  testing::write_file(cfg, original);
  edit_json(cfg, [](nlohmann::json& j) { j.erase("quantization_config"); });
  EXPECT_NE(load_error([&] { Release::load(dir); }).find("has no fp8 quantization_config"),
            std::string::npos);
  testing::write_file(cfg, original);
  edit_json(cfg, [](nlohmann::json& j) {
    j["quantization_config"]["modules_to_not_convert"].push_back("layers.1.mlp.down_proj");
  });
  const std::string e = load_error([&] { Release::load(dir); });
  EXPECT_NE(e.find("model.language_model.layers.1.mlp.down_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("modules_to_not_convert"), std::string::npos) << e;
}

TEST(Fp8Loader, RefusesBadScalesNamingTheTensor) {
  const std::string scale = "model.language_model.layers.0.mlp.up_proj.weight_scale_inv";
  auto with_header = [&](const std::function<void(nlohmann::json&)>& edit) {
    ScratchDir tmp;
    const std::string dir = copy_fp8(tmp);
    testing::edit_safetensors_header(dir + "/model.safetensors", edit);
    return load_error([&] { Release::load(dir); });
  };
  // tiny's up_proj is [128, 64]: one block, one 4-byte F32 scale; the edits keep 4 bytes.
  std::string e = with_header([&](nlohmann::json& h) { h[scale]["dtype"] = "I32"; });
  EXPECT_NE(e.find(scale), std::string::npos) << e;
  EXPECT_NE(e.find("must be F32 or BF16"), std::string::npos) << e;
  e = with_header([&](nlohmann::json& h) {
    h[scale]["dtype"] = "BF16";
    h[scale]["shape"] = {2, 1};
  });
  EXPECT_NE(e.find("blocks of"), std::string::npos) << e;
  e = with_header([&](nlohmann::json& h) { h.erase(scale); });
  EXPECT_NE(e.find("has no 'model.language_model.layers.0.mlp.up_proj.weight_scale_inv'"),
            std::string::npos)
      << e;
  e = with_header([&](nlohmann::json& h) {  // an F8 norm weight: only *_proj.weight may be FP8
    h["model.language_model.layers.0.input_layernorm.weight"]["dtype"] = "F8_E4M3";
    auto& s = h["model.language_model.layers.0.input_layernorm.weight"];
    s["shape"] = {128};
  });
  EXPECT_NE(e.find("only the layers' 2-D projection weights"), std::string::npos) << e;
}

}  // namespace
}  // namespace clef::model
