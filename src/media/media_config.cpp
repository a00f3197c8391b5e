#include "media/media_config.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "json/value.h"

namespace clef::media {
namespace {

std::optional<json::Value> read_json(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  json::ParseError err;
  std::optional<json::Value> v = json::parse(ss.str(), &err);
  if (!v || !v->is_object())
    throw std::runtime_error(path.string() + ": not a JSON object" +
                             (v ? std::string() : ": " + err.message));
  return v;
}

int32_t token_id(const json::Value& cfg, const char* key, const std::string& file) {
  const json::Value* v = cfg.find(key);
  if (!v || v->is_null()) return -1;
  const std::optional<int64_t> id = v->as_int64();
  if (!id || *id < 0 || *id > INT32_MAX)
    throw std::runtime_error(file + ": " + key + " must be a non-negative integer");
  return static_cast<int32_t>(*id);
}

// {"size": {"shortest_edge": min, "longest_edge": max}} (the Qwen processors' form).
void read_budget(const json::Value* proc, PixelBudget& b, const std::string& file) {
  if (!proc || !proc->is_object()) return;
  const json::Value* size = proc->find("size");
  if (!size || !size->is_object()) return;
  const json::Value* mn = size->find("shortest_edge");
  const json::Value* mx = size->find("longest_edge");
  if (!mn || !mx) return;
  const std::optional<int64_t> lo = mn->as_int64(), hi = mx->as_int64();
  if (!lo || !hi || *lo <= 0 || *hi < *lo)
    throw std::runtime_error(file + ": size.shortest_edge/longest_edge must be 0 < min <= max");
  b = {*lo, *hi};
}

}  // namespace

MediaConfig load_media_config(const std::string& dir) {
  MediaConfig out;
  const std::filesystem::path root(dir);
  if (auto cfg = read_json(root / "config.json")) {
    const std::string file = (root / "config.json").string();
    out.tokens.image_pad = token_id(*cfg, "image_token_id", file);
    out.tokens.video_pad = token_id(*cfg, "video_token_id", file);
    out.tokens.vision_start = token_id(*cfg, "vision_start_token_id", file);
    out.tokens.vision_end = token_id(*cfg, "vision_end_token_id", file);
  }
  if (auto proc = read_json(root / "processor_config.json")) {
    const std::string file = (root / "processor_config.json").string();
    read_budget(proc->find("image_processor"), out.image, file);
    read_budget(proc->find("video_processor"), out.video, file);
  }
  return out;
}

}  // namespace clef::media
