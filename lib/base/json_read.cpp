#include "flowrun/json_read.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>

namespace flowrun {

const JsonValue* JsonValue::find(std::string_view key) const {
  if (type != Type::object) return nullptr;
  for (auto it = object.rbegin(); it != object.rend(); ++it)
    if (it->key == key) return &it->value;
  return nullptr;
}

const std::string* JsonValue::find_string(std::string_view key) const {
  const JsonValue* v = find(key);
  return v && v->is_string() ? &v->string : nullptr;
}

namespace {

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// For a valid number too large or too small for a double: +-infinity when its
// decimal magnitude is positive, else +-0.
double overflow_value(std::string_view t) {
  bool negative = !t.empty() && t[0] == '-';
  if (negative) t.remove_prefix(1);
  std::size_t e = t.find_first_of("eE");
  std::string_view mantissa = t.substr(0, e);
  std::int64_t exponent = 0;
  if (e != std::string_view::npos) {
    std::string_view digits = t.substr(e + 1);
    bool minus = !digits.empty() && digits[0] == '-';
    if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) digits.remove_prefix(1);
    for (char c : digits) exponent = std::min<std::int64_t>(exponent * 10 + (c - '0'), 1'000'000'000);
    if (minus) exponent = -exponent;
  }
  std::size_t dot = mantissa.find('.');
  std::string_view whole = mantissa.substr(0, dot);
  std::int64_t magnitude = 0;  // the position of the first significant digit
  if (whole != "0") {
    magnitude = static_cast<std::int64_t>(whole.size());
  } else if (dot != std::string_view::npos) {
    std::string_view fraction = mantissa.substr(dot + 1);
    magnitude = -static_cast<std::int64_t>(std::min(fraction.find_first_not_of('0'), fraction.size()));
  }
  double value = magnitude + exponent > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  return negative ? -value : value;
}

// Recursive descent over a string_view; every function returns false on bad
// input and leaves the position wherever it stopped.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  std::optional<JsonValue> document() {
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;
    JsonValue v;
    skip_space();
    if (!value(v, 0)) return std::nullopt;
    skip_space();
    if (pos_ != text_.size()) return std::nullopt;
    return v;
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++pos_;
  }

  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  bool value(JsonValue& v, int depth) {
    switch (peek()) {
      case '{': return object(v, depth + 1);
      case '[': return array(v, depth + 1);
      case '"': v.type = JsonValue::Type::string; return string(v.string);
      case 't':
        v.type = JsonValue::Type::boolean;
        v.boolean = true;
        return literal("true");
      case 'f':
        v.type = JsonValue::Type::boolean;
        v.boolean = false;
        return literal("false");
      case 'n': v.type = JsonValue::Type::null; return literal("null");
      default: v.type = JsonValue::Type::number; return number(v.number);
    }
  }

  bool object(JsonValue& v, int depth) {
    if (depth > kMaxJsonDepth) return false;
    v.type = JsonValue::Type::object;
    ++pos_;  // '{'
    skip_space();
    if (peek() == '}') {
      ++pos_;
      return true;
    }
    while (true) {
      JsonMember member;
      skip_space();
      if (peek() != '"' || !string(member.key)) return false;
      skip_space();
      if (peek() != ':') return false;
      ++pos_;
      skip_space();
      if (!value(member.value, depth)) return false;
      v.object.push_back(std::move(member));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') return false;
      ++pos_;
      return true;
    }
  }

  bool array(JsonValue& v, int depth) {
    if (depth > kMaxJsonDepth) return false;
    v.type = JsonValue::Type::array;
    ++pos_;  // '['
    skip_space();
    if (peek() == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      JsonValue item;
      skip_space();
      if (!value(item, depth)) return false;
      v.array.push_back(std::move(item));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != ']') return false;
      ++pos_;
      return true;
    }
  }

  bool hex4(std::uint32_t& out) {
    if (text_.size() - pos_ < 4) return false;
    out = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[pos_++];
      out <<= 4;
      if (c >= '0' && c <= '9')
        out |= static_cast<std::uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        out |= static_cast<std::uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        out |= static_cast<std::uint32_t>(c - 'A' + 10);
      else
        return false;
    }
    return true;
  }

  // After "\u": one code point, joining a surrogate pair when a low half follows.
  bool unicode_escape(std::string& out) {
    std::uint32_t cp = 0;
    if (!hex4(cp)) return false;
    constexpr std::uint32_t kReplacement = 0xFFFD;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (text_.substr(pos_, 2) == "\\u") {
        std::size_t saved = pos_;
        pos_ += 2;
        std::uint32_t low = 0;
        if (!hex4(low)) return false;
        if (low >= 0xDC00 && low <= 0xDFFF) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        } else {
          cp = kReplacement;
          pos_ = saved;  // the next escape is read on its own
        }
      } else {
        cp = kReplacement;
      }
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      cp = kReplacement;
    }
    append_utf8(out, cp);
    return true;
  }

  bool string(std::string& out) {
    ++pos_;  // '"'
    while (!at_end()) {
      char c = text_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_end()) return false;
      switch (text_[pos_++]) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u':
          if (!unicode_escape(out)) return false;
          break;
        default: return false;
      }
    }
    return false;
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  bool number(double& out) {
    std::size_t start = pos_;
    auto digits = [&] {
      std::size_t from = pos_;
      while (!at_end() && peek() >= '0' && peek() <= '9') ++pos_;
      return pos_ > from;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (!digits()) {
      return false;
    }
    if (peek() == '.') {
      ++pos_;
      if (!digits()) return false;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!digits()) return false;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    auto [end, error] = std::from_chars(first, last, out);
    if (error == std::errc::result_out_of_range) {
      out = overflow_value(std::string_view(first, static_cast<std::size_t>(last - first)));
      return true;
    }
    return error == std::errc() && end == last;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

std::optional<JsonValue> parse_json(std::string_view text) { return Parser(text).document(); }

}  // namespace flowrun
