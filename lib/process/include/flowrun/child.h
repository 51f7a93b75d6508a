// Helpers: the short programs flowrun runs for itself and waits for (the
// doctor's check child, the probe of CUDA's device order, `ssh -G`,
// `scontrol`), as opposed to workers, which spawn_process starts and the
// supervisor watches. Part of the process module, the only one that forks.
//
// run_helper forks, reads what the helper writes, and returns once it has
// ended and was reaped: the outcome is a value, never an exception. The
// helper runs in a process group of its own, with stdin from /dev/null, its
// stdout on a pipe, the signal mask and dispositions a shell would give it,
// and no descriptor of flowrun's above 2 (close_range). It gets this
// process's environment with the guardian's mark on top (as spawn_process
// gives a worker), so the guardian finds it if flowrun dies meanwhile.
//
// When a limit is hit or the caller cancels, the whole group is killed
// (SIGKILL), so a grandchild that holds the pipe cannot keep run_helper
// waiting; when the helper exits, what is left of its group is killed too.
// Every system call is retried on EINTR.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace flowrun {

// Where a helper's stderr goes.
enum class HelperStderr {
  inherit,  // flowrun's own stderr (the console)
  discard,  // /dev/null, as `2>/dev/null`
  capture,  // a pipe of its own, kept in HelperOutcome::error_output
};

struct HelperRequest {
  // The program and its arguments; argv[0] is looked up on this process's
  // PATH when it holds no '/' (find_program).
  std::vector<std::string> argv;
  // Instead of argv: what the forked child runs, without exec; its return
  // value is the exit status (through _exit, so no atexit handler or stdio
  // buffer of flowrun's runs twice). Only before flowrun starts a thread:
  // after fork, only the forking thread exists in the child.
  std::function<int()> child_main;
  HelperStderr stderr_to = HelperStderr::inherit;
  // Bytes kept of stdout (and of captured stderr); the rest is read and
  // dropped, so the helper never blocks on a full pipe.
  std::size_t output_limit = 64 << 10;
  // Killed after this long without a byte of output (HelperEnd::silent);
  // zero: no limit.
  std::chrono::milliseconds silence_limit{0};
  // Killed this long after it started (HelperEnd::overran); zero: no limit.
  std::chrono::milliseconds deadline{0};
  // Set (by another thread, or by on_line): the helper is killed
  // (HelperEnd::cancelled). Read at least every 50 ms.
  const std::atomic<bool>* cancel = nullptr;
  // Sees each line of stdout as it arrives, without its '\n', on the
  // caller's thread; a trailing line without a '\n' is not passed on, and a
  // line longer than 1 MiB comes in pieces of 1 MiB.
  std::function<void(std::string_view line)> on_line;
  // A line by which the helper says its work is done (doctor's "done"):
  // once it came, the helper only has to exit, and silence_limit becomes
  // silence_after_done. Empty: none.
  std::string done_line;
  std::chrono::milliseconds silence_after_done{10'000};
};

enum class HelperEnd {
  exited,       // by itself; HelperOutcome::code is its exit status
  signalled,    // by a signal it did not get from run_helper; code is the signal
  silent,       // killed: no output for silence_limit
  overran,      // killed: it ran past the deadline
  cancelled,    // killed: *cancel was set
  vanished,     // another waiter reaped it (a SIGCHLD handler that waits for
                // every child); its status is unknown
  not_started,  // HelperOutcome::error says why
};

struct HelperOutcome {
  HelperEnd end = HelperEnd::not_started;
  int code = 0;
  // not_started: "fork: Resource temporarily unavailable", or, with
  // exec_failed, "ssh: command not found", "/x/flowrun: Permission denied".
  std::string error;
  bool exec_failed = false;  // not_started because its program could not be run
  bool done = false;         // done_line came
  std::string output;        // stdout, at most output_limit bytes
  std::string error_output;  // stderr, when captured
  bool output_cut = false;   // it wrote more than output_limit to either
  bool ok() const { return end == HelperEnd::exited && code == 0; }
};

// Runs the helper `request` describes and waits for it (see above).
HelperOutcome run_helper(const HelperRequest& request);

}  // namespace flowrun
