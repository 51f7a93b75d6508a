// Where flowrun's templates stand in shell text, and how a value is quoted there.
//
// A `shell: true` script, and the script word of a `run:` whose program is a
// shell with `-c` (`[bash, -lc, "..."]`), is read by a shell after flowrun
// has filled in `${args}` and `${steps.NAME.outputs}`. A value must reach the
// program as the one string it is, whatever quoting the user wrote around the
// template, so the text is lexed as POSIX sh and bash lex it (quotes, `$(...)`,
// backquotes, `${...}`, arithmetic, comments, here-documents) and each
// template gets the quoting of the place it stands in:
//
//   unquoted                  'value' (each of ${args} a word of its own;
//                             joined by spaces in an assignment, NAME=${args},
//                             and a redirection's target, <<< ${args})
//   inside '...'              the ' of the value written '\''
//   inside "..."              \ $ ` and " escaped with a backslash
//   in a backquote body       the above, then \ $ and ` escaped once more for
//                             the backquotes' own backslash pass
//
// `$(...)` (and bash's `<(...)`, `>(...)`) starts over: a template in it takes
// the quoting of where it stands inside. Everywhere else no quoting is safe in
// every shell (arithmetic, the shell's own `${...}`, a here-document, the
// script of a shell the text starts, a word of eval or ssh, ...), or the lexer
// cannot be sure how the shell reads the text; there the template is refused
// with the reason (ShellScan::refusal), before the run.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flowrun {

enum class ShellContext { unquoted, single_quoted, double_quoted };

// One flowrun template in shell text.
struct ShellTemplate {
  std::size_t offset = 0;  // of its `${`
  std::size_t length = 0;  // of `${args}` or `${steps.NAME.outputs}`
  ShellContext context = ShellContext::unquoted;
  int backquotes = 0;  // how many backquote bodies hold it
  // Unquoted in a NAME=... word or a redirection's target (`> ${args}`,
  // `<<< ${args}`): the arguments are one word, joined by spaces.
  bool one_word = false;
};

// A template the shell text cannot hold safely.
struct ShellRefusal {
  std::size_t offset = 0;  // of the template's `${`
  // Where it stands and why that is refused, then how to write it instead:
  // "in a comment, which a newline in the value would end; take it out of
  // the comment". The caller puts the template's name and place before it.
  std::string reason;
};

struct ShellScan {
  // The text as the shell reads it: the script with flowrun's `$${` escape
  // undone (each becomes a plain `${`). The templates' offsets are in it.
  std::string text;
  std::vector<ShellTemplate> templates;  // in order, when there is no refusal
  std::optional<ShellRefusal> refusal;   // the first template refused; its offset is in the script
};

// Lexes `script` and places each of flowrun's templates in it (the spec
// checks that they are well formed; find_placeholders). Text that is not a
// complete script (an unterminated quote) is no reason to refuse by itself,
// only a template after the point where the lexer lost certainty is.
ShellScan scan_shell_text(std::string_view script);

// `values` quoted for where `at` stands: one value for ${steps.NAME.outputs},
// the arguments for ${args}. The result replaces the template's text.
std::string quote_for_shell(const ShellTemplate& at, const std::vector<std::string>& values);

// For a command run without a shell: the index of the word a shell program in
// it reads as its script (`bash -c SCRIPT`, `sh -euc SCRIPT`, `env A=1 bash
// -o pipefail -lc SCRIPT`), or nullopt when no word is one. `shell_name` is
// set to the shell's name when a shell is found whose script flowrun cannot
// quote for (csh, fish): any template in that word is refused.
std::optional<std::size_t> shell_script_word(const std::vector<std::string>& argv,
                                             std::string* unquotable_shell = nullptr);

// For a command run without a shell: the index of a program in it that hands
// the words after it to a shell of its own (ssh to the remote one, su and
// watch to sh -c), where no quoting of flowrun's would survive, or nullopt.
std::optional<std::size_t> rereading_program(const std::vector<std::string>& argv);

}  // namespace flowrun
