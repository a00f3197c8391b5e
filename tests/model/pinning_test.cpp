// sha256 pinning: digests against known vectors and sha256sum, verify refusals, revision from HF
// paths, and the `clefserve hash` command.
#include <gtest/gtest.h>

#include "model/pinning.h"
#include "model_test_util.h"
#include "support/cli_runner.h"

namespace clef::model {
namespace {

using testing::copy_release;
using testing::load_error;
using testing::ScratchDir;
namespace fs = std::filesystem;

bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

// stdout of a shell command.
std::string run(const std::string& cmd) {
  return testsupport::run_command(cmd).out;
}

TEST(Pinning, Sha256KnownVectors) {
  ScratchDir tmp;
  testing::write_file(tmp / "abc", "abc");
  testing::write_file(tmp / "empty", "");
  EXPECT_EQ(sha256_file(tmp / "abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_file(tmp / "empty"),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  // Larger than one read buffer (8 MiB): 9 MiB of 'a'.
  testing::write_file(tmp / "big", std::string(9u << 20, 'a'));
  std::string ref = run("sha256sum " + (tmp / "big"));
  EXPECT_EQ(sha256_file(tmp / "big"), ref.substr(0, 64));
  EXPECT_THROW(sha256_file(tmp / "missing"), LoadError);
}

TEST(Pinning, Sha256HexOfBytesMatchesTheFileDigest) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  ScratchDir tmp;
  const std::string big(9u << 20, 'a');
  testing::write_file(tmp / "big", big);
  EXPECT_EQ(sha256_hex(big), sha256_file(tmp / "big"));
}

TEST(Pinning, HashCommandMatchesSha256sum) {
  std::string dir = testing::golden("models/tiny-r2");
  const testsupport::CliResult hash =
      testsupport::run_command(std::string(CLEF_BINARY) + " hash --model " + dir);
  const std::string& ours = hash.out;
  EXPECT_EQ(hash.status, 0);
  std::string ref = run("cd " + dir + " && sha256sum $(ls *.json *.safetensors | LC_ALL=C sort)");
  EXPECT_EQ(ours, ref);
  EXPECT_TRUE(contains(ours, "  model.safetensors\n"));
  EXPECT_TRUE(contains(ours, "  tokenizer.json\n"));
  EXPECT_TRUE(contains(ours, "  joint_head_config.json\n"));
  const int missing_status =
      testsupport::run_command(std::string(CLEF_BINARY) +
                               " hash --model /nonexistent/model 2>/dev/null")
          .status;
  EXPECT_EQ(missing_status, 1);
}

TEST(Pinning, VerifyAcceptsMatchAndRefusesMismatchMissingOrUnlisted) {
  ScratchDir tmp;
  std::string dir = copy_release(tmp, "tiny-r2");
  std::string sums = tmp / "SHA256SUMS";
  testing::write_file(sums, run("cd " + dir + " && sha256sum *.json *.safetensors"));
  LoadOptions opts;
  opts.verify_file = sums;
  auto r = Release::load(dir, opts);
  EXPECT_TRUE(r->weights_sha256_verified);

  // One flipped byte in the weights' data section (the file still parses).
  std::string st = dir + "/model.safetensors";
  std::string b = testing::read_file(st);
  b[b.size() - 3] ^= 1;
  testing::write_file(st, b);
  std::string msg = load_error([&] { Release::load(dir, opts); });
  EXPECT_TRUE(contains(msg, "model.safetensors") && contains(msg, "mismatch")) << msg;

  // A listed file that is gone.
  testing::write_file(sums, run("cd " + dir + " && sha256sum *.json *.safetensors"));
  std::filesystem::remove(dir + "/generation_config.json");
  msg = load_error([&] { Release::load(dir, opts); });
  EXPECT_TRUE(contains(msg, "generation_config.json") && contains(msg, "missing")) << msg;

  // A release file that the list does not cover would load unchecked.
  testing::write_file(sums, run("cd " + dir + " && sha256sum config.json"));
  msg = load_error([&] { Release::load(dir, opts); });
  EXPECT_TRUE(contains(msg, "not listed")) << msg;

  // Malformed lines, escapes out of the folder, an absent verify file.
  testing::write_file(sums, "not a checksum\n");
  EXPECT_TRUE(contains(load_error([&] { Release::load(dir, opts); }), "SHA256SUMS:1"));
  testing::write_file(sums, std::string(64, 'a') + "  ../x\n");
  EXPECT_TRUE(contains(load_error([&] { Release::load(dir, opts); }), ".."));
  opts.verify_file = tmp / "absent";
  EXPECT_TRUE(contains(load_error([&] { Release::load(dir, opts); }), "absent"));
}

TEST(Pinning, RevisionAndNameFromHuggingFaceCachePath) {
  EXPECT_EQ(revision_from_path("/h/hub/models--Cloudflare--clef-flash/snapshots/fde727a2/"),
            "fde727a2");
  EXPECT_EQ(model_name_from_path("/h/hub/models--Cloudflare--clef-flash/snapshots/fde727a2"),
            "clef-flash");
  EXPECT_EQ(revision_from_path("/data/clef-flash"), "");
  EXPECT_EQ(model_name_from_path("/data/clef-flash/"), "clef-flash");

  ScratchDir tmp;
  std::filesystem::create_directories(tmp.path() / "models--Org--tiny" / "snapshots");
  std::filesystem::copy(testing::golden("models/tiny-r2"),
                        tmp.path() / "models--Org--tiny" / "snapshots" / "0123abc",
                        std::filesystem::copy_options::recursive);
  std::string snap = (tmp.path() / "models--Org--tiny" / "snapshots" / "0123abc").string();
  auto r = Release::load(snap);
  EXPECT_EQ(r->revision, "0123abc");
  EXPECT_EQ(r->name, "tiny");
  LoadOptions opts;
  opts.revision = "pinned";
  EXPECT_EQ(Release::load(snap, opts)->revision, "pinned");
}

// A HF cache snapshot holds symlinks into ../../blobs: hashing and verifying follow them.
TEST(Pinning, FollowsSnapshotSymlinks) {
  ScratchDir tmp;
  fs::path blobs = tmp.path() / "models--Org--m" / "blobs";
  fs::path snap = tmp.path() / "models--Org--m" / "snapshots" / "c0ffee";
  fs::create_directories(blobs);
  fs::create_directories(snap);
  for (const auto& e : fs::directory_iterator(testing::golden("models/tiny-r2"))) {
    fs::path blob = blobs / ("blob-" + e.path().filename().string());
    fs::copy_file(e.path(), blob);
    fs::create_symlink(fs::relative(blob, snap), snap / e.path().filename());
  }
  auto hashes = hash_release(snap.string());
  auto direct = hash_release(testing::golden("models/tiny-r2"));
  ASSERT_EQ(hashes.size(), direct.size());
  for (size_t i = 0; i < hashes.size(); ++i) {
    EXPECT_EQ(hashes[i].path, direct[i].path);
    EXPECT_EQ(hashes[i].sha256, direct[i].sha256);
  }
  std::string sums = tmp / "SUMS";
  testing::write_file(sums, format_sha256sum(direct));
  LoadOptions opts;
  opts.verify_file = sums;
  auto r = Release::load(snap.string(), opts);
  EXPECT_TRUE(r->weights_sha256_verified);
  EXPECT_EQ(r->revision, "c0ffee");
  EXPECT_EQ(r->name, "m");
}

}  // namespace
}  // namespace clef::model
