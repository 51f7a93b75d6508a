#include "flowrun/json.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "flowrun/text.h"

namespace flowrun {

namespace {

// The length of the UTF-8 sequence at the start of `s` (the byte ranges of
// RFC 3629, as nlohmann checks them), 0 when it is not one.
std::size_t utf8_length(std::string_view s) {
  auto byte = [&](std::size_t i) { return i < s.size() ? static_cast<unsigned char>(s[i]) : 0u; };
  auto in = [&](std::size_t i, unsigned lo, unsigned hi) { return byte(i) >= lo && byte(i) <= hi; };
  const unsigned b = byte(0);
  if (b >= 0xC2 && b <= 0xDF) return in(1, 0x80, 0xBF) ? 2 : 0;
  unsigned lo = 0x80, hi = 0xBF;
  if (b == 0xE0) lo = 0xA0;
  if (b == 0xED) hi = 0x9F;
  if (b >= 0xE0 && b <= 0xEF) return in(1, lo, hi) && in(2, 0x80, 0xBF) ? 3 : 0;
  if (b == 0xF0) lo = 0x90;
  if (b == 0xF4) hi = 0x8F;
  if (b >= 0xF0 && b <= 0xF4) return in(1, lo, hi) && in(2, 0x80, 0xBF) && in(3, 0x80, 0xBF) ? 4 : 0;
  return 0;
}

// The four hex digits after "\u" at `s`, or -1.
long hex4(std::string_view s) {
  if (s.size() < 6 || s[0] != '\\' || s[1] != 'u') return -1;
  long cp = 0;
  for (char c : s.substr(2, 4)) {
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
    if (digit < 0) return -1;
    cp = cp * 16 + digit;
  }
  return cp;
}

bool is_high(long cp) { return cp >= 0xD800 && cp <= 0xDBFF; }
bool is_low(long cp) { return cp >= 0xDC00 && cp <= 0xDFFF; }

// Bytes::keep's strings on their way through nlohmann, which holds only
// UTF-8: a byte that is not UTF-8 travels as kMark and U+0080..U+00FF (the
// byte's value), a kMark of the text itself as two. U+FDD0 is a
// noncharacter, Unicode's code point for a program's own use.
constexpr std::string_view kMark = "\xEF\xB7\x90";

// `byte` (0x80..0xFF) as kMark and its code point's UTF-8.
void append_marked_byte(std::string& out, unsigned char byte) {
  out += kMark;
  out += static_cast<char>(0xC0 | (byte >> 6));
  out += static_cast<char>(0x80 | (byte & 0x3F));
}

// The byte after kMark at `s` (kMark, then U+0080..U+00FF), or -1.
int marked_byte(std::string_view s) {
  if (s.size() < kMark.size() + 2 || !s.starts_with(kMark)) return -1;
  const auto lead = static_cast<unsigned char>(s[kMark.size()]);
  const auto tail = static_cast<unsigned char>(s[kMark.size() + 1]);
  if ((lead != 0xC2 && lead != 0xC3) || (tail & 0xC0) != 0x80) return -1;
  return ((lead & 0x03) << 6) | (tail & 0x3F);
}

// Whether `s` is something Bytes::keep must mark: not UTF-8, or holding kMark.
bool needs_marks(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t n = utf8_length(s.substr(i));
    if (n == 0 || s.substr(i, n) == kMark) return true;
    i += n;
  }
  return false;
}

std::string mark(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = static_cast<unsigned char>(s[i]) < 0x80 ? 1 : utf8_length(s.substr(i));
    if (n == 0) {
      append_marked_byte(out, static_cast<unsigned char>(s[i++]));
      continue;
    }
    if (s.substr(i, n) == kMark) out += kMark;
    out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string unmark(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    if (s.substr(i).starts_with(kMark)) {
      if (const int byte = marked_byte(s.substr(i)); byte >= 0) {
        out += static_cast<char>(byte);
        i += kMark.size() + 2;
        continue;
      }
      i += s.substr(i + kMark.size()).starts_with(kMark) ? kMark.size() : 0;  // kMark twice is one
    }
    out += s[i++];
  }
  return out;
}

bool any_string(const Json& doc, bool (*test)(std::string_view)) {
  if (doc.is_string()) return test(doc.get_ref<const std::string&>());
  if (doc.is_array())
    return std::any_of(doc.begin(), doc.end(), [&](const Json& v) { return any_string(v, test); });
  if (!doc.is_object()) return false;
  for (const auto& [key, value] : doc.items()) {
    if (test(key) || any_string(value, test)) return true;
  }
  return false;
}

// `doc` with `change` made to every string and key.
Json map_strings(const Json& doc, std::string (*change)(std::string_view)) {
  if (doc.is_string()) return change(doc.get_ref<const std::string&>());
  if (doc.is_array()) {
    Json out = Json::array();
    for (const Json& v : doc) out.push_back(map_strings(v, change));
    return out;
  }
  if (!doc.is_object()) return doc;
  Json out = Json::object();
  for (const auto& [key, value] : doc.items()) out[change(key)] = map_strings(value, change);
  return out;
}

// nlohmann refuses what Python writes and reads: lone surrogates in \u
// escapes and raw bytes that are not UTF-8. Inside strings both become
// U+FFFD here, or with Bytes::keep the bytes (Python's surrogateescape
// writes byte 0xNN as \udcNN) marked as mark() does, `*marked` then set;
// everything else is left for nlohmann to judge.
std::string repair_strings(std::string_view text, Bytes bytes, bool* marked) {
  const bool keep = bytes == Bytes::keep;
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (!in_string || (c != '\\' && static_cast<unsigned char>(c) < 0x80)) {
      if (c == '"') in_string = !in_string;
      out += c;
      ++i;
      continue;
    }
    if (c != '\\') {
      const std::size_t n = utf8_length(text.substr(i));
      if (keep && (n == 0 || text.substr(i, n) == kMark)) {
        *marked = true;
        if (n == 0)
          append_marked_byte(out, static_cast<unsigned char>(c));
        else
          out.append(kMark).append(kMark);
      } else {
        out.append(n > 0 ? text.substr(i, n) : "\xEF\xBF\xBD");
      }
      i += n > 0 ? n : 1;
      continue;
    }
    const long cp = hex4(text.substr(i));
    std::size_t n = std::min<std::size_t>(2, text.size() - i);  // "\n", "\"", or a bad escape
    if (is_high(cp) && is_low(hex4(text.substr(i + 6)))) {
      n = 12;  // a pair is one code point
    } else if (keep && ((cp >= 0xDC80 && cp <= 0xDCFF) || cp == 0xFDD0)) {
      *marked = true;
      if (cp == 0xFDD0)
        out.append(kMark).append(kMark);
      else
        append_marked_byte(out, static_cast<unsigned char>(cp - 0xDC00));
      i += 6;
      continue;
    } else if (is_high(cp) || is_low(cp)) {
      out += "\\ufffd";
      i += 6;
      continue;
    } else if (cp >= 0) {
      n = 6;
    }
    out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace

std::optional<Json> parse_json(std::string_view text, Bytes bytes) {
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  // A raw NUL is JSON nowhere, but nlohmann's lexer takes it for the end of
  // the input and would read "1\0junk" as 1.
  if (text.find('\0') != std::string_view::npos) return std::nullopt;
  bool marked = false;
  const std::string repaired = repair_strings(text, bytes, &marked);
  // nlohmann's parser keeps its own stack, so depth costs memory, not the
  // call stack; the limit keeps what readers walk recursively shallow.
  bool too_deep = false;
  auto refuse_deep = [&](int depth, Json::parse_event_t event, Json&) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      too_deep = true;
    return !too_deep;
  };
  try {
    Json doc = Json::parse(repaired, refuse_deep, /*allow_exceptions=*/false);
    if (too_deep || doc.is_discarded()) return std::nullopt;
    return marked ? map_strings(doc, unmark) : doc;
  } catch (const Json::exception&) {
    return std::nullopt;
  }
}

std::string to_document(const Json& doc, Bytes bytes) {
  auto dump = [](const Json& d) {
    return d.dump(2, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
  };
  if (bytes == Bytes::replace || !any_string(doc, needs_marks)) return dump(doc) + "\n";
  // Marked, dumped, and each mark in the text turned into its escape: kMark
  // occurs in the dump only inside strings, and only as mark() put it there.
  const std::string text = dump(map_strings(doc, mark));
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::string_view rest = std::string_view(text).substr(i);
    if (const int byte = marked_byte(rest); byte >= 0) {
      const auto b = static_cast<unsigned char>(byte);
      out += "\\udc" + hex(&b, 1);
      i += kMark.size() + 2;
    } else if (rest.starts_with(kMark)) {
      out += kMark;
      i += 2 * kMark.size();
    } else {
      out += text[i++];
    }
  }
  return out + "\n";
}

const Json* find(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it != object.end() ? &*it : nullptr;
}

const std::string* find_string(const Json& object, std::string_view key) {
  const Json* value = find(object, key);
  return value != nullptr ? value->get_ptr<const std::string*>() : nullptr;
}

std::optional<int> find_int(const Json& object, std::string_view key) {
  const Json* value = find(object, key);
  if (value == nullptr || !value->is_number_integer()) return std::nullopt;
  if (value->is_number_unsigned())
    return value->get<std::uint64_t>() <= std::numeric_limits<int>::max() ? std::optional(value->get<int>())
                                                                          : std::nullopt;
  const auto number = value->get<std::int64_t>();
  if (number < std::numeric_limits<int>::min() || number > std::numeric_limits<int>::max())
    return std::nullopt;
  return static_cast<int>(number);
}

}  // namespace flowrun
