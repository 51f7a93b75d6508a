// The supervisor: one Boost.Asio event loop on flowrun's main thread that
// starts a group of workers, forwards their output, and tears the group down.
//
// Everything happens on the loop's thread: workers are spawned from it (so
// PR_SET_PDEATHSIG, which fires when the spawning thread exits, means "when
// flowrun dies"); child exits arrive as SIGCHLD through a signal_set and are
// reaped with wait4 (never polled on an interval); output arrives as pipe
// readiness; signals to flowrun arrive through the same loop.
//
// Signals (docs/cli.md has the table): SIGINT, SIGTERM and SIGHUP stop the
// group (the stop signals; a list given to the constructor may leave some
// out, which flowrun then ignores, or add SIGQUIT, torchrun's fourth). Only a
// SIGINT while the group is already stopping (a second Ctrl-C) skips the
// grace: a repeated SIGTERM or SIGHUP never does, since GNU timeout and Slurm
// send SIGTERM twice, to flowrun and then to its process group, and the ranks
// must get their whole grace to write a checkpoint. SIGUSR1 and SIGUSR2 stop
// nothing: they are forwarded to every live worker's main process (Slurm's
// --signal=USR1@90, Lightning's auto-requeue), or given to the observer.
// SIGQUIT, unless it is a stop signal, stops nothing either: it takes every
// live rank's stack now and reports it (flowrun stacks RUN sends it).
//
// One shutdown path, for a failed worker, a step timeout, a stall and an
// interrupt alike: first, for all but an interrupt, every live rank's stack
// (stack_taker.h, within GroupOptions::forensics_timeout_s); then SIGTERM to
// each live rank's main process (then SIGCONT, so that a stopped process gets
// it), to the rest of its process group once the main has ended, one shared
// grace deadline, SIGKILL to what is left, reap. Before the signals, each
// live worker's silence and state go into its record (WorkerRecord::silent_s,
// suspended).
// After the workers are reaped, descendants they left behind (orphans, which
// come to flowrun as the subreaper) are stopped the same way, so nothing of
// the group outlives it.
//
// The console never holds up the loop: output to a pipe or terminal is
// written without blocking (through a descriptor of its own), and what the
// reader has not taken waits in a bounded buffer; past it, whole lines of the
// workers' output are dropped and counted (their log files keep every byte),
// and a line says how many once the reader takes output again.
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// The clocks and write_all are base's (flowrun/clock.h, flowrun/fd.h); the
// head, the agent and the control layer still reach them through this header.
#include "flowrun/clock.h"
#include "flowrun/fd.h"
#include "flowrun/logmux.h"
#include "flowrun/rank_output.h"
#include "flowrun/result.h"
#include "flowrun/stacks.h"
#include "flowrun/wait_shares.h"

namespace boost::asio {
class io_context;
}

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
  // Where its end is written as it ends (write_rank_end), for `flowrun
  // status` while the others run; empty: nowhere.
  std::string end_file;
  ConsoleShows console;  // its streams shown on flowrun's console (logs always keep both)
  // The CPUs it may run on (sched_setaffinity before exec); empty: flowrun's own.
  std::vector<int> cpus;
  std::string label;       // console tag instead of "<step> r<rank>" ("node2 agent"); empty: default
  std::string stdin_text;  // written to its stdin, which is then closed; empty: /dev/null
};

struct GroupOptions {
  std::string step;
  // How a worker's log file is opened; empty: as a log file always is
  // (open_output_file: a regular file, never through a link). Tests give a
  // device here (/dev/full) to make every write fail.
  std::function<int(const std::string& path)> open_log;
  // How many of the group's log files open_log already holds open (opened
  // ahead of their ranks' starts): the count of descriptors the group needs
  // counts them once. Empty: none.
  std::function<std::size_t()> logs_held;
  double grace_s = 10;              // SIGTERM .. SIGKILL
  std::optional<double> timeout_s;  // the group's time left; nullopt = none
  // The step's stall_timeout: a worker that writes nothing to stdout or
  // stderr for this long stops the group as a timeout does (outcome stalled).
  std::optional<double> stall_timeout_s;
  // Whether py-spy takes the live ranks' stacks before a stall's, a
  // timeout's or a failure's signals (a step's forensics.stacks), and how
  // long it may take for all of them at once.
  bool forensics_stacks = true;
  double forensics_timeout_s = 3;
  // One sample of each live rank's Python stack every sample_s seconds on
  // average, to name the slow rank (forensics' sample); 0: none. The shares
  // so far go to shares_file (wait_shares_document, for flowrun status) as
  // they grow; empty: nowhere.
  double sample_s = 0;
  std::string shares_file;
  // Where stacks taken on demand (SIGQUIT, flowrun stacks) are described
  // (stacks_document: the step's stacks.json); empty: on the console only.
  std::string stacks_file;
  // The run directory, named in the message about a log file flowrun cannot
  // write (the resume command); empty: none is named.
  std::string run_dir;
  LogStyle style;
  int restart_count = 0;
  int master_port = 0;
  // Whether stopping processes the group left behind is noted (the head's
  // group is srun or ssh, whose own helpers outlive it for a moment).
  bool note_leftovers = true;
  // When the observer stops the work itself (GroupObserver::on_stop), the
  // seconds past grace_s the supervisor waits before it kills the group's
  // processes (the head's agents stop their ranks with the grace first).
  double observer_margin_s = 5;
};

constexpr double kDefaultConsoleWaitS = 5;

// How a step's note about the workers' lines its console dropped begins.
inline constexpr const char* kConsoleMissedNote = "the console did not keep up";

// Where flowrun writes: its stdout and stderr. Writes are whole lines, one
// write(2) each, so nothing another process writes to the same terminal can
// tear them.
struct Console {
  int out_fd = 1;
  int err_fd = 2;
  // How long a reader of a pipe or terminal that takes nothing holds the
  // ranks up (--console-wait) before their lines past the backlog are
  // dropped and counted; 0: never held, dropped at once.
  double reader_wait_s = kDefaultConsoleWaitS;
  // flowrun's own message lines ("flowrun: ..."), to err_fd.
  void message(const std::string& text) const;
};

// Code that takes part in a group beyond starting processes: the control
// plane's head (whose "workers" are the srun or ssh processes that start the
// agents, while the ranks run elsewhere) and the agent (which forwards its
// ranks' output and exits to the head). Every call comes on the loop's
// thread; the observer may use Supervisor::io() for its own sockets and
// timers, which then run while the group runs.
class GroupObserver {
 public:
  virtual ~GroupObserver() = default;
  // Raw bytes worker `index` wrote, after they went to its log file.
  virtual void on_output(std::size_t index, bool is_err, std::string_view data) {
    (void)index, (void)is_err, (void)data;
  }
  // Worker `index` ended (or could not start); its record is final but for its role.
  // Return false to keep a failure from stopping the group (the observer decides).
  virtual bool on_exit(std::size_t index, const WorkerRecord& record) {
    (void)index;
    return !record.status.ok();
  }
  // The group is stopping (a failure, the step's timeout, an interrupt, or
  // stop_group()). Return true when the observer stops the work itself: the
  // supervisor then signals its processes only when GroupOptions::grace_s
  // plus GroupOptions::observer_margin_s have passed.
  virtual bool on_stop(Outcome why) {
    (void)why;
    return false;
  }
  // Workers `indices` wrote nothing for GroupOptions::stall_timeout_s
  // (`stalled`: their records, with silent_s and suspended); the group stops
  // next (on_stop, outcome stalled). Return true when the observer reports
  // the stall itself; else the supervisor prints format_stall_message's line.
  virtual bool on_stall(const std::vector<std::size_t>& indices, const std::vector<WorkerRecord>& stalled) {
    (void)indices, (void)stalled;
    return false;
  }
  // Kill at once (a second Ctrl-C, or the grace ran out).
  virtual void on_kill() {}
  // flowrun got SIGUSR1 or SIGUSR2 while the group runs. Return true when
  // the observer delivers it (the head tells every agent, since its own
  // processes are srun or ssh); else every live worker's main process gets it.
  virtual bool on_signal(int sig) {
    (void)sig;
    return false;
  }
  // flowrun got SIGQUIT while the group runs: every rank's stack, now,
  // stopping nothing. Return true when the observer takes them (the head
  // asks every agent); else the supervisor takes its own workers' (request
  // kStacksOnSignal) and reports them.
  virtual bool on_stacks_request() { return false; }
  // The stacks of this host's live ranks were taken (`found`, by rank; from
  // `source`, "py-spy" or "kernel"): before a stop (request kStacksBeforeStop)
  // or on demand (a take_stacks request, or kStacksOnSignal). Return true
  // when the observer reports them (an agent sends them to the head); else
  // the supervisor does: for a stop in the attempt's record, on demand on the
  // console and in GroupOptions::stacks_file.
  virtual bool on_stacks(int request, const std::vector<RankStack>& found, const std::string& source) {
    (void)request, (void)found, (void)source;
    return false;
  }
  // A sample of a live rank's stack (GroupOptions::sample_s). Return true
  // when the observer counts it (an agent sends its tallies to the head);
  // else the supervisor does, names the slow rank on the console once the
  // evidence does, and keeps every rank's shares in the attempt's record.
  virtual bool on_sample(const RankSample& sample) {
    (void)sample;
    return false;
  }
};

// The requests of GroupObserver::on_stacks that are not a take_stacks call's.
inline constexpr int kStacksBeforeStop = 0;
inline constexpr int kStacksOnSignal = -1;

// The signals that stop a group unless --signals-to-handle says otherwise:
// torchrun's default but SIGQUIT, which takes the ranks' stacks instead.
inline const std::vector<int> kStopSignals = {SIGTERM, SIGINT, SIGHUP};

// Parses torchrun's --signals-to-handle: a comma list of signal names
// ("SIGTERM,SIGINT", "TERM", any case). Returns the stop signals it names,
// SIGQUIT among them when listed (then it stops the step, as in torchrun);
// SIGUSR1 and SIGUSR2 may be listed (they are always forwarded). Returns
// nullopt with *error set for a name that is not a signal or one flowrun
// cannot handle ("SIGKILL").
std::optional<std::vector<int>> parse_signals_to_handle(const std::string& text, std::string* error);

class Supervisor {
 public:
  // `guardian_pid` is excluded from leftover sweeps (it is flowrun's child).
  // `stop_signals`: which of SIGINT, SIGTERM, SIGHUP and SIGQUIT stop the
  // group (all four by default); the others are ignored.
  Supervisor(Console console, int guardian_pid, const std::vector<int>& stop_signals = kStopSignals);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts the workers and runs until every one of them and every
  // descendant they left has ended. The attempt's outcome is failed (a
  // worker failed, or a log file could not be written: write_error says
  // which, once, on the console too), timed_out, stalled, interrupted or
  // succeeded; roles are assigned.
  AttemptRecord run_group(const std::vector<WorkerLaunch>& workers, const GroupOptions& options,
                          GroupObserver* observer = nullptr);

  // run_group in three parts, for an observer whose work spans several
  // calls of its own (the head: its agents stay connected between a step's
  // attempts, whether or not its srun or ssh processes still run).
  // start_group starts the workers (`workers` must outlive the group);
  // run_until runs the loop until `until()` holds, also once every process
  // has ended (the observer's own sockets and timers go on), and returns
  // whether every process has ended; finish_group runs it until they and
  // what they left behind have ended and returns the group's record.
  void start_group(const std::vector<WorkerLaunch>& workers, const GroupOptions& options,
                   GroupObserver* observer);
  bool run_until(const std::function<bool()>& until);
  AttemptRecord finish_group();
  // Starts `launch` (which must outlive the group) as one more worker of the
  // running group, after those it has: its index for the observer, or
  // nullopt when no group runs, it is stopping, or the worker cannot start
  // (then the group stops as a failure, as a worker of start_group's would).
  // Called from the observer's own handlers (its sockets, its timers, a
  // post), not from inside a GroupObserver callback: the group may be going
  // through its workers then.
  std::optional<std::size_t> add_worker(const WorkerLaunch& launch);

  // The loop, for an observer's sockets and timers, and for code that runs
  // it between groups (the agent waiting for its next message).
  boost::asio::io_context& io();

  // Stops the running group as a failure, timeout or interrupt would
  // (an observer's call, e.g. when another node failed). No-op when it is
  // already stopping or no group runs. The live ranks' stacks are taken
  // first for every outcome but interrupted, and for that too with
  // `stacks_first` (an agent told by its head that another node failed).
  void stop_group(Outcome why, bool stacks_first = false);

  // Takes the live ranks' stacks now, stopping nothing; the observer's
  // on_stacks gets them with `request` (also at once, with none, when no
  // rank runs).
  void take_stacks(int request);

  // Kills the running group now (SIGKILL), as a second Ctrl-C does.
  void kill_group();

  // Hands whole lines (the ranks' output an observer shows, e.g. the head
  // for other nodes) to the console as the workers' own go: never blocks,
  // dropped and counted past the backlog. Clears both strings.
  void write_console(std::string& out, std::string& err);

  // Sends `sig` to the main process of every live worker of the running
  // group (the agent, for the head's signal message). No-op without a group.
  void signal_workers(int sig);

  // Samples the running group's ranks `rate` times as often as its
  // sample_s says (1: as it says) until the next group: the head, which
  // tallies every node's ranks together, asks an agent for it while it holds
  // a suspect (SampleRate). No-op without samples.
  void sample_faster(double rate);

  // Whether the running group is stopping.
  bool stopping() const;

  // Whether worker `index` of the running group, which has ended, was ended
  // by flowrun's stop (it is then a victim, not a failure of its own): it
  // died of flowrun's SIGKILL, or flowrun had sent it SIGTERM and it died of
  // that, or it ran code of its own on SIGTERM or SIGCONT (a handler, or it
  // blocked them), so that any end may be its answer. A worker flowrun found
  // ended before signalling it (checked just before the signals, and before
  // the stacks) was not stopped, nor was one that kept SIGTERM's default
  // action and still ended otherwise (its own exit code, SIGSEGV).
  bool ended_by_stop(std::size_t index) const;

  // Stops any leftover descendants now (between steps, or before exit).
  // Returns notes about what had to be stopped.
  std::vector<std::string> sweep_leftovers(double grace_s);

  // What the supervisor had to do beyond the plan in the groups run since
  // the last call (leftover processes it stopped); clears the list.
  std::vector<std::string> notes();

  // The first stop signal flowrun received (0 if none). Once set, the
  // flow starts nothing new.
  int interrupt_signal() const;

  // Whether SIGINT to flowrun while a group is stopping kills it at once
  // (the default: a second Ctrl-C; other stop signals never do). An agent
  // turns it off: its stops come from the head or from Slurm.
  void set_repeat_signal_kills(bool kills);

  // The same without running the loop: for code already inside a handler.
  int interrupt_received() const;

  // Flow control for an observer that sends the output somewhere slower
  // than the workers write it (an agent's connection to the head). While
  // paused, the workers' pipes are not read: a worker that fills its pipe
  // blocks in write(2), as under a slow terminal. Exits, stops, the step's
  // timeout and signals are handled as usual; what is still in the pipes
  // when the workers have ended is read once output resumes, before
  // run_group returns, so an observer that pauses must resume (as its
  // queue drains, or when its connection is gone). May be called from
  // on_output; the state outlasts the group.
  void pause_output();
  void resume_output();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What to do after a file of the run directory `run_dir` could not be
// written with errno `err`, as the end of flowrun's message:
// " (free space there, then: flowrun resume RUN_DIR)".
std::string write_failure_hint(int err, const std::string& run_dir);

// Stacks taken on demand (SIGQUIT, flowrun stacks), by a supervisor or by
// the head for every node: writes `stacks_file` (stacks_document; nothing
// when it is empty) and returns flowrun's lines for the console (the
// headline, the groups, where the whole stacks are).
std::string publish_stacks(const std::string& step, const StackReport& report, const std::string& stacks_file,
                           std::int64_t requested_unix_ns);

}  // namespace flowrun
