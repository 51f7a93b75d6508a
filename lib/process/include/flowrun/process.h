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
//  - if flowrun itself is killed (SIGKILL, or a kill of its whole process
//    group or session), the guardian (a process forked at start, in a session
//    of its own, that waits on a pipe) finds every process whose environment
//    carries this invocation's mark and kills it.
//
// The mark is an environment entry KEY=SECRET, SECRET 128 random bits made
// afresh by each invocation (make_secret): two runs that share a run id, a
// host and a user never touch each other's processes, and no name a user
// chooses (a --run-id, a step's env:) can make flowrun's guardian kill
// something it did not start. Every process spawn_process starts carries the
// mark of the guardian of this process, whatever environment it is given.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace flowrun {

struct SpawnRequest {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH (from `env`) when it has no '/'
  std::vector<std::string> env;   // "NAME=VALUE", the whole environment
  std::string workdir;
  int stdout_fd = -1;  // write ends; dup2'ed in the child, closed by the caller after spawn
  int stderr_fd = -1;
  int stdin_fd = -1;  // read end for its stdin; -1: /dev/null
  // The CPUs it may run on, set in the child before exec (sched_setaffinity;
  // a failure is a setup error); empty: this process's own.
  std::vector<int> cpus;
  // Scheduled below everything else (SCHED_IDLE; nice 19 where the kernel
  // refuses it), set in the child before exec, so that it never runs at its
  // parent's priority: the slow-rank sampler's py-spy.
  bool idle = false;
};

struct SpawnResult {
  pid_t pid = -1;       // > 0 when the child exec'ed (or at least forked)
  std::string program;  // the file it exec'ed: argv[0] as find_program found it
  std::string error;    // non-empty when exec failed: "python4: No such file or directory"
  int exit_code = 0;    // for a failed exec: 127 (not found) or 126 (not executable)
};

// Where execve finds `name` for a process with environment `env`
// ("NAME=VALUE"): `name` itself when it holds a '/' and is executable, else
// the first executable regular file of that name on env's PATH (without a
// PATH, /usr/local/bin:/usr/bin:/bin), as a shell looks it up. Empty when
// there is none; `err` (when given) then holds ENOENT or EACCES.
std::string find_program(const std::string& name, const std::vector<std::string>& env, int* err = nullptr);

// Starts `request` as posix_spawn does (clone with CLONE_VM | CLONE_VFORK:
// nothing of this process is copied, and the call returns once the child has
// exec'ed). The child's environment is `request.env` with this process's
// guardian mark (Guardian::start) set on top, replacing any entry of the same
// name. A failure before the program runs (its workdir, exec) is reported
// back (the child is reaped here), so `error` says why a command could not
// start. Throws Error when no process can be started at all.
SpawnResult spawn_process(const SpawnRequest& request);

// SIGUSR1 and SIGUSR2 while no Supervisor passes them on to workers (flowrun
// starting, reading its spec, planning, writing its summary): noted, never
// fatal, and blocking calls go on (SA_RESTART). flowrun's main installs it
// first thing; the Supervisor takes the signals over while it lives and
// installs it again when it goes. Workers start with the default action
// (exec resets a handler).
void hold_forward_signals();

// The last SIGUSR1 or SIGUSR2 noted since the last call, or 0.
int take_held_forward_signal();

// Sends `signal` to a process group; ESRCH (already gone) is not an error.
void signal_group(pid_t pgid, int signal);

// What a file of the kernel's under /proc holds, up to `limit` bytes, read
// as it is (nothing a worker made can stand there); empty when it cannot be
// read (the process is gone).
std::string read_proc_file(const std::string& path, std::size_t limit = 1 << 16);

// The pids whose parent is `pid` (from /proc/PID/task/*/children).
std::vector<pid_t> children_of(pid_t pid);

// Every process (other than this one) whose initial environment contains
// `entry` ("FLOWRUN_INVOCATION=<secret>"), from /proc/*/environ.
std::vector<pid_t> processes_with_env(const std::string& entry);

// 128 bits from getrandom(2), as 32 lowercase hex digits: a guardian's secret.
// Throws Error when the kernel gives no random bytes.
std::string make_secret();

// Makes fds 0, 1 and 2 valid before anything else opens a file, as
// OpenSSH's sanitise_stdfd does: each one that is closed gets /dev/null.
// Started with stdout closed, the first file flowrun opened (run.lock, a
// guardian's pipe) would otherwise become fd 1 and take the console's lines.
// Returns false (with errno set) when /dev/null cannot be opened.
bool sanitize_standard_fds();

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

// The file a pid runs (/proc/PID/exe: "/usr/bin/sleep"); an exec changes it, a
// rename (prctl) does not. Empty if gone or not readable. pid 0: this process.
std::string process_program(pid_t pid);

// A TCP port on `addr` that is free now, with the bound (not listening)
// socket that holds it, so that nothing else on the host binds it until
// release(). Release it just before the workers start. The port lies outside
// the ephemeral range (net.ipv4.ip_local_port_range), from which the kernel
// gives every connect() its local port: between the release and rank 0's
// bind (the seconds Python takes to import torch) a busy host's outgoing
// connections (a gloo mesh makes hundreds) could otherwise take it, and
// rank 0's store would fail to listen. Only where fewer than 1,000 ports lie
// outside does the kernel choose (bind to port 0).
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

// What listens on a TCP port of this host (its network namespace).
struct PortListener {
  unsigned uid = 0;  // the socket's owner
  pid_t pid = 0;     // a process that holds it; 0: none found (another user's, another pid namespace)
  std::string name;  // that process's command name ("python3")
};
// The first listening socket on `port` in /proc/net/tcp and /proc/net/tcp6,
// and a process of this user that holds it; nullopt when none listens.
std::optional<PortListener> port_listener(int port);
// The listening sockets on `port` in the text of /proc/net/tcp (or tcp6):
// {inode, uid} of each. Pure.
std::vector<std::pair<unsigned long, unsigned>> listening_sockets(std::string_view proc_net_tcp, int port);

// The guardian: a forked process that outlives flowrun when flowrun is
// killed, just long enough to kill every process carrying its mark and
// remove the directories it was given; when flowrun exits by its own code
// (disarm, or an armed Guardian's destructor) flowrun waits for it, so that
// nothing flowrun started outlives it. It runs in a session of its own (setsid), so
// no signal to flowrun's process group or session (a terminal's hangup,
// `kill -9 -- -PGID`, `timeout -s KILL`) reaches it, and it ignores the
// signals a terminal or a `kill` sends; only SIGKILL by its pid ends it.
// Start it before any thread exists, with fds 0-2 valid
// (sanitize_standard_fds). disarm() on a normal exit tells it there is
// nothing to kill; without it (flowrun killed, or leaving by an exception)
// the guardian kills. It works from "/", never keeping a user's directory
// busy.
class Guardian {
 public:
  Guardian() = default;
  Guardian(const Guardian&) = delete;
  Guardian& operator=(const Guardian&) = delete;
  ~Guardian();
  // Starts the guardian of the processes whose environment holds
  // `key`=`secret` (make_secret(), or a value holding one), sets that entry
  // in this process's environment, so every process started from here on
  // inherits it, and makes spawn_process put it in every child's. flowrun
  // uses FLOWRUN_INVOCATION; an agent uses FLOWRUN_AGENT_ID, so that an agent
  // the head started on its own host keeps the head's mark too, and on a
  // host shared by several nodes no agent touches another node's workers.
  // Throws Error when the pipe or the fork fails.
  void start(const std::string& key, const std::string& secret);
  // Has the guardian remove `dir` (an absolute path; a whole tree, links not
  // followed) when this process ends, after it killed the marked processes:
  // a private directory outside the workdir never outlives its owner. Call
  // after start.
  void remove_on_exit(const std::string& dir);
  // A normal exit: the guardian kills nothing, removes its directories and
  // exits, and this waits for it to have.
  void disarm();
  pid_t pid() const { return pid_; }
  const std::string& mark() const { return mark_; }  // "KEY=SECRET"; empty before start

 private:
  bool running();
  void finish(std::string_view record);

  pid_t pid_ = -1;
  int fd_ = -1;  // write end; closing it without a byte means "flowrun died"
  std::string mark_;
};

// Kills (SIGKILL) every process carrying the environment entry, repeating
// until none is left or `rounds` passes found nothing new; another
// guardian (an agent's, carrying the mark it inherited) is left to finish
// its own work. Returns how many were killed. Used by the guardian.
int kill_processes_with_env(const std::string& entry, int rounds = 5);

// True when `pid` is a guardian: a process named flowrun-guard running this
// same program.
bool is_guardian(pid_t pid);

}  // namespace flowrun
