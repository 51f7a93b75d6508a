// Processes: the only module that forks, signals and reaps. Linux only.
//
// A worker is started in its own process group (pgid = pid), with stdin from
// /dev/null, its stdout and stderr on the pipes the caller hands in, its
// whole environment given explicitly, and PR_SET_PDEATHSIG(SIGKILL), so a
// direct child dies with the thread that spawned it. Everything further down
// (a DataLoader worker, a `shell: true` script's children, a process that
// called setsid) is found two other ways:
//  - flowrun makes itself a child subreaper (PR_SET_CHILD_SUBREAPER): when a
//    worker exits, its orphaned descendants become flowrun's children, so
//    they can be listed (children_of) and stopped after the step;
//  - if flowrun itself is SIGKILLed, the guardian (a process forked at start
//    that waits on a pipe) finds every process whose environment carries the
//    run id and kills it.
#pragma once

#include <string>
#include <sys/types.h>
#include <vector>

namespace flowrun {

struct SpawnRequest {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH (from `env`) when it has no '/'
  std::vector<std::string> env;   // "NAME=VALUE", the whole environment
  std::string workdir;
  int stdout_fd = -1;  // write ends; dup2'ed in the child, closed by the caller after spawn
  int stderr_fd = -1;
  int stdin_fd = -1;  // read end for its stdin; -1: /dev/null
};

struct SpawnResult {
  pid_t pid = -1;     // > 0 when the child exec'ed (or at least forked)
  std::string error;  // non-empty when exec failed: "python4: No such file or directory"
  int exit_code = 0;  // for a failed exec: 127 (not found) or 126 (not executable)
};

// Forks and execs `request`. An exec failure is reported through a
// close-on-exec pipe (the child is reaped here), so `error` says why a
// command could not start. Throws Error when fork itself fails.
SpawnResult spawn_process(const SpawnRequest& request);

// Sends `signal` to a process group; ESRCH (already gone) is not an error.
void signal_group(pid_t pgid, int signal);

// The pids whose parent is `pid` (from /proc/PID/task/*/children).
std::vector<pid_t> children_of(pid_t pid);

// Every process (other than this one) whose initial environment contains
// `entry` ("FLOWRUN_RUN_ID=<id>"), from /proc/*/environ.
std::vector<pid_t> processes_with_env(const std::string& entry);

// Makes this process a child subreaper, so orphaned descendants become ours.
void become_subreaper();

// Raises the soft limit on open files to the hard limit (as ninja and
// systemd do): every worker costs flowrun a handful of descriptors (its two
// pipes, two log files, a pidfd), and 1024 ends near 200 workers. Processes
// spawn_process starts get the soft limit back that flowrun started with, so
// a worker sees the limits its user set. Call once, first thing.
void raise_open_file_limit();

// The state letter of a process, from /proc/PID/stat: 'R', 'S', 'D', 'T'
// (stopped by a signal), 't' (stopped by a tracer), 'Z', ...; 0 if gone.
char process_state(pid_t pid);

// The command name of a pid ("sleep"), for messages; empty if gone.
std::string process_name(pid_t pid);

// A TCP port on `addr` that is free now, with the bound (not listening)
// socket that holds it: SO_REUSEADDR lets a worker bind and listen on the
// same port while flowrun holds it, and no other bind(0) on the host picks it.
struct HeldPort {
  int port = 0;
  int fd = -1;
  HeldPort() = default;
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  HeldPort(HeldPort&& other) noexcept;
  HeldPort& operator=(HeldPort&& other) noexcept;
  ~HeldPort();
  void release();
};
HeldPort hold_free_port(const std::string& addr);

// The guardian: a forked process that outlives a SIGKILLed flowrun just long
// enough to kill every process carrying `run_id`. Start it before any thread
// exists. disarm() on a normal exit tells it there is nothing to do; without
// it (flowrun killed, or leaving by an exception) the guardian cleans up.
class Guardian {
 public:
  Guardian() = default;
  Guardian(const Guardian&) = delete;
  Guardian& operator=(const Guardian&) = delete;
  ~Guardian();
  // Kills the processes whose environment holds `key`=`run_id` (an agent
  // uses its own key, so that on a host shared by several nodes it never
  // touches another node's workers).
  void start(const std::string& run_id, const std::string& key = "FLOWRUN_RUN_ID");
  void disarm();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;  // write end; closing it without a byte means "flowrun died"
};

// Kills (SIGKILL) every process carrying the environment entry, repeating
// until none is left or `rounds` passes found nothing new. Returns how many
// were killed. Used by the guardian and as a last resort.
int kill_processes_with_env(const std::string& entry, int rounds = 5);

}  // namespace flowrun
