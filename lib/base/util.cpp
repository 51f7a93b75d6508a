#include "flowrun/util.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "flowrun/text.h"

extern char** environ;

namespace flowrun {

EnvMap read_environ() {
  EnvMap env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view kv(*entry);
    auto eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

std::optional<std::string> env_get(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

// POSIX sh word splitting for a simple command, without expansions: blanks
// separate words; '...' keeps everything literally; "..." keeps everything
// but lets a backslash escape $ ` " \ and newline; an unquoted backslash
// escapes the next character (backslash-newline is a line continuation).
std::optional<std::vector<std::string>> split_shell_words(std::string_view text, std::string* error) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else if (c == '\'') {
      auto end = text.find('\'', i + 1);
      if (end == std::string_view::npos) {
        if (error) *error = "unterminated single quote";
        return std::nullopt;
      }
      word.append(text.substr(i + 1, end - i - 1));
      in_word = true;
      i = end;
    } else if (c == '"') {
      std::size_t j = i + 1;
      for (; j < text.size() && text[j] != '"'; ++j) {
        if (text[j] == '\\' && j + 1 < text.size() &&
            (text[j + 1] == '$' || text[j + 1] == '`' || text[j + 1] == '"' || text[j + 1] == '\\' ||
             text[j + 1] == '\n')) {
          ++j;
          if (text[j] != '\n') word += text[j];
        } else {
          word += text[j];
        }
      }
      if (j >= text.size()) {
        if (error) *error = "unterminated double quote";
        return std::nullopt;
      }
      in_word = true;
      i = j;
    } else if (c == '\\') {
      if (i + 1 >= text.size()) {
        if (error) *error = "trailing backslash";
        return std::nullopt;
      }
      ++i;
      if (text[i] != '\n') {
        word += text[i];
        in_word = true;
      }
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

std::string shell_quote(std::string_view word) {
  if (!word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               std::string_view("@%_+=:,./-").find(c) != std::string_view::npos;
      })) {
    return std::string(word);
  }
  std::string out = "'";
  for (char c : word) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  out += '\'';
  return out;
}

// Optimal string alignment distance (Damerau-Levenshtein without repeated
// edits of one substring), so "gpsu" is one edit from "gpus".
std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  if (word.size() > 64) return std::nullopt;
  // A typo is at most a third of the word's letters away (and at most 3).
  const std::size_t limit = std::min<std::size_t>(3, std::max<std::size_t>(1, word.size() / 3));
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (const auto& candidate : candidates) {
    std::size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::string format_duration(double s) {
  char buf[48];
  if (s != std::floor(s) || s < 1 || s > 1e12) {
    std::snprintf(buf, sizeof buf, "%gs", s);
    return buf;
  }
  auto left = static_cast<std::int64_t>(s);
  std::string out;
  for (auto [unit, size] : {std::pair{'d', 86400}, {'h', 3600}, {'m', 60}, {'s', 1}}) {
    if (left >= size) {
      std::snprintf(buf, sizeof buf, "%lld%c", static_cast<long long>(left / size), unit);
      out += buf;
      left %= size;
    }
  }
  return out;
}

std::string format_bytes(std::uint64_t bytes) {
  constexpr std::uint64_t kGiB = 1ULL << 30, kMiB = 1ULL << 20, kKiB = 1ULL << 10;
  auto format = [](double value, const char* unit) {
    char buf[32];
    if (value >= 100 || value == static_cast<double>(static_cast<std::uint64_t>(value)))
      std::snprintf(buf, sizeof buf, "%.0f %s", value, unit);
    else
      std::snprintf(buf, sizeof buf, "%.1f %s", value, unit);
    return std::string(buf);
  };
  if (bytes >= kGiB) return format(static_cast<double>(bytes) / kGiB, "GiB");
  if (bytes >= kMiB) return format(static_cast<double>(bytes) / kMiB, "MiB");
  if (bytes >= kKiB) return format(static_cast<double>(bytes) / kKiB, "KiB");
  return std::to_string(bytes) + " B";
}

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto escape = [&](unsigned char c) { out += "\\x" + hex(&c, 1); };
  auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = byte(i);
    if (c >= 0x20 && c < 0x7f) {
      if (c == '\\') out += '\\';
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    if (c == '\n' || c == '\r' || c == '\t') {
      out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
      ++i;
      continue;
    }
    // A UTF-8 sequence: its length from the lead byte, continuation bytes
    // 10xxxxxx, no overlong form, no surrogate, nothing past U+10FFFF.
    std::size_t length = c >= 0xc2 && c <= 0xdf   ? 2
                         : c >= 0xe0 && c <= 0xef ? 3
                         : c >= 0xf0 && c <= 0xf4 ? 4
                                                  : 0;
    std::uint32_t code = length == 2 ? c & 0x1fu : length == 3 ? c & 0x0fu : c & 0x07u;
    bool ok = length > 0 && i + length <= s.size();
    for (std::size_t k = 1; ok && k < length; ++k) {
      ok = (byte(i + k) & 0xc0) == 0x80;
      code = (code << 6) | (byte(i + k) & 0x3fu);
    }
    if (ok) {
      ok = !(length == 3 && code < 0x800) && !(length == 4 && (code < 0x10000 || code > 0x10ffff)) &&
           !(code >= 0xd800 && code <= 0xdfff) && !(code >= 0x80 && code <= 0x9f);
    }
    if (!ok) {
      escape(c);
      ++i;
      continue;
    }
    out.append(s.substr(i, length));
    i += length;
  }
  return out;
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

bool is_env_name(std::string_view name) {
  if (name.empty()) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(name[0])) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return alpha(c) || (c >= '0' && c <= '9'); });
}

NameCheck check_name(std::string_view name, std::string_view also_allowed) {
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (name.empty()) return NameCheck::empty;
  if (!alnum(name[0])) return NameCheck::bad_character;
  for (char c : name) {
    if (!alnum(c) && c != '_' && c != '-' && also_allowed.find(c) == std::string_view::npos)
      return NameCheck::bad_character;
  }
  return name.size() > kMaxNameLength ? NameCheck::too_long : NameCheck::ok;
}

std::string name_rule(std::string_view also_allowed) {
  std::vector<std::string> chars;
  for (char c : also_allowed) chars.push_back(std::string("'") + c + "'");
  chars.insert(chars.end(), {"'_'", "'-'"});
  std::string list = join({chars.begin(), chars.end() - 1}, ", ") + " and " + chars.back();
  return "letters, digits, " + list + ", starting with a letter or digit, at most " +
         std::to_string(kMaxNameLength) + " characters";
}

}  // namespace flowrun
