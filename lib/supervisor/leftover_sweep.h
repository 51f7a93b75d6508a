// The supervisor's sweep of what its workers left behind: descendants still
// running after every worker was reaped (they came to flowrun as the
// subreaper), each signalled once with its whole tree and named for the note.
#pragma once

#include <set>
#include <string>
#include <sys/types.h>
#include <vector>

#include "worker_pipes.h"

namespace flowrun {

class LeftoverSweep {
 public:
  // `guardian` is flowrun's own child, never a leftover.
  LeftoverSweep(pid_t guardian, const WorkerList& workers) : guardian_(guardian), workers_(workers) {}

  // flowrun's children that are neither the guardian nor a live worker.
  std::vector<pid_t> find() const;

  // Signals each of `left` not signalled since reset(), with its tree:
  // SIGKILL when `kill_now`, else SIGTERM and SIGCONT. Returns them as
  // "pid (name)".
  std::vector<std::string> signal_new(const std::vector<pid_t>& left, bool kill_now);
  void reset() { seen_.clear(); }

  static void signal_tree(pid_t pid, int sig);

 private:
  pid_t guardian_;
  const WorkerList& workers_;
  std::set<pid_t> seen_;
};

}  // namespace flowrun
