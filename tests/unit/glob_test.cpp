// The glob grammar (flowrun/glob.h) as both its readers use it: the spec's
// check asks problem(), the join's walk asks names() and matches(). Each
// table row is one GENERATE value, named by INFO when it fails.
#include "flowrun/glob.h"

#include <catch2/catch.hpp>
#include <optional>
#include <string>

using namespace flowrun;

namespace {

struct MatchRow {
  const char* glob;
  const char* path;
  bool match;
};

struct ProblemRow {
  std::string glob;
  std::optional<GlobProblem> problem;
};

const char* name_of(std::optional<GlobProblem> p) {
  if (!p) return "none";
  switch (*p) {
    case GlobProblem::empty: return "empty";
    case GlobProblem::nul_or_newline: return "nul_or_newline";
    case GlobProblem::absolute: return "absolute";
    case GlobProblem::dot_dot: return "dot_dot";
    case GlobProblem::unclosed_class: return "unclosed_class";
    case GlobProblem::stray_close: return "stray_close";
  }
  return "?";
}

}  // namespace

TEST_CASE("Glob::matches: names, classes and **", "[glob]") {
  const MatchRow row = GENERATE(values<MatchRow>({
      {"model.pt", "model.pt", true},
      {"model.pt", "model.pth", false},
      {"model.pt", "sub/model.pt", false},
      {"*.pt", "a.pt", true},
      {"*.pt", ".pt", true},
      {"*.pt", ".hidden.pt", true},  // no leading-dot rule
      {"*.pt", "dir/a.pt", false},   // * stays in one component
      {"*", "", false},
      {"a*b*c", "abc", true},
      {"a*b*c", "axxbyyc", true},
      {"a*b*c", "axxbyy", false},
      {"a*c", "acbc", true},
      {"?.pt", "a.pt", true},
      {"?.pt", "ab.pt", false},
      {"?", "", false},
      {"[abc].pt", "b.pt", true},
      {"[abc].pt", "d.pt", false},
      {"[!abc].pt", "d.pt", true},
      {"[!abc].pt", "a.pt", false},
      {"[^abc].pt", "a.pt", false},
      {"epoch[0-9].pt", "epoch7.pt", true},
      {"epoch[0-9].pt", "epochx.pt", false},
      {"epoch[0-9][0-9].pt", "epoch42.pt", true},
      {"[]]", "]", true},  // a ']' first is a member
      {"[!]]", "]", false},
      {"[!]]", "x", true},
      {"[a-]", "-", true},  // a '-' last is a member
      {"[[]", "[", true},
      {"a[b", "a[b", true},  // unclosed '[': an ordinary character
      {"a[b", "ab", false},
      {"\\*.pt", "*.pt", true},
      {"\\*.pt", "a.pt", false},
      {"a\\?", "a?", true},
      {"**", "a", true},
      {"**", "a/b/c.pt", true},
      {"**/*.pt", "a.pt", true},  // ** is zero or more directories
      {"**/*.pt", "a/b/c.pt", true},
      {"**/*.pt", "a/b/c.txt", false},
      {"a/**/b.pt", "a/b.pt", true},
      {"a/**/b.pt", "a/x/y/b.pt", true},
      {"a/**/b.pt", "b.pt", false},
      {"a/**", "a", true},
      {"a/**", "a/b/c", true},
      {"a/**/**/b", "a/b", true},
      {"**/x/**/y", "x/x/y", true},
      {"a**b", "axxb", true},  // ** inside a name is *
      {"a**b", "ax/xb", false},
      {"./model.pt", "model.pt", true},
      {"ckpt//model.pt", "ckpt/model.pt", true},
      {"ckpt/", "ckpt", true},
      {"*/*.pt", "a/b.pt", true},
      {"*/*.pt", "a/b/c.pt", false},
      // Where a class ends, as the check reads it: a backslash inside is a member,
      // a range ends before a ']', and a '/' ends the name (and with it the class).
      {"[\\]x", "\\x", true},
      {"[\\]x", "]x", false},
      {"[a-]]", "-]", true},
      {"[]-a]", "^", true},  // the range ']'..'a'
      {"a[/]b", "a[/]b", true},
      {"a[/]b", "a/b", false},
      {"\\.x", ".x", true},
      {"x\\", "x\\", true},        // a '\' that ends its name is itself
      {"[z-a]", "m", false},       // a range the wrong way round is empty
      {"\\*\\*/x", "a/x", false},  // an escaped '**' is a name, not any depth
      {"\\*\\*/x", "**/x", true},
  }));
  INFO(row.glob << " vs " << row.path);
  CHECK(Glob::parse(row.glob).matches(row.path) == row.match);
}

TEST_CASE("Glob::problem: what a pattern may not have, the first of them", "[glob]") {
  const ProblemRow row = GENERATE(values<ProblemRow>({
      {"", GlobProblem::empty},
      {"x\ny", GlobProblem::nul_or_newline},
      {std::string("a\0b", 3), GlobProblem::nul_or_newline},
      {"/abs/*.pt", GlobProblem::absolute},
      {"/", GlobProblem::absolute},
      {"../up", GlobProblem::dot_dot},
      {"a/../b", GlobProblem::dot_dot},
      {"a/..", GlobProblem::dot_dot},
      {"a/../", GlobProblem::dot_dot},
      {"\\.\\./secret.txt", GlobProblem::dot_dot},  // read after its escapes
      {"a/.\\./b", GlobProblem::dot_dot},
      {"\\..", GlobProblem::dot_dot},
      {"a[b", GlobProblem::unclosed_class},
      {"a]b", GlobProblem::stray_close},
      {"[!]", GlobProblem::unclosed_class},  // the ']' is a member: nothing closes it
      {"[]", GlobProblem::unclosed_class},
      {"checkpoints/epoch[0-9.pt", GlobProblem::unclosed_class},
      {"a\\]/b]", GlobProblem::stray_close},
      {"a[b/c]", GlobProblem::unclosed_class},  // a class lies within its name
      {"a[/]b", GlobProblem::unclosed_class},
      {"a]/b[", GlobProblem::stray_close},     // the leftmost of the two
      {"a[/b]", GlobProblem::unclosed_class},  // the leftmost of the two
      {"[a-]]", GlobProblem::stray_close},     // the class is [a-], the last ']' is stray
      // In the order the check looks: a NUL before '/', '/' before '..', '..' before a class.
      {"/a\n", GlobProblem::nul_or_newline},
      {"/../x", GlobProblem::absolute},
      {"a[/..", GlobProblem::dot_dot},
      // Fine: '..' only as a whole name, escapes and classes balanced per name.
      {"**/*.pt", std::nullopt},
      {"logs/rank[0-9].txt", std::nullopt},
      {"a[]]b", std::nullopt},
      {"a[!x]", std::nullopt},
      {"a\\[b", std::nullopt},
      {"a\\]b", std::nullopt},
      {"[\\]", std::nullopt},
      {"c/./d", std::nullopt},
      {"\\.x", std::nullopt},
      {".[.]", std::nullopt},  // a listing has no '..'
      {"x\\.", std::nullopt},
      {"..?", std::nullopt},
      {"...", std::nullopt},
      {".", std::nullopt},
      {"a\\", std::nullopt},
  }));
  INFO(row.glob);
  CHECK(name_of(Glob::parse(row.glob).problem()) == std::string(name_of(row.problem)));
}

TEST_CASE("Glob::names: each name read once, literal or wildcard", "[glob]") {
  SECTION("empty names and '.' are left out, and a run of '**' is one") {
    const Glob g = Glob::parse("./ckpt//**/./**/\\*\\*/e[0-9]*.pt/");
    REQUIRE(g.names().size() == 4);
    CHECK(g.names()[0].kind == GlobName::Kind::literal);
    CHECK(g.names()[0].text == "ckpt");
    CHECK(g.names()[1].kind == GlobName::Kind::any_depth);
    CHECK(g.names()[2].kind == GlobName::Kind::literal);  // escaped: a name "**"
    CHECK(g.names()[2].text == "**");
    CHECK(g.names()[3].kind == GlobName::Kind::wildcard);
    CHECK(g.names()[3].text == "e[0-9]*.pt");
    CHECK(g.pattern() == "./ckpt//**/./**/\\*\\*/e[0-9]*.pt/");
    CHECK_FALSE(g.literal());
  }
  SECTION("a name without '*', '?' or '[' is its text with escapes read") {
    const Glob g = Glob::parse("ckpt/\\.\\./a\\]b/model.pt");
    REQUIRE(g.names().size() == 4);
    CHECK(g.names()[1].text == "..");
    CHECK(g.names()[2].text == "a]b");
    CHECK(g.literal());
    CHECK(Glob::parse(".").names().empty());
    CHECK(Glob::parse(".").literal());
  }
  SECTION("an unclosed '[' makes a wildcard name that matches it as a character") {
    const Glob g = Glob::parse("a[b");
    REQUIRE(g.names().size() == 1);
    CHECK(g.names()[0].kind == GlobName::Kind::wildcard);
    CHECK_FALSE(g.literal());
    CHECK(g.names()[0].matches("a[b"));
  }
}
