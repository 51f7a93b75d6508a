// Writing spec text that parse_spec() reads back as given (spec.h).
//
// flowrun init and flowrun run write a user's arguments into a spec; YAML
// reads a plain scalar as it likes (`null.py` stays a string but `null`,
// `true`, `1e3` and `~` do not, `- x` is a list, `#` starts a comment), so
// every scalar is double-quoted, and everything a double-quoted scalar would
// fold, trim or drop is escaped.

#include <cstdint>
#include <cstdio>
#include <yaml-cpp/binary.h>

#include "flowrun/spec.h"

namespace flowrun {

namespace {

// The length of the UTF-8 sequence at `text[i]` and its code point, or 0 for
// a byte that does not start one (overlong forms, surrogates and values past
// U+10FFFF are not UTF-8; the spec's reader refuses them, spec.cpp).
std::size_t utf8_at(std::string_view text, std::size_t i, std::uint32_t& code) {
  const auto c = static_cast<unsigned char>(text[i]);
  const std::size_t n = c < 0x80                 ? 1
                        : c >= 0xc2 && c <= 0xdf ? 2
                        : c >= 0xe0 && c <= 0xef ? 3
                        : c >= 0xf0 && c <= 0xf4 ? 4
                                                 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  code = n == 1 ? c : n == 2 ? c & 0x1fu : n == 3 ? c & 0x0fu : c & 0x07u;
  for (std::size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(text[i + k]);
    if ((b & 0xc0) != 0x80) return 0;
    code = (code << 6) | (b & 0x3fu);
  }
  if ((n == 3 && code < 0x800) || (n == 4 && (code < 0x10000 || code > 0x10ffff)) ||
      (code >= 0xd800 && code <= 0xdfff))
    return 0;
  return n;
}

bool is_utf8(std::string_view text) {
  std::uint32_t code = 0;
  for (std::size_t i = 0, n = 0; i < text.size(); i += n) {
    n = utf8_at(text, i, code);
    if (n == 0) return false;
  }
  return true;
}

}  // namespace

std::string yaml_quoted(std::string_view text) {
  std::string out = "\"";
  std::uint32_t code = 0;
  for (std::size_t i = 0, n = 1; i < text.size(); i += n) {
    n = utf8_at(text, i, code);
    if (n == 0) {  // not UTF-8: the caller's to avoid (spec_word); never a raw byte in a spec
      code = static_cast<unsigned char>(text[i]);
      n = 1;
    }
    char buf[16];
    if (code == '"' || code == '\\') {
      out += '\\';
      out += static_cast<char>(code);
    } else if (code == '\n' || code == '\t' || code == '\r') {
      out += code == '\n' ? "\\n" : code == '\t' ? "\\t" : "\\r";
    } else if (code < 0x20 || (code >= 0x7f && code <= 0x9f)) {
      // Controls (DEL and the C1 ones too, NEL among them, which YAML 1.1
      // reads as a line break): \xHH is that code point.
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(code));
      out += buf;
    } else if (code == 0x2028 || code == 0x2029 || code == 0xfeff) {
      // Line and paragraph separators (line breaks to YAML 1.1) and the byte
      // order mark, which a reader may drop.
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(code));
      out += buf;
    } else {
      out.append(text.substr(i, n));
    }
  }
  return out + "\"";
}

std::string spec_word(std::string_view word) {
  const std::string escaped = escape_templates(word);
  if (is_utf8(escaped)) return yaml_quoted(escaped);
  return "!!binary \"" +
         YAML::EncodeBase64(reinterpret_cast<const unsigned char*>(escaped.data()), escaped.size()) + "\"";
}

}  // namespace flowrun
