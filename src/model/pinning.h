// Pinning a release to exact bytes: sha256 of its files in `sha256sum` format, checked before
// loading, and the revision recorded from a Hugging Face cache path.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace clef::model {

struct FileHash {
  std::string sha256;  // lowercase hex
  std::string path;    // relative to the release folder
};

// Lowercase hex sha256 of a file (large sequential reads). Throws LoadError naming the file.
std::string sha256_file(const std::string& path);

// Lowercase hex sha256 of in-memory bytes (e.g. a bench manifest's fingerprint).
std::string sha256_hex(std::string_view bytes);

// The files that make up a release (top-level *.json and *.safetensors: configs, index, shards,
// head, tokenizer), relative paths, sorted. Symlinks (as in a HF cache snapshot) are followed.
std::vector<std::string> release_files(const std::string& dir);

// Hashes the given files (relative to dir) in parallel, one thread per file up to the core count.
std::vector<FileHash> hash_files(const std::string& dir, const std::vector<std::string>& files);
inline std::vector<FileHash> hash_release(const std::string& dir) {
  return hash_files(dir, release_files(dir));
}

// "<hex>  <path>\n" lines, as sha256sum prints them.
std::string format_sha256sum(const std::vector<FileHash>& hashes);

// Checks every release file against a sha256sum-format file. Throws LoadError when the file is
// malformed, a listed file is missing, a hash differs, or a release file is not listed (it would
// load unchecked). Returns the number of files checked.
size_t verify_release(const std::string& dir, const std::string& verify_file);

// ".../snapshots/<commit>" -> commit; otherwise "".
std::string revision_from_path(const std::string& dir);
// ".../models--Org--name/snapshots/<commit>" -> "name"; otherwise the folder's own name.
std::string model_name_from_path(const std::string& dir);

}  // namespace clef::model
