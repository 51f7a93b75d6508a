#include "flowrun/plan.h"

namespace flowrun {

namespace {

constexpr std::string_view kArgs = "${args}";
constexpr std::string_view kStepsPrefix = "${steps.";
constexpr std::string_view kOutputsSuffix = ".outputs}";

// Replaces flowrun's templates in `text`; `quote` wraps every substituted
// value (identity for argv words, sh quoting for scripts). The spec has been
// validated, so every `${steps.` here is a well-formed `${steps.NAME.outputs}`
// and any other `${...}` is the shell's, left as written; `$${` is a `${`.
template <typename Quote>
std::string substitute(std::string_view text, const RunLayout& layout, const std::vector<std::string>& args,
                       Quote quote) {
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t open = text.find("${", i);
    if (open == std::string_view::npos) break;
    if (open > i && text[open - 1] == '$') {  // `$${`: a literal `${` (placeholders.cpp)
      out.append(text.substr(i, open - 1 - i));
      out += "${";
      i = open + 2;
      continue;
    }
    out.append(text.substr(i, open - i));
    std::string_view rest = text.substr(open);
    if (rest.substr(0, kArgs.size()) == kArgs) {
      std::vector<std::string> quoted;
      for (const auto& arg : args) quoted.push_back(quote(arg));
      out += join(quoted, " ");
      i = open + kArgs.size();
    } else if (rest.substr(0, kStepsPrefix.size()) == kStepsPrefix) {
      std::size_t end = rest.find(kOutputsSuffix);
      std::string name(rest.substr(kStepsPrefix.size(), end - kStepsPrefix.size()));
      out += quote(layout.inputs_dir(name));
      i = open + end + kOutputsSuffix.size();
    } else {
      out += "${";
      i = open + 2;
    }
  }
  out.append(text.substr(std::min(i, text.size())));
  return out;
}

}  // namespace

std::vector<std::string> expand_command(const Step& step, const RunLayout& layout,
                                        const std::vector<std::string>& args) {
  if (step.shell) {
    auto sh = [](const std::string& value) { return shell_quote(value); };
    return {"/bin/sh", "-c", substitute(step.script, layout, args, sh)};
  }
  auto as_is = [](const std::string& value) { return value; };
  std::vector<std::string> argv;
  for (const auto& word : step.argv) {
    if (word == kArgs) {
      argv.insert(argv.end(), args.begin(), args.end());
    } else {
      argv.push_back(substitute(word, layout, args, as_is));
    }
  }
  return argv;
}

}  // namespace flowrun
