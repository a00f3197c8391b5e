// What a GPU engine prepares before serving, without a GPU: the token buckets (their padding over
// public231-shape, measured with the real Qwen3 tokenizer and the System One encoder) and the GEMM
// tuning cache file (round trip, stale keys, corruption of every kind).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "bench/manifest.h"
#include "encoding/encode.h"
#include "encoding/request.h"
#include "engine/prepare/token_buckets.h"
#include "engine/prepare/tuning_cache.h"
#include "json/value.h"
#include "model/pinning.h"
#include "support/scratch_dir.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

namespace clef::engine {
namespace {

namespace fs = std::filesystem;

TEST(TokenBuckets, EveryLengthFitsItsBucketAndBucketsAreFixedPoints) {
  const std::vector<int> all = all_buckets(16384);
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.back(), 16384);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LT(all[i - 1], all[i]);
  for (int b : all) EXPECT_EQ(bucket_tokens(b), b) << b;
  size_t k = 0;
  for (int T = 1; T <= 16384; ++T) {
    const int b = bucket_tokens(T);
    while (all[k] < T) ++k;
    EXPECT_EQ(b, all[k]) << "T=" << T;  // the smallest listed bucket that holds T
    // Padding bound: 7 tokens below 512, then under 1/32 of the request.
    if (T < 512)
      ASSERT_LE(b - T, 7) << T;
    else
      ASSERT_LT(32.0 * (b - T), static_cast<double>(T)) << T;
  }
  // 32 buckets up to 256, then 32 per doubling: 224 up to 16384.
  EXPECT_EQ(all.size(), 224u);
  EXPECT_EQ(bucket_tokens(5661), 5760);  // step 128 (16 per doubling gave 5888)
  EXPECT_EQ(bucket_tokens(961), 976);    // step 16
  EXPECT_EQ(bucket_tokens(511), 512);    // step 8 up to 511
  EXPECT_THROW(bucket_tokens(0), std::invalid_argument);
  EXPECT_EQ(all_buckets(1), std::vector<int>{8});
  EXPECT_EQ(all_buckets(1000).back(), 1008);  // step 16 from 512
}

// The padding bound: mean padding <= 3% of a request's tokens over public231-shape (manifests/, a
// copy of the spec's manifest) with Clef's tokenizer family (tests/golden/tokenizers/qwen3, the
// real Qwen3 tokenizer.json; see tests/golden/PROVENANCE.md).
TEST(TokenBuckets, MeanPaddingOverPublic231ShapeIsAtMostThreePercent) {
  const auto tok = tokenizer::Tokenizer::load(std::string(CLEF_SOURCE_DIR) +
                                              "/tests/golden/tokenizers/qwen3/tokenizer.json");
  bench::ManifestOptions mo;
  const bench::Manifest m =
      bench::load_manifest(std::string(CLEF_SOURCE_DIR) + "/manifests/public231-shape.jsonl", mo);
  ASSERT_EQ(m.items.size(), 231u);
  double sum = 0;
  int longest = 0;
  std::vector<int> lengths;
  for (const auto& item : m.items) {
    json::ParseError err;
    auto body = json::parse(item.body, &err);
    ASSERT_TRUE(body) << err.message;
    const auto req = encoding::validate_request(*body);
    const auto enc = encoding::encode_request(req, tok, {});
    const int T = static_cast<int>(enc.input_ids.size());
    lengths.push_back(T);
    longest = std::max(longest, T);
    sum += static_cast<double>(bucket_tokens(T) - T) / T;
  }
  std::sort(lengths.begin(), lengths.end());
  // The manifest's measured shape: p50 400, p95 4925 tokens.
  EXPECT_EQ(lengths[115], 400);   // ceil(0.5 * 231) = 116
  EXPECT_EQ(lengths[219], 4925);  // nearest rank: ceil(0.95 * 231) = 220
  const double mean = sum / static_cast<double>(m.items.size());
  std::printf("public231-shape: mean padding %.2f%% (longest %d tokens)\n", 100 * mean, longest);
  EXPECT_LE(mean, 0.03);
}

TuningKey key() {
  return {{"device", "NVIDIA H200"}, {"driver_version", "580.159.04"}, {"cublaslt", "13.1.0"}};
}

std::vector<TuningEntry> entries(int n) {
  std::mt19937_64 rng(std::random_device{}());
  std::vector<TuningEntry> out(n);
  for (auto& e : out) {
    for (auto& v : e.shape) v = static_cast<int64_t>(rng() % 20000);
    for (auto& w : e.algo) w = rng();  // every bit pattern must survive the text form
  }
  return out;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

TEST(TuningCache, RoundTripsEveryEntryUnderTheSameKey) {
  testing::ScratchDir d;
  const fs::path p = d.path() / "sub" / "gemm.json";  // the folder is created
  EXPECT_EQ(load_tuning_cache(p, key()).status, TuningCacheStatus::Missing);
  const auto e = entries(300);
  save_tuning_cache(p, key(), e);
  const TuningCacheLoad l = load_tuning_cache(p, key());
  ASSERT_EQ(l.status, TuningCacheStatus::Loaded) << l.detail;
  EXPECT_EQ(l.entries, e);
  // No temporary file is left beside it.
  size_t files = 0;
  for (const auto& f : fs::directory_iterator(p.parent_path())) files += f.is_regular_file();
  EXPECT_EQ(files, 1u);
}

TEST(TuningCache, AnotherDriverOrLibraryMakesItStaleNamingTheField) {
  testing::ScratchDir d;
  const fs::path p = d.path() / "gemm.json";
  save_tuning_cache(p, key(), entries(3));
  TuningKey k = key();
  k["driver_version"] = "590.1";
  TuningCacheLoad l = load_tuning_cache(p, k);
  EXPECT_EQ(l.status, TuningCacheStatus::Stale);
  EXPECT_NE(l.detail.find("driver_version"), std::string::npos) << l.detail;
  EXPECT_TRUE(l.entries.empty());
  k = key();
  k["policy"] = "new";
  EXPECT_EQ(load_tuning_cache(p, k).status, TuningCacheStatus::Stale);
  k = key();
  k.erase("cublaslt");
  EXPECT_EQ(load_tuning_cache(p, k).status, TuningCacheStatus::Stale);
}

TEST(TuningCache, AnyDamageIsCorruptNeverTrusted) {
  testing::ScratchDir d;
  const fs::path p = d.path() / "gemm.json";
  save_tuning_cache(p, key(), entries(8));
  const std::string good = read(p);
  // One flipped hex digit in an algorithm (the checksum no longer matches).
  const size_t at = good.find("\"", good.find("[", good.find("\"entries\"")) + 1);
  ASSERT_NE(at, std::string::npos);
  std::string flipped = good;
  flipped[at + 5] = flipped[at + 5] == '0' ? '1' : '0';
  std::vector<std::string> damaged = {flipped, good.substr(0, good.size() / 2), "", "not json",
                                      "[]",    "{\"format\":\"other\"}"};
  // A valid checksum over a malformed entry (a hand edit that kept the sum right).
  {
    nlohmann::ordered_json k = nlohmann::ordered_json::object();
    for (const auto& [name, value] : key()) k[name] = value;
    nlohmann::ordered_json es = nlohmann::ordered_json::parse(R"([[1,2,3,4,5,0,1,1,1,"zz"]])");
    nlohmann::ordered_json j{{"format", "clefserve-gemm-tuning/2"},
                             {"sha256", model::sha256_hex(k.dump() + "\n" + es.dump())},
                             {"key", k},
                             {"entries", es}};
    damaged.push_back(j.dump());
  }
  for (const std::string& bad : damaged) {
    write(p, bad);
    const TuningCacheLoad l = load_tuning_cache(p, key());
    EXPECT_EQ(l.status, TuningCacheStatus::Corrupt) << bad.substr(0, 80);
    EXPECT_TRUE(l.entries.empty());
    EXPECT_FALSE(l.detail.empty());
  }
  // Rewriting repairs it.
  save_tuning_cache(p, key(), entries(2));
  EXPECT_EQ(load_tuning_cache(p, key()).status, TuningCacheStatus::Loaded);
}

TEST(TuningCache, UnwritableFolderThrows) {
  // A path under a regular file fails for every user, root included.
  testing::ScratchDir d;
  write(d.path() / "file", "x");
  EXPECT_THROW(save_tuning_cache((d.path() / "file" / "gemm.json").string(), key(), entries(1)),
               std::runtime_error);
}

}  // namespace
}  // namespace clef::engine
