// A small JSON reader: enough to read files other programs wrote (torch's
// error files), not a general JSON library.
//
// It accepts RFC 8259 JSON and nothing looser: no comments, no trailing commas,
// no NaN/Infinity, no single quotes. Bad input of any kind gives nullopt, never
// an exception and never a crash; nesting deeper than kMaxJsonDepth is refused
// so a hostile file cannot exhaust the stack.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flowrun {

// Arrays and objects nested deeper than this are refused ("[[[...]]]").
inline constexpr int kMaxJsonDepth = 64;

struct JsonMember;

// One parsed value. Only the field that matches `type` is meaningful.
struct JsonValue {
  enum class Type { null, boolean, number, string, array, object };
  Type type = Type::null;
  bool boolean = false;
  // As a double: integers beyond 2^53 lose precision; numbers too large for a
  // double become +-infinity, too small ones 0 (the text is still valid JSON).
  double number = 0;
  // UTF-8. \uXXXX escapes are decoded, surrogate pairs joined; a lone
  // surrogate (which Python writes for undecodable bytes) becomes U+FFFD.
  // Raw bytes are copied as they are, even when they are not valid UTF-8.
  std::string string;
  std::vector<JsonValue> array;
  std::vector<JsonMember> object;  // in document order, duplicates kept

  bool is_null() const { return type == Type::null; }
  bool is_string() const { return type == Type::string; }
  bool is_object() const { return type == Type::object; }
  bool is_array() const { return type == Type::array; }

  // The member called `key` of an object; nullptr when this is not an object
  // or has no such member. With duplicate keys the last one wins, as in
  // Python's json module.
  const JsonValue* find(std::string_view key) const;
  // The member `key` when it is a string, else nullptr.
  const std::string* find_string(std::string_view key) const;
};

struct JsonMember {
  std::string key;
  JsonValue value;
};

// Parses one JSON document (surrounding whitespace allowed, a leading UTF-8
// byte order mark skipped). nullopt when `text` is not valid JSON.
std::optional<JsonValue> parse_json(std::string_view text);

}  // namespace flowrun
