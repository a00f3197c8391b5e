// Request validation: the reference's checks in its order (docs/spec/encoding.md §5), the project's
// tightenings (§2) and limits (docs/spec/protocol.md). The first failure is reported.
#include "encoding/request.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "encoding/render.h"

namespace clef::encoding {
namespace {

const char* kDefaultTrue = "The proposition is true or the answer is yes.";
const char* kDefaultFalse = "The proposition is false or the answer is no.";

[[noreturn]] void refuse(std::vector<std::string> loc, std::string msg, std::string type,
                         int status = 422) {
  // Quoted request text (ids, keys) may hold lone surrogates: keep the error valid UTF-8.
  for (auto& part : loc) part = escape_surrogates(part);
  throw RequestError(FieldError{std::move(loc), escape_surrogates(msg), std::move(type)}, status);
}

std::vector<std::string> qloc(const std::string& qid, const char* field = nullptr) {
  std::vector<std::string> loc{"body", "questions", qid};
  if (field) loc.emplace_back(field);
  return loc;
}

// Python-style kind name for messages.
const char* kind_name(const json::Value& v) {
  switch (v.kind()) {
    case json::Kind::Null:
      return "null";
    case json::Kind::Bool:
      return "a boolean";
    case json::Kind::Int:
    case json::Kind::Float:
      return "a number";
    case json::Kind::String:
      return "a string";
    case json::Kind::Array:
      return "an array";
    case json::Kind::Object:
      return "an object";
  }
  return "?";
}

void check_request_options(const json::Value& body) {
  if (const json::Value* t = body.find("truncation"); t && !t->is_null()) {
    if (!t->is_string() || (t->as_string() != "error" && t->as_string() != "allow"))
      refuse({"body", "truncation"}, "truncation must be \"error\" or \"allow\"", "literal_error");
  }
  if (const json::Value* th = body.find("thinking"); th && !th->is_null()) {
    if (!th->is_object()) refuse({"body", "thinking"}, "thinking must be an object", "dict_type");
    if (const json::Value* en = th->find("enabled"); en && en->truthy())
      refuse({"body", "thinking", "enabled"},
             "thinking is not supported: Clef models answer without thinking", "value_error");
  }
}

// docs/spec/encoding.md §1: a number that overflows a double (1e400) is infinity in Python and
// would render as `Infinity`; refused (422) where it would be rendered, naming the field and the
// path.
void refuse_non_finite(const json::Value& v, std::vector<std::string> loc,
                       const std::string& what) {
  if (auto path = json::find_non_finite(v))
    refuse(std::move(loc),
           what + *path +
               " is a number too large for a double (such as 1e400): it would render as "
               "Infinity, which is not JSON",
           "value_error");
}

// An absent, null or [] media field is a text request; anything else must be a list.
const std::vector<json::Value>* media_list(const json::Value& body, const char* field) {
  const json::Value* m = body.find(field);
  if (!m || m->is_null()) return nullptr;
  if (!m->is_array())
    refuse({"body", field}, std::string(field) + " must be a list (or null), not " + kind_name(*m),
           "list_type");
  return m->items().empty() ? nullptr : &m->items();
}

std::string image_string(const json::Value& v, std::vector<std::string> loc) {
  if (!v.is_string() || v.as_string().empty())
    refuse(std::move(loc),
           std::string("an image must be a non-empty string (a data:image/...;base64, URI or raw "
                       "base64), not ") +
               kind_name(v),
           "string_type");
  return v.as_string();
}

bool positive_finite(const json::Value& v) {
  return v.is_number() && std::isfinite(v.as_double()) && v.as_double() > 0;
}

void validate_media(const json::Value& body, const Limits& limits, ValidatedRequest& out) {
  if (const auto* images = media_list(body, "images")) {
    if (images->size() > limits.max_images)
      refuse({"body", "images"},
             "too many images: " + std::to_string(images->size()) + " (limit " +
                 std::to_string(limits.max_images) + ", --max-images)",
             "too_many_images");
    for (size_t k = 0; k < images->size(); ++k)
      out.images.push_back(image_string((*images)[k], {"body", "images", std::to_string(k)}));
  }
  if (const auto* videos = media_list(body, "videos")) {
    if (videos->size() > limits.max_videos)
      refuse({"body", "videos"},
             "too many videos: " + std::to_string(videos->size()) + " (limit " +
                 std::to_string(limits.max_videos) + ", --max-videos)",
             "too_many_videos");
    for (size_t k = 0; k < videos->size(); ++k) {
      const json::Value& v = (*videos)[k];
      const std::string ks = std::to_string(k);
      if (!v.is_object())
        refuse({"body", "videos", ks},
               std::string("a video must be an object {\"frames\": [...], \"fps\": ...} or "
                           "{\"data\": file}, not ") +
                   kind_name(v),
               "dict_type");
      if (const json::Value* data = v.find("data")) {
        // The data form: one MP4 / Matroska / WebM file; its own frame rate is the fps.
        for (const auto& [key, value] : v.members())
          if (key != "data")
            refuse({"body", "videos", ks, key},
                   key == "frames" || key == "fps"
                       ? "a video is either {\"data\": file} or {\"frames\": [...], \"fps\": "
                         "...}, not both (a file's fps is its container's)"
                       : "unknown video field \"" + key + "\" (expected \"data\")",
                   "extra_forbidden");
        if (!data->is_string() || data->as_string().empty())
          refuse({"body", "videos", ks, "data"},
                 std::string("\"data\" must be a non-empty string (a data:video/mp4;base64, or "
                             "data:video/webm;base64, URI or raw base64), not ") +
                     kind_name(*data),
                 "string_type");
        VideoInput in;
        in.data = data->as_string();
        out.videos.push_back(std::move(in));
        continue;
      }
      for (const auto& [key, value] : v.members())
        if (key != "frames" && key != "fps")
          refuse(
              {"body", "videos", ks, key},
              "unknown video field \"" + key + "\" (expected \"frames\" and \"fps\", or \"data\")",
              "extra_forbidden");
      const json::Value* frames = v.find("frames");
      if (!frames || !frames->is_array())
        refuse({"body", "videos", ks, "frames"}, "a video needs \"frames\": a list of images",
               frames ? "list_type" : "missing");
      if (frames->items().size() < 2)
        refuse({"body", "videos", ks, "frames"},
               "a video needs at least 2 frames, got " + std::to_string(frames->items().size()),
               "value_error");
      if (frames->items().size() > limits.max_video_frames)
        refuse({"body", "videos", ks, "frames"},
               "too many frames: " + std::to_string(frames->items().size()) + " (limit " +
                   std::to_string(limits.max_video_frames) + ", --max-video-frames)",
               "too_many_frames");
      VideoInput in;
      for (size_t i = 0; i < frames->items().size(); ++i)
        in.frames.push_back(
            image_string(frames->items()[i], {"body", "videos", ks, "frames", std::to_string(i)}));
      if (const json::Value* fps = v.find("fps"); fps && !fps->is_null()) {
        if (!positive_finite(*fps))
          refuse({"body", "videos", ks, "fps"}, "fps must be a positive number", "value_error");
        in.fps = fps->as_double();
      }
      out.videos.push_back(std::move(in));
    }
  }
  const json::Value* kw = body.find("media_kwargs");
  if (!kw || kw->is_null()) return;
  if (!kw->is_object())
    refuse({"body", "media_kwargs"},
           std::string("media_kwargs must be an object, not ") + kind_name(*kw), "dict_type");
  MediaKwargs& mk = out.media_kwargs;
  for (const auto& [key, value] : kw->members()) {
    const std::vector<std::string> loc{"body", "media_kwargs", key};
    if (key == "fps") {
      if (value.is_null()) {
        mk.fps_null = true;
      } else {
        if (!positive_finite(value))
          refuse(loc, "fps must be a positive number or null", "value_error");
        mk.fps = value.as_double();
      }
    } else if (key == "num_frames") {
      const std::optional<int64_t> n = value.is_int() ? value.as_int64() : std::nullopt;
      if (!n || *n < 2 || static_cast<uint64_t>(*n) > limits.max_video_frames)
        refuse(loc,
               "num_frames must be an integer from 2 to " + std::to_string(limits.max_video_frames),
               "value_error");
      mk.num_frames = static_cast<int>(*n);
    } else if (key == "min_pixels" || key == "max_pixels") {
      const std::optional<int64_t> n = value.is_int() ? value.as_int64() : std::nullopt;
      // 2^40: far above anything --max-length admits, low enough that no size arithmetic overflows.
      if (!n || *n <= 0 || *n > (int64_t{1} << 40))
        refuse(loc, key + " must be a positive integer", "value_error");
      (key == "min_pixels" ? mk.min_pixels : mk.max_pixels) = *n;
    } else {
      refuse(loc,
             "unsupported media_kwargs key \"" + key +
                 "\" (accepted: fps, num_frames, min_pixels with max_pixels)",
             "extra_forbidden");
    }
  }
  if (mk.min_pixels.has_value() != mk.max_pixels.has_value())
    refuse({"body", "media_kwargs", mk.min_pixels ? "max_pixels" : "min_pixels"},
           "min_pixels and max_pixels must be given together (one alone would be ignored)",
           "missing");
  if (mk.min_pixels && *mk.min_pixels > *mk.max_pixels)
    refuse({"body", "media_kwargs", "min_pixels"}, "min_pixels must not exceed max_pixels",
           "value_error");
  if (mk.num_frames && !mk.fps_null)
    refuse({"body", "media_kwargs", "num_frames"},
           "num_frames samples a fixed count and needs \"fps\": null (the default fps is 2)",
           "value_error");
}

}  // namespace

const char* question_type_name(QuestionType t) {
  switch (t) {
    case QuestionType::Noul:
      return "noul";
    case QuestionType::Choice:
      return "choice";
    case QuestionType::Score:
      return "score";
  }
  return "?";
}

ValidatedRequest validate_request(const json::Value& body, const Limits& limits) {
  // 1. The body is an object.
  if (!body.is_object())
    refuse({"body"}, "the request body must be a JSON object", "model_attributes_type", 400);

  // 2. model is a string and state is present (one check in the reference; null state is allowed).
  const json::Value* model = body.find("model");
  const json::Value* state = body.find("state");
  if (!model || !model->is_string() || !state) {
    if (!model) refuse({"body", "model"}, "model and state are required", "missing");
    if (!model->is_string())
      refuse({"body", "model"}, "model and state are required (model must be a string)",
             "string_type");
    refuse({"body", "state"}, "model and state are required", "missing");
  }
  // The model name is echoed in the response, which must be valid UTF-8.
  if (model->has_lone_surrogate())
    refuse({"body", "model"}, "model contains a lone UTF-16 surrogate", "value_error");

  // 3. questions is a non-empty object.
  const json::Value* questions = body.find("questions");
  if (!questions || !questions->truthy())
    refuse({"body", "questions"}, "at least one question is required", "missing");
  if (!questions->is_object())
    refuse({"body", "questions"},
           std::string("questions must be an object {id: question}, not ") + kind_name(*questions),
           "dict_type");
  if (questions->members().size() > limits.max_questions)
    refuse({"body", "questions"},
           "too many questions: " + std::to_string(questions->members().size()) + " (limit " +
               std::to_string(limits.max_questions) + ")",
           "too_many_questions");

  check_request_options(body);

  ValidatedRequest out;
  out.model = model->as_string();
  out.state = *state;
  if (const json::Value* t = body.find("truncation"); t && t->is_string())
    out.truncation = t->as_string() == "allow" ? Truncation::Allow : Truncation::Error;
  validate_media(body, limits, out);

  // 4. Per question, in request order: type, then non-empty criteria for choice/score.
  for (const auto& [qid, q] : questions->members()) {
    if (count_code_points(qid) > limits.max_question_id_chars)
      refuse(
          qloc(qid),
          "question id longer than " + std::to_string(limits.max_question_id_chars) + " characters",
          "string_too_long");
    if (!q.is_object())
      refuse(qloc(qid), qid + ": a question must be an object, not " + kind_name(q), "dict_type");
    const json::Value* type = q.find("type");
    Question question;
    question.id = qid;
    if (type && type->is_string() && type->as_string() == "noul")
      question.type = QuestionType::Noul;
    else if (type && type->is_string() && type->as_string() == "choice")
      question.type = QuestionType::Choice;
    else if (type && type->is_string() && type->as_string() == "score")
      question.type = QuestionType::Score;
    else
      refuse(qloc(qid, "type"), qid + ": type must be noul, choice, or score", "literal_error");
    const json::Value* criteria = q.find("criteria");
    if (question.type != QuestionType::Noul && (!criteria || !criteria->truthy()))
      refuse(qloc(qid, "criteria"), qid + ": criteria must not be empty", "value_error");
    if (const json::Value* ins = q.find("instructions")) question.instructions = *ins;
    if (criteria) question.criteria = *criteria;
    out.questions.push_back(std::move(question));
  }

  // 5. The schema: each question's options in model order (malformed criteria fail here).
  size_t total_options = 0;
  for (Question& question : out.questions) {
    const json::Value& c = question.criteria;
    const std::string& qid = question.id;
    switch (question.type) {
      case QuestionType::Noul: {
        // A truthy non-object would be read as key/value pairs by the reference: refused here.
        if (c.truthy() && !c.is_object())
          refuse(qloc(qid, "criteria"),
                 qid + ": noul criteria must be an object with \"true\"/\"false\" descriptions",
                 "dict_type");
        json::Value d_true = json::Value::string(kDefaultTrue);
        json::Value d_false = json::Value::string(kDefaultFalse);
        if (c.is_object()) {
          if (const json::Value* t = c.find("true")) d_true = *t;
          if (const json::Value* f = c.find("false")) d_false = *f;
        }
        question.options = {{"true", d_true}, {"false", d_false}};
        question.request_order = {0, 1};
        break;
      }
      case QuestionType::Choice: {
        if (!c.is_object())
          refuse(qloc(qid, "criteria"),
                 qid + ": choice criteria must be an object {option: description}", "dict_type");
        for (const auto& [key, desc] : c.members()) question.options.push_back({key, desc});
        // Model order: keys by code point (UTF-8 byte order is code point order).
        std::vector<size_t> sorted(question.options.size());
        for (size_t i = 0; i < sorted.size(); ++i) sorted[i] = i;
        std::sort(sorted.begin(), sorted.end(), [&](size_t a, size_t b) {
          return question.options[a].id < question.options[b].id;
        });
        std::vector<Option> model_order;
        question.request_order.assign(sorted.size(), 0);
        for (size_t pos = 0; pos < sorted.size(); ++pos) {
          model_order.push_back(question.options[sorted[pos]]);
          question.request_order[sorted[pos]] = pos;
        }
        question.options = std::move(model_order);
        break;
      }
      case QuestionType::Score: {
        if (!c.is_array())
          refuse(qloc(qid, "criteria"),
                 qid + ": score criteria must be an array of level descriptions", "list_type");
        for (size_t i = 0; i < c.items().size(); ++i)
          question.options.push_back({std::to_string(i), c.items()[i]});
        for (size_t i = 0; i < c.items().size(); ++i) question.request_order.push_back(i);
        break;
      }
    }
    if (question.options.size() > limits.max_options_per_question)
      refuse(qloc(qid, "criteria"),
             qid + ": too many options: " + std::to_string(question.options.size()) + " (limit " +
                 std::to_string(limits.max_options_per_question) + ")",
             "too_many_options");
    total_options += question.options.size();
  }
  if (total_options > limits.max_options_per_request)
    refuse({"body", "questions"},
           "too many options in the request: " + std::to_string(total_options) + " (limit " +
               std::to_string(limits.max_options_per_request) + ")",
           "too_many_options");

  // 6. Every rendered value is finite, in the order the encoder renders them (state, then per
  // question its instructions and its options' descriptions in request order).
  refuse_non_finite(out.state, {"body", "state"}, "state");
  for (const Question& question : out.questions) {
    const std::string& qid = question.id;
    refuse_non_finite(question.instructions, qloc(qid, "instructions"), qid + ": instructions");
    for (size_t idx : question.request_order) {
      const Option& o = question.options[idx];
      const std::string where =
          question.type == QuestionType::Score ? "[" + o.id + "]" : "[\"" + o.id + "\"]";
      refuse_non_finite(o.description, qloc(qid, "criteria"), qid + ": criteria" + where);
    }
  }
  return out;
}

}  // namespace clef::encoding
