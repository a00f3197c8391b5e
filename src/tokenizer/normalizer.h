// Unicode normalizers of tokenizer.json ("NFC", "NFD", "NFKC", "NFKD", or a "Sequence" of them),
// via utf8proc. Anything else is refused at load time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace clef::tokenizer {

class Normalizer {
 public:
  enum class Form { kNFC, kNFD, kNFKC, kNFKD };

  Normalizer() = default;                                // identity (no normalizer in the file)
  static Normalizer from_json(const nlohmann::json& j);  // j may be null
  explicit Normalizer(std::vector<Form> forms) : forms_(std::move(forms)) {}

  bool empty() const { return forms_.empty(); }
  // text must be valid UTF-8.
  std::string apply(std::string_view text) const;

 private:
  std::vector<Form> forms_;
};

}  // namespace clef::tokenizer
