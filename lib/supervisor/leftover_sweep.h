// The supervisor's sweep of what its workers left behind: descendants still
// running after every worker was reaped (they came to flowrun as the
// subreaper), each signalled with its whole tree and named for the note. Once
// each, but for one that has exec'd since: caught between fork and exec, it
// took the SIGTERM in the code it was about to replace (a shell's trap it
// inherited), and what it runs now never had it.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <map>
#include <string>
#include <sys/types.h>
#include <vector>

#include "worker_pipes.h"

namespace flowrun {

class LeftoverSweep {
 public:
  // `guardian` is flowrun's own child, never a leftover. `recheck` is what
  // recheck_soon calls.
  LeftoverSweep(boost::asio::io_context& io, pid_t guardian, const WorkerList& workers,
                std::function<void()> recheck)
      : guardian_(guardian), workers_(workers), timer_(io), recheck_(std::move(recheck)) {}

  // flowrun's children that are neither the guardian nor a live worker.
  std::vector<pid_t> find() const;

  // Signals each of `left` not signalled since reset(), with its tree:
  // SIGKILL when `kill_now`, else SIGTERM and SIGCONT. Returns them as
  // "pid (name)". One signalled before whose program has changed since (it
  // exec'd) is signalled again, not named again.
  std::vector<std::string> signal_new(const std::vector<pid_t>& left, bool kill_now);
  void reset() {
    seen_.clear();
    timer_.cancel();
  }

  // Calls `recheck` in kRecheckMs, once: a leftover's exec wakes nothing, and
  // one that took its SIGTERM before it exec'd needs another (signal_new).
  void recheck_soon();
  static constexpr int kRecheckMs = 100;

  static void signal_tree(pid_t pid, int sig);

 private:
  pid_t guardian_;
  const WorkerList& workers_;
  std::map<pid_t, std::string> seen_;  // each one signalled, with its program then (/proc/PID/exe)
  boost::asio::steady_timer timer_;
  std::function<void()> recheck_;
};

}  // namespace flowrun
