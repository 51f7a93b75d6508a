// Quoting a template's values for the context shell_text.cpp placed it in,
// and finding the words of a command that a shell reads as its script
// (shell_text.h).
#include <algorithm>
#include <array>

#include "flowrun/path.h"
#include "flowrun/shell_text.h"
#include "flowrun/util.h"

namespace flowrun {

namespace spec_detail {

// A program's name without a version after it: "bash-5.2" and "zsh5" are shells too.
std::string_view unversioned(std::string_view name) {
  const std::size_t end = name.find_last_not_of("0123456789.-");
  return end == std::string_view::npos ? name : name.substr(0, end + 1);
}

}  // namespace spec_detail

namespace {

// shell_quote, but never a bare word that starts with '=' (zsh's =command).
std::string quote_word(std::string_view value) {
  if (!value.starts_with("=")) return shell_quote(value);
  std::string out = "'";
  for (char c : value) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string escaped(std::string_view text, std::string_view special) {
  std::string out;
  for (char c : text) {
    if (special.find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string quote_for_shell(const ShellTemplate& at, const std::vector<std::string>& values) {
  std::string text;
  const std::string joined = join(values, " ");
  switch (at.context) {
    case ShellContext::unquoted:
      if (at.one_word || values.size() == 1) {
        text = quote_word(joined);
      } else {
        std::vector<std::string> words;
        for (const auto& value : values) words.push_back(quote_word(value));
        text = join(words, " ");
      }
      break;
    case ShellContext::single_quoted:
      for (char c : joined) text += c == '\'' ? std::string("'\\''") : std::string(1, c);
      break;
    case ShellContext::double_quoted: text = escaped(joined, "\\$`\""); break;
  }
  // Each backquote body's own pass removes one backslash before \ $ and `.
  for (int k = 0; k < at.backquotes; ++k) text = escaped(text, "\\$`");
  return text;
}

std::optional<std::size_t> shell_script_word(const std::vector<std::string>& argv,
                                             std::string* unquotable_shell) {
  static constexpr std::array<std::string_view, 12> kPosix = {
      "sh", "bash", "dash", "zsh", "ksh", "ksh93", "mksh", "lksh", "ash", "yash", "posh", "rbash"};
  static constexpr std::array<std::string_view, 8> kOther = {"csh",  "tcsh", "fish",   "nu",
                                                             "pwsh", "rc",   "elvish", "xonsh"};
  for (std::size_t k = 0; k < argv.size(); ++k) {
    const std::string& word = argv[k];
    const std::string_view name = spec_detail::unversioned(base_name(word));
    const bool posix = std::find(kPosix.begin(), kPosix.end(), name) != kPosix.end();
    const bool other = std::find(kOther.begin(), kOther.end(), name) != kOther.end();
    if (!posix && !other) continue;
    // Its options: -c (alone or among others: -lc, -euc) says the first word
    // that is not an option is the script; -o and -O take the next word.
    bool dash_c = false;
    std::size_t j = k + 1;
    for (; j < argv.size(); ++j) {
      const std::string& option = argv[j];
      if (option == "--" || option == "-") {
        ++j;
        break;
      }
      if (option.starts_with("--")) {
        if (option == "--rcfile" || option == "--init-file") ++j;
        continue;
      }
      if (option.size() < 2 || (option[0] != '-' && option[0] != '+')) break;
      for (char letter : std::string_view(option).substr(1)) {
        if (letter == 'c' && option[0] == '-') dash_c = true;
        if (letter == 'o' || letter == 'O') ++j;
      }
    }
    if (!dash_c || j >= argv.size()) continue;
    if (unquotable_shell) *unquotable_shell = other ? std::string(name) : std::string();
    return j;
  }
  return std::nullopt;
}

std::optional<std::size_t> rereading_program(const std::vector<std::string>& argv) {
  for (std::size_t k = 0; k < argv.size(); ++k) {
    const std::string_view name = base_name(argv[k]);
    if (name == "ssh" || name == "su" || name == "watch") return k;
  }
  return std::nullopt;
}

}  // namespace flowrun
