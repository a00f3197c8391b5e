// libFuzzer: raw request bytes -> parse -> validate -> encode -> answer, with the invariants that
// must hold for any input: no crash, no UB, refusals only as RequestError, dumps/parse round trip,
// spans inside the sequence, the length limit respected.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "answer/answer.h"
#include "encoding/encode.h"
#include "encoding/render.h"
#include "encoding/request.h"
#include "json/value.h"
#include "tokenizer/tokenizer.h"

namespace {

const clef::tokenizer::Tokenizer& tiny() {
  static const clef::tokenizer::Tokenizer tok =
      clef::tokenizer::Tokenizer::load(CLEF_SOURCE_DIR "/tests/golden/tokenizers/tiny-bpe");
  return tok;
}

void check(bool ok) {
  if (!ok) std::abort();
}

void check_encoding(const clef::encoding::ValidatedRequest& req,
                    const clef::encoding::EncodedRequest& enc, int32_t max_length) {
  const int32_t n = static_cast<int32_t>(enc.input_ids.size());
  check(n <= max_length);
  check(enc.questions.size() == req.questions.size());
  for (size_t k = 0; k < enc.questions.size(); ++k) {
    const auto& q = enc.questions[k];
    check(q.question_span.start < q.question_span.end && q.question_span.end <= n);
    check(q.option_spans.size() == req.questions[k].options.size());
    for (const auto& s : q.option_spans) check(s.start < s.end && s.end <= n);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  clef::json::ParseError err;
  const auto body = clef::json::parse(text, &err);
  if (!body) return 0;

  // What we write, we read back identically (strings with lone surrogates are written as WTF-8,
  // and overflowing numbers, parsed as infinity, as Infinity: the strict parser refuses both by
  // design).
  const std::string dumped = clef::json::dumps(*body);
  const auto again = clef::json::parse(dumped, &err);
  if (again)
    check(*again == *body);
  else
    check(clef::encoding::has_surrogate_bytes(dumped) ||
          clef::json::find_non_finite(*body).has_value());
  clef::json::dumps_python_sorted(*body);

  try {
    const auto req = clef::encoding::validate_request(*body);
    for (int32_t max_length : {16384, 96}) {
      for (auto policy : {clef::encoding::Truncation::Error, clef::encoding::Truncation::Allow}) {
        try {
          clef::encoding::EncodeOptions opts;
          opts.max_length = max_length;
          opts.truncation = policy;
          const auto enc = clef::encoding::encode_request(req, tiny(), opts);
          check_encoding(req, enc, max_length);
          std::vector<std::vector<float>> logits;
          for (const auto& q : req.questions) logits.emplace_back(q.options.size(), 0.5f);
          const auto response = clef::answer::make_response(req, enc, logits, true);
          clef::json::dumps(response);
          clef::json::dumps(clef::encoding::encoded_to_json(enc));
        } catch (const clef::encoding::RequestError&) {
        }
      }
    }
  } catch (const clef::encoding::RequestError& e) {
    check(e.status == 400 || e.status == 422);
  }
  return 0;
}
