// The GEMM tuning cache: algorithm choices a GPU engine measured, persisted so a restart skips the
// measuring. A file is trusted only for the key it was written under (device, driver, library
// versions, dtype, tuning policy: any change makes it "stale") and only when its checksum matches
// ("corrupt" otherwise); either way the caller re-tunes and rewrites it. Each entry is still
// checked by the engine against the library before use. Plain C++ (the algorithm is 64 opaque
// bytes), so the file handling is tested without a GPU.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace clef::engine {

// Ordered name -> value pairs; two keys are equal when every pair is.
using TuningKey = std::map<std::string, std::string>;

struct TuningEntry {
  // The GEMM problem: M, N, K, lda, ldc, accumulate, and the element types of A, B and C.
  using Shape = std::array<int64_t, 9>;
  Shape shape{};
  std::array<uint64_t, 8> algo{};  // cublasLtMatmulAlgo_t's bytes
  bool operator==(const TuningEntry&) const = default;
};

enum class TuningCacheStatus { Missing, Loaded, Stale, Corrupt };
const char* tuning_cache_status_name(TuningCacheStatus s);

struct TuningCacheLoad {
  TuningCacheStatus status = TuningCacheStatus::Missing;
  std::string detail;                // why stale / corrupt (which key field, what failed to parse)
  std::vector<TuningEntry> entries;  // only when Loaded
};

// Never throws: an unreadable file is Missing (absent) or Corrupt (anything else).
TuningCacheLoad load_tuning_cache(const std::string& path, const TuningKey& key);

// Writes atomically (a temporary file in the same folder, then rename), creating the folder.
// Throws std::runtime_error naming the path on failure.
void save_tuning_cache(const std::string& path, const TuningKey& key,
                       const std::vector<TuningEntry>& entries);

}  // namespace clef::engine
