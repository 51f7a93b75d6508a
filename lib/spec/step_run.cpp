// A step's run: (spec_detail.h): its command or its script, the templates in
// them, and where a template stands in shell text (shell_text.h), refused at
// its own line and column where its value cannot be quoted.

#include <algorithm>

#include "flowrun/shell_text.h"

#include "spec_detail.h"

namespace flowrun::spec_detail {

void Checker::step_run(const Entry& e, Step& s, StepNotes& notes, bool shell_known) {
  s.run_loc = e.loc;
  if (!shell_known) return;
  if (s.shell) {
    if (!e.value.IsScalar()) {
      expected(e, "a script (a string) with 'shell: true'");
      return;
    }
    s.script = e.value.Scalar();
    if (s.script.find_first_not_of(" \t\r\n") == std::string::npos) {
      expected(e, "a non-empty script");
      return;
    }
    if (auto problem = argument_problem(s.script)) {
      error(e.loc, e.path, "the script " + *problem);
      return;
    }
    if (templates_in(s.script, e.loc, e.path, notes))
      shell_templates(s.script, e.value, e.loc, e.path, {}, {});
    return;
  }
  auto argv = words(e, "a command (a string or a list of words)", false);
  if (!argv) return;
  if (argv->front().empty()) {
    error(e.loc, e.path, "the program (the first word) is empty; expected a program name or path");
    return;
  }
  s.argv = std::move(*argv);
  s.python_command = s.argv.front() == "python" || s.argv.front() == "python3";
  bool well_formed = true;
  const std::vector<YAML::Node> nodes = e.value.IsSequence() ? items(e.value) : std::vector<YAML::Node>{};
  if (e.value.IsSequence()) {
    for (std::size_t i = 0; i < nodes.size() && i < s.argv.size(); ++i) {
      Location loc = to_location(nodes[i].Mark());
      well_formed = templates_in(s.argv[i], loc.line ? loc : e.loc, e.path, notes) && well_formed;
    }
  } else {
    well_formed = templates_in(e.value.Scalar(), e.loc, e.path, notes);
  }
  // The script word of a shell run with -c is shell text, as a `shell: true` script is.
  std::string unquotable;
  const std::optional<std::size_t> script = shell_script_word(s.argv, &unquotable);
  if (!well_formed) return;
  if (const std::optional<std::size_t> program = rereading_program(s.argv)) {
    for (std::size_t i = *program + 1; i < s.argv.size(); ++i) {
      const std::size_t at = std::min(s.argv[i].find("${args}"), s.argv[i].find("${steps."));
      if (at == std::string::npos) continue;
      const std::string_view needle =
          std::string_view(s.argv[i]).substr(at, s.argv[i].find('}', at) - at + 1);
      const Location loc = i < nodes.size() ? to_location(nodes[i].Mark()) : e.loc;
      error(
          loc.line ? loc : e.loc, e.path,
          "template " + quote(needle) + " is in a word of " + s.argv[*program] +
              ", which hands it to a shell that reads it as a script; pass the value another way, such as a "
              "file or an environment variable");
      return;
    }
  }
  if (!script) return;
  std::string before;  // the words before it, where its templates' text may appear too
  for (std::size_t i = 0; i < *script; ++i) before += s.argv[i] + "\n";
  if (*script < nodes.size()) {
    const Location loc = to_location(nodes[*script].Mark());
    shell_templates(s.argv[*script], nodes[*script], loc.line ? loc : e.loc, e.path, {}, unquotable);
  } else {
    shell_templates(s.argv[*script], e.value, e.loc, e.path, before, unquotable);
  }
}

// The templates of shell text: each must stand where a value can be quoted
// (shell_text.h); one that does not is refused at its own line and column.
void Checker::shell_templates(std::string_view script, const YAML::Node& node, Location loc,
                              const std::string& path, std::string_view before,
                              const std::string& unquotable) {
  std::size_t at = 0;
  std::string reason;
  const ShellScan scan = scan_shell_text(script);
  if (!unquotable.empty()) {
    const std::size_t first = std::min(script.find("${args}"), script.find("${steps."));
    if (first == std::string_view::npos) return;
    at = first;
    reason =
        "is in a script for " + unquotable +
        ", whose quoting flowrun does not know; run the script with bash or sh, or pass the value as a word "
        "of its own after the script";
  } else if (scan.refusal) {
    at = scan.refusal->offset;
    reason = "stands " + scan.refusal->reason;
  } else {
    return;
  }
  const std::size_t end = script.find('}', at);
  const std::string needle(script.substr(at, end == std::string_view::npos ? 2 : end - at + 1));
  std::size_t skip = 0;
  for (std::size_t k = before.find(needle); k != std::string_view::npos; k = before.find(needle, k + 1))
    ++skip;
  for (std::size_t k = script.find(needle); k < at; k = script.find(needle, k + 1)) ++skip;
  error(locate(node, loc, needle, skip), path, "template " + quote(needle) + " " + reason);
}

// Where the (skip+1)-th `needle` after `node`'s start is in the spec's text;
// `fallback` (the value's own position) when it is not found there as written.
Location Checker::locate(const YAML::Node& node, Location fallback, std::string_view needle,
                         std::size_t skip) const {
  const YAML::Mark mark = node.Mark();
  if (mark.pos < 0 || static_cast<std::size_t>(mark.pos) > text_.size()) return fallback;
  std::size_t at = text_.find(needle, static_cast<std::size_t>(mark.pos));
  for (; at != std::string_view::npos && skip > 0; --skip) at = text_.find(needle, at + 1);
  if (at == std::string_view::npos) return fallback;
  const std::string_view head = text_.substr(0, at);
  const std::size_t newline = head.rfind('\n');
  const std::size_t line_start = newline == std::string_view::npos ? 0 : newline + 1;
  const auto line = 1 + std::count(head.begin(), head.end(), '\n');
  const std::size_t column = at - line_start;
  return {static_cast<int>(line), static_cast<int>(column) + 1};
}

bool Checker::templates_in(std::string_view text, Location loc, const std::string& path, StepNotes& notes) {
  std::string problem;
  auto found = find_placeholders(text, &problem);
  if (!found) {
    error(loc, path, problem);
    return false;
  }
  for (const Placeholder& p : *found) {
    if (p.kind == Placeholder::Kind::step_outputs) notes.refs.emplace_back(p.step, loc);
  }
  return true;
}

}  // namespace flowrun::spec_detail
