// flowrun's JSON house rules on top of nlohmann::ordered_json: how every
// document flowrun writes is laid out, and how files other programs wrote
// (torch's error files) or an older flowrun wrote are read.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace flowrun {

// Objects keep their keys in the order they were added or read.
using Json = nlohmann::ordered_json;

// Arrays and objects nested deeper than this are refused ("[[[...]]]").
inline constexpr int kMaxJsonDepth = 64;

// What becomes of a string's bytes that are not UTF-8, which JSON cannot hold.
enum class Bytes {
  // Each becomes U+FFFD: for what is only shown (a worker's output).
  replace,
  // Kept, as Python's surrogateescape keeps them: byte 0xNN is written as
  // the escape \udcNN (a lone low surrogate, as Python's json writes it) and
  // read back as the byte, so that json.load and os.fsencode give the bytes
  // in Python too. For what flowrun reads back (run.json's paths and
  // arguments, which are bytes). U+FDD0 in such a string is written as
  // itself; reading keeps a raw byte that is not UTF-8 too.
  keep,
};

// Parses one JSON document (surrounding whitespace allowed, a leading UTF-8
// byte order mark skipped). RFC 8259 and nothing looser: no comments, no
// trailing commas, no NaN/Infinity. Bad input of any kind gives nullopt,
// never an exception and never a crash; nesting deeper than kMaxJsonDepth is
// refused.
// - Duplicate keys: the last one wins, as in Python's json module (at the
//   place of the first).
// - Strings are UTF-8: a lone surrogate in a \u escape (which Python writes
//   for undecodable bytes) and a raw byte that is not UTF-8 become U+FFFD;
//   with Bytes::keep, \udc80..\udcff and raw bytes are the bytes.
// - Integers that fit 64 bits stay integers (signed, or unsigned above
//   INT64_MAX); others are doubles, losing precision beyond 2^53. A number
//   too large for a double is refused (Python writes those as Infinity,
//   which is not JSON either); one too small becomes 0.
std::optional<Json> parse_json(std::string_view text, Bytes bytes = Bytes::replace);

// The document as flowrun writes every JSON file: two-space indentation, one
// array element or object member a line, ending in a newline. Strings that
// are not valid UTF-8 (a worker's output can be anything) get U+FFFD for the
// bad bytes instead of an exception, or with Bytes::keep their escapes.
std::string to_document(const Json& doc, Bytes bytes = Bytes::replace);

// The member `key` of `object`; nullptr when `object` is not an object or has
// no such member.
const Json* find(const Json& object, std::string_view key);
// The member `key` when it is a string, else nullptr.
const std::string* find_string(const Json& object, std::string_view key);
// The member `key` when it is an integer within an int's range ("3", not
// "3.0"), else nullopt.
std::optional<int> find_int(const Json& object, std::string_view key);

}  // namespace flowrun
