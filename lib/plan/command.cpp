#include "flowrun/plan.h"
#include "flowrun/shell_text.h"

namespace flowrun {

namespace {

constexpr std::string_view kArgs = "${args}";
constexpr std::string_view kStepsPrefix = "${steps.";
constexpr std::string_view kOutputsSuffix = ".outputs}";

// The values a template stands for: the arguments, or one path.
std::vector<std::string> values_of(std::string_view tmpl, const RunLayout& layout,
                                   const std::vector<std::string>& args) {
  if (tmpl == kArgs) return args;
  const std::size_t end = tmpl.size() - kOutputsSuffix.size();
  return {layout.inputs_dir(std::string(tmpl.substr(kStepsPrefix.size(), end - kStepsPrefix.size())))};
}

// Replaces flowrun's templates in a word that reaches its program as is. The
// spec has been validated, so every `${steps.` here is a well-formed
// `${steps.NAME.outputs}` and any other `${...}` is left as written.
std::string substitute_word(std::string_view text, const RunLayout& layout,
                            const std::vector<std::string>& args) {
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
    std::size_t length = 0;
    if (rest.starts_with(kArgs))
      length = kArgs.size();
    else if (rest.starts_with(kStepsPrefix))
      length = rest.find(kOutputsSuffix) + kOutputsSuffix.size();
    if (length) {
      out += join(values_of(rest.substr(0, length), layout, args), " ");
      i = open + length;
    } else {
      out += "${";
      i = open + 2;
    }
  }
  out.append(text.substr(std::min(i, text.size())));
  return out;
}

// Replaces the templates of shell text, each quoted for the place it stands
// in (shell_text.h). The spec refused every template that no quoting makes
// safe; one here all the same (a spec made elsewhere) is an error, not a guess.
std::string substitute_script(std::string_view text, const RunLayout& layout,
                              const std::vector<std::string>& args) {
  const ShellScan scan = scan_shell_text(text);
  if (scan.refusal) {
    throw Error("a template in a shell script stands " + scan.refusal->reason);
  }
  // scan.text: the script with its `$${` escapes undone, as the shell reads it.
  const std::string_view shell = scan.text;
  std::string out;
  std::size_t i = 0;
  for (const ShellTemplate& t : scan.templates) {
    out.append(shell.substr(i, t.offset - i));
    out += quote_for_shell(t, values_of(shell.substr(t.offset, t.length), layout, args));
    i = t.offset + t.length;
  }
  out.append(shell.substr(i));
  return out;
}

}  // namespace

std::vector<std::string> expand_command(const Step& step, const RunLayout& layout,
                                        const std::vector<std::string>& args) {
  if (step.shell) return {"/bin/sh", "-c", substitute_script(step.script, layout, args)};
  // A shell program's script word (`bash -lc "..."`) is shell text too.
  std::string unquotable;
  const std::optional<std::size_t> script = shell_script_word(step.argv, &unquotable);
  if (script && !unquotable.empty() &&
      !find_placeholders(step.argv[*script], nullptr).value_or(std::vector<Placeholder>{}).empty())
    throw Error("a template in a script for " + unquotable + ", whose quoting flowrun does not know");
  if (const std::optional<std::size_t> program = rereading_program(step.argv)) {
    for (std::size_t i = *program + 1; i < step.argv.size(); ++i) {
      if (!find_placeholders(step.argv[i], nullptr).value_or(std::vector<Placeholder>{}).empty())
        throw Error("a template in a word of " + step.argv[*program] + ", which hands it to a shell");
    }
  }
  std::vector<std::string> argv;
  for (std::size_t i = 0; i < step.argv.size(); ++i) {
    const std::string& word = step.argv[i];
    if (script && i == *script) {
      argv.push_back(substitute_script(word, layout, args));
    } else if (word == kArgs) {
      argv.insert(argv.end(), args.begin(), args.end());
    } else {
      argv.push_back(substitute_word(word, layout, args));
    }
  }
  return argv;
}

}  // namespace flowrun
