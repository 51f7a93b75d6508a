// flowrun's JSON rules (lib/base/json.cpp): every kind of value, every
// escape, the bad inputs the reader must refuse without throwing, and the
// layout of what flowrun writes.
#include "flowrun/json.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>

using namespace flowrun;

namespace {

Json parse_ok(std::string_view text) {
  auto v = parse_json(text);
  INFO(text);
  REQUIRE(v.has_value());
  return *v;
}

std::string parse_string(std::string_view text) {
  Json v = parse_ok(text);
  REQUIRE(v.is_string());
  return v.get<std::string>();
}

}  // namespace

TEST_CASE("json_read: scalars", "[json_read]") {
  CHECK(parse_ok("null").is_null());
  CHECK(parse_ok("true").is_boolean());
  CHECK(parse_ok("true").get<bool>());
  CHECK_FALSE(parse_ok("false").get<bool>());
  CHECK(parse_ok("  \t\r\n 42 \n").get<int>() == 42);
  CHECK(parse_ok("-0").get<double>() == 0);
  CHECK(parse_ok("-12.5").get<double>() == -12.5);
  CHECK(parse_ok("1e3").get<double>() == 1000);
  CHECK(parse_ok("2.5E-1").get<double>() == 0.25);
  CHECK(parse_ok("1E+2").get<double>() == 100);
  CHECK(parse_ok("1700000000").get<std::int64_t>() == 1700000000);
  CHECK(parse_string(R"("plain")") == "plain");
  CHECK(parse_string(R"("")").empty());
}

TEST_CASE("json_read: numbers beyond 64 bits and a double's range", "[json_read]") {
  CHECK(parse_ok("9223372036854775807").get<std::int64_t>() == INT64_MAX);
  CHECK(parse_ok("-9223372036854775808").get<std::int64_t>() == INT64_MIN);
  CHECK(parse_ok("18446744073709551615").get<std::uint64_t>() == UINT64_MAX);
  // Beyond 64 bits an integer is a double.
  CHECK(parse_ok("18446744073709551616").is_number_float());
  CHECK(parse_ok("18446744073709551616").get<double>() == 18446744073709551616.0);
  CHECK(parse_ok("-9223372036854775809").is_number_float());
  // Too small for a double: 0.
  CHECK(parse_ok("1e-400").get<double>() == 0.0);
  CHECK(parse_ok("-1e-400").get<double>() == 0.0);
  CHECK(std::signbit(parse_ok("-1e-400").get<double>()));
  CHECK(parse_ok("0." + std::string(400, '0') + "1").get<double>() == 0.0);
  // Too large for one: refused, as Infinity is.
  CHECK_FALSE(parse_json("1e400").has_value());
  CHECK_FALSE(parse_json("-1e400").has_value());
  CHECK_FALSE(parse_json("1" + std::string(400, '0')).has_value());
  CHECK_FALSE(parse_json("[1e99999999999999999999]").has_value());
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
  // A surrogate escaped as text is not an escape.
  CHECK(parse_string(R"("\\udcff")") == "\\udcff");
  // Raw UTF-8 passes through; bytes that are not UTF-8 become U+FFFD each.
  CHECK(parse_string("\"caf\xC3\xA9 \xF0\x9F\x98\x80\"") == "caf\xC3\xA9 \xF0\x9F\x98\x80");
  CHECK(parse_string("\"a\xFF\xC3"
                     "b\"") ==
        "a\xEF\xBF\xBD\xEF\xBF\xBD"
        "b");
  CHECK(parse_string("\"\xED\xA0\x80\"") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // an encoded surrogate
  CHECK(parse_string("\"\xC0\xAF\"") == "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong '/'
  // Outside strings such bytes are not JSON.
  CHECK_FALSE(parse_json("[1]\xFF").has_value());
}

TEST_CASE("json_read: arrays and objects", "[json_read]") {
  Json v = parse_ok(R"( { "z" : [1, "two", [], {}], "b": {"c": null}, "a": true } )");
  REQUIRE(v.is_object());
  REQUIRE(v.size() == 3);
  // In document order, not sorted.
  CHECK(v.begin().key() == "z");
  const Json& z = v.begin().value();
  REQUIRE(z.is_array());
  REQUIRE(z.size() == 4);
  CHECK(z[0] == 1);
  CHECK(z[1] == "two");
  CHECK(z[2].empty());
  CHECK(z[3].is_object());
  REQUIRE(find(v, "b") != nullptr);
  CHECK(find(*find(v, "b"), "c")->is_null());
  CHECK(find(v, "missing") == nullptr);
  CHECK(find_string(v, "a") == nullptr);
  CHECK(find(parse_ok("[]"), "a") == nullptr);
  CHECK(find_string(parse_ok("\"a\""), "a") == nullptr);
  CHECK(*find_string(parse_ok(R"({"k": "v"})"), "k") == "v");
  CHECK(parse_ok("\xEF\xBB\xBF{}").is_object());
  CHECK_FALSE(parse_json("\xEF\xBB\xBF").has_value());
}

TEST_CASE("json_read: duplicate keys, the last one wins", "[json_read]") {
  Json v = parse_ok(R"({"a": 1, "b": 2, "a": false})");
  REQUIRE(v.size() == 2);
  REQUIRE(find(v, "a") != nullptr);
  CHECK(find(v, "a")->is_boolean());
  CHECK(v.begin().key() == "a");
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
  CHECK_FALSE(parse_json(std::string_view("\"a\0\"", 4)).has_value());
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

TEST_CASE("json: the layout flowrun writes", "[json]") {
  Json doc;
  doc["format"] = 1;
  doc["name"] = "train";
  doc["gpus"] = {0, 1};
  doc["none"] = Json::array();
  doc["empty"] = Json::object();
  doc["node"] = nullptr;
  CHECK(to_document(doc) == R"({
  "format": 1,
  "name": "train",
  "gpus": [
    0,
    1
  ],
  "none": [],
  "empty": {},
  "node": null
}
)");
  // Control characters escaped, other bytes as they are; bytes that are not
  // UTF-8 (a worker's output) become U+FFFD instead of an exception.
  CHECK(to_document("a\"\\\n\t\x01/caf\xC3\xA9") == "\"a\\\"\\\\\\n\\t\\u0001/caf\xC3\xA9\"\n");
  CHECK(to_document("x\xFFy") == "\"x\xEF\xBF\xBDy\"\n");
  // What flowrun writes reads back the same.
  CHECK(parse_json(to_document(doc)) == doc);
}

TEST_CASE("json: Bytes::keep writes bytes that are not UTF-8 as Python does and reads them back", "[json]") {
  // 0xff and 0x80 alone, 0xc3 without its second byte, U+FDD0 (what the
  // bytes travel as inside), then U+00E9 and U+20AC as they are.
  const std::string bytes = "a\xFF/b\x80\xC3(\xEF\xB7\x90\xC3\xA9\xE2\x82\xAC";
  const Json doc = {{"spec", bytes}, {"args", {bytes, "plain", "\xEF\xB7\x90\xC2\x80"}}, {bytes, 1}};
  const std::string text = to_document(doc, Bytes::keep);
  CHECK(text.find("\"a\\udcff/b\\udc80\\udcc3(\xEF\xB7\x90\xC3\xA9\xE2\x82\xAC\"") != std::string::npos);
  CHECK(text.find("\xEF\xB7\x90\xEF\xB7\x90") == std::string::npos);
  const auto back = parse_json(text, Bytes::keep);
  REQUIRE(back.has_value());
  CHECK(*back == doc);
  // What Python writes: json.dumps(os.fsdecode(b"\xff\xc3")) and the escape of U+FDD0.
  CHECK(parse_json(R"("\udcff\udcc3\ufdd0")", Bytes::keep) == Json("\xFF\xC3\xEF\xB7\x90"));
  // Only bytes 0x80..0xff have an escape (Python's surrogateescape makes no other); a raw byte
  // that is not UTF-8 is kept as well.
  CHECK(parse_json(R"("\udc41\ud800")", Bytes::keep) == Json("\xEF\xBF\xBD\xEF\xBF\xBD"));
  CHECK(parse_json("\"x\xFFy\"", Bytes::keep) == Json("x\xFFy"));
  // An escaped backslash before "udcff" is text.
  CHECK(parse_json(R"("\\udcff")", Bytes::keep) == Json("\\udcff"));
  // Without keep, as before: U+FFFD, and plain UTF-8 is written the same either way.
  CHECK(to_document(Json(bytes)) ==
        "\"a\xEF\xBF\xBD/b\xEF\xBF\xBD\xEF\xBF\xBD(\xEF\xB7\x90\xC3\xA9\xE2\x82\xAC\"\n");
  CHECK(to_document(Json("caf\xC3\xA9"), Bytes::keep) == to_document(Json("caf\xC3\xA9")));
}
