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

enum class Kind : uint8_t { Null, Bool, Int, Float, String, Array, Object };

class Value;
using Member = std::pair<std::string, Value>;

// 16 bytes: a kind, flags and one word (a bool, a double, an int64, or a pointer to a heap payload
// for strings, integers beyond int64, arrays and objects). Empty strings, arrays and objects hold
// no payload, so an array of small values costs 16 bytes per element (the parser sizes arrays
// exactly).
class Value {
 public:
  Value() = default;  // null
  Value(const Value& other);
  Value(Value&& other) noexcept : kind_(other.kind_), flags_(other.flags_), u_(other.u_) {
    other.kind_ = Kind::Null;
    other.flags_ = 0;
    other.u_.i = 0;
  }
  Value& operator=(const Value& other);
  Value& operator=(Value&& other) noexcept;
  ~Value() { release(); }

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

  bool as_bool() const { return kind_ == Kind::Bool && u_.b; }
  std::string int_text() const;             // Kind::Int: exact digits
  std::optional<int64_t> as_int64() const;  // Kind::Int within range
  double as_double() const;                 // Int or Float
  const std::string& as_string() const;     // Kind::String, UTF-8 (else empty)
  // True when the string came from a lone surrogate escape ("\ud800"); its bytes then hold that
  // code unit WTF-8 encoded, which is not valid UTF-8 and must never reach the tokenizer.
  bool has_lone_surrogate() const { return (flags_ & kLoneSurrogate) != 0; }
  // Arrays / objects (other kinds: empty). The mutable forms are for an array / an object only.
  const std::vector<Value>& items() const;
  std::vector<Value>& items();
  const std::vector<Member>& members() const;
  std::vector<Member>& members();
  const Value* find(std::string_view key) const;  // object member or nullptr
  // Python dict assignment: replaces in place when the key exists, else appends.
  void set(std::string key, Value v);
  void push_back(Value v) { items().push_back(std::move(v)); }
  // Python truthiness: null/false/0/0.0/""/[]/{} are falsy.
  bool truthy() const;

  friend bool operator==(const Value& a, const Value& b);

 private:
  static constexpr uint8_t kLoneSurrogate = 1;
  static constexpr uint8_t kBigInt = 2;  // Kind::Int held as digits (u_.str) beyond int64
  void release() noexcept;

  Kind kind_ = Kind::Null;
  uint8_t flags_ = 0;
  union Word {
    int64_t i;  // first: `u_{}` zeroes the whole word through it (nullptr payloads)
    bool b;
    double d;
    std::string* str;          // String (nullptr = ""), Int with kBigInt
    std::vector<Value>* arr;   // Array (nullptr = [])
    std::vector<Member>* obj;  // Object (nullptr = {})
  } u_{};
};

struct ParseError {
  std::string message;  // human readable, includes the byte offset
  size_t offset = 0;
};

// Nesting limit of parse(): arrays/objects more than this deep are a parse error (400 at the
// server). It bounds the parser's recursion (the stack) and the recursion of everything that walks
// a value later (render, dumps, copy, destruction). Documented in docs/server.md "Request limits".
inline constexpr int kMaxDepth = 128;

struct ParseOptions {
  int max_depth = kMaxDepth;     // deeper nesting is refused (protects the stack)
  size_t max_int_digits = 4300;  // Python's int parsing limit
};

// Strict RFC 8259 JSON (no NaN/Infinity literals, no trailing commas, no comments). Invalid UTF-8
// in the input is an error. A number that overflows a double (1e400) is well-formed JSON and
// parses, as in Python, to an infinite float: validation refuses it (422) where it would be used,
// see find_non_finite. Returns the value or fills `error` and returns nullopt.
//
// Memory: a first pass checks the grammar and counts every array's / object's elements, building
// nothing, so a malformed document is refused without allocating for it; the second pass builds
// the value with exactly sized containers. The value then costs 16 bytes per array element, 48 per
// object member plus the payloads of non-empty strings (a heap std::string), big integers and
// non-empty containers: 8x the document's size for `[0,0,...]`, at most about 17x for any shape of
// small values (the worst: one-element arrays `[[0],[0],...]`). Time is linear in both passes.
std::optional<Value> parse(std::string_view text, ParseError* error, const ParseOptions& opts = {});

// Where the first non-finite float of v is (document order), as a path below v such as
// `["a"][0]`, or nullopt when every number is finite. An empty path means v itself.
std::optional<std::string> find_non_finite(const Value& v);

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
