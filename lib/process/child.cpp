#include "flowrun/child.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flowrun/process.h"

#include "process_detail.h"

extern char** environ;

namespace flowrun {

namespace {

using process_detail::errno_text;

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::size_t kMaxLine = 1 << 20;
constexpr int kCancelPollMs = 50;

// The descriptors run_helper holds; each closed once, whatever way it leaves.
struct Fds {
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  int report[2] = {-1, -1};  // the child's exec failure; argv helpers only
  int devnull = -1;
  int pidfd = -1;
  Fds() = default;
  Fds(const Fds&) = delete;
  Fds& operator=(const Fds&) = delete;
  ~Fds() {
    for (int* fd : {&out[0], &out[1], &err[0], &err[1], &report[0], &report[1], &devnull, &pidfd}) drop(*fd);
  }
  static void drop(int& fd) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

// What the child reports through the report pipe when it cannot exec.
struct HelperFailure {
  int stage;  // 1 exec, 2 setup
  int err;
};

[[noreturn]] void child_fail(int fd, int stage) {
  HelperFailure failure{stage, errno};
  if (fd >= 0) {
    [[maybe_unused]] ssize_t n = write(fd, &failure, sizeof failure);
  }
  _exit(127);
}

// `fd` as `target` in the child, without close-on-exec.
bool put_at(int fd, int target) {
  if (fd == target) return fcntl(fd, F_SETFD, 0) == 0;
  return dup2(fd, target) == target;
}

// In the child, from fork to exec (or to child_main): async-signal-safe calls
// only, since the caller may have threads.
[[noreturn]] void run_child(const HelperRequest& request, const Fds& fds, const char* program,
                            char* const* argv, char* const* envp) {
  const int report = fds.report[1];
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : process_detail::kResetSignals) signal(sig, SIG_DFL);
  if (setpgid(0, 0) != 0) child_fail(report, 2);
  if (!put_at(fds.devnull, STDIN_FILENO) || !put_at(fds.out[1], STDOUT_FILENO)) child_fail(report, 2);
  if (request.stderr_to == HelperStderr::capture && !put_at(fds.err[1], STDERR_FILENO)) child_fail(report, 2);
  if (request.stderr_to == HelperStderr::discard && !put_at(fds.devnull, STDERR_FILENO))
    child_fail(report, 2);
  if (program == nullptr) {
    // No exec to close them: nothing of flowrun's (a pipe another reader
    // waits on for end-of-file, the guardian's) stays open in the child.
    close_range(3, ~0U, 0);
    int status = 127;
    try {
      status = request.child_main();
    } catch (...) {
    }
    _exit(status);
  }
  process_detail::cloexec_above_stdio();  // the report pipe included: exec closes it
  execve(program, argv, envp);
  child_fail(report, 1);
}

// The outcome of a helper that could not be started.
HelperOutcome not_started(std::string error, bool exec_failed = false) {
  HelperOutcome outcome;
  outcome.end = HelperEnd::not_started;
  outcome.error = std::move(error);
  outcome.exec_failed = exec_failed;
  return outcome;
}

void reap(pid_t pid, HelperOutcome& outcome, bool killed) {
  int status = 0;
  pid_t got;
  do {
    got = waitpid(pid, &status, 0);
  } while (got < 0 && errno == EINTR);
  if (killed) return;
  if (got != pid) {
    outcome.end = HelperEnd::vanished;
  } else if (WIFEXITED(status)) {
    outcome.end = HelperEnd::exited;
    outcome.code = WEXITSTATUS(status);
  } else {
    outcome.end = HelperEnd::signalled;
    outcome.code = WTERMSIG(status);
  }
}

// Reads the helper's pipes until they are closed and it has exited, or until
// a limit is hit or the caller cancels: then returns why it is to be killed.
// Its exit is seen through `pidfd`; once it exited, the rest of its group is
// killed. Without a pidfd, the watch ends when the pipes are closed.
class Watch {
 public:
  Watch(const HelperRequest& request, HelperOutcome& outcome, pid_t pid, Fds& fds)
      : request_(request), outcome_(outcome), pid_(pid), fds_(fds) {}

  std::optional<HelperEnd> run() {
    while (fds_.out[0] >= 0 || fds_.err[0] >= 0 || (fds_.pidfd >= 0 && !leader_gone_)) {
      const Clock::time_point now = Clock::now();
      std::optional<Clock::time_point> wake;
      const milliseconds silence = outcome_.done ? request_.silence_after_done : request_.silence_limit;
      if (silence.count() > 0) {
        if (now - last_word_ >= silence) return HelperEnd::silent;
        wake = last_word_ + silence;
      }
      if (request_.deadline.count() > 0) {
        if (now - start_ >= request_.deadline) return HelperEnd::overran;
        wake = std::min(wake.value_or(Clock::time_point::max()), start_ + request_.deadline);
      }
      if (request_.cancel != nullptr && request_.cancel->load()) return HelperEnd::cancelled;
      int timeout_ms = -1;
      if (wake) timeout_ms = static_cast<int>(std::chrono::ceil<milliseconds>(*wake - now).count());
      if (request_.cancel != nullptr)
        timeout_ms = timeout_ms < 0 ? kCancelPollMs : std::min(timeout_ms, kCancelPollMs);
      pollfd pfds[3] = {
          {fds_.out[0], POLLIN, 0}, {fds_.err[0], POLLIN, 0}, {leader_gone_ ? -1 : fds_.pidfd, POLLIN, 0}};
      const int ready = poll(pfds, 3, timeout_ms);
      if (ready < 0 && errno != EINTR) return std::nullopt;  // not with valid fds: stop watching
      if (ready <= 0) continue;
      if (pfds[0].revents != 0) take(fds_.out[0], outcome_.output, true);
      if (pfds[1].revents != 0) take(fds_.err[0], outcome_.error_output, false);
      if (pfds[2].revents != 0) {
        // The helper exited (a zombie now, so its pid, and the group's id,
        // cannot be taken by another process): a grandchild still holding
        // the pipe is a stray.
        leader_gone_ = true;
        kill(-pid_, SIGKILL);
      }
    }
    return std::nullopt;
  }

 private:
  // One read from `fd`; closes it at end-of-file.
  void take(int& fd, std::string& kept, bool lines) {
    char chunk[16384];
    const ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      Fds::drop(fd);
      return;
    }
    last_word_ = Clock::now();
    const std::string_view got(chunk, static_cast<std::size_t>(n));
    const std::size_t room = request_.output_limit - std::min(kept.size(), request_.output_limit);
    kept.append(got.substr(0, room));
    if (got.size() > room) outcome_.output_cut = true;
    if (lines) split_lines(got);
  }

  void split_lines(std::string_view got) {
    if (!request_.on_line && request_.done_line.empty()) return;
    line_.append(got);
    std::size_t start = 0;
    for (std::size_t newline; (newline = line_.find('\n', start)) != std::string::npos; start = newline + 1)
      deliver(std::string_view(line_).substr(start, newline - start));
    line_.erase(0, start);
    while (line_.size() >= kMaxLine) {
      deliver(std::string_view(line_).substr(0, kMaxLine));
      line_.erase(0, kMaxLine);
    }
  }

  void deliver(std::string_view line) {
    if (request_.on_line) request_.on_line(line);
    if (!request_.done_line.empty() && line == request_.done_line) outcome_.done = true;
  }

  const HelperRequest& request_;
  HelperOutcome& outcome_;
  const pid_t pid_;
  Fds& fds_;
  const Clock::time_point start_ = Clock::now();
  Clock::time_point last_word_ = start_;
  std::string line_;  // a line not yet whole
  bool leader_gone_ = false;
};

}  // namespace

HelperOutcome run_helper(const HelperRequest& request) {
  // Everything the child needs is made before fork: it may not allocate.
  std::string program;
  std::vector<std::string> env;
  std::vector<char*> argv, envp;
  if (!request.child_main) {
    if (request.argv.empty()) return not_started("no program to run");
    for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) env.emplace_back(*entry);
    int err = 0;
    program = find_program(request.argv[0], env, &err);
    if (program.empty()) {
      const bool searched = err == ENOENT && request.argv[0].find('/') == std::string::npos;
      return not_started(request.argv[0] + ": " + (searched ? "command not found" : errno_text(err)), true);
    }
    for (const auto& arg : request.argv) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    envp = process_detail::marked_envp(env);
  }

  Fds fds;
  if (pipe2(fds.out, O_CLOEXEC) != 0) return not_started("pipe: " + errno_text(errno));
  if (request.stderr_to == HelperStderr::capture && pipe2(fds.err, O_CLOEXEC) != 0)
    return not_started("pipe: " + errno_text(errno));
  if (!request.child_main && pipe2(fds.report, O_CLOEXEC) != 0)
    return not_started("pipe: " + errno_text(errno));
  fds.devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (fds.devnull < 0) return not_started("/dev/null: " + errno_text(errno));

  process_detail::wait_for_guardian();
  const pid_t pid = fork();
  if (pid < 0) return not_started("fork: " + errno_text(errno));
  if (pid == 0)
    run_child(request, fds, program.empty() ? nullptr : program.c_str(), argv.data(), envp.data());
  setpgid(pid, pid);  // as the child does: a kill of the group may come before it ran that far
  Fds::drop(fds.out[1]);
  Fds::drop(fds.err[1]);
  Fds::drop(fds.report[1]);
  Fds::drop(fds.devnull);

  HelperOutcome outcome;
  if (fds.report[0] >= 0) {
    HelperFailure failure{};
    ssize_t n;
    do {
      n = read(fds.report[0], &failure, sizeof failure);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof failure)) {
      reap(pid, outcome, true);
      if (failure.stage == 1) return not_started(request.argv[0] + ": " + errno_text(failure.err), true);
      return not_started("cannot set up the process: " + errno_text(failure.err));
    }
  }
  // Without a pidfd (a kernel before 5.3), the limits hold only while its
  // output is open; then run_helper waits for its exit.
  fds.pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));

  const std::optional<HelperEnd> killed = Watch(request, outcome, pid, fds).run();
  if (killed) {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);  // should its setpgid have failed
  }
  reap(pid, outcome, killed.has_value());
  if (killed) outcome.end = *killed;
  return outcome;
}

}  // namespace flowrun
