#include "engine/prepare/tuning_cache.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>

#include "model/pinning.h"

namespace clef::engine {
namespace {

using nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr const char* kFormat = "clefserve-gemm-tuning/2";
constexpr std::uintmax_t kMaxFileBytes = 64u << 20;  // far above any real cache; bounds the read

std::string hex(const std::array<uint64_t, 8>& a) {
  std::string s;
  char buf[17];
  for (uint64_t w : a) {
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(w));
    s += buf;
  }
  return s;
}

bool unhex(const std::string& s, std::array<uint64_t, 8>& out) {
  if (s.size() != 128) return false;
  for (size_t i = 0; i < 8; ++i) {
    uint64_t w = 0;
    for (size_t j = 0; j < 16; ++j) {
      const char c = s[i * 16 + j];
      int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (v < 0) return false;
      w = w << 4 | static_cast<uint64_t>(v);
    }
    out[i] = w;
  }
  return true;
}

ordered_json key_json(const TuningKey& key) {
  ordered_json k = ordered_json::object();
  for (const auto& [name, value] : key) k[name] = value;
  return k;
}

// What the checksum covers: the key and the entries exactly as written.
std::string checksum(const ordered_json& key, const ordered_json& entries) {
  return model::sha256_hex(key.dump() + "\n" + entries.dump());
}

TuningCacheLoad corrupt(std::string why) {
  TuningCacheLoad r;
  r.status = TuningCacheStatus::Corrupt;
  r.detail = std::move(why);
  return r;
}

}  // namespace

const char* tuning_cache_status_name(TuningCacheStatus s) {
  switch (s) {
    case TuningCacheStatus::Missing:
      return "missing";
    case TuningCacheStatus::Loaded:
      return "loaded";
    case TuningCacheStatus::Stale:
      return "stale";
    case TuningCacheStatus::Corrupt:
      return "corrupt";
  }
  return "?";
}

TuningCacheLoad load_tuning_cache(const std::string& path, const TuningKey& key) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return {};
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) return corrupt("cannot stat: " + ec.message());
  if (size > kMaxFileBytes) return corrupt("file of " + std::to_string(size) + " bytes");
  std::ifstream in(path, std::ios::binary);
  if (!in) return corrupt("cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  ordered_json j;
  try {
    j = ordered_json::parse(ss.str());
  } catch (const std::exception& e) {
    return corrupt(std::string("not JSON: ") + e.what());
  }
  try {
    if (!j.is_object() || j.value("format", std::string()) != kFormat)
      return corrupt("not a " + std::string(kFormat) + " file");
    const ordered_json& k = j.at("key");
    const ordered_json& entries = j.at("entries");
    if (!k.is_object() || !entries.is_array()) return corrupt("key or entries of the wrong type");
    if (j.at("sha256").get<std::string>() != checksum(k, entries))
      return corrupt("checksum mismatch");
    // A correct file written under another key: say which field moved.
    for (const auto& [name, value] : key) {
      if (!k.contains(name) || !k[name].is_string() || k[name].get<std::string>() != value) {
        TuningCacheLoad r;
        r.status = TuningCacheStatus::Stale;
        r.detail = name + ": cached " + (k.contains(name) ? k[name].dump() : "absent") +
                   ", now \"" + value + "\"";
        return r;
      }
    }
    if (k.size() != key.size()) {
      TuningCacheLoad r;
      r.status = TuningCacheStatus::Stale;
      r.detail = "the cached key has other fields";
      return r;
    }
    TuningCacheLoad r;
    r.status = TuningCacheStatus::Loaded;
    for (const auto& e : entries) {
      constexpr size_t n = std::tuple_size_v<TuningEntry::Shape>;
      if (!e.is_array() || e.size() != n + 1)
        return corrupt("an entry is not [M,N,K,lda,ldc,acc,a_type,b_type,c_type,algo]");
      TuningEntry t;
      for (size_t i = 0; i < n; ++i) t.shape[i] = e.at(i).get<int64_t>();
      if (!unhex(e.at(n).get<std::string>(), t.algo)) return corrupt("an algorithm is not 128 hex");
      r.entries.push_back(t);
    }
    return r;
  } catch (const std::exception& e) {
    return corrupt(std::string("malformed: ") + e.what());
  }
}

void save_tuning_cache(const std::string& path, const TuningKey& key,
                       const std::vector<TuningEntry>& entries) {
  ordered_json k = key_json(key);
  ordered_json es = ordered_json::array();
  for (const auto& e : entries) {
    ordered_json row = ordered_json::array();
    for (int64_t v : e.shape) row.push_back(v);
    row.push_back(hex(e.algo));
    es.push_back(std::move(row));
  }
  ordered_json j = ordered_json::object();
  j["format"] = kFormat;
  j["sha256"] = checksum(k, es);
  j["key"] = std::move(k);
  j["entries"] = std::move(es);
  const fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  if (ec)
    throw std::runtime_error("tuning cache: cannot create " + p.parent_path().string() + ": " +
                             ec.message());
  // Unique per process and thread, so two servers starting at once, or two GPUs of one server
  // (serve --device cuda:0,cuda:1 prepares them in parallel), never write one temporary file.
  const fs::path tmp = p.string() + ".tmp." + std::to_string(::getpid()) + "." +
                       std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << j.dump(1) << "\n";
    out.flush();
    if (!out) {
      fs::remove(tmp, ec);
      throw std::runtime_error("tuning cache: cannot write " + tmp.string());
    }
  }
  fs::rename(tmp, p, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw std::runtime_error("tuning cache: cannot rename into " + path);
  }
}

}  // namespace clef::engine
