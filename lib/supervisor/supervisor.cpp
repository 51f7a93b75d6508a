#include "flowrun/supervisor.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <functional>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <utility>

#include "flowrun/clock.h"
#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/process.h"
#include "flowrun/rank_output.h"
#include "flowrun/util.h"

#include "console_writer.h"
#include "exit_watch.h"
#include "leftover_sweep.h"
#include "rank_sampler.h"
#include "stack_taker.h"
#include "stall_watch.h"
#include "worker_pipes.h"

namespace flowrun {

namespace asio = boost::asio;

std::string write_failure_hint(int err, const std::string& run_dir) {
  return fmt::format(" ({}, then: flowrun resume {})",
                     err == ENOSPC || err == EDQUOT ? "free space there" : "fix that", run_dir);
}

std::string publish_stacks(const std::string& step, const StackReport& report, const std::string& stacks_file,
                           std::int64_t requested_unix_ns) {
  std::string text = stacks_headline(step, report);
  if (!report.groups.empty()) text += "\n" + format_stacks_line(report);
  if (stacks_file.empty()) return text;
  const std::string dir = stacks_file.substr(0, stacks_file.rfind('/') + 1);
  if (report.ranks > 0) text += fmt::format("\nflowrun:   whole stacks: {}rank*/stack.txt", dir);
  try {
    write_file(stacks_file, stacks_document(step, report, requested_unix_ns, unix_now_ns()));
  } catch (const Error& e) {
    text += fmt::format("\nflowrun:   {}", e.what());
  }
  return text;
}

void Console::message(const std::string& text) const {
  if (text.empty()) return;
  if (text.back() == '\n') {
    write_all(err_fd, text.data(), text.size());
  } else {
    const std::string line = text + "\n";
    write_all(err_fd, line.data(), line.size());
  }
}

namespace {

// The bit of signal `sig` in a mask of /proc/PID/status ("SigCgt:\t...").
bool has_signal(const std::string& status, const char* field, int sig) {
  const std::size_t at = status.find(field);
  if (at == std::string::npos) return false;
  const std::size_t start = status.find_first_not_of(" \t", at + std::strlen(field));
  if (start == std::string::npos) return false;
  std::uint64_t mask = 0;
  try {
    mask = std::stoull(status.substr(start, 16), nullptr, 16);
  } catch (...) {
    return false;
  }
  return (mask >> (sig - 1)) & 1U;
}

// Whether `pid` runs code of its own on the signals of a stop, SIGTERM and
// SIGCONT: a handler for either (SigCgt), or SIGTERM blocked and not ignored
// (SigBlk: it may take it with sigwait or a signalfd). Then whatever it ends
// with may be its answer to flowrun's signal. False when SIGTERM keeps its
// default action (it ends the rank as SIGTERM) or is ignored (it does
// nothing, blocked or not: a shell blocks every signal for an instant while
// it forks), and when the rank is already gone.
bool takes_stop_signals(pid_t pid) {
  const std::string status = read_proc_file(fmt::format("/proc/{}/status", pid), 8192);
  if (has_signal(status, "SigCgt:", SIGTERM) || has_signal(status, "SigCgt:", SIGCONT)) return true;
  if (has_signal(status, "SigIgn:", SIGTERM)) return false;
  return has_signal(status, "SigBlk:", SIGTERM);
}

// The first step of a group's teardown: each live rank's main process gets
// SIGTERM. What it started (DataLoader workers, a shell's program) keeps
// running while it saves its checkpoint; the rest of its group is told when
// the main has ended (terminate_group), or killed with it when the grace runs
// out. How the main takes SIGTERM is read just before (takes_stop_signals):
// what it ends with decides whether the end was flowrun's (ended_by_stop).
void terminate_mains(WorkerList& workers) {
  for (auto& w : workers) {
    if (!w.alive) continue;
    w.takes_stop = takes_stop_signals(w.pid);
    w.term_sent = true;
    kill(w.pid, SIGTERM);
    // A stopped process (SIGSTOP, Ctrl-Z) keeps the SIGTERM pending until
    // it is continued: continue it, so it ends now and not at the SIGKILL.
    signal_group(w.pid, SIGCONT);
  }
}

// Whether the end of `w` can be flowrun's stop, once it ended: it got
// flowrun's SIGKILL and died of it; or it got the SIGTERM and either died of
// it or runs code of its own on it (then any end may be its answer). A rank
// that keeps SIGTERM's default action and ends otherwise (an exit code, a
// signal flowrun never sent: SIGSEGV, the kernel's SIGKILL before flowrun's)
// ended on its own; so did one that ended before flowrun signalled it, and
// one that had written its error file before the stop began (at `stop_ns`):
// it was ending of its own failure, and the stop only cut its exit short.
bool end_was_the_stop(const Worker& w, std::int64_t stop_ns) {
  if (w.record.error_file_unix_ns > 0 && w.record.error_file_unix_ns < stop_ns) return false;
  const ExitStatus& s = w.record.status;
  const bool signaled = s.kind == ExitStatus::Kind::signaled;
  if (w.kill_sent && signaled && s.code == SIGKILL) return true;
  if (!w.term_sent) return false;
  return w.takes_stop || (signaled && s.code == SIGTERM);
}

// What is left of a rank's process group once its main has ended (nothing,
// when the main took its children with it).
void terminate_group(pid_t pgid) {
  signal_group(pgid, SIGTERM);
  signal_group(pgid, SIGCONT);
}

// SIGKILL to a live worker's whole process group: the grace ran out, a
// second Ctrl-C.
void kill_worker(Worker& w) {
  if (!w.alive) return;
  w.kill_sent = true;
  signal_group(w.pid, SIGKILL);
}

// The workers whose ends were flowrun's stop, by index, for assign_roles.
std::vector<int> stopped_workers(const WorkerList& workers) {
  std::vector<int> stopped;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    if (workers[i].stopped) stopped.push_back(static_cast<int>(i));
  }
  return stopped;
}

// assign_roles, and the root cause of a group is a failure that came before
// flowrun began to stop it (at `stop_ns`): one that came only after (a rank
// that ignores SIGTERM and failed on its own once a timeout's stop had ended
// its peers) failed after the stop, and is no culprit.
void assign_group_roles(AttemptRecord& attempt, const std::vector<int>& stopped, std::int64_t stop_ns) {
  assign_roles(attempt, stopped);
  if (!attempt.culprit || stop_ns == 0) return;
  WorkerRecord& w = attempt.workers[static_cast<std::size_t>(*attempt.culprit)];
  if (failure_time(w) < stop_ns) return;
  w.role = Role::failed_after;
  attempt.culprit.reset();
}

// A SIGUSR1 or SIGUSR2 that no worker was there to take.
void say_unforwarded(const Console& console, int sig, const char* when) {
  console.message(
      fmt::format("flowrun: {} received {}: no worker to pass it on to (flowrun passes SIGUSR1 and "
                  "SIGUSR2 on to running workers)",
                  signal_name(sig), when));
}

// A SIGQUIT with no running rank to take the stack of.
void say_no_stacks(const Console& console, bool stopping) {
  console.message(
      fmt::format("flowrun: SIGQUIT received {}: no running rank to take the stack of (SIGQUIT takes every "
                  "running rank's stack and stops nothing)",
                  stopping ? "while the step stops" : "between steps"));
}

// Hands each signal `set` receives to `handler`, on the loop, until the set
// is cancelled (with the loop).
void keep_waiting(asio::signal_set& set, std::function<void(int)> handler) {
  set.async_wait([&set, handler = std::move(handler)](const boost::system::error_code& ec, int sig) mutable {
    if (ec) return;
    handler(sig);
    keep_waiting(set, std::move(handler));
  });
}

// Worker `i` (`w`) could not start: its record, log and end file say why.
void record_spawn_failure(Worker& w, std::size_t i, const SpawnResult& spawned, WorkerPipes& pipes,
                          GroupObserver* observer) {
  w.record.end_unix_ns = unix_now_ns();
  w.record.status.kind = ExitStatus::Kind::spawn_failed;
  w.record.status.code = spawned.exit_code;
  w.record.status.spawn_error = spawned.error;
  const std::string line = "flowrun: cannot start: " + spawned.error + "\n";
  w.log->keep(true, line);
  write_rank_end(w.launch->end_file, w.record);
  if (observer != nullptr) {
    observer->on_output(i, true, line);
    observer->on_exit(i, w.record);
  }
  pipes.close_stream(w, w.out);
  pipes.close_stream(w, w.err);
}

// `w` runs as `spawned` says, since the group's start at `started_mono`.
void mark_started(Worker& w, const SpawnResult& spawned, std::int64_t started_mono) {
  w.pid = spawned.pid;
  w.record.pid = spawned.pid;
  w.record.command = w.launch->argv[0];
  w.record.program = spawned.program;
  // Silence counts from the group's start: workers that never write are
  // silent for the same time, and a stall names them together.
  w.last_output_ns = started_mono;
  w.record.status.kind = ExitStatus::Kind::running;
  w.alive = true;
}

void signal_live(const WorkerList& workers, int sig) {
  for (const auto& w : workers)
    if (w.alive) kill(w.pid, sig);
}

int live_workers(const WorkerList& workers) {
  return static_cast<int>(
      std::count_if(workers.begin(), workers.end(), [](const Worker& w) { return w.alive; }));
}

}  // namespace

// Refuses a group whose descriptors would not fit under RLIMIT_NOFILE
// (flowrun raised its soft limit to the hard one when it started): each
// worker holds 5 while it runs (the read ends of its stdout and stderr, its
// two log files, its pidfd), and a spawn needs a few more for an instant.
// Said before the first worker starts, while there are descriptors left to
// say it with, instead of half-way through the spawns. The `held` logs open
// already are among the workers' (read first: any opened during the count
// are counted twice, never missed).
static void require_descriptors(std::size_t workers, std::size_t held) {
  rlimit limit{};
  if (workers == 0 || getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return;
  std::size_t open = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec))
    ++open;
  const std::size_t need = open - std::min(open, held) + 5 * workers + 8;
  if (need <= limit.rlim_cur) return;
  throw Error(
      fmt::format("cannot start {} workers: {}: they need about {} open files and RLIMIT_NOFILE is {}; "
                  "raise it (ulimit -n; the hard limit, ulimit -Hn, as root or in the job's settings)",
                  workers, std::strerror(EMFILE), need, limit.rlim_cur));
}

// What the stop line tells the sender of `sig` about a second signal
// (docs/cli.md#signals): only a SIGINT kills at once, when `sigint_kills`.
// Whoever sent a SIGTERM (timeout, Slurm, kill) has no Ctrl-C to press, and
// its second SIGTERM leaves the grace as it is; an agent never kills at once.
static std::string what_cuts_the_grace(int sig, bool sigint_kills) {
  if (!sigint_kills) return "";
  if (sig == SIGINT) return "; press Ctrl-C again to kill at once";
  return fmt::format("; a second {} does not shorten the grace, a SIGINT kills at once", signal_name(sig));
}

namespace {

// The stop signals `handled` go to `stops`; SIGQUIT, when not among them,
// to `stacks`; the others of SIGTERM, SIGINT and SIGHUP are ignored
// (--signals-to-handle left them out). Returns whether SIGINT stops.
bool sort_stop_signals(const std::vector<int>& handled, asio::signal_set& stops, asio::signal_set& stacks) {
  bool sigint_stops = false;
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) {
    if (std::find(handled.begin(), handled.end(), sig) != handled.end()) {
      stops.add(sig);
      sigint_stops = sigint_stops || sig == SIGINT;
    } else if (sig == SIGQUIT) {
      stacks.add(sig);
    } else {
      signal(sig, SIG_IGN);
    }
  }
  return sigint_stops;
}

}  // namespace

struct Supervisor::Impl {
  asio::io_context io;
  asio::signal_set child_signals{io, SIGCHLD};
  asio::signal_set stop_signals{io};
  asio::signal_set forward_signals{io, SIGUSR1, SIGUSR2};
  asio::signal_set stacks_signal{io};  // SIGQUIT, when it is no stop signal
  asio::steady_timer grace_timer{io};
  asio::steady_timer timeout_timer{io};
  Console console;
  pid_t guardian = -1;
  int interrupt = 0;
  bool repeat_kills = true;   // a SIGINT while stopping kills at once
  bool sigint_stops = false;  // SIGINT is a stop signal (--signals-to-handle)

  // The group being run.
  bool in_group = false, stopping = false, kill_now = false, sweeping = false;
  bool finishing = false;  // finish() waits for the group's end: nothing holds it past its processes
  bool done = false;
  Outcome outcome = Outcome::succeeded;
  std::string write_error;  // the first log file that could not be written, and why
  WorkerList workers;
  std::vector<std::string> notes;      // this group's
  std::vector<std::string> all_notes;  // since Supervisor::notes() was last called
  GroupOptions options;
  GroupObserver* observer = nullptr;
  bool observer_stops = false;  // the observer took over the stop (on_stop returned true)
  std::int64_t started_mono = 0;
  std::int64_t group_start_ns = 0, stop_ns = 0;  // wall clock: the start (for the record), the stop (0: none)
  // This batch's lines, before they go to the streams.
  ConsoleBatch batch{io, [this](std::string& out, std::string& err) {
                       screen.write(0, out, true);
                       screen.write(1, err, true);
                     }};
  ConsoleWriter screen{io, console, [this](bool hold) { pipes.hold_output(WorkerPipes::kConsole, hold); }};
  WorkerPipes pipes{io, workers,
                    [this](Worker& w, bool is_err, std::string_view data, std::int64_t now) {
                      keep_output(w, is_err, data, now);
                    },
                    [this] { schedule_flush(); }};
  StallWatch stall{io, workers, pipes};
  LeftoverSweep sweep{io, guardian, workers, [this] { advance(); }};
  ExitWatch exits{io, guardian, workers, [this](Worker& w) { on_exit(w); }, [this] { advance(); }};
  bool force_stacks = false;  // stop_group's stacks_first
  StackRounds stacks{io,
                     workers,
                     {[this](int request, const std::vector<RankStack>& found, const std::string& source) {
                        return observer != nullptr && observer->on_stacks(request, found, source);
                      },
                      [this](const StackReport& report, std::int64_t requested_ns) {
                        say(publish_stacks(options.step, report, options.stacks_file, requested_ns));
                      },
                      [this] { stop_workers(); }, [this](const std::string& text) { say(text); }}};

  SlowRankWatch slow_ranks{
      io,
      workers,
      {[this](const RankSample& s) { return observer != nullptr && observer->on_sample(s); },
       [this](const std::string& text) { say(text); }}};

  Impl(Console c, pid_t g, const std::vector<int>& handled) : console(c), guardian(g) {
    sigint_stops = sort_stop_signals(handled, stop_signals, stacks_signal);
    keep_waiting(child_signals, [this](int) {
      exits.reap();
      if (in_group) advance();
    });
    keep_waiting(stop_signals, [this](int sig) { on_stop_signal(sig); });
    keep_waiting(forward_signals, [this](int sig) { on_forward_signal(sig); });
    keep_waiting(stacks_signal, [this](int) { on_stacks_signal(); });
  }

  // SIGINT while stopping is a second Ctrl-C; SIGTERM, SIGHUP and SIGQUIT
  // again are the same request repeated (GNU timeout sends SIGTERM to
  // flowrun and then to its group) and leave the grace as it is.
  void on_stop_signal(int sig) {
    if (interrupt == 0) interrupt = sig;
    if (!in_group) return;
    flush_console();  // the workers' lines so far come before flowrun's
    if (!stopping) {
      const std::string cut = what_cuts_the_grace(sig, repeat_kills && sigint_stops);
      say(fmt::format("flowrun: {} received: stopping step '{}' (SIGTERM, then SIGKILL after {} s{})",
                      signal_name(sig), options.step, options.grace_s, cut));
      outcome = Outcome::interrupted;
      begin_stop();
    } else if (sig == SIGINT && repeat_kills && !kill_now) {
      say(fmt::format("flowrun: {} again: killing step '{}' now", signal_name(sig), options.step));
      kill_everything();
    }
  }

  // SIGUSR1, SIGUSR2: for the workers, not for flowrun.
  void on_forward_signal(int sig) {
    if (!in_group || done)
      say_unforwarded(console, sig, "between steps");
    else if (observer == nullptr || !observer->on_signal(sig))
      signal_live(workers, sig);
  }

  // --- stacks on demand ------------------------------------------------

  // SIGQUIT: every rank's stack now; nothing stops.
  void on_stacks_signal() {
    if (!in_group || done || stopping)
      say_no_stacks(console, in_group && stopping);
    else if (observer == nullptr || !observer->on_stacks_request())
      stacks.request(kStacksOnSignal, stopping, options.forensics_timeout_s);
  }

  // --- exits -------------------------------------------------------------

  // A worker's exit, in its record now: a failure stops the group.
  void on_exit(Worker& w) {
    // The last rank ended: a sample on its way is not one of the step's
    // processes left behind.
    if (alive_count() == 0) slow_ranks.stop();
    w.stopped = end_was_the_stop(w, stop_ns);
    end_of_main(w);
    write_rank_end(w.launch != nullptr ? w.launch->end_file : std::string(), w.record);
    const bool fails = observer != nullptr ? observer->on_exit(w.index, w.record) : !w.record.status.ok();
    if (fails && !stopping) {
      outcome = Outcome::failed;
      begin_stop();
    }
  }

  int alive_count() const { return live_workers(workers); }

  // --- stopping ----------------------------------------------------------

  // A stall, a timeout or a failure (or a stop with stacks_first): the live
  // ranks' stacks first, unless the step's forensics turn them off, then the
  // signals.
  void begin_stop() {
    if (stopping) return;
    stopping = true;
    stop_ns = unix_now_ns();
    slow_ranks.stop();  // the ranks' waits from here on are the stop's
    exits.settle();     // a rank that ended on its own meanwhile is neither sampled nor stopped
    stall.note_silence();
    const bool wanted = options.forensics_stacks && (outcome != Outcome::interrupted || force_stacks);
    if (!wanted || !stacks.before_stop(options.forensics_timeout_s)) stop_workers();
  }

  void stop_workers() {
    if (observer != nullptr && observer->on_stop(outcome)) {
      // The observer stops the work (the head tells every agent); flowrun's
      // own processes get the grace plus the observer's margin to end.
      observer_stops = true;
      start_grace(options.grace_s + options.observer_margin_s);
      return;
    }
    exits.settle();  // the stacks took a while: who ended by then ended before the signal
    terminate_mains(workers);
    start_grace(options.grace_s);
  }

  // A rank's main process ended while the group stops: the rest of its
  // process group gets SIGTERM now, inside the same grace.
  void end_of_main(const Worker& w) {
    if (stopping && !kill_now && !observer_stops) terminate_group(w.pid);
  }

  void start_grace(double seconds) {
    grace_timer.expires_after(steady_seconds(seconds));
    grace_timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      kill_everything();
    });
  }

  void kill_everything() {
    kill_now = true;
    if (observer != nullptr) observer->on_kill();
    for (auto& w : workers) kill_worker(w);
    for (pid_t pid : sweep.find()) LeftoverSweep::signal_tree(pid, SIGKILL);
  }

  // --- silence and stalls ------------------------------------------------

  void check_stalls() {
    if (pipes.paused()) return;  // the workers wait for flowrun, not the other way round
    const std::vector<std::size_t> found = stall.silent(*options.stall_timeout_s);
    schedule_flush();
    if (found.empty() || stopping) return;
    flush_console();  // the workers' lines so far come before flowrun's
    stall.note_silence();
    const std::vector<WorkerRecord> stalled = stall.mark_stalled(found);
    outcome = Outcome::stalled;
    if (observer == nullptr || !observer->on_stall(found, stalled))
      say(format_stall_message(options.step, stalled, *options.stall_timeout_s));
    begin_stop();
    advance();
  }

  // --- the end and the leftovers --------------------------------------

  void advance() {
    if (done || alive_count() > 0) return;
    const auto left = sweep.find();
    if (left.empty()) {
      done = finishing;
      return;
    }
    if (!sweeping) {
      sweeping = true;
      if (!stopping) start_grace(options.grace_s);  // a stopping group already has its deadline
    }
    const std::vector<std::string> named = sweep.signal_new(left, kill_now);
    if (!named.empty() && options.note_leftovers) {
      notes.push_back(fmt::format("stopped {} process{} left behind by the step's workers: {}", named.size(),
                                  named.size() == 1 ? "" : "es", join(named, ", ")));
    }
    if (!kill_now) sweep.recheck_soon();  // while they live: one may exec after its SIGTERM
  }

  // --- output ------------------------------------------------------------

  // A read's `data` from `w`: raw to the log file, whole prefixed lines to
  // the console buffers.
  void keep_output(Worker& w, bool is_err, std::string_view data, std::int64_t now) {
    if (auto error = w.log->keep(is_err, data)) log_failed(*error);
    if (observer != nullptr) observer->on_output(w.index, is_err, data);
    w.log->show(is_err, data, now);
  }

  // A log file cannot be written (a full disk): the rank's output is lost
  // from here on, so the step cannot succeed. Said once per group; the
  // console goes on showing what the workers write while they stop.
  void log_failed(const RankLog::WriteError& error) {
    if (!write_error.empty()) return;
    write_error = error.text;
    say(log_failed_message(options.step, write_error, stopping, error.err, options.run_dir));
    if (!stopping) {
      outcome = Outcome::failed;
      begin_stop();
    }
  }

  void schedule_flush() { batch.schedule(); }

  void flush_console() { batch.flush(); }

  // flowrun's own line, after what the workers wrote so far; never dropped.
  void say(const std::string& text) {
    flush_console();
    std::string line = text;
    if (line.empty() || line.back() != '\n') line += '\n';
    screen.write(1, line, false);
  }

  // --- the group ---------------------------------------------------------

  // Spawns in rank order; stops at the first that cannot start, or at an
  // interrupt that arrived meanwhile.
  void spawn_all(const std::vector<WorkerLaunch>& launches) {
    for (std::size_t i = 0; i < launches.size() && !stopping && interrupt == 0; ++i)
      if (!spawn_one(workers[i])) break;
  }

  // Starts `w` (its launch assigned); false when it cannot start, which
  // stops the group as a failure.
  bool spawn_one(Worker& w) {
    WorkerPipes::open_log(w, options, batch);
    const SpawnResult spawned = pipes.spawn(w, *w.launch);
    if (spawned.pid < 0) {
      record_spawn_failure(w, w.index, spawned, pipes, observer);
      outcome = Outcome::failed;
      begin_stop();
      return false;
    }
    mark_started(w, spawned, started_mono);
    exits.watch(w);
    pipes.start_read(w, w.out);
    pipes.start_read(w, w.err);
    return true;
  }

  std::optional<std::size_t> add(const WorkerLaunch& launch) {
    if (!in_group || stopping || done || interrupt != 0) return std::nullopt;
    Worker& w = workers.emplace_back();
    w.index = workers.size() - 1;
    w.assign(launch);
    if (!spawn_one(w)) {
      advance();
      return std::nullopt;
    }
    return w.index;
  }

  AttemptRecord run(const std::vector<WorkerLaunch>& launches, const GroupOptions& opts, GroupObserver* obs) {
    start(launches, opts, obs);
    return finish();
  }

  void start(const std::vector<WorkerLaunch>& launches, const GroupOptions& opts, GroupObserver* obs) {
    options = opts;
    batch.fold(options.step, options.style);
    observer = obs;
    observer_stops = false;
    in_group = true;
    stopping = kill_now = sweeping = finishing = done = false;
    force_stacks = false;
    stacks.reset();
    stall.reset();

    outcome = Outcome::succeeded;
    write_error.clear();
    require_descriptors(launches.size(), opts.logs_held ? opts.logs_held() : 0);
    workers.clear();
    workers.resize(launches.size());
    sweep.reset();
    notes.clear();
    started_mono = monotonic_now_ns();
    group_start_ns = unix_now_ns();
    stop_ns = 0;

    if (opts.timeout_s) {
      timeout_timer.expires_after(steady_seconds(std::max(0.0, *opts.timeout_s)));
      timeout_timer.async_wait([this](const boost::system::error_code& ec) {
        if (ec || stopping) return;
        outcome = Outcome::timed_out;
        begin_stop();
        advance();
      });
    }

    if (opts.stall_timeout_s && !launches.empty()) {
      stall.start(
          *opts.stall_timeout_s, [this] { return stopping || done; },
          [this] {
            check_stalls();
            return !stopping;
          });
    }

    for (std::size_t i = 0; i < launches.size(); ++i) {
      workers[i].index = i;
      workers[i].assign(launches[i]);
    }
    try {
      spawn_all(launches);
    } catch (...) {
      // flowrun cannot go on (a log file it cannot create): stop what runs.
      stall.cancel();
      kill_everything();
      finishing = true;
      advance();
      while (!done) io.run_one();
      in_group = false;
      throw;
    }
    if (interrupt != 0 && !stopping) {
      outcome = Outcome::interrupted;
      begin_stop();
    }
    if (!stopping)
      slow_ranks.start(options.step, options.restart_count, options.sample_s, options.shares_file);
    advance();
  }

  AttemptRecord finish() {
    finishing = true;
    advance();
    while (!done) io.run_one();

    slow_ranks.stop();
    pipes.drain_rest();
    flush_console();
    grace_timer.cancel();
    timeout_timer.cancel();
    stall.cancel();
    io.poll();  // run the cancelled handlers
    const std::size_t dropped = screen.take_dropped();
    if (dropped > 0) {
      notes.push_back(
          fmt::format("{}: {} line{} of the workers' output were not shown (the log files have them)",
                      kConsoleMissedNote, dropped, dropped == 1 ? "" : "s"));
    }

    AttemptRecord attempt;
    attempt.restart_count = options.restart_count;
    attempt.master_port = options.master_port;
    attempt.start_unix_ns = group_start_ns;
    attempt.end_unix_ns = unix_now_ns();
    attempt.outcome = outcome;
    attempt.write_error = write_error;
    attempt.stacks = stacks.end_of_group();
    attempt.shares = slow_ranks.end_of_group();
    const std::vector<int> stopped = stopped_workers(workers);
    for (auto& w : workers) {
      if (w.log) w.record.stderr_tail = w.log->tail();
      attempt.workers.push_back(std::move(w.record));
    }
    assign_group_roles(attempt, stopped, stop_ns);
    all_notes.insert(all_notes.end(), notes.begin(), notes.end());
    workers.clear();
    in_group = false;
    observer = nullptr;
    return attempt;
  }
};

Supervisor::Supervisor(Console console, int guardian_pid, const std::vector<int>& stop_signals)
    : impl_(std::make_unique<Impl>(console, static_cast<pid_t>(guardian_pid), stop_signals)) {
  if (const int sig = take_held_forward_signal(); sig != 0)
    say_unforwarded(console, sig, "before any worker started");
}

Supervisor::~Supervisor() {
  impl_.reset();  // its signal sets give SIGUSR1 and SIGUSR2 their default action back
  hold_forward_signals();
}

AttemptRecord Supervisor::run_group(const std::vector<WorkerLaunch>& workers, const GroupOptions& options,
                                    GroupObserver* observer) {
  return impl_->run(workers, options, observer);
}

void Supervisor::start_group(const std::vector<WorkerLaunch>& workers, const GroupOptions& options,
                             GroupObserver* observer) {
  impl_->start(workers, options, observer);
}

bool Supervisor::run_until(const std::function<bool()>& until) {
  while (!until()) impl_->io.run_one();
  return impl_->alive_count() == 0;
}

AttemptRecord Supervisor::finish_group() { return impl_->finish(); }

std::optional<std::size_t> Supervisor::add_worker(const WorkerLaunch& launch) { return impl_->add(launch); }

boost::asio::io_context& Supervisor::io() { return impl_->io; }

void Supervisor::stop_group(Outcome why, bool stacks_first) {
  if (!impl_->in_group || impl_->stopping) return;
  impl_->outcome = why;
  impl_->force_stacks = stacks_first;
  impl_->begin_stop();
  impl_->advance();
}

void Supervisor::take_stacks(int request) {
  if (!impl_->in_group || impl_->done) {
    if (impl_->observer != nullptr) impl_->observer->on_stacks(request, {}, "py-spy");
    return;
  }
  impl_->stacks.request(request, impl_->stopping, impl_->options.forensics_timeout_s);
}

void Supervisor::kill_group() {
  if (!impl_->in_group) return;
  if (!impl_->stopping) {
    impl_->outcome = Outcome::interrupted;
    impl_->stopping = true;
  }
  impl_->kill_everything();
  impl_->advance();
}

void Supervisor::write_console(std::string& out, std::string& err) {
  impl_->screen.write(0, out, true);
  impl_->screen.write(1, err, true);
}

void Supervisor::signal_workers(int sig) {
  if (impl_->in_group) signal_live(impl_->workers, sig);
}

bool Supervisor::stopping() const { return impl_->stopping; }

bool Supervisor::ended_by_stop(std::size_t index) const {
  return index < impl_->workers.size() && impl_->workers[index].stopped;
}

std::vector<std::string> Supervisor::sweep_leftovers(double grace_s) {
  GroupOptions options;
  options.grace_s = grace_s;
  options.step = "(between steps)";
  impl_->run({}, options, nullptr);
  return impl_->notes;
}

std::vector<std::string> Supervisor::notes() {
  std::vector<std::string> taken;
  taken.swap(impl_->all_notes);
  return taken;
}

void Supervisor::set_repeat_signal_kills(bool kills) { impl_->repeat_kills = kills; }

int Supervisor::interrupt_received() const { return impl_->interrupt; }

void Supervisor::pause_output() { impl_->pipes.hold_output(WorkerPipes::kObserver, true); }
void Supervisor::resume_output() { impl_->pipes.hold_output(WorkerPipes::kObserver, false); }
void Supervisor::sample_faster(double rate) { impl_->slow_ranks.hurry(rate); }

int Supervisor::interrupt_signal() const {
  impl_->io.poll();  // deliver a signal that arrived between steps
  return impl_->interrupt;
}

}  // namespace flowrun
