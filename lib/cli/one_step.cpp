#include "one_step.h"

#include "flowrun/spec.h"
#include "flowrun/util.h"

namespace flowrun {

std::string one_step_spec_text(const OneStepSpec& spec) {
  // Every word as given: its `${` escaped, so that flowrun reads no template
  // in it (torchrun passes `lr=${args.lr}` to the script as it is), and
  // quoted, so that YAML reads no null, number or list in it.
  std::string run;
  for (const auto& word : spec.argv) run += (run.empty() ? "" : ", ") + spec_word(word);
  std::string line;
  for (const auto& word : spec.argv) line += (line.empty() ? "" : " ") + shell_quote(word);
  // A comment ends at a line break: a newline in an argument would start a
  // line of YAML of its own.
  std::string t = "# flowrun run: " + printable(line) + "\n";
  t += "name: " + yaml_quoted(spec.name) + "\n";
  t += "steps:\n";
  t += "  - name: " + yaml_quoted(spec.name) + "\n";
  t += "    run: [" + run + "]\n";
  if (!spec.timeout.empty()) t += "    timeout: " + yaml_quoted(spec.timeout) + "\n";
  if (!spec.stall_timeout.empty()) t += "    stall_timeout: " + yaml_quoted(spec.stall_timeout) + "\n";
  t += "    # " + printable(spec.why) + "\n";
  t += "    parallel:";
  if (spec.parallel.empty()) t += " {}";
  t += "\n";
  for (const auto& [key, value] : spec.parallel) t += "      " + key + ": " + value + "\n";
  // No join reads them: every rank's FLOWRUN_OUTPUT_DIR is kept in the run
  // directory (outputs/rank<R>), from every node.
  if (spec.collect_all) t += "    collect: all\n";
  return t;
}

}  // namespace flowrun
