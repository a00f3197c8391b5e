// The safetensors reader's checks on crafted files, the writer round trip, and the dtype
// conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "model/bf16.h"
#include "model_test_util.h"

namespace clef::model {
namespace {

using testing::load_error;

// A file image: 8-byte length, header text, data bytes.
std::string image(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

std::shared_ptr<const SafetensorsFile> parse(const std::string& bytes) {
  return SafetensorsFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                "x.safetensors");
}

TEST(Safetensors, ParsesTensorsAndMetadata) {
  // bf16 1.0 = 0x3f80, -2.0 = 0xc000; f32 0.5 = 0x3f000000 (little-endian).
  std::string data("\x80\x3f\x00\xc0\x00\x00\x00\x3f", 8);
  std::string bytes = image(
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[],"data_offsets":[4,8]},)"
      R"("a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})",
      data);
  auto f = parse(bytes);
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->tensors()[0].name, "a");  // data-offset order
  EXPECT_EQ(f->metadata().at("format"), "pt");
  const Tensor* a = f->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(a->numel(), 2u);
  EXPECT_EQ(a->at(0), 1.0f);
  EXPECT_EQ(a->at(1), -2.0f);
  const Tensor* b = f->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->numel(), 1u);  // 0-dim scalar
  EXPECT_EQ(b->at(0), 0.5f);
  EXPECT_EQ(f->find("c"), nullptr);
}

TEST(Safetensors, RefusesBadFilesNamingFileAndTensor) {
  std::string data(8, '\0');
  struct Case {
    const char* what;
    std::string bytes;
    const char* expect;  // substring of the message besides the file name
  };
  std::vector<Case> cases = {
      {"empty", "", "truncated"},
      {"short length", std::string("\x05\x00\x00", 3), "truncated"},
      {"header past EOF", image("{}", "").substr(0, 9), "past the end"},
      {"huge header length", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10), "exceeds"},
      {"corrupt JSON", image(R"({"a":{"dtype":"BF16",)", data), "not valid JSON"},
      {"not an object", image("[1,2]", data), "not a JSON object"},
      {"bad dtype", image(R"({"t1":{"dtype":"F8_E5M2","shape":[1],"data_offsets":[0,1]}})", data),
       "t1"},
      {"missing dtype", image(R"({"t2":{"shape":[1],"data_offsets":[0,2]}})", data), "t2"},
      {"negative dim", image(R"({"t3":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", data),
       "t3"},
      {"float dim", image(R"({"t4":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", data),
       "t4"},
      {"size mismatch", image(R"({"t5":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data),
       "t5"},
      {"end past data", image(R"({"t6":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data),
       "t6"},
      {"begin > end", image(R"({"t7":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})", data),
       "t7"},
      {"overflowing shape",
       image(R"({"t8":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
             data),
       "t8"},
      {"overlap",
       image(R"({"t9":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
             R"("t10":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
             data),
       "overlaps"},
      {"offsets not a pair",
       image(R"({"t11":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", data), "t11"},
      {"metadata not strings", image(R"({"__metadata__":{"k":1}})", data), "__metadata__"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::string msg = load_error([&] { parse(c.bytes); });
    EXPECT_NE(msg.find("x.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
  }
}

TEST(Safetensors, OpenNamesMissingAndTruncatedFiles) {
  testing::ScratchDir dir;
  std::string missing = dir / "nope.safetensors";
  EXPECT_NE(load_error([&] { SafetensorsFile::open(missing); }).find(missing), std::string::npos);
  std::string empty = dir / "empty.safetensors";
  testing::write_file(empty, "");
  EXPECT_NE(load_error([&] { SafetensorsFile::open(empty); }).find("truncated"), std::string::npos);
}

TEST(Safetensors, WriterRoundTripsAndAlignsData) {
  testing::ScratchDir dir;
  std::vector<float> f32 = {1.5f, -0.25f, 3.0f};
  std::vector<uint16_t> bf = {0x3f80, 0x4000};
  std::vector<Tensor> ts(2);
  ts[0].name = "w";
  ts[0].dtype = DType::F32;
  ts[0].shape = {3, 1};
  ts[0].data = reinterpret_cast<const uint8_t*>(f32.data());
  ts[0].nbytes = 12;
  ts[1].name = "v";
  ts[1].dtype = DType::BF16;
  ts[1].shape = {2};
  ts[1].data = reinterpret_cast<const uint8_t*>(bf.data());
  ts[1].nbytes = 4;
  std::string path = dir / "rt.safetensors";
  write_safetensors(path, ts, {{"format", "pt"}});
  std::string bytes = testing::read_file(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 16);
  auto f = SafetensorsFile::open(path);
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->find("w")->shape, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(f->find("w")->at(0), 1.5f);
  EXPECT_EQ(f->find("w")->at(2), 3.0f);
  EXPECT_EQ(f->find("v")->at(1), 2.0f);
  EXPECT_EQ(f->metadata().at("format"), "pt");
}

TEST(Safetensors, StreamingWriterUsesSmallChunks) {
  testing::ScratchDir dir;
  std::vector<TensorSpec> specs = {
      {"a", DType::U8, {10000}}, {"b", DType::I32, {3}}, {"c", DType::U8, {5000}}};
  std::string path = dir / "s.safetensors";
  write_safetensors(
      path, specs, {},
      [](size_t i, size_t off, uint8_t* dst, size_t n) {
        for (size_t k = 0; k < n; ++k) dst[k] = static_cast<uint8_t>((i * 31 + off + k) % 251);
      },
      4096);
  auto f = SafetensorsFile::open(path);
  const Tensor* a = f->find("a");
  const Tensor* c = f->find("c");
  ASSERT_TRUE(a && c);
  for (size_t k = 0; k < 10000; ++k) ASSERT_EQ(a->data[k], k % 251) << k;
  for (size_t k = 0; k < 5000; ++k) ASSERT_EQ(c->data[k], (62 + k) % 251) << k;
}

TEST(Bf16, RoundsToNearestEven) {
  auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  auto from = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(from(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(float_to_bf16(from(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(float_to_bf16(from(0x3f808001)), 0x3f81);  // above half
  EXPECT_EQ(float_to_bf16(from(0x3f807fff)), 0x3f80);  // below half
  EXPECT_EQ(float_to_bf16(from(0x7f7fffff)), 0x7f80);  // max float rounds to inf
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(from(0x7f800001)))));  // low-bit NaN stays NaN
  EXPECT_EQ(bits(round_to_bf16(0.1f)), 0x3dcd0000u);                        // 0.1f = 0x3dcccccd
}

TEST(F16, ConvertsAllClasses) {
  EXPECT_EQ(f16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_float(0xc000), -2.0f);
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_float(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_to_float(0x0400), std::ldexp(1.0f, -14));
  EXPECT_TRUE(std::isinf(f16_to_float(0x7c00)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7e00)));
  EXPECT_TRUE(std::signbit(f16_to_float(0x8000)));
}

TEST(TensorAccess, AppliesTheBf16LoadingRuleToWiderFloats) {
  float v = 0.1f;       // not a bf16 value
  uint16_t h = 0x3555;  // f16 0.333251953125: needs more mantissa bits than bf16 has
  double d = 0.1;
  Tensor t;
  t.dtype = DType::F32;
  t.shape = {1};
  t.data = reinterpret_cast<const uint8_t*>(&v);
  t.nbytes = 4;
  EXPECT_EQ(t.at(0), round_to_bf16(0.1f));
  EXPECT_NE(t.at(0), 0.1f);
  t.round_to_bf16 = false;
  EXPECT_EQ(t.at(0), 0.1f);
  t.dtype = DType::F16;
  t.data = reinterpret_cast<const uint8_t*>(&h);
  t.nbytes = 2;
  EXPECT_EQ(t.at(0), 0.333251953125f);
  t.round_to_bf16 = true;
  EXPECT_EQ(t.at(0), round_to_bf16(0.333251953125f));
  EXPECT_NE(t.at(0), 0.333251953125f);
  t.dtype = DType::F64;
  t.data = reinterpret_cast<const uint8_t*>(&d);
  t.nbytes = 8;
  EXPECT_EQ(t.at(0), round_to_bf16(0.1f));
  std::vector<float> out(1);
  EXPECT_THROW(t.to_float(out.data(), 1, 1), std::out_of_range);
}

}  // namespace
}  // namespace clef::model
