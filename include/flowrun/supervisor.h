// The supervisor: one Boost.Asio event loop on flowrun's main thread that
// starts a group of workers, forwards their output, and tears the group down.
//
// Everything happens on the loop's thread: workers are spawned from it (so
// PR_SET_PDEATHSIG, which fires when the spawning thread exits, means "when
// flowrun dies"); child exits arrive as SIGCHLD through a signal_set and are
// reaped with wait4 (never polled on an interval); output arrives as pipe
// readiness; SIGINT, SIGTERM and SIGHUP (a closed terminal) to flowrun
// arrive through the same loop.
//
// One shutdown path, for a failed worker, a step timeout and an interrupt
// alike: SIGTERM to every live worker's process group, one shared grace
// deadline, SIGKILL to what is left, reap. A second SIGINT or SIGTERM skips
// the grace. After the workers are reaped, descendants they left behind
// (orphans, which come to flowrun as the subreaper) are stopped the same way,
// so nothing of the group outlives it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flowrun/logmux.h"
#include "flowrun/result.h"

namespace flowrun {

// One worker to start: the blueprint (torchrun's WorkerSpec, per rank).
struct WorkerLaunch {
  int rank = -1;  // -1 for a plain step
  int local_rank = 0;
  std::vector<std::string> argv;
  std::vector<std::string> env;  // the whole environment, "NAME=VALUE"
  std::string workdir;
  std::string stdout_log;  // raw copies of everything it writes
  std::string stderr_log;
  std::string error_file;  // TORCHELASTIC_ERROR_FILE, for the report
  bool console = true;     // shown on flowrun's console (logs always go to files)
};

struct GroupOptions {
  std::string step;
  double grace_s = 10;              // SIGTERM .. SIGKILL
  std::optional<double> timeout_s;  // the group's time left; nullopt = none
  LogStyle style;
  int restart_count = 0;
  int master_port = 0;
};

// Where flowrun writes: its stdout and stderr. Writes are whole lines, one
// write(2) each, so nothing another process writes to the same terminal can
// tear them.
struct Console {
  int out_fd = 1;
  int err_fd = 2;
  // flowrun's own message lines ("flowrun: ..."), to err_fd.
  void message(const std::string& text) const;
};

class Supervisor {
 public:
  // `guardian_pid` is excluded from leftover sweeps (it is flowrun's child).
  Supervisor(Console console, int guardian_pid);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts the workers and runs until every one of them and every
  // descendant they left has ended. The attempt's outcome is failed (a
  // worker failed), timed_out, interrupted or succeeded; roles are assigned.
  AttemptRecord run_group(const std::vector<WorkerLaunch>& workers, const GroupOptions& options);

  // Stops any leftover descendants now (between steps, or before exit).
  // Returns notes about what had to be stopped.
  std::vector<std::string> sweep_leftovers(double grace_s);

  // What the supervisor had to do beyond the plan in the groups run since
  // the last call (leftover processes it stopped); clears the list.
  std::vector<std::string> notes();

  // The first SIGINT or SIGTERM flowrun received (0 if none). Once set, the
  // flow starts nothing new.
  int interrupt_signal() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes all of `data` to `fd`, retrying on EINTR and waiting on EAGAIN.
// Returns false when the descriptor is gone (EPIPE and the like).
bool write_all(int fd, const char* data, std::size_t size);

// Wall-clock nanoseconds since the epoch; monotonic nanoseconds.
std::int64_t unix_now_ns();
std::int64_t monotonic_now_ns();

}  // namespace flowrun
