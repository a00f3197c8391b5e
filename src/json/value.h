// A JSON value with Python's semantics, so a request renders exactly as the reference's json.dumps
// would: member order kept (duplicate keys: last value wins, at the first key's position, like a
// Python dict), integers kept as their exact decimal digits (any size), floats as doubles, and lone
// UTF-16 surrogate escapes tolerated at parse time (Python accepts them) but flagged so the encoder
// can refuse them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace clef::json {

enum class Kind { Null, Bool, Int, Float, String, Array, Object };

class Value;
using Member = std::pair<std::string, Value>;

class Value {
 public:
  Value() = default;  // null
  static Value null() { return Value(); }
  static Value boolean(bool b);
  static Value integer(int64_t v);
  // Exact decimal digits, optional leading '-'; "-0" is normalised to "0" (Python int semantics).
  static Value integer_text(std::string digits);
  static Value floating(double v);
  static Value string(std::string utf8, bool has_lone_surrogate = false);
  static Value array(std::vector<Value> items = {});
  static Value object(std::vector<Member> members = {});

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::Null; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }

  bool as_bool() const { return bool_; }
  const std::string& int_text() const { return text_; }   // Kind::Int: exact digits
  std::optional<int64_t> as_int64() const;                // Kind::Int within range
  double as_double() const;                               // Int or Float
  const std::string& as_string() const { return text_; }  // Kind::String, UTF-8
  // True when the string came from a lone surrogate escape ("\ud800"); its bytes then hold that
  // code unit WTF-8 encoded, which is not valid UTF-8 and must never reach the tokenizer.
  bool has_lone_surrogate() const { return lone_surrogate_; }
  const std::vector<Value>& items() const { return items_; }
  std::vector<Value>& items() { return items_; }
  const std::vector<Member>& members() const { return members_; }
  std::vector<Member>& members() { return members_; }
  const Value* find(std::string_view key) const;  // object member or nullptr
  // Python dict assignment: replaces in place when the key exists, else appends.
  void set(std::string key, Value v);
  void push_back(Value v) { items_.push_back(std::move(v)); }
  // Python truthiness: null/false/0/0.0/""/[]/{} are falsy.
  bool truthy() const;

  friend bool operator==(const Value& a, const Value& b);

 private:
  Kind kind_ = Kind::Null;
  bool bool_ = false;
  bool lone_surrogate_ = false;
  double double_ = 0.0;
  std::string text_;
  std::vector<Value> items_;
  std::vector<Member> members_;
};

struct ParseError {
  std::string message;  // human readable, includes the byte offset
  size_t offset = 0;
};

struct ParseOptions {
  int max_depth = 128;           // deeper nesting is refused (protects the stack)
  size_t max_int_digits = 4300;  // Python's int parsing limit
};

// Strict RFC 8259 JSON (no NaN/Infinity literals, no trailing commas, no comments). Refuses floats
// that overflow a double (Python would render them as Infinity). Invalid UTF-8 in the input is an
// error. Returns the value or fills `error` and returns nullopt.
std::optional<Value> parse(std::string_view text, ParseError* error, const ParseOptions& opts = {});

// Python's json.dumps(v, ensure_ascii=False, separators=(",", ":"), sort_keys=True).
std::string dumps_python_sorted(const Value& v);
// Compact JSON in member order; floats written as Python writes them (repr). For responses and CLI
// output.
std::string dumps(const Value& v);

// Python repr(float): shortest round-trip digits, Python's layout ("1.0", "1e-07", "1e+16", "inf").
std::string python_float_repr(double x);
// Python round(x, ndigits): correctly rounded from the exact binary value, ties to even.
double python_round(double x, int ndigits);

}  // namespace clef::json
