// Piecewise tokenization of a validated request (docs/spec/encoding.md §3-4): every piece is
// tokenized on its own so that no BPE merge crosses a piece boundary, exactly as the reference's
// encode_record.
#include "encoding/encode.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <unordered_map>

#include "encoding/encode_media.h"
#include "encoding/render.h"
#include "media/patchify.h"

namespace clef::encoding {
namespace {

const char* kPrefix =
    "<|im_start|>system\nRead the complete state and schema. Decide every field jointly. Each "
    "answer must be exactly one of that field's allowed options.<|im_end|>\n<|im_start|>user\n"
    "STATE:\n";
const char* kSchemaHeader = "\n\nSCHEMA FIELDS:\n";
const char* kSuffix =
    "\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:";

[[noreturn]] void refuse(std::vector<std::string> loc, std::string msg, std::string type) {
  // Quoted request text (ids, keys) may hold lone surrogates: keep the error valid UTF-8.
  for (auto& part : loc) part = escape_surrogates(part);
  throw RequestError(FieldError{std::move(loc), escape_surrogates(msg), std::move(type)});
}

// Tokenizes pieces, refusing text the tokenizer must never see; repeated pieces ("\n", "OPTION 1:
// ", default noul options ...) are tokenized once per request.
class PieceTokenizer {
 public:
  explicit PieceTokenizer(const tokenizer::Tokenizer& tok) : tok_(tok) {}

  const std::vector<int32_t>& operator()(const std::string& piece,
                                         const std::vector<std::string>& loc) {
    auto it = cache_.find(piece);
    if (it != cache_.end()) return it->second;
    if (has_surrogate_bytes(piece))
      refuse(loc, "contains a lone UTF-16 surrogate escape, which cannot be tokenized",
             "value_error");
    std::vector<int32_t> ids;
    try {
      ids = tok_.encode(piece);
    } catch (const tokenizer::TokenizerError& e) {
      refuse(loc, std::string("cannot be tokenized: ") + e.what(), "value_error");
    }
    return cache_.emplace(piece, std::move(ids)).first->second;
  }

 private:
  const tokenizer::Tokenizer& tok_;
  std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

void append(std::vector<int32_t>& out, const std::vector<int32_t>& ids) {
  out.insert(out.end(), ids.begin(), ids.end());
}

}  // namespace

EncodedRequest encode_request(const ValidatedRequest& req, const tokenizer::Tokenizer& tok,
                              const EncodeOptions& opts) {
  PieceTokenizer pieces(tok);
  const std::vector<std::string> body_loc{"body"};
  const std::vector<int32_t> prefix = pieces(kPrefix, body_loc);
  std::vector<int32_t> state = pieces(render(req.state), {"body", "state"});

  // The schema, with spans relative to its own start.
  EncodedRequest enc;
  std::vector<int32_t> schema = pieces(kSchemaHeader, body_loc);
  for (size_t k = 0; k < req.questions.size(); ++k) {
    const Question& q = req.questions[k];
    const std::vector<std::string> loc{"body", "questions", q.id};
    EncodedQuestion eq;
    eq.id = q.id;
    eq.type = q.type;
    append(schema, pieces("\nFIELD " + std::to_string(k + 1) + "\nID: " + q.id +
                              "\nTYPE: " + question_type_name(q.type) + "\nINSTRUCTION: ",
                          loc));
    const json::Value& ins = q.instructions;
    bool use_id = ins.is_null() || (ins.is_string() && ins.as_string().empty());
    const std::vector<int32_t>& ins_ids =
        pieces(use_id ? q.id : render(ins), {"body", "questions", q.id, "instructions"});
    // The reference would pool zero tokens and answer NaN: refuse instead.
    if (ins_ids.empty())
      refuse({"body", "questions", q.id, "instructions"},
             "question \"" + q.id + "\" renders to no tokens (empty id and no instructions)",
             "value_error");
    eq.question_span = {static_cast<int32_t>(schema.size()),
                        static_cast<int32_t>(schema.size() + ins_ids.size())};
    append(schema, ins_ids);
    append(schema, pieces("\nALLOWED OPTIONS:\n", loc));
    for (size_t j = 0; j < q.options.size(); ++j) {
      const Option& o = q.options[j];
      append(schema, pieces("OPTION " + std::to_string(j + 1) + ": ", loc));
      const std::vector<int32_t>& opt_ids =
          pieces(render_option(o.id, o.description), {"body", "questions", q.id, "criteria"});
      eq.option_spans.push_back({static_cast<int32_t>(schema.size()),
                                 static_cast<int32_t>(schema.size() + opt_ids.size())});
      append(schema, opt_ids);
      append(schema, pieces("\n", loc));
      eq.option_ids.push_back(o.id);
    }
    append(schema, pieces("END FIELD\n", loc));
    enc.questions.push_back(std::move(eq));
  }
  const std::vector<int32_t> suffix = pieces(kSuffix, body_loc);
  if (req.has_media() && opts.media.tokens.valid()) {
    const media::VisionTokens& vt = opts.media.tokens;
    const size_t vocab = tok.vocab_size();
    for (int32_t id : {vt.image_pad, vt.video_pad, vt.vision_start, vt.vision_end})
      if (static_cast<size_t>(id) >= vocab)
        refuse({"body", req.images.empty() ? "videos" : "images"},
               "this model takes no images or videos (its config.json's vision token id " +
                   std::to_string(id) + " is outside its tokenizer's vocabulary)",
               "not_supported");
  }
  // Images and videos, sized from their headers: their tokens are part of the fixed length.
  const MediaBlock media_block =
      plan_media(req, opts,
                 [&pieces](const std::string& piece, const std::vector<std::string>& loc)
                     -> const std::vector<int32_t>& { return pieces(piece, loc); });

  // Length limit (§4): everything but the state must fit; the state gets what is left.
  const size_t fixed = prefix.size() + media_block.ids.size() + schema.size() + suffix.size();
  const size_t max_length = opts.max_length > 0 ? static_cast<size_t>(opts.max_length) : 0;
  if (fixed > max_length)
    refuse({"body", "questions"},
           "schema requires " + std::to_string(fixed) + " tokens before state" +
               (media_block.ids.empty() ? std::string()
                                        : " (of which images and videos " +
                                              std::to_string(media_block.ids.size()) + ")") +
               "; maximum is " + std::to_string(max_length),
           "schema_too_long");
  const size_t room = max_length - fixed;
  const Truncation policy = req.truncation.value_or(opts.truncation);
  if (state.size() > room) {
    if (policy == Truncation::Error)
      refuse({"body", "state"},
             "state is " + std::to_string(state.size()) + " tokens but only " +
                 std::to_string(room) + " fit (max_length " + std::to_string(max_length) +
                 ", of which the prompt and schema take " + std::to_string(fixed) +
                 "); send \"truncation\": \"allow\" to cut it from the end",
             "state_too_long");
    enc.truncated_state_tokens = static_cast<int32_t>(state.size() - room);
    state.resize(room);
  }
  enc.state_tokens = static_cast<int32_t>(state.size());

  enc.input_ids.reserve(fixed + state.size());
  append(enc.input_ids, prefix);
  enc.media_token_offset = static_cast<int32_t>(enc.input_ids.size());
  enc.media_tokens = static_cast<int32_t>(media_block.ids.size());
  append(enc.input_ids, media_block.ids);
  append(enc.input_ids, state);
  const int32_t offset = static_cast<int32_t>(enc.input_ids.size());
  append(enc.input_ids, schema);
  append(enc.input_ids, suffix);
  for (EncodedQuestion& eq : enc.questions) {
    eq.question_span.start += offset;
    eq.question_span.end += offset;
    for (Span& s : eq.option_spans) {
      s.start += offset;
      s.end += offset;
    }
  }
  if (req.has_media()) {
    const media::VisionTokens& vt = opts.media.tokens;
    // The processor would expand a literal pad token in the text into an image placeholder.
    for (size_t i = 0; i < enc.input_ids.size(); ++i) {
      const bool in_block = i >= static_cast<size_t>(enc.media_token_offset) &&
                            i < enc.media_token_offset + media_block.ids.size();
      if (!in_block && (enc.input_ids[i] == vt.image_pad || enc.input_ids[i] == vt.video_pad))
        refuse({"body"},
               "the request text contains an image or video pad token (<|image_pad|> or "
               "<|video_pad|>), which a request with media cannot hold",
               "value_error");
    }
    enc.mm_token_type_ids.assign(enc.input_ids.size(), 0);
    std::copy(media_block.types.begin(), media_block.types.end(),
              enc.mm_token_type_ids.begin() + enc.media_token_offset);
    enc.position_ids = rope_positions(enc.input_ids.size(),
                                      static_cast<size_t>(enc.media_token_offset), media_block);
    render_media(media_block, opts, enc.visual);
  }
  return enc;
}

json::Value encoded_to_json(const EncodedRequest& enc) {
  auto span = [](const Span& s) {
    return json::Value::array({json::Value::integer(s.start), json::Value::integer(s.end)});
  };
  json::Value ids = json::Value::array();
  ids.items().reserve(enc.input_ids.size());
  for (int32_t id : enc.input_ids) ids.push_back(json::Value::integer(id));
  json::Value questions = json::Value::array();
  for (const EncodedQuestion& q : enc.questions) {
    json::Value spans = json::Value::array();
    json::Value option_ids = json::Value::array();
    for (const Span& s : q.option_spans) spans.push_back(span(s));
    for (const std::string& id : q.option_ids) option_ids.push_back(json::Value::string(id));
    json::Value jq = json::Value::object();
    jq.set("id", json::Value::string(q.id));
    jq.set("type", json::Value::integer(static_cast<int64_t>(q.type)));
    jq.set("question_span", span(q.question_span));
    jq.set("option_spans", std::move(spans));
    jq.set("option_ids", std::move(option_ids));
    questions.push_back(std::move(jq));
  }
  json::Value out = json::Value::object();
  out.set("input_ids", std::move(ids));
  out.set("questions", std::move(questions));
  if (!enc.has_media()) return out;
  auto ints = [](auto begin, auto end) {
    json::Value a = json::Value::array();
    for (auto it = begin; it != end; ++it) a.push_back(json::Value::integer(*it));
    return a;
  };
  auto grids = [](const std::vector<media::Grid>& gs) {
    json::Value a = json::Value::array();
    for (const media::Grid& g : gs)
      a.push_back(json::Value::array(
          {json::Value::integer(g.t), json::Value::integer(g.h), json::Value::integer(g.w)}));
    return a;
  };
  // The float rows the reference's processor returns, made from the frames as the CPU engine does.
  const std::vector<float> rows_f32 = media::pixel_rows(enc.visual);
  auto pixels = [&rows_f32](size_t row0, size_t rows) {
    const float* p = rows_f32.data() + row0 * media::kPatchValues;
    return json::Value::object(
        {{"shape", json::Value::array({json::Value::integer(static_cast<int64_t>(rows)),
                                       json::Value::integer(media::kPatchValues)})},
         {"sha256_f32le",
          json::Value::string(media::sha256_f32le(p, rows * media::kPatchValues))}});
  };
  size_t image_rows = 0, video_rows = 0;
  for (const media::Grid& g : enc.visual.image_grids)
    image_rows += static_cast<size_t>(g.patches());
  for (const media::Grid& g : enc.visual.video_grids)
    video_rows += static_cast<size_t>(g.patches());
  const size_t offset = static_cast<size_t>(enc.media_token_offset);
  out.set("media_token_offset", json::Value::integer(enc.media_token_offset));
  out.set("mm_token_type_ids",
          ints(enc.mm_token_type_ids.begin() + static_cast<std::ptrdiff_t>(offset),
               enc.mm_token_type_ids.begin() +
                   static_cast<std::ptrdiff_t>(offset + static_cast<size_t>(enc.media_tokens))));
  if (!enc.visual.image_grids.empty()) out.set("image_grid_thw", grids(enc.visual.image_grids));
  if (!enc.visual.video_grids.empty()) out.set("video_grid_thw", grids(enc.visual.video_grids));
  if (image_rows) out.set("pixel_values", pixels(0, image_rows));
  if (video_rows) out.set("pixel_values_videos", pixels(image_rows, video_rows));
  json::Value positions = json::Value::array();
  const size_t t = enc.input_ids.size();
  for (size_t axis = 0; axis < 3; ++axis)
    positions.push_back(
        ints(enc.position_ids.begin() + static_cast<std::ptrdiff_t>(axis * t),
             enc.position_ids.begin() + static_cast<std::ptrdiff_t>((axis + 1) * t)));
  out.set("position_ids", std::move(positions));
  return out;
}

}  // namespace clef::encoding
