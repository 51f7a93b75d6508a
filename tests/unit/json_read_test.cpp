// The JSON reader: every kind of value, every escape, and the bad inputs it
// must refuse without throwing.
#include "flowrun/json_read.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>

using namespace flowrun;

namespace {

JsonValue parse_ok(std::string_view text) {
  auto v = parse_json(text);
  INFO(text);
  REQUIRE(v.has_value());
  return *v;
}

std::string parse_string(std::string_view text) {
  JsonValue v = parse_ok(text);
  REQUIRE(v.is_string());
  return v.string;
}

}  // namespace

TEST_CASE("json_read: scalars", "[json_read]") {
  CHECK(parse_ok("null").is_null());
  CHECK(parse_ok("true").type == JsonValue::Type::boolean);
  CHECK(parse_ok("true").boolean);
  CHECK_FALSE(parse_ok("false").boolean);
  CHECK(parse_ok("  \t\r\n 42 \n").number == 42);
  CHECK(parse_ok("-0").number == 0);
  CHECK(parse_ok("-12.5").number == -12.5);
  CHECK(parse_ok("1e3").number == 1000);
  CHECK(parse_ok("2.5E-1").number == 0.25);
  CHECK(parse_ok("1E+2").number == 100);
  CHECK(parse_ok("1700000000").number == 1700000000.0);
  CHECK(parse_string(R"("plain")") == "plain");
  CHECK(parse_string(R"("")").empty());
}

TEST_CASE("json_read: numbers out of a double's range stay valid", "[json_read]") {
  CHECK(parse_ok("1e400").number == std::numeric_limits<double>::infinity());
  CHECK(parse_ok("-1e400").number == -std::numeric_limits<double>::infinity());
  CHECK(parse_ok("1e-400").number == 0.0);
  CHECK(parse_ok("-1e-400").number == 0.0);
  CHECK(std::signbit(parse_ok("-1e-400").number));
  CHECK(parse_ok("0." + std::string(400, '0') + "1").number == 0.0);
  CHECK(parse_ok("1" + std::string(400, '0')).number == std::numeric_limits<double>::infinity());
  CHECK(parse_ok("1e99999999999999999999").number == std::numeric_limits<double>::infinity());
}

TEST_CASE("json_read: string escapes", "[json_read]") {
  CHECK(parse_string(R"("a\"b\\c\/d")") == "a\"b\\c/d");
  CHECK(parse_string(R"("\b\f\n\r\t")") == "\b\f\n\r\t");
  CHECK(parse_string(R"("\u0041\u00e9\u20AC")") == "A\xC3\xA9\xE2\x82\xAC");  // A é €
  CHECK(parse_string(R"("\u0000")") == std::string(1, '\0'));
  // A surrogate pair is one code point: U+1F600.
  CHECK(parse_string(R"("\ud83d\ude00")") == "\xF0\x9F\x98\x80");
  // Lone surrogates (Python's surrogateescape) become U+FFFD, the text survives.
  CHECK(parse_string(R"("x\udcffy")") == "x\xEF\xBF\xBDy");
  CHECK(parse_string(R"("\ud83dz")") == "\xEF\xBF\xBDz");
  CHECK(parse_string(R"("\ud83d\u0041")") ==
        "\xEF\xBF\xBD"
        "A");
  // Raw UTF-8 and even invalid bytes pass through unchanged.
  CHECK(parse_string("\"caf\xC3\xA9 \xFF\"") == "caf\xC3\xA9 \xFF");
}

TEST_CASE("json_read: arrays and objects", "[json_read]") {
  JsonValue v = parse_ok(R"( { "a" : [1, "two", [], {}], "b": {"c": null}, "a": false } )");
  REQUIRE(v.is_object());
  REQUIRE(v.object.size() == 3);
  CHECK(v.object[0].key == "a");
  REQUIRE(v.object[0].value.is_array());
  REQUIRE(v.object[0].value.array.size() == 4);
  CHECK(v.object[0].value.array[0].number == 1);
  CHECK(v.object[0].value.array[1].string == "two");
  CHECK(v.object[0].value.array[2].array.empty());
  CHECK(v.object[0].value.array[3].is_object());
  // Duplicate keys: the last one wins.
  REQUIRE(v.find("a") != nullptr);
  CHECK(v.find("a")->type == JsonValue::Type::boolean);
  REQUIRE(v.find("b") != nullptr);
  CHECK(v.find("b")->find("c")->is_null());
  CHECK(v.find("missing") == nullptr);
  CHECK(v.find_string("a") == nullptr);
  CHECK(parse_ok("[]").find("a") == nullptr);
  CHECK(*parse_ok(R"({"k": "v"})").find_string("k") == "v");
  CHECK(parse_ok("\xEF\xBB\xBF{}").is_object());
}

TEST_CASE("json_read: nesting up to the depth limit", "[json_read]") {
  auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  CHECK(parse_json(nested(kMaxJsonDepth)).has_value());
  CHECK_FALSE(parse_json(nested(kMaxJsonDepth + 1)).has_value());
  std::string objects;
  for (int i = 0; i < kMaxJsonDepth + 1; ++i) objects += "{\"a\":";
  objects += "1" + std::string(kMaxJsonDepth + 1, '}');
  CHECK_FALSE(parse_json(objects).has_value());
  // Deep enough to overflow the stack if the limit were missing.
  CHECK_FALSE(parse_json(std::string(1'000'000, '[')).has_value());
}

TEST_CASE("json_read: refuses what is not JSON", "[json_read]") {
  const char* bad[] = {
      "",          " ",           "nul",
      "nulls",     "True",        "[1,]",
      "[1 2]",     "{,}",         "{\"a\"}",
      "{\"a\":}",  "{\"a\":1,}",  "{a:1}",
      "{'a':1}",   "[",           "]",
      "{",         "\"abc",       "\"a\\\"",
      "\"\\x\"",   "\"\\u12\"",   "\"\\u12G4\"",
      "\"a\nb\"",  "\"\t\"",      "01",
      "-",         "+1",          ".5",
      "1.",        "1e",          "1e+",
      "0x10",      "NaN",         "Infinity",
      "-Infinity", "1 2",         "{} {}",
      "[1]x",      "// c\n1",     "\"\\ud83d\\u12\"",
      "\"\\",      "[\"a\" : 1]", "{\"a\" 1}",
  };
  for (const char* text : bad) {
    INFO(text);
    CHECK_FALSE(parse_json(text).has_value());
  }
  // A NUL byte inside the text is not whitespace.
  CHECK_FALSE(parse_json(std::string_view("1\0", 2)).has_value());
}

TEST_CASE("json_read: never throws on arbitrary bytes", "[json_read]") {
  // Every prefix of a valid document, and every one-byte corruption of it.
  const std::string doc =
      R"({"message": {"message": "ValueError: boom", "extraInfo": {"py_callstack": "T\u00e9\n", "n": [1.5e3, true]}}})";
  for (std::size_t n = 0; n < doc.size(); ++n) CHECK_NOTHROW(parse_json(doc.substr(0, n)));
  for (std::size_t i = 0; i < doc.size(); ++i) {
    for (char c : std::string("\"\\{}[],:0e-u \x01\xFF")) {
      std::string copy = doc;
      copy[i] = c;
      CHECK_NOTHROW(parse_json(copy));
    }
  }
  CHECK(parse_json(doc).has_value());
}
