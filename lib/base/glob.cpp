// The glob grammar of glob.h, read in one pass per name: the check of a
// pattern and its matching cannot disagree on where a class ends or what a
// backslash means, since both read the tokens made here.
#include "flowrun/glob.h"

#include <algorithm>

namespace flowrun {

namespace {

constexpr std::size_t npos = std::string_view::npos;

// Every name of `text`, split at '/', without empty ones and '.'.
std::vector<std::string_view> split_names(std::string_view text) {
  std::vector<std::string_view> names;
  while (!text.empty()) {
    const std::size_t slash = std::min(text.find('/'), text.size());
    const std::string_view name = text.substr(0, slash);
    text.remove_prefix(std::min(slash + 1, text.size()));
    if (!name.empty() && name != ".") names.push_back(name);
  }
  return names;
}

bool has_wildcard(std::string_view name) {
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '\\')
      ++i;
    else if (name[i] == '*' || name[i] == '?' || name[i] == '[')
      return true;
  }
  return false;
}

std::string unescape(std::string_view name) {
  std::string out;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '\\' && i + 1 < name.size()) ++i;
    out += name[i];
  }
  return out;
}

GlobName::Token one_char(char ch) {
  GlobName::Token t;
  t.chars.set(static_cast<unsigned char>(ch));
  return t;
}

// The class that starts at name[i] ('['): the index after its ']' and its
// members, or npos when the name ends first. The first member may be ']',
// and a range never ends at ']', so the class ends at the first ']' after its
// first member.
std::size_t read_class(std::string_view name, std::size_t i, GlobName::Token* out) {
  std::size_t j = i + 1;
  bool negate = false;
  if (j < name.size() && (name[j] == '!' || name[j] == '^')) {
    negate = true;
    ++j;
  }
  std::bitset<256> chars;
  for (bool first = true; j < name.size() && (first || name[j] != ']'); first = false) {
    const auto lo = static_cast<unsigned char>(name[j]);
    if (j + 2 < name.size() && name[j + 1] == '-' && name[j + 2] != ']') {
      for (unsigned c = lo; c <= static_cast<unsigned char>(name[j + 2]); ++c) chars.set(c);
      j += 3;
    } else {
      chars.set(lo);
      ++j;
    }
  }
  if (j >= name.size()) return npos;
  out->chars = negate ? ~chars : chars;
  return j + 1;
}

// A name with a wildcard as tokens; the leftmost bracket problem, if any,
// goes to *problem (when it holds none yet).
std::vector<GlobName::Token> read_tokens(std::string_view name, std::optional<GlobProblem>* problem) {
  std::vector<GlobName::Token> tokens;
  for (std::size_t i = 0; i < name.size();) {
    GlobName::Token t;
    switch (name[i]) {
      case '*':
        t.star = true;
        ++i;
        break;
      case '?':
        t.chars.set();
        ++i;
        break;
      case '[':
        if (const std::size_t next = read_class(name, i, &t); next != npos) {
          i = next;
        } else {
          if (!*problem) *problem = GlobProblem::unclosed_class;
          t = one_char('[');
          ++i;
        }
        break;
      case ']':
        if (!*problem) *problem = GlobProblem::stray_close;
        t = one_char(']');
        ++i;
        break;
      case '\\':
        if (i + 1 < name.size()) ++i;
        t = one_char(name[i]);
        ++i;
        break;
      default: t = one_char(name[i]); ++i;
    }
    tokens.push_back(std::move(t));
  }
  return tokens;
}

bool match_names(const std::vector<GlobName>& g, std::size_t gi, const std::vector<std::string_view>& p,
                 std::size_t pi) {
  for (; gi < g.size(); ++gi, ++pi) {
    if (g[gi].kind == GlobName::Kind::any_depth) {
      for (std::size_t k = pi; k <= p.size(); ++k)
        if (match_names(g, gi + 1, p, k)) return true;
      return false;
    }
    if (pi == p.size() || !g[gi].matches(p[pi])) return false;
  }
  return pi == p.size();
}

}  // namespace

// Every token but '*' takes exactly one character, so backtracking to the
// last '*' alone is enough.
bool GlobName::matches(std::string_view name) const {
  switch (kind) {
    case Kind::literal: return name == text;
    case Kind::any_depth: return true;
    case Kind::wildcard: break;
  }
  std::size_t ti = 0, ni = 0, star_t = npos, star_n = 0;
  while (ni < name.size()) {
    if (ti < tokens.size() && tokens[ti].star) {
      star_t = ++ti;
      star_n = ni;
      continue;
    }
    if (ti < tokens.size() && tokens[ti].chars.test(static_cast<unsigned char>(name[ni]))) {
      ++ti;
      ++ni;
      continue;
    }
    if (star_t == npos) return false;
    ti = star_t;
    ni = ++star_n;
  }
  while (ti < tokens.size() && tokens[ti].star) ++ti;
  return ti == tokens.size();
}

Glob Glob::parse(std::string_view pattern) {
  Glob glob;
  glob.pattern_ = std::string(pattern);
  std::optional<GlobProblem> bracket;
  bool dot_dot = false;
  for (std::string_view raw : split_names(pattern)) {
    if (raw == "**") {
      if (glob.names_.empty() || glob.names_.back().kind != GlobName::Kind::any_depth)
        glob.names_.push_back({GlobName::Kind::any_depth, std::string(raw), {}});
      continue;
    }
    GlobName& name = glob.names_.emplace_back();
    if (has_wildcard(raw)) {
      name.kind = GlobName::Kind::wildcard;
      name.text = std::string(raw);
      name.tokens = read_tokens(raw, &bracket);
    } else {
      name.text = unescape(raw);
      dot_dot = dot_dot || name.text == "..";
      // No class can start here, but a ']' outside one is still stray.
      for (std::size_t i = 0; i < raw.size() && !bracket; ++i) {
        if (raw[i] == '\\')
          ++i;
        else if (raw[i] == ']')
          bracket = GlobProblem::stray_close;
      }
    }
  }
  if (pattern.empty())
    glob.problem_ = GlobProblem::empty;
  else if (pattern.find('\0') != npos || pattern.find('\n') != npos)
    glob.problem_ = GlobProblem::nul_or_newline;
  else if (pattern.front() == '/')
    glob.problem_ = GlobProblem::absolute;
  else if (dot_dot)
    glob.problem_ = GlobProblem::dot_dot;
  else
    glob.problem_ = bracket;
  return glob;
}

bool Glob::literal() const {
  return std::all_of(names_.begin(), names_.end(),
                     [](const GlobName& n) { return n.kind == GlobName::Kind::literal; });
}

bool Glob::matches(std::string_view path) const { return match_names(names_, 0, split_names(path), 0); }

}  // namespace flowrun
