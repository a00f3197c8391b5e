// The JSON layer against the rules of docs/spec/encoding.md §1. Expected strings come from
// CPython 3.11 (json.loads / json.dumps(..., ensure_ascii=False, separators=(",", ":"),
// sort_keys=True), repr, round), written down by hand, never from this code's own output.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>

#include "json/value.h"

using clef::json::dumps;
using clef::json::dumps_python_sorted;
using clef::json::Kind;
using clef::json::parse;
using clef::json::ParseError;
using clef::json::python_float_repr;
using clef::json::python_round;
using clef::json::Value;

namespace {

Value parse_ok(std::string_view text) {
  ParseError err;
  auto v = parse(text, &err);
  EXPECT_TRUE(v.has_value()) << text << " -> " << err.message;
  return v ? *v : Value();
}

bool refused(std::string_view text) {
  ParseError err;
  auto v = parse(text, &err);
  if (v) return false;
  EXPECT_FALSE(err.message.empty());
  return true;
}

// Python: json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"), sort_keys=True)
std::string py(std::string_view text) {
  return dumps_python_sorted(parse_ok(text));
}

}  // namespace

TEST(JsonRender, CompactSortedAtEveryDepth) {
  EXPECT_EQ(py(R"({"b": 1, "a": {"z": [1, 2, {"y": null, "x": true}], "c": false}})"),
            R"({"a":{"c":false,"z":[1,2,{"x":true,"y":null}]},"b":1})");
  // Member order is kept by the unsorted dump.
  EXPECT_EQ(dumps(parse_ok(R"({"b": 1, "a": 2})")), R"({"b":1,"a":2})");
}

TEST(JsonRender, KeysSortByCodePointNotUtf16) {
  // Python: "\ue000" < "\uffff" < "\U0001f600" (UTF-16 code-unit order would put the emoji first).
  EXPECT_EQ(py(R"({"\ud83d\ude00":3,"\uffff":2,"\ue000":1,"a":0,"B":5})"),
            "{\"B\":5,\"a\":0,\"\xEE\x80\x80\":1,\"\xEF\xBF\xBF\":2,\"\xF0\x9F\x98\x80\":3}");
  // "1" < "10" < "9"
  EXPECT_EQ(py(R"({"9":0,"10":0,"1":0})"), R"({"1":0,"10":0,"9":0})");
}

TEST(JsonRender, StringEscapesLikePython) {
  EXPECT_EQ(py(R"(["q\"b\\s/\n\r\t\b\f"])"), R"(["q\"b\\s/\n\r\t\b\f"])");
  EXPECT_EQ(py(R"(["\u0000\u0001\u001f\u007f"])"), "[\"\\u0000\\u0001\\u001f\x7f\"]");
  // Non-ASCII and U+2028 are written raw (ensure_ascii=False); "\/" decodes to "/".
  EXPECT_EQ(py(R"(["\u00e9\u2028\/"])"), "[\"\xC3\xA9\xE2\x80\xA8/\"]");
  EXPECT_EQ(py("[\"\xC3\xA9\"]"), "[\"\xC3\xA9\"]");
}

TEST(JsonRender, Literals) {
  EXPECT_EQ(py("[true,false,null]"), "[true,false,null]");
}

TEST(JsonRender, IntegersExactAtAnySize) {
  EXPECT_EQ(py("[9223372036854775808,-12345678901234567890123,0,-0,7]"),
            "[9223372036854775808,-12345678901234567890123,0,0,7]");
  Value v = parse_ok("-0");
  EXPECT_TRUE(v.is_int());
  EXPECT_EQ(v.int_text(), "0");
  EXPECT_FALSE(v.truthy());
  EXPECT_EQ(parse_ok("9223372036854775807").as_int64(), INT64_MAX);
  EXPECT_FALSE(parse_ok("9223372036854775808").as_int64().has_value());
  // Python refuses int literals of more than 4300 digits.
  EXPECT_TRUE(parse_ok(std::string(4300, '7')).is_int());
  std::string negative(4301, '7');
  negative[0] = '-';  // (not "-" + string: GCC 12 -Wrestrict false positive)
  EXPECT_TRUE(parse_ok(negative).is_int());
  EXPECT_TRUE(refused(std::string(4301, '7')));
}

TEST(JsonRender, FloatVersusInt) {
  EXPECT_EQ(parse_ok("2").kind(), Kind::Int);
  EXPECT_EQ(parse_ok("2.0").kind(), Kind::Float);
  EXPECT_EQ(parse_ok("2e0").kind(), Kind::Float);
  EXPECT_EQ(py("[1e5,1E-7,0e0,-0.0,1.0000000000000000001,1.50,2.0,1e15,1e16,0.0001,0.00001]"),
            "[100000.0,1e-07,0.0,-0.0,1.0,1.5,2.0,1000000000000000.0,1e+16,0.0001,1e-05]");
  EXPECT_EQ(py("[1.5e300,-1.0,100.0,0.30000000000000004,1250,1250.0,1.25e3,1e-400]"),
            "[1.5e+300,-1.0,100.0,0.30000000000000004,1250,1250.0,1250.0,0.0]");
}

TEST(JsonParse, OverflowingNumbersAreInfinityLikePython) {
  // Python: json.loads("1e400") == float("inf"), json.loads("[-1e400]") == [float("-inf")]: the
  // document is well-formed; validation refuses the value where it matters (docs/spec/encoding.md
  // §1).
  const Value big = parse_ok("1e400");
  ASSERT_EQ(big.kind(), Kind::Float);
  EXPECT_TRUE(std::isinf(big.as_double()) && big.as_double() > 0);
  const Value neg = parse_ok("[-1e400]");
  ASSERT_EQ(neg.items().size(), 1u);
  EXPECT_TRUE(std::isinf(neg.items()[0].as_double()) && neg.items()[0].as_double() < 0);
  EXPECT_EQ(parse_ok("1E+309").as_double(), INFINITY);
  // The largest double still parses finite; an integer never overflows (exact digits).
  EXPECT_TRUE(std::isfinite(parse_ok("1.7976931348623157e308").as_double()));
  EXPECT_EQ(py("1" + std::string(400, '0')), "1" + std::string(400, '0'));
}

TEST(JsonValue, FindNonFinite) {
  using clef::json::find_non_finite;
  EXPECT_FALSE(find_non_finite(parse_ok(R"({"a":[1,2.5,"1e400",1e308],"b":1e-400})")));
  EXPECT_EQ(find_non_finite(parse_ok("1e400")), std::optional<std::string>(""));
  EXPECT_EQ(find_non_finite(parse_ok(R"({"a":[0,{"b\"c":-1e400}],"z":1e400})")),
            std::optional<std::string>(R"(["a"][1]["b\"c"])"));
}

TEST(JsonRender, NonStandardLiteralsRefused) {
  EXPECT_TRUE(refused("NaN"));
  EXPECT_TRUE(refused("Infinity"));
  EXPECT_TRUE(refused("-Infinity"));
  EXPECT_TRUE(refused("[nan]"));
}

TEST(JsonParse, DuplicateKeysLikeAPythonDict) {
  EXPECT_EQ(dumps(parse_ok(R"({"k":1,"z":2,"k":3})")), R"({"k":3,"z":2})");
  EXPECT_EQ(dumps(parse_ok(R"({"o":{"a":1,"b":2,"a":{"x":1,"x":2}},"o2":0})")),
            R"({"o":{"a":{"x":2},"b":2},"o2":0})");
  // Past the small-object threshold (a key index is used).
  std::string big = "{";
  for (int i = 0; i < 40; ++i) big += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  big += "\"k3\":\"again\",\"k39\":\"last\",\"new\":1}";
  Value v = parse_ok(big);
  ASSERT_EQ(v.members().size(), 41u);
  EXPECT_EQ(v.members()[3].first, "k3");
  EXPECT_EQ(v.members()[3].second.as_string(), "again");
  EXPECT_EQ(v.members()[39].second.as_string(), "last");
  EXPECT_EQ(v.members()[40].first, "new");
}

TEST(JsonParse, SetAndObjectUseDictSemantics) {
  Value v =
      Value::object({{"a", Value::integer(1)}, {"b", Value::integer(2)}, {"a", Value::integer(3)}});
  EXPECT_EQ(dumps(v), R"({"a":3,"b":2})");
  v.set("c", Value::null());
  v.set("b", Value::boolean(true));
  EXPECT_EQ(dumps(v), R"({"a":3,"b":true,"c":null})");
  ASSERT_NE(v.find("b"), nullptr);
  EXPECT_EQ(v.find("zz"), nullptr);
}

TEST(JsonParse, Surrogates) {
  Value pair = parse_ok(R"("\ud83d\ude00")");
  EXPECT_EQ(pair.as_string(), "\xF0\x9F\x98\x80");
  EXPECT_FALSE(pair.has_lone_surrogate());
  Value lone = parse_ok(R"("bad \ud800 surrogate")");
  EXPECT_TRUE(lone.has_lone_surrogate());
  EXPECT_EQ(lone.as_string(), "bad \xED\xA0\x80 surrogate");  // WTF-8
  EXPECT_TRUE(parse_ok(R"("\udc00")").has_lone_surrogate());
  EXPECT_TRUE(parse_ok(R"("\ud800\ud800")").has_lone_surrogate());
  // A high surrogate followed by a non-surrogate escape: lone, and the escape still decodes.
  Value mixed = parse_ok(R"("\ud800\u0041")");
  EXPECT_TRUE(mixed.has_lone_surrogate());
  EXPECT_EQ(mixed.as_string(),
            "\xED\xA0\x80"
            "A");
  EXPECT_FALSE(parse_ok(R"("\u00e9")").has_lone_surrogate());
}

TEST(JsonParse, InvalidUtf8Refused) {
  EXPECT_TRUE(refused("\"\xC0\x80\""));          // overlong
  EXPECT_TRUE(refused("\"\xE0\x80\xAF\""));      // overlong 3-byte
  EXPECT_TRUE(refused("\"\xED\xA0\x80\""));      // encoded surrogate
  EXPECT_TRUE(refused("\"\xF4\x90\x80\x80\""));  // above U+10FFFF
  EXPECT_TRUE(refused("\"\xF5\x80\x80\x80\""));
  EXPECT_TRUE(refused("\"\x80\""));  // stray continuation
  EXPECT_TRUE(refused("\"\xC3\""));  // truncated
  EXPECT_TRUE(refused("\"\xE2\x82\""));
  EXPECT_TRUE(refused("\xC3\xA9"));  // non-ASCII outside a string
  EXPECT_EQ(parse_ok("\"\xF0\x9F\x98\x80\xE2\x82\xAC\"").as_string(),
            "\xF0\x9F\x98\x80\xE2\x82\xAC");
}

TEST(JsonParse, StrictGrammar) {
  for (const char* bad :
       {"",          " ",           "[1,]",  "{\"a\":1,}", "[1 2]",    "{\"a\" 1}", "{'a':1}",
        "{a:1}",     "01",          "-01",   "1.",         ".5",       "+1",        "-",
        "1e",        "1e+",         "[1]x",  "// c\n1",    "\"a\tb\"", "\"a\nb\"",  "\"\\x41\"",
        "\"\\u12\"", "\"\\u12G4\"", "\"abc", "tru",        "nul",      "[",         "{",
        "{\"a\":}",  "[1]]",        "True"}) {
    EXPECT_TRUE(refused(bad)) << "accepted: " << bad;
  }
  EXPECT_TRUE(parse_ok(" \t\r\n[ 1 , {\"a\" : [ ] } ] \n").is_array());
  // A UTF-8 byte order mark is stripped, as json.loads(bytes) does.
  EXPECT_EQ(parse_ok("\xEF\xBB\xBF{\"a\":1}").members().size(), 1u);
}

TEST(JsonParse, ErrorCarriesOffset) {
  ParseError err;
  EXPECT_FALSE(parse("[1, 2, x]", &err).has_value());
  EXPECT_EQ(err.offset, 7u);
  EXPECT_NE(err.message.find("byte 7"), std::string::npos);
}

TEST(JsonParse, DepthLimit) {
  auto nested = [](int n) { return std::string(n, '[') + std::string(n, ']'); };
  EXPECT_TRUE(parse_ok(nested(128)).is_array());
  EXPECT_TRUE(refused(nested(129)));
  EXPECT_TRUE(refused(std::string(1000000, '[')));  // no stack overflow
  std::string objs;
  for (int i = 0; i < 200; ++i) objs += "{\"a\":";
  objs += "1" + std::string(200, '}');
  EXPECT_TRUE(refused(objs));
  clef::json::ParseOptions shallow;
  shallow.max_depth = 2;
  ParseError err;
  EXPECT_TRUE(parse("[[1]]", &err, shallow).has_value());
  EXPECT_FALSE(parse("[[[1]]]", &err, shallow).has_value());
}

TEST(JsonValue, Truthiness) {
  for (const char* f : {"null", "false", "0", "-0", "0.0", "-0.0", "\"\"", "[]", "{}"})
    EXPECT_FALSE(parse_ok(f).truthy()) << f;
  for (const char* t : {"true", "1", "-1", "0.5", "\" \"", "[0]", "{\"a\":null}", "1e-300"})
    EXPECT_TRUE(parse_ok(t).truthy()) << t;
}

TEST(JsonValue, EqualityIsStrict) {
  EXPECT_EQ(parse_ok("[1,{\"a\":2.0}]"), parse_ok("[1, {\"a\": 2.0}]"));
  EXPECT_FALSE(parse_ok("1") == parse_ok("1.0"));
  EXPECT_FALSE(parse_ok("{\"a\":1,\"b\":2}") == parse_ok("{\"b\":2,\"a\":1}"));
}

TEST(PythonFloat, Repr) {
  struct Case {
    double x;
    const char* repr;
  };
  const Case cases[] = {{1e5, "100000.0"},
                        {1e-7, "1e-07"},
                        {0.0, "0.0"},
                        {-0.0, "-0.0"},
                        {1e16, "1e+16"},
                        {1e15, "1000000000000000.0"},
                        {1.5e300, "1.5e+300"},
                        {0.30000000000000004, "0.30000000000000004"},
                        {1250.0, "1250.0"},
                        {123456789012345678.0, "1.2345678901234568e+17"},
                        {0.0001, "0.0001"},
                        {0.00001, "1e-05"},
                        {5e-324, "5e-324"},
                        {1.7976931348623157e308, "1.7976931348623157e+308"},
                        {1.5e-323, "1.5e-323"},
                        {1.0 / 3, "0.3333333333333333"},
                        {2.0 / 3, "0.6666666666666666"},
                        {100.0, "100.0"},
                        {9999999999999998.0, "9999999999999998.0"},
                        {1e22, "1e+22"},
                        {1.2345e-5, "1.2345e-05"},
                        {-1.5, "-1.5"},
                        {0.9551, "0.9551"}};
  for (const auto& c : cases) EXPECT_EQ(python_float_repr(c.x), c.repr);
  EXPECT_EQ(python_float_repr(INFINITY), "inf");
  EXPECT_EQ(python_float_repr(-INFINITY), "-inf");
  EXPECT_EQ(python_float_repr(NAN), "nan");
  EXPECT_EQ(dumps(Value::floating(INFINITY)), "Infinity");
}

TEST(PythonFloat, RoundIsCorrectlyRoundedTiesToEven) {
  struct Case {
    double x;
    int n;
    double want;
  };
  // CPython 3.11 round(x, n).
  const Case cases[] = {{2.00005, 4, 2.0},
                        {5e-05, 4, 0.0001},
                        {0.00015, 4, 0.0001},
                        {0.00025, 4, 0.0003},
                        {1.00005, 4, 1.0001},
                        {0.12345, 4, 0.1235},
                        {0.99995, 4, 1.0},
                        {0.49995, 4, 0.5},
                        {2.675, 4, 2.675},
                        {1.5e-05, 4, 0.0},
                        {0.30000000000000004, 4, 0.3},
                        {0.6665500000000001, 4, 0.6666},
                        {0.44445, 4, 0.4445},
                        {1.65435, 4, 1.6543},
                        {6.68645, 4, 6.6864},
                        {3.09115, 4, 3.0911},
                        {12.37965, 4, 12.3796},
                        {9.95135, 4, 9.9513},
                        {5.50385, 4, 5.5038},
                        {0.74315, 4, 0.7431},
                        {11.34475, 4, 11.3447},
                        {19.98275, 4, 19.9827},
                        {0.5, 0, 0.0},
                        {1.5, 0, 2.0},
                        {2.5, 0, 2.0},
                        {-2.5, 0, -2.0},
                        {0.125, 2, 0.12},
                        {0.375, 2, 0.38},
                        {0.03125, 4, 0.0312},
                        {0.09375, 4, 0.0938},
                        {1e300, 4, 1e300},
                        {123456789.12345679, 4, 123456789.1235},
                        {5e-324, 4, 0.0}};
  for (const auto& c : cases) {
    double got = python_round(c.x, c.n);
    EXPECT_EQ(got, c.want) << python_float_repr(c.x) << " n=" << c.n << " got "
                           << python_float_repr(got);
  }
  double neg_zero = python_round(-1e-05, 4);
  EXPECT_EQ(neg_zero, 0.0);
  EXPECT_TRUE(std::signbit(neg_zero));  // Python: -0.0
  EXPECT_TRUE(std::isinf(python_round(INFINITY, 4)));
  EXPECT_TRUE(std::isnan(python_round(NAN, 4)));
}

// Strings are scanned eight bytes a step: every byte that ends a plain run (a quote, a backslash,
// a control character, a non-ASCII lead byte) must be seen at every offset within the step, and
// plain bytes next to them in value (0x1F/0x20, '!'/'#', '['/']', 0x7F) must pass through.
TEST(JsonParse, StringRunsStopAtEverySpecialByteAtEveryOffset) {
  for (size_t n = 0; n < 20; ++n) {
    const std::string a(n, 'a'), tail = " !#[]\x7F~ tail of more than eight bytes";
    EXPECT_EQ(parse_ok("\"" + a + "\"").as_string(), a);
    EXPECT_EQ(parse_ok("\"" + a + "\\\"" + tail + "\"").as_string(), a + "\"" + tail);
    EXPECT_EQ(parse_ok("\"" + a + "\\\\" + tail + "\"").as_string(), a + "\\" + tail);
    EXPECT_EQ(parse_ok("\"" + a + "\\n" + tail + "\"").as_string(), a + "\n" + tail);
    EXPECT_EQ(parse_ok("\"" + a + "\xC3\xA9" + tail + "\"").as_string(), a + "\xC3\xA9" + tail);
    EXPECT_EQ(parse_ok("[\"" + a + "\",\"" + tail + "\"]").items().at(1).as_string(), tail);
    for (const char control : {'\x00', '\x01', '\x1F', '\t', '\n'})
      EXPECT_TRUE(refused("\"" + a + std::string(1, control) + tail + "\"")) << n;
    EXPECT_TRUE(refused("\"" + a + "\xFF" + tail + "\"")) << n;
    EXPECT_TRUE(refused("\"" + a + "\x80" + tail + "\"")) << n;
    EXPECT_TRUE(refused("\"" + a));  // unterminated
  }
}
