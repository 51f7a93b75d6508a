// The one-step spec `flowrun run` and `flowrun init` make of a torchrun
// command line (run_spec.cpp), written by a pure function so that a unit test
// can read it back: what the workers run must be what the command line gave,
// byte for byte, whatever YAML or flowrun's templates would read in it.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace flowrun {

struct OneStepSpec {
  std::string name;               // the flow's and the step's
  std::vector<std::string> argv;  // what every worker runs, as given
  std::string timeout;            // the step's timeout and stall_timeout; empty: none
  std::string stall_timeout;
  std::string why;                                            // why the step has its shape (a comment)
  std::vector<std::pair<std::string, std::string>> parallel;  // key, its value as YAML text
  bool collect_all = false;
};

// The spec's text: a `# flowrun run:` comment with the command as sh would
// take it (escaped where it is not printable, so that it stays one line),
// then the flow's name and its one step. A `cluster:` part may follow.
std::string one_step_spec_text(const OneStepSpec& spec);

}  // namespace flowrun
