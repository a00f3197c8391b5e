#include "model/pinning.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "model/config.h"
#include "model/release.h"

namespace clef::model {

namespace fs = std::filesystem;

namespace {

// Lowercase hex of a digest.
std::string to_hex(const unsigned char* md, unsigned int len) {
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * size_t{len});
  for (unsigned int i = 0; i < len; ++i) {
    hex += kHex[md[i] >> 4];
    hex += kHex[md[i] & 15];
  }
  return hex;
}

}  // namespace

std::string sha256_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw LoadError(path + ": cannot open: " + std::strerror(errno));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    ::close(fd);
    throw LoadError(path + ": sha256 init failed");
  }
  std::vector<unsigned char> buf(size_t{8} << 20);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      throw LoadError(path + ": read error: " + std::strerror(err));
    }
    if (n == 0) break;
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  return to_hex(md, len);
}

std::string sha256_hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("sha256 failed (OpenSSL EVP_Digest)");
  return to_hex(md, len);
}

std::vector<std::string> release_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) throw LoadError(dir + ": cannot list: " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) throw LoadError(dir + ": cannot list: " + ec.message());
    const fs::path& p = it->path();
    std::string ext = p.extension().string();
    if ((ext == ".json" || ext == ".safetensors") && fs::is_regular_file(p, ec)) {
      out.push_back(p.filename().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<FileHash> hash_files(const std::string& dir, const std::vector<std::string>& files) {
  std::vector<FileHash> out(files.size());
  std::vector<std::exception_ptr> errors(files.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next++) < files.size();) {
      try {
        out[i] = {sha256_file((fs::path(dir) / files[i]).string()), files[i]};
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  size_t n = std::min<size_t>(files.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (size_t t = 1; t < n; ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return out;
}

std::string format_sha256sum(const std::vector<FileHash>& hashes) {
  std::string s;
  for (const FileHash& h : hashes) s += h.sha256 + "  " + h.path + "\n";
  return s;
}

size_t verify_release(const std::string& dir, const std::string& verify_file) {
  std::string text = read_text_file(verify_file);
  std::map<std::string, std::string> expected;  // path -> hex
  std::istringstream in(text);
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    auto bad = [&](const std::string& why) {
      throw LoadError(verify_file + ":" + std::to_string(lineno) + ": " + why);
    };
    if (line.size() < 67 || line[64] != ' ' || (line[65] != ' ' && line[65] != '*')) {
      bad("not a sha256sum line (\"<64 hex digits>  <path>\")");
    }
    std::string hex = line.substr(0, 64);
    for (char& c : hex) {
      if (!std::isxdigit(static_cast<unsigned char>(c))) bad("not a sha256 hex digest");
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    std::string path = line.substr(66);
    fs::path rel(path);
    if (rel.is_absolute() ||
        std::any_of(rel.begin(), rel.end(), [](const fs::path& c) { return c == ".."; })) {
      bad("path \"" + path + "\" must be relative to the model folder, without \"..\"");
    }
    path = rel.lexically_normal().string();
    auto [it, inserted] = expected.emplace(path, hex);
    if (!inserted && it->second != hex) bad("\"" + path + "\" listed twice with different digests");
  }
  if (expected.empty()) throw LoadError(verify_file + ": lists no files");
  for (const std::string& f : release_files(dir)) {
    if (!expected.count(f)) {
      throw LoadError(verify_file + ": release file " + (fs::path(dir) / f).string() +
                      " is not listed (it would load unverified)");
    }
  }
  std::vector<std::string> files;
  for (const auto& [path, hex] : expected) {
    std::error_code ec;
    if (!fs::is_regular_file(fs::path(dir) / path, ec)) {
      throw LoadError(verify_file + ": listed file " + (fs::path(dir) / path).string() +
                      " is missing");
    }
    files.push_back(path);
  }
  for (const FileHash& h : hash_files(dir, files)) {
    if (h.sha256 != expected[h.path]) {
      throw LoadError((fs::path(dir) / h.path).string() + ": sha256 mismatch (expected " +
                      expected[h.path] + " from " + verify_file + ", got " + h.sha256 + ")");
    }
  }
  return files.size();
}

namespace {

fs::path normal_dir(const std::string& dir) {
  fs::path p = fs::absolute(fs::path(dir)).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // trailing slash
  return p;
}

}  // namespace

std::string revision_from_path(const std::string& dir) {
  fs::path p = normal_dir(dir);
  if (p.parent_path().filename() == "snapshots" && !p.filename().empty())
    return p.filename().string();
  return "";
}

std::string model_name_from_path(const std::string& dir) {
  fs::path p = normal_dir(dir);
  if (!revision_from_path(dir).empty()) {
    std::string repo = p.parent_path().parent_path().filename().string();
    if (repo.rfind("models--", 0) == 0) {
      size_t sep = repo.rfind("--");
      if (sep != std::string::npos && sep + 2 < repo.size()) return repo.substr(sep + 2);
    }
  }
  return p.filename().string();
}

}  // namespace clef::model
