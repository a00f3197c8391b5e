// Safetensors reader (mmap + fully validated header) and streaming writer.
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace clef::model {

namespace {

// The safetensors format's own limit; also keeps a corrupt length from asking for absurd parses.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw LoadError(path + ": " + what);
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& tensor,
                              const std::string& what) {
  throw LoadError(path + ": tensor '" + tensor + "': " + what);
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A non-negative JSON integer, or nullopt.
std::optional<uint64_t> as_u64(const nlohmann::json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer()) {
    int64_t v = j.get<int64_t>();
    if (v >= 0) return static_cast<uint64_t>(v);
  }
  return std::nullopt;
}

}  // namespace

std::optional<DType> parse_dtype(std::string_view name) {
  static constexpr std::pair<std::string_view, DType> kNames[] = {
      {"BF16", DType::BF16}, {"F16", DType::F16},   {"F32", DType::F32},
      {"F64", DType::F64},   {"I64", DType::I64},   {"I32", DType::I32},
      {"U8", DType::U8},     {"BOOL", DType::BOOL}, {"F8_E4M3", DType::F8_E4M3}};
  for (const auto& [n, d] : kNames) {
    if (n == name) return d;
  }
  return std::nullopt;
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::parse(const uint8_t* bytes, size_t size,
                                                              const std::string& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  if (size < 8) fail(path, "truncated: " + std::to_string(size) + " bytes, no header length");
  uint64_t header_len = read_u64_le(bytes);
  if (header_len > kMaxHeaderBytes) {
    fail(path, "header length " + std::to_string(header_len) + " exceeds the 100 MB limit");
  }
  if (header_len > size - 8) {
    fail(path, "truncated: header length " + std::to_string(header_len) + " runs past the end (" +
                   std::to_string(size) + " bytes)");
  }
  const char* hbegin = reinterpret_cast<const char*>(bytes + 8);
  nlohmann::json header = nlohmann::json::parse(hbegin, hbegin + header_len, nullptr, false);
  if (header.is_discarded()) fail(path, "header is not valid JSON");
  if (!header.is_object()) fail(path, "header is not a JSON object");

  const uint8_t* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  struct Range {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(path, "__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) fail(path, "__metadata__ value for '" + k + "' is not a string");
        f->metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) fail_tensor(path, name, "header entry is not an object");
    auto dt = entry.find("dtype");
    if (dt == entry.end() || !dt->is_string()) fail_tensor(path, name, "missing dtype");
    auto dtype = parse_dtype(dt->get<std::string>());
    if (!dtype) fail_tensor(path, name, "unsupported dtype " + dt->dump());
    auto sh = entry.find("shape");
    if (sh == entry.end() || !sh->is_array()) fail_tensor(path, name, "missing shape");
    Tensor t;
    t.name = name;
    t.file = path;
    t.dtype = *dtype;
    uint64_t expect = dtype_size(*dtype);
    for (const auto& d : *sh) {
      auto v = as_u64(d);
      if (!v || *v > static_cast<uint64_t>(INT64_MAX)) {
        fail_tensor(path, name, "bad shape " + sh->dump());
      }
      if (__builtin_mul_overflow(expect, *v, &expect)) {
        fail_tensor(path, name, "shape " + sh->dump() + " overflows");
      }
      t.shape.push_back(static_cast<int64_t>(*v));
    }
    auto off = entry.find("data_offsets");
    if (off == entry.end() || !off->is_array() || off->size() != 2) {
      fail_tensor(path, name, "missing data_offsets [begin, end]");
    }
    auto b = as_u64((*off)[0]), e = as_u64((*off)[1]);
    if (!b || !e || *b > *e) fail_tensor(path, name, "bad data_offsets " + off->dump());
    if (*e > data_size) {
      fail_tensor(path, name,
                  "data_offsets " + off->dump() + " run past the end of the data (" +
                      std::to_string(data_size) + " bytes; file truncated?)");
    }
    if (*e - *b != expect) {
      fail_tensor(path, name,
                  "data_offsets " + off->dump() + " hold " + std::to_string(*e - *b) +
                      " bytes but dtype and shape need " + std::to_string(expect));
    }
    t.data = data + *b;
    t.nbytes = static_cast<size_t>(expect);
    ranges.push_back({*b, *e, f->tensors_.size()});
    f->tensors_.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& x, const Range& y) {
    return x.begin < y.begin || (x.begin == y.begin && x.end < y.end);
  });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) {
      fail_tensor(path, f->tensors_[ranges[i].index].name,
                  "data overlaps tensor '" + f->tensors_[ranges[i - 1].index].name + "'");
    }
  }
  // Offset order = file order, which is also the cheapest order to read.
  std::vector<Tensor> ordered;
  ordered.reserve(ranges.size());
  for (const Range& r : ranges) ordered.push_back(std::move(f->tensors_[r.index]));
  f->tensors_ = std::move(ordered);
  for (size_t i = 0; i < f->tensors_.size(); ++i) f->index_[f->tensors_[i].name] = i;
  return f;
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail(path, "truncated: " + std::to_string(size) + " bytes, no header length");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (map == MAP_FAILED) fail(path, std::string("cannot mmap: ") + std::strerror(err));
  std::shared_ptr<const SafetensorsFile> parsed;
  try {
    parsed = parse(static_cast<const uint8_t*>(map), size, path);
  } catch (...) {
    ::munmap(map, size);
    throw;
  }
  auto* mutable_file = const_cast<SafetensorsFile*>(parsed.get());
  mutable_file->map_ = map;
  mutable_file->map_size_ = size;
  return parsed;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

const Tensor* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---- writer
// ---------------------------------------------------------------------------------------

size_t TensorSpec::nbytes() const {
  size_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

namespace {

void write_all(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(path + ": write failed: " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorSpec>& specs,
                       const std::map<std::string, std::string>& metadata, const TensorFill& fill,
                       size_t chunk_bytes) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const TensorSpec& s : specs) {
    size_t n = s.nbytes();
    header[s.name] = {
        {"dtype", dtype_name(s.dtype)}, {"shape", s.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // 8-byte aligned data, as the reference writer does
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(path + ": cannot create: " + std::strerror(errno));
  try {
    uint8_t len[8];
    for (int i = 0; i < 8; ++i)
      len[i] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));
    write_all(fd, len, 8, path);
    write_all(fd, reinterpret_cast<const uint8_t*>(h.data()), h.size(), path);
    // Double buffering: fill one buffer while the other is being written.
    chunk_bytes = std::max<size_t>(chunk_bytes, 4096);
    std::vector<uint8_t> bufs[2];
    bufs[0].resize(std::min(chunk_bytes, std::max<size_t>(offset, 1)));
    int cur = 0;
    size_t pos = 0;
    std::future<void> pending;
    auto flush = [&] {
      if (pending.valid()) pending.get();
      if (pos == 0) return;
      const uint8_t* p = bufs[cur].data();
      size_t n = pos;
      pending = std::async(std::launch::async, [fd, p, n, &path] { write_all(fd, p, n, path); });
      cur ^= 1;
      if (bufs[cur].size() < bufs[cur ^ 1].size()) bufs[cur].resize(bufs[cur ^ 1].size());
      pos = 0;
    };
    try {
      for (size_t i = 0; i < specs.size(); ++i) {
        size_t n = specs[i].nbytes(), done = 0;
        while (done < n) {
          size_t take = std::min(n - done, bufs[cur].size() - pos);
          fill(i, done, bufs[cur].data() + pos, take);
          pos += take;
          done += take;
          if (pos == bufs[cur].size()) flush();
        }
      }
      flush();
      if (pending.valid()) pending.get();
    } catch (...) {
      if (pending.valid()) pending.wait();
      throw;
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw std::runtime_error(path + ": close failed: " + std::strerror(errno));
}

void write_safetensors(const std::string& path, const std::vector<Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const Tensor& t : tensors) {
    TensorSpec s{t.name, t.dtype, t.shape};
    if (s.nbytes() != t.nbytes) {
      throw std::invalid_argument("tensor " + t.name + ": nbytes does not match dtype and shape");
    }
    specs.push_back(std::move(s));
  }
  write_safetensors(path, specs, metadata, [&](size_t i, size_t off, uint8_t* dst, size_t n) {
    std::memcpy(dst, tensors[i].data + off, n);
  });
}

}  // namespace clef::model
