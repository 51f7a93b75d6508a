// The workdir's outputs lock: a run whose steps gather outputs by glob from
// a workdir holds <workdir>/.flowrun/outputs.lock (flock) for as long as it
// runs, so a second live run there is refused instead of taking the first
// run's files for its own (or giving it its own). Internal to lib/flow.
#pragma once

#include <string>
#include <vector>

#include "flowrun/beneath.h"
#include "flowrun/plan.h"

namespace flowrun {

class WorkdirLocks {
 public:
  // Takes the lock of every workdir that a parallel step of `spec` gathers
  // `outputs` globs from. Another live run holding one is an Error (exit
  // code 2) that names it and says what to do. A workdir whose lock cannot
  // be made (read-only, or .flowrun is not a directory) is a warning in
  // warnings(), and the run goes on without that lock.
  static WorkdirLocks take(const Spec& spec, const std::string& run_id, const std::string& host);

  // "flowrun: warning: ..." for each workdir left without its lock.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  std::vector<UniqueFd> held_;
  std::vector<std::string> warnings_;
};

}  // namespace flowrun
