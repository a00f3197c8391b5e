// Value construction, access and Python-like truthiness (see value.h).
#include "json/value.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace clef::json {

static_assert(sizeof(Value) == 16, "json::Value must stay one tag and one word");

namespace {
const std::string kEmptyString;
const std::vector<Value> kEmptyItems;
const std::vector<Member> kEmptyMembers;
}  // namespace

Value::Value(const Value& other) : kind_(other.kind_), flags_(other.flags_), u_(other.u_) {
  switch (kind_) {
    case Kind::Int:
      if (flags_ & kBigInt) u_.str = new std::string(*other.u_.str);
      break;
    case Kind::String:
      if (other.u_.str) u_.str = new std::string(*other.u_.str);
      break;
    case Kind::Array:
      if (other.u_.arr) u_.arr = new std::vector<Value>(*other.u_.arr);
      break;
    case Kind::Object:
      if (other.u_.obj) u_.obj = new std::vector<Member>(*other.u_.obj);
      break;
    default:
      break;
  }
}

Value& Value::operator=(const Value& other) {
  if (this != &other) *this = Value(other);
  return *this;
}

Value& Value::operator=(Value&& other) noexcept {
  if (this != &other) {
    // `other` may live inside this value (v = std::move(v.items()[0])): detach it first.
    Value tmp(std::move(other));
    release();
    kind_ = tmp.kind_;
    flags_ = tmp.flags_;
    u_ = tmp.u_;
    tmp.kind_ = Kind::Null;
    tmp.flags_ = 0;
    tmp.u_.i = 0;
  }
  return *this;
}

void Value::release() noexcept {
  switch (kind_) {
    case Kind::Int:
      if (flags_ & kBigInt) delete u_.str;
      break;
    case Kind::String:
      delete u_.str;
      break;
    case Kind::Array:
      delete u_.arr;
      break;
    case Kind::Object:
      delete u_.obj;
      break;
    default:
      break;
  }
  kind_ = Kind::Null;
  flags_ = 0;
  u_.i = 0;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.u_.b = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.u_.i = i;
  return v;
}

Value Value::integer_text(std::string digits) {
  if (digits == "-0") digits = "0";
  // Canonical digits that fit an int64 are held inline; anything else keeps its exact text.
  const size_t lead = !digits.empty() && digits[0] == '-' ? 1 : 0;
  const bool canonical = digits.size() > lead && (digits[lead] != '0' || digits.size() == lead + 1);
  int64_t i = 0;
  if (canonical) {
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), i);
    if (ec == std::errc() && ptr == digits.data() + digits.size()) return integer(i);
  }
  Value v;
  v.kind_ = Kind::Int;
  v.flags_ = kBigInt;
  v.u_.str = new std::string(std::move(digits));
  return v;
}

Value Value::floating(double d) {
  Value v;
  v.kind_ = Kind::Float;
  v.u_.d = d;
  return v;
}

Value Value::string(std::string utf8, bool has_lone_surrogate) {
  Value v;
  v.kind_ = Kind::String;
  if (!utf8.empty()) v.u_.str = new std::string(std::move(utf8));
  if (has_lone_surrogate) v.flags_ = kLoneSurrogate;
  return v;
}

Value Value::array(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::Array;
  if (!items.empty()) v.u_.arr = new std::vector<Value>(std::move(items));
  return v;
}

Value Value::object(std::vector<Member> members) {
  Value v;
  v.kind_ = Kind::Object;
  for (auto& m : members) v.set(std::move(m.first), std::move(m.second));
  return v;
}

std::string Value::int_text() const {
  if (kind_ != Kind::Int) return std::string();
  if (flags_ & kBigInt) return *u_.str;
  return std::to_string(u_.i);
}

std::optional<int64_t> Value::as_int64() const {
  if (kind_ != Kind::Int || (flags_ & kBigInt)) return std::nullopt;  // big: beyond int64
  return u_.i;
}

double Value::as_double() const {
  if (kind_ == Kind::Float) return u_.d;
  if (kind_ == Kind::Int) {
    if (flags_ & kBigInt) return std::strtod(u_.str->c_str(), nullptr);  // huge ints -> +-inf
    return static_cast<double>(u_.i);
  }
  return 0.0;
}

const std::string& Value::as_string() const {
  return kind_ == Kind::String && u_.str ? *u_.str : kEmptyString;
}

const std::vector<Value>& Value::items() const {
  return kind_ == Kind::Array && u_.arr ? *u_.arr : kEmptyItems;
}

std::vector<Value>& Value::items() {
  if (kind_ != Kind::Array) *this = array();
  if (!u_.arr) u_.arr = new std::vector<Value>();
  return *u_.arr;
}

const std::vector<Member>& Value::members() const {
  return kind_ == Kind::Object && u_.obj ? *u_.obj : kEmptyMembers;
}

std::vector<Member>& Value::members() {
  if (kind_ != Kind::Object) *this = object();
  if (!u_.obj) u_.obj = new std::vector<Member>();
  return *u_.obj;
}

const Value* Value::find(std::string_view key) const {
  for (const auto& m : members())
    if (m.first == key) return &m.second;
  return nullptr;
}

void Value::set(std::string key, Value v) {
  auto& ms = members();
  for (auto& m : ms) {
    if (m.first == key) {
      m.second = std::move(v);
      return;
    }
  }
  ms.emplace_back(std::move(key), std::move(v));
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Null:
      return false;
    case Kind::Bool:
      return u_.b;
    case Kind::Int:
      return (flags_ & kBigInt) || u_.i != 0;  // big integers are never 0 ("-0" is normalised)
    case Kind::Float:
      return u_.d != 0.0;  // NaN is truthy in Python too
    case Kind::String:
      return !as_string().empty();
    case Kind::Array:
      return !items().empty();
    case Kind::Object:
      return !members().empty();
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
      return a.u_.b == b.u_.b;
    case Kind::Int:
      return a.int_text() == b.int_text();
    case Kind::Float:
      return a.u_.d == b.u_.d;
    case Kind::String:
      return a.as_string() == b.as_string() && a.has_lone_surrogate() == b.has_lone_surrogate();
    case Kind::Array:
      return a.items() == b.items();
    case Kind::Object:
      return a.members() == b.members();
  }
  return false;
}

namespace {

void quote_key(std::string& out, const std::string& key) {
  out += "[\"";
  for (char c : key) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += "\"]";
}

bool non_finite_path(const Value& v, std::string& path) {
  switch (v.kind()) {
    case Kind::Float:
      return !std::isfinite(v.as_double());
    case Kind::Array:
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (non_finite_path(v.items()[i], path)) {
          path.insert(0, "[" + std::to_string(i) + "]");
          return true;
        }
      }
      return false;
    case Kind::Object:
      for (const auto& [key, item] : v.members()) {
        if (non_finite_path(item, path)) {
          std::string step;
          quote_key(step, key);
          path.insert(0, step);
          return true;
        }
      }
      return false;
    default:
      return false;
  }
}

}  // namespace

std::optional<std::string> find_non_finite(const Value& v) {
  std::string path;
  if (non_finite_path(v, path)) return path;
  return std::nullopt;
}

}  // namespace clef::json
