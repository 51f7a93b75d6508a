// A path pattern read once: the one reading of the glob grammar, for the
// check that refuses a bad pattern and for the walk that matches a good one.
//
// The grammar:
//  - A pattern is split at every '/' into names; empty names and '.' are
//    left out ("a//./b" is "a/b"), and so is a run of '**' names after the
//    first.
//  - A name that is exactly '**' matches zero or more names (any depth).
//  - Within a name: '*' matches any characters, '?' one character, and
//    '[...]' one of a class of characters: '!' or '^' first negates it, a
//    ']' right after that is a member, 'a-z' is a range, a '-' last is a
//    member, and a backslash inside is an ordinary character. A class lies
//    within its name: a '/' ends the name first. A '[' that is not closed
//    in its name is an ordinary character, and so is a ']' outside a class.
//  - '\x' outside a class is a plain x; a '\' that ends its name is itself.
//  - A leading '.' is not special: '*' matches ".hidden".
// A name without '*', '?' or '[' is a literal: it matches only its text,
// escapes read ('\.\.' is "..").
//
// Parsing never fails; problem() says what a pattern a user writes must not
// have, and the caller words it.
#pragma once

#include <bitset>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flowrun {

// What is wrong with a pattern, in the order Glob::problem() looks (the
// last two as one: the leftmost of them).
enum class GlobProblem {
  empty,           // ""
  nul_or_newline,  // a NUL or '\n' anywhere
  absolute,        // starts with '/'
  dot_dot,         // a name that reads '..' (also written '\.\.')
  unclosed_class,  // a '[' whose name has no ']' for it
  stray_close,     // a ']' outside a class
};

// One name of a pattern.
struct GlobName {
  enum class Kind { literal, wildcard, any_depth };
  // One position of a wildcard name: '*', or one character of `chars`.
  struct Token {
    bool star = false;
    std::bitset<256> chars;  // indexed by unsigned char
  };

  Kind kind = Kind::literal;
  std::string text;           // literal: the name, escapes read; else as written
  std::vector<Token> tokens;  // wildcard only

  // Whether this name matches the name `name` of a path ('**' matches
  // any one; Glob::matches gives it its depth).
  bool matches(std::string_view name) const;
};

class Glob {
 public:
  static Glob parse(std::string_view pattern);

  const std::string& pattern() const { return pattern_; }
  const std::vector<GlobName>& names() const { return names_; }
  // Every name is a literal: the pattern names one path.
  bool literal() const;
  // The first problem in GlobProblem's order.
  std::optional<GlobProblem> problem() const { return problem_; }

  // Whether the relative `path` matches, its empty names and '.' left out.
  bool matches(std::string_view path) const;

 private:
  std::string pattern_;
  std::vector<GlobName> names_;
  std::optional<GlobProblem> problem_;
};

}  // namespace flowrun
