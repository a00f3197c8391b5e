// Value construction, access and Python-like truthiness (see value.h).
#include "json/value.h"

#include <cerrno>
#include <charconv>
#include <cstdlib>

namespace clef::json {

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.bool_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.text_ = std::to_string(i);
  return v;
}

Value Value::integer_text(std::string digits) {
  Value v;
  v.kind_ = Kind::Int;
  if (digits == "-0") digits = "0";
  v.text_ = std::move(digits);
  return v;
}

Value Value::floating(double d) {
  Value v;
  v.kind_ = Kind::Float;
  v.double_ = d;
  return v;
}

Value Value::string(std::string utf8, bool has_lone_surrogate) {
  Value v;
  v.kind_ = Kind::String;
  v.text_ = std::move(utf8);
  v.lone_surrogate_ = has_lone_surrogate;
  return v;
}

Value Value::array(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::Array;
  v.items_ = std::move(items);
  return v;
}

Value Value::object(std::vector<Member> members) {
  Value v;
  v.kind_ = Kind::Object;
  for (auto& m : members) v.set(std::move(m.first), std::move(m.second));
  return v;
}

std::optional<int64_t> Value::as_int64() const {
  if (kind_ != Kind::Int) return std::nullopt;
  int64_t out = 0;
  auto [ptr, ec] = std::from_chars(text_.data(), text_.data() + text_.size(), out);
  if (ec != std::errc() || ptr != text_.data() + text_.size()) return std::nullopt;
  return out;
}

double Value::as_double() const {
  if (kind_ == Kind::Float) return double_;
  if (kind_ == Kind::Int) return std::strtod(text_.c_str(), nullptr);  // huge ints -> +-inf
  return 0.0;
}

const Value* Value::find(std::string_view key) const {
  for (const auto& m : members_)
    if (m.first == key) return &m.second;
  return nullptr;
}

void Value::set(std::string key, Value v) {
  for (auto& m : members_) {
    if (m.first == key) {
      m.second = std::move(v);
      return;
    }
  }
  members_.emplace_back(std::move(key), std::move(v));
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Null:
      return false;
    case Kind::Bool:
      return bool_;
    case Kind::Int:
      return text_ != "0";  // normalised: "-0" never occurs
    case Kind::Float:
      return double_ != 0.0;  // NaN is truthy in Python too
    case Kind::String:
      return !text_.empty();
    case Kind::Array:
      return !items_.empty();
    case Kind::Object:
      return !members_.empty();
  }
  return false;
}

// Structural equality, stricter than Python's: 1 != 1.0 and object member ORDER matters (the order
// decides question and option order, so tests must see it).
bool operator==(const Value& a, const Value& b) {
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case Kind::Null:
      return true;
    case Kind::Bool:
      return a.bool_ == b.bool_;
    case Kind::Int:
      return a.text_ == b.text_;
    case Kind::Float:
      return a.double_ == b.double_;
    case Kind::String:
      return a.text_ == b.text_ && a.lone_surrogate_ == b.lone_surrogate_;
    case Kind::Array:
      return a.items_ == b.items_;
    case Kind::Object:
      return a.members_ == b.members_;
  }
  return false;
}

}  // namespace clef::json
