#include "flowrun/supervisor.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <set>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "flowrun/error.h"
#include "flowrun/process.h"
#include "flowrun/rank_output.h"
#include "flowrun/util.h"

#include "console_writer.h"

namespace flowrun {

namespace asio = boost::asio;

std::int64_t unix_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::int64_t monotonic_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, -1);
    } else {
      return false;
    }
  }
  return true;
}

std::optional<std::vector<int>> parse_signals_to_handle(const std::string& text, std::string* error) {
  static constexpr std::pair<const char*, int> kKnown[] = {{"SIGTERM", SIGTERM}, {"SIGINT", SIGINT},
                                                           {"SIGHUP", SIGHUP},   {"SIGQUIT", SIGQUIT},
                                                           {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}};
  std::vector<int> stops;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = std::min(text.find(',', pos), text.size());
    std::string name = text.substr(pos, end - pos);
    pos = end + 1;
    while (!name.empty() && name.front() == ' ') name.erase(0, 1);
    while (!name.empty() && name.back() == ' ') name.pop_back();
    if (name.empty()) continue;
    for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (name.rfind("SIG", 0) != 0) name = "SIG" + name;
    int sig = 0;
    for (const auto& [known, number] : kKnown) {
      if (name == known) sig = number;
    }
    if (sig == 0) {
      *error = fmt::format(
          "'{}': flowrun handles SIGTERM, SIGINT, SIGHUP and SIGQUIT (stop signals) and forwards SIGUSR1 "
          "and SIGUSR2",
          name);
      return std::nullopt;
    }
    if (sig != SIGUSR1 && sig != SIGUSR2 && std::find(stops.begin(), stops.end(), sig) == stops.end())
      stops.push_back(sig);
  }
  return stops;
}

std::string write_failure_hint(int err, const std::string& run_dir) {
  return fmt::format(" ({}, then: flowrun resume {})",
                     err == ENOSPC || err == EDQUOT ? "free space there" : "fix that", run_dir);
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

constexpr std::size_t kReadChunk = 256 * 1024;
constexpr int kReadsPerWakeup = 4;  // fairness between ranks that flood
struct Stream {
  int fd = -1;  // our read end
  bool is_err = false;
  std::unique_ptr<asio::posix::stream_descriptor> desc;
  bool parked = false;  // readable, left unread while output is paused
  bool open() const { return fd >= 0; }
};

struct Worker {
  const WorkerLaunch* launch = nullptr;
  WorkerRecord record;
  pid_t pid = -1;
  bool alive = false;
  Stream out, err;
  std::unique_ptr<RankLog> log;     // its log files, stderr tail and console lines
  std::int64_t last_output_ns = 0;  // monotonic: when it last wrote (or the group started)
  // A pidfd becomes readable when the worker exits. Exits then arrive in the
  // order they happened (epoll's ready list is first come, first served),
  // which is what names the right culprit when peers die a moment after it.
  std::unique_ptr<asio::posix::stream_descriptor> exit_watch;
};

}  // namespace

struct Supervisor::Impl {
  asio::io_context io;
  asio::signal_set child_signals{io, SIGCHLD};
  asio::signal_set stop_signals{io};
  asio::signal_set forward_signals{io, SIGUSR1, SIGUSR2};
  asio::steady_timer grace_timer{io};
  asio::steady_timer timeout_timer{io};
  asio::steady_timer stall_timer{io};
  Console console;
  pid_t guardian = -1;
  int interrupt = 0;
  bool repeat_kills = true;  // a SIGINT while stopping kills at once

  // The group being run.
  bool in_group = false;
  bool stopping = false;
  bool kill_now = false;
  bool sweeping = false;
  bool finishing = false;  // finish() waits for the group's end: nothing holds it past its processes
  bool done = false;
  bool grace_expired = false;
  bool silence_noted = false;
  Outcome outcome = Outcome::succeeded;
  std::string write_error;  // the first log file that could not be written, and why
  std::vector<Worker> workers;
  std::vector<int> stopped;
  std::set<pid_t> leftovers_seen;
  std::vector<std::string> notes;      // this group's
  std::vector<std::string> all_notes;  // since Supervisor::notes() was last called
  GroupOptions options;
  GroupObserver* observer = nullptr;
  bool observer_stops = false;  // the observer took over the stop (on_stop returned true)
  std::int64_t started_mono = 0;
  std::int64_t group_start_ns = 0;  // wall clock, for the record
  std::vector<char> buffer = std::vector<char>(kReadChunk);
  // This batch's lines, before they go to the streams.
  ConsoleBatch batch{io, [this](std::string& out, std::string& err) {
                       screen.write(0, out, true);
                       screen.write(1, err, true);
                     }};
  ConsoleWriter screen{io, console};  // flowrun's stdout and stderr
  bool output_paused = false;         // Supervisor::pause_output()
  std::int64_t paused_at_ns = 0;      // monotonic, when output was paused

  Impl(Console c, pid_t g, const std::vector<int>& handled) : console(c), guardian(g) {
    for (int sig : kStopSignals) {
      if (std::find(handled.begin(), handled.end(), sig) != handled.end()) {
        stop_signals.add(sig);
      } else {
        signal(sig, SIG_IGN);  // --signals-to-handle left it out
      }
    }
    wait_child();
    wait_stop();
    wait_forward();
  }

  void wait_child() {
    child_signals.async_wait([this](const boost::system::error_code& ec, int) {
      if (ec) return;
      reap();
      wait_child();
    });
  }

  void wait_stop() {
    stop_signals.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      on_stop_signal(sig);
      wait_stop();
    });
  }

  void wait_forward() {
    forward_signals.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      on_forward_signal(sig);
      wait_forward();
    });
  }

  // SIGINT while stopping is a second Ctrl-C; SIGTERM, SIGHUP and SIGQUIT
  // again are the same request repeated (GNU timeout sends SIGTERM to
  // flowrun and then to its group) and leave the grace as it is.
  void on_stop_signal(int sig) {
    if (interrupt == 0) interrupt = sig;
    if (!in_group) return;
    flush_console();  // the workers' lines so far come before flowrun's
    if (!stopping) {
      say(
          fmt::format("flowrun: {} received: stopping step '{}' (SIGTERM, then SIGKILL after {} s; "
                      "press Ctrl-C again to kill at once)",
                      signal_name(sig), options.step, options.grace_s));
      outcome = Outcome::interrupted;
      begin_stop();
    } else if (sig == SIGINT && repeat_kills && !kill_now) {
      say(fmt::format("flowrun: {} again: killing step '{}' now", signal_name(sig), options.step));
      kill_everything();
    }
  }

  // SIGUSR1, SIGUSR2: for the workers, not for flowrun.
  void on_forward_signal(int sig) {
    if (!in_group || done) return;
    if (observer != nullptr && observer->on_signal(sig)) return;
    signal_workers(sig);
  }

  void signal_workers(int sig) {
    for (auto& w : workers) {
      if (w.alive) kill(w.pid, sig);
    }
  }

  // --- exits -------------------------------------------------------------

  // SIGCHLD: reap what no pidfd watches (orphans that came to flowrun as
  // the subreaper, a worker whose pidfd could not be opened).
  void reap() {
    for (pid_t pid : children_of(getpid())) {
      if (pid == guardian) continue;
      Worker* watched = nullptr;
      for (auto& w : workers) {
        if (w.pid == pid && w.alive) watched = &w;
      }
      if (watched != nullptr && watched->exit_watch) continue;
      int status = 0;
      rusage usage{};
      if (wait4(pid, &status, WNOHANG, &usage) != pid) continue;
      if (watched != nullptr) on_exit(*watched, status, usage);
    }
    if (in_group) advance();
  }

  void watch_exit(Worker& w) {
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, w.pid, 0));
    if (fd < 0) return;  // an old kernel: SIGCHLD reaps it
    w.exit_watch = std::make_unique<asio::posix::stream_descriptor>(io, fd);
    w.exit_watch->async_wait(asio::posix::stream_descriptor::wait_read,
                             [this, &w](const boost::system::error_code& ec) {
                               if (ec || !w.alive) return;
                               int status = 0;
                               rusage usage{};
                               pid_t got;
                               do {
                                 got = wait4(w.pid, &status, 0, &usage);
                               } while (got < 0 && errno == EINTR);
                               if (got == w.pid) on_exit(w, status, usage);
                               advance();
                             });
  }

  void on_exit(Worker& w, int status, const rusage& usage) {
    w.alive = false;
    w.record.end_unix_ns = unix_now_ns();
    w.record.peak_rss_kib = usage.ru_maxrss;
    if (WIFEXITED(status)) {
      w.record.status.kind = ExitStatus::Kind::exited;
      w.record.status.code = WEXITSTATUS(status);
    } else {
      w.record.status.kind = ExitStatus::Kind::signaled;
      w.record.status.code = WTERMSIG(status);
    }
    if (w.exit_watch) {
      w.exit_watch->cancel();
      w.exit_watch.reset();  // closes the pidfd
    }
    const bool fails = observer != nullptr ? observer->on_exit(index_of(w), w.record) : !w.record.status.ok();
    if (fails && !stopping) {
      outcome = Outcome::failed;
      begin_stop();
    }
  }

  std::size_t index_of(const Worker& w) const { return static_cast<std::size_t>(&w - workers.data()); }

  int alive_count() const {
    return static_cast<int>(
        std::count_if(workers.begin(), workers.end(), [](const Worker& w) { return w.alive; }));
  }

  // --- stopping ----------------------------------------------------------

  void begin_stop() {
    if (stopping) return;
    stopping = true;
    note_silence();
    if (observer != nullptr && observer->on_stop(outcome)) {
      // The observer stops the work (the head tells every agent); flowrun's
      // own processes get the grace plus the observer's margin to end.
      observer_stops = true;
      start_grace(options.grace_s + options.observer_margin_s);
      return;
    }
    for (std::size_t i = 0; i < workers.size(); ++i) {
      if (!workers[i].alive) continue;
      signal_group(workers[i].pid, SIGTERM);
      // A stopped process (SIGSTOP, Ctrl-Z) keeps the SIGTERM pending until
      // it is continued: continue it, so it ends now and not at the SIGKILL.
      signal_group(workers[i].pid, SIGCONT);
      stopped.push_back(static_cast<int>(i));
    }
    start_grace(options.grace_s);
  }

  void start_grace(double seconds) {
    grace_timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(seconds)));
    grace_timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      grace_expired = true;
      kill_everything();
    });
  }

  void kill_everything() {
    kill_now = true;
    if (observer != nullptr) observer->on_kill();
    for (auto& w : workers) {
      if (w.alive) signal_group(w.pid, SIGKILL);
    }
    for (pid_t pid : leftovers()) signal_tree(pid, SIGKILL);
  }

  // --- silence and stalls ------------------------------------------------

  // Whether `pid` or a process under it is in the stopped state (T).
  static bool tree_suspended(pid_t pid, int depth = 0) {
    if (process_state(pid) == 'T') return true;
    if (depth > 32) return false;
    for (pid_t child : children_of(pid)) {
      if (tree_suspended(child, depth + 1)) return true;
    }
    return false;
  }

  // Each live worker's silence and state, once per group, before the stop
  // signals change them.
  void note_silence() {
    if (silence_noted) return;
    silence_noted = true;
    const std::int64_t now = monotonic_now_ns();
    for (auto& w : workers) {
      if (!w.alive) continue;
      w.record.silent_s = static_cast<double>(now - w.last_output_ns) / 1e9;
      w.record.suspended = tree_suspended(w.pid);
    }
  }

  // stall_timeout is checked on a steady tick (a 50th of it, between 20 ms
  // and 250 ms), so that workers that went silent together (all of them, in
  // a hung collective) are named together.
  void start_stall_watch() {
    const double every = std::clamp(*options.stall_timeout_s / 50, 0.02, 0.25);
    stall_timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(every)));
    wait_stall_tick(every);
  }

  void wait_stall_tick(double every) {
    stall_timer.async_wait([this, every](const boost::system::error_code& ec) {
      if (ec || stopping || done) return;
      check_stalls();
      if (stopping) return;
      stall_timer.expires_at(stall_timer.expiry() +
                             std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(every)));
      wait_stall_tick(every);
    });
  }

  void check_stalls() {
    if (output_paused) return;  // the workers wait for flowrun, not the other way round
    const auto limit = static_cast<std::int64_t>(*options.stall_timeout_s * 1e9);
    std::vector<std::size_t> found;
    for (auto& w : workers) {
      if (!w.alive || monotonic_now_ns() - w.last_output_ns < limit) continue;
      // Output in the pipes that the loop has not read yet is not silence.
      for (Stream* s : {&w.out, &w.err}) {
        if (s->open()) drain(w, *s, 1);
      }
      if (w.alive && monotonic_now_ns() - w.last_output_ns >= limit) found.push_back(index_of(w));
    }
    schedule_flush();
    if (found.empty() || stopping) return;
    flush_console();  // the workers' lines so far come before flowrun's
    note_silence();
    std::vector<WorkerRecord> stalled;
    for (std::size_t i : found) {
      workers[i].record.stalled = true;
      stalled.push_back(workers[i].record);
    }
    outcome = Outcome::stalled;
    if (observer == nullptr || !observer->on_stall(found, stalled))
      say(format_stall_message(options.step, stalled, *options.stall_timeout_s));
    begin_stop();
    advance();
  }

  // --- leftovers ---------------------------------------------------------

  // Descendants still running after every worker was reaped: they came to
  // flowrun as the subreaper. The guardian is flowrun's own child.
  std::vector<pid_t> leftovers() const {
    std::vector<pid_t> found;
    for (pid_t pid : children_of(getpid())) {
      if (pid == guardian) continue;
      bool worker = false;
      for (const auto& w : workers) worker = worker || (w.pid == pid && w.alive);
      if (!worker) found.push_back(pid);
    }
    return found;
  }

  static void signal_tree(pid_t pid, int sig) {
    for (pid_t child : children_of(pid)) signal_tree(child, sig);
    if (getpgid(pid) == pid) kill(-pid, sig);
    kill(pid, sig);
  }

  void advance() {
    if (done || alive_count() > 0) return;
    const auto left = leftovers();
    if (left.empty()) {
      done = finishing;
      return;
    }
    if (!sweeping) {
      sweeping = true;
      if (!stopping) start_grace(options.grace_s);  // a stopping group already has its deadline
    }
    std::vector<std::string> named;
    for (pid_t pid : left) {
      if (!leftovers_seen.insert(pid).second) continue;
      named.push_back(fmt::format("{} ({})", pid, process_name(pid)));
      signal_tree(pid, kill_now ? SIGKILL : SIGTERM);
      if (!kill_now) signal_tree(pid, SIGCONT);
    }
    if (!named.empty() && options.note_leftovers) {
      notes.push_back(fmt::format("stopped {} process{} left behind by the step's workers: {}", named.size(),
                                  named.size() == 1 ? "" : "es", join(named, ", ")));
    }
  }

  // --- output ------------------------------------------------------------

  void start_read(Worker& w, Stream& s) {
    s.desc->async_wait(asio::posix::stream_descriptor::wait_read,
                       [this, &w, &s](const boost::system::error_code& ec) {
                         if (ec || !s.open()) return;
                         if (!output_paused) {
                           drain(w, s, kReadsPerWakeup);
                           schedule_flush();
                         }
                         if (!s.open()) return;
                         if (output_paused) {
                           s.parked = true;  // resume_output() watches it again
                         } else {
                           start_read(w, s);
                         }
                       });
  }

  void pause_output() {
    if (output_paused) return;
    output_paused = true;
    paused_at_ns = monotonic_now_ns();
  }

  void resume_output() {
    if (!output_paused) return;
    output_paused = false;
    // A worker held back by flowrun was not silent: the pause does not count
    // towards its stall_timeout.
    const std::int64_t paused_for = monotonic_now_ns() - paused_at_ns;
    for (auto& w : workers) w.last_output_ns += paused_for;
    for (auto& w : workers) {
      for (Stream* s : {&w.out, &w.err}) {
        if (!s->parked) continue;
        s->parked = false;
        if (s->open()) start_read(w, *s);
      }
    }
  }

  // Reads what is there (at most `reads` chunks, none once output is
  // paused): raw to the log file, whole prefixed lines to the console buffers.
  void drain(Worker& w, Stream& s, int reads) {
    const std::int64_t now = monotonic_now_ns();
    for (int i = 0; i < reads && s.open() && !output_paused; ++i) {
      const ssize_t n = read(s.fd, buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;  // EAGAIN: nothing more now
      if (n == 0) {
        close_stream(w, s);
        break;
      }
      const std::string_view data(buffer.data(), static_cast<std::size_t>(n));
      w.last_output_ns = now;
      if (auto error = w.log->keep(s.is_err, data)) log_failed(*error);
      if (observer != nullptr) observer->on_output(index_of(w), s.is_err, data);
      w.log->show(s.is_err, data, now);
      if (static_cast<std::size_t>(n) < buffer.size()) break;
    }
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

  void close_stream(Worker& w, Stream& s) {
    if (!s.open()) return;
    w.log->close(s.is_err);
    if (s.desc) {
      s.desc->cancel();
      s.desc->release();
      s.desc.reset();
    }
    close(s.fd);
    s.fd = -1;
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

  // The worker's log files, created now (an error flowrun cannot go on
  // from), its tail and its console tag.
  void open_output(Worker& w) {
    const WorkerLaunch& launch = *w.launch;
    RankLog::Options o;
    o.stdout_log = launch.stdout_log;
    o.stderr_log = launch.stderr_log;
    o.style = options.style;
    if (launch.console) {
      o.prefix = launch.label.empty() ? log_prefix(options.step, launch.rank, options.style.color)
                                      : log_prefix(launch.label, -1, options.style.color);
    }
    o.who = launch.rank >= 0        ? fmt::format("rank {}'s ", launch.rank)
            : !launch.label.empty() ? launch.label + "'s "
                                    : std::string("its ");
    w.log = std::make_unique<RankLog>(std::move(o), batch);
    w.log->open_files();
  }

  void open_stream(Stream& s, bool is_err, int* child_end) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("cannot create a pipe: ") + std::strerror(errno));
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    fcntl(fds[0], F_SETPIPE_SZ, 1 << 20);  // fewer wakeups when a rank floods; best effort
    s.fd = fds[0];
    *child_end = fds[1];
    s.is_err = is_err;
    s.desc = std::make_unique<asio::posix::stream_descriptor>(io, s.fd);
  }

  // A pipe holding `text` and then end-of-file; returns its read end. The
  // text (a token) is small: it fits the pipe's buffer, so this never blocks.
  static int stdin_with(const std::string& text) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("cannot create a pipe: ") + std::strerror(errno));
    const bool ok = text.size() <= 4096 && write_all(fds[1], text.data(), text.size());
    close(fds[1]);
    if (!ok) {
      close(fds[0]);
      throw Error("cannot write a process's standard input");
    }
    return fds[0];
  }

  // Spawns in rank order; stops at the first that cannot start, or at an
  // interrupt that arrived meanwhile.
  void spawn_all(const std::vector<WorkerLaunch>& launches) {
    for (std::size_t i = 0; i < launches.size() && !stopping && interrupt == 0; ++i) {
      Worker& w = workers[i];
      int out_end = -1, err_end = -1;
      open_output(w);
      open_stream(w.out, false, &out_end);
      open_stream(w.err, true, &err_end);
      SpawnRequest request{launches[i].argv, launches[i].env, launches[i].workdir, out_end, err_end};
      int in_end = -1;
      if (!launches[i].stdin_text.empty()) in_end = stdin_with(launches[i].stdin_text);
      request.stdin_fd = in_end;
      w.record.start_unix_ns = unix_now_ns();
      SpawnResult spawned;
      try {
        spawned = spawn_process(request);
      } catch (...) {
        close(out_end);
        close(err_end);
        if (in_end >= 0) close(in_end);
        throw;
      }
      close(out_end);
      close(err_end);
      if (in_end >= 0) close(in_end);
      if (spawned.pid < 0) {
        w.record.end_unix_ns = unix_now_ns();
        w.record.status.kind = ExitStatus::Kind::spawn_failed;
        w.record.status.code = spawned.exit_code;
        w.record.status.spawn_error = spawned.error;
        const std::string line = "flowrun: cannot start: " + spawned.error + "\n";
        w.log->keep(true, line);
        if (observer != nullptr) {
          observer->on_output(i, true, line);
          observer->on_exit(i, w.record);
        }
        close_stream(w, w.out);
        close_stream(w, w.err);
        outcome = Outcome::failed;
        begin_stop();
        break;
      }
      w.pid = spawned.pid;
      w.record.pid = spawned.pid;
      w.record.command = launches[i].argv[0];
      w.record.program = spawned.program;
      w.record.path_python = find_program("python3", launches[i].env);
      // Silence counts from the group's start: workers that never write are
      // silent for the same time, and a stall names them together.
      w.last_output_ns = started_mono;
      w.record.status.kind = ExitStatus::Kind::running;
      w.alive = true;
      watch_exit(w);
      start_read(w, w.out);
      start_read(w, w.err);
    }
  }

  AttemptRecord run(const std::vector<WorkerLaunch>& launches, const GroupOptions& opts, GroupObserver* obs) {
    start(launches, opts, obs);
    return finish();
  }

  void start(const std::vector<WorkerLaunch>& launches, const GroupOptions& opts, GroupObserver* obs) {
    options = opts;
    observer = obs;
    observer_stops = false;
    in_group = true;
    stopping = kill_now = sweeping = finishing = done = grace_expired = silence_noted = false;
    outcome = Outcome::succeeded;
    write_error.clear();
    workers.clear();
    workers.resize(launches.size());
    stopped.clear();
    leftovers_seen.clear();
    notes.clear();
    started_mono = monotonic_now_ns();
    group_start_ns = unix_now_ns();

    if (opts.timeout_s) {
      timeout_timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(std::max(0.0, *opts.timeout_s))));
      timeout_timer.async_wait([this](const boost::system::error_code& ec) {
        if (ec || stopping) return;
        outcome = Outcome::timed_out;
        begin_stop();
        advance();
      });
    }

    if (opts.stall_timeout_s && !launches.empty()) start_stall_watch();

    for (std::size_t i = 0; i < launches.size(); ++i) {
      Worker& w = workers[i];
      w.launch = &launches[i];
      w.record.rank = launches[i].rank;
      w.record.local_rank = launches[i].local_rank;
      w.record.stdout_log = launches[i].stdout_log;
      w.record.stderr_log = launches[i].stderr_log;
      w.record.error_file = launches[i].error_file;
    }
    try {
      spawn_all(launches);
    } catch (...) {
      // flowrun cannot go on (a log file it cannot create): stop what runs.
      stall_timer.cancel();
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
    advance();
  }

  AttemptRecord finish() {
    finishing = true;
    advance();
    while (!done) io.run_one();

    // Every worker and leftover has ended: take what is still in the pipes
    // (paused output first waits for the observer to resume it).
    for (auto& w : workers) {
      for (Stream* s : {&w.out, &w.err}) {
        while (s->open()) {
          while (output_paused) io.run_one();
          drain(w, *s, 1 << 20);
          if (s->open() && !output_paused) close_stream(w, *s);  // EAGAIN with no writer left: done
        }
      }
    }
    flush_console();
    grace_timer.cancel();
    timeout_timer.cancel();
    stall_timer.cancel();
    io.poll();  // run the cancelled handlers
    const std::size_t dropped = screen.take_dropped();
    if (dropped > 0) {
      notes.push_back(fmt::format(
          "the console did not keep up: {} line{} of the workers' output were not shown (the log files "
          "have them)",
          dropped, dropped == 1 ? "" : "s"));
    }

    AttemptRecord attempt;
    attempt.restart_count = options.restart_count;
    attempt.master_port = options.master_port;
    attempt.start_unix_ns = group_start_ns;
    attempt.end_unix_ns = unix_now_ns();
    attempt.outcome = outcome;
    attempt.write_error = write_error;
    for (auto& w : workers) {
      if (w.log) w.record.stderr_tail = w.log->tail();
      attempt.workers.push_back(std::move(w.record));
    }
    assign_roles(attempt, stopped);
    all_notes.insert(all_notes.end(), notes.begin(), notes.end());
    workers.clear();
    in_group = false;
    observer = nullptr;
    return attempt;
  }
};

Supervisor::Supervisor(Console console, int guardian_pid, const std::vector<int>& stop_signals)
    : impl_(std::make_unique<Impl>(console, static_cast<pid_t>(guardian_pid), stop_signals)) {}

Supervisor::~Supervisor() = default;

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

boost::asio::io_context& Supervisor::io() { return impl_->io; }

void Supervisor::stop_group(Outcome why) {
  if (!impl_->in_group || impl_->stopping) return;
  impl_->outcome = why;
  impl_->begin_stop();
  impl_->advance();
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
  if (impl_->in_group) impl_->signal_workers(sig);
}

bool Supervisor::stopping() const { return impl_->stopping; }

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

void Supervisor::pause_output() { impl_->pause_output(); }

void Supervisor::resume_output() { impl_->resume_output(); }

int Supervisor::interrupt_signal() const {
  impl_->io.poll();  // deliver a signal that arrived between steps
  return impl_->interrupt;
}

}  // namespace flowrun
