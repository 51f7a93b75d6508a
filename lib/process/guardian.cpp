// The guardian outlives flowrun, however flowrun ends. It is forked before
// any thread exists, leaves flowrun's session (setsid: a kill of flowrun's
// process group or session, or the hangup of its terminal, does not reach
// it), closes everything it inherited (so it never holds a pipe a reader
// waits on), ignores the signals a terminal or a `kill` sends, and blocks on
// the read end of a pipe whose write end only flowrun holds. Down the pipe
// come records: 'P' PATH '\0' (a directory to remove at the end), 'd'
// (flowrun is exiting normally) and 'k' (flowrun is leaving on an error).
// End-of-file before a 'd' means flowrun died without a word: then, and on
// a 'k', the guardian kills every process carrying its mark (an srun among
// them gets SIGTERM first, so it can end its job). Either way it then
// removes the directories it was given, and exits; after a 'd' or a 'k'
// flowrun waits for that, so that what it started is gone once it is.
//
// No child starts before the guardian is out of flowrun's session and named
// (a second pipe carries one byte when it is): a kill of flowrun's process
// group in the first milliseconds would otherwise take the guardian along
// with flowrun and leave the first workers unguarded, and another guardian
// could take it for a worker. flowrun waits for that byte only at its first
// spawn, by which time the guardian has long been ready.
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "flowrun/error.h"
#include "flowrun/fd.h"
#include "flowrun/files.h"
#include "flowrun/process.h"

#include "process_detail.h"

namespace flowrun {

namespace {

// The read end of the ready pipe until the guardian's byte (or its end) came.
std::atomic<int> ready_fd{-1};
std::mutex ready_mutex;

bool alive(pid_t pid) {
  const char state = process_state(pid);
  return state != 0 && state != 'Z' && state != 'X';
}

// An srun that gets SIGKILL can neither end its step on the nodes nor give
// back the allocation it made (a job that then holds the nodes until an
// administrator cancels it). SIGTERM first lets it do both; it gets at most
// 3 s before everything is killed.
void end_srun_gently(const std::string& entry) {
  std::vector<pid_t> sruns;
  for (pid_t pid : processes_with_env(entry)) {
    if (process_name(pid) == "srun" && kill(pid, SIGTERM) == 0) sruns.push_back(pid);
  }
  for (int i = 0; i < 60 && !sruns.empty(); ++i) {
    usleep(50'000);
    std::erase_if(sruns, [](pid_t pid) { return !alive(pid); });
  }
}

// A descriptor of at least 3, so that nothing meant for fds 0-2 lands on it.
int above_standard(int fd) {
  if (fd > 2) return fd;
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (moved < 0) return fd;
  close(fd);
  return moved;
}

[[noreturn]] void guard(int keep, int ready, const std::string& entry) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU, SIGUSR1, SIGUSR2})
    signal(sig, SIG_IGN);
  setsid();
  // Out of the directory flowrun ran in: a guardian still cleaning up never
  // keeps a user's directory busy (an unmount, a removal); what it is given
  // to remove is absolute (remove_on_exit).
  [[maybe_unused]] const int moved = chdir("/");
  prctl(PR_SET_NAME, "flowrun-guard");
  [[maybe_unused]] const ssize_t told = write(ready, "r", 1);
  close(ready);
  int devnull = open("/dev/null", O_RDWR | O_NOCTTY);
  if (devnull >= 0) {
    dup2(devnull, STDIN_FILENO);
    dup2(devnull, STDOUT_FILENO);
    dup2(devnull, STDERR_FILENO);
  }
  // Close every other inherited descriptor; keep the pipe's read end.
  if (keep > 3) close_range(3, static_cast<unsigned>(keep) - 1, 0);
  close_range(static_cast<unsigned>(keep) + 1, ~0U, 0);

  std::vector<std::string> dirs;
  std::string pending;  // a record not yet whole
  bool disarmed = false, told_to_stop = false;
  char buf[4096];
  while (!disarmed && !told_to_stop) {
    const ssize_t n = read(keep, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<std::size_t>(n));
    std::size_t pos = 0;
    while (pos < pending.size()) {
      if (pending[pos] == 'd' || pending[pos] == 'k') {
        (pending[pos] == 'd' ? disarmed : told_to_stop) = true;
        break;
      }
      const std::size_t end = pending.find('\0', pos);
      if (end == std::string::npos) break;
      if (pending[pos] == 'P' && end > pos + 1) dirs.push_back(pending.substr(pos + 1, end - pos - 1));
      pos = end + 1;
    }
    pending.erase(0, pos);
  }
  if (!disarmed) {
    end_srun_gently(entry);
    kill_processes_with_env(entry);
  }
  // What is left cannot be told: stderr is /dev/null by now.
  for (const auto& dir : dirs) static_cast<void>(remove_tree(dir));
  _exit(0);
}

}  // namespace

void Guardian::start(const std::string& key, const std::string& secret) {
  if (key.empty() || key.find('=') != std::string::npos || secret.empty())
    throw Error("internal: a guardian needs a variable name and a secret");
  int fds[2], ready[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("cannot create a pipe: ") + std::strerror(errno));
  if (pipe2(ready, O_CLOEXEC) != 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    throw Error(std::string("cannot create a pipe: ") + std::strerror(err));
  }
  fds[0] = above_standard(fds[0]);
  fds[1] = above_standard(fds[1]);
  ready[0] = above_standard(ready[0]);
  ready[1] = above_standard(ready[1]);
  const std::string entry = key + "=" + secret;
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    for (int fd : {fds[0], fds[1], ready[0], ready[1]}) close(fd);
    throw Error(std::string("cannot start the guardian process (fork): ") + std::strerror(err));
  }
  if (pid == 0) {
    close(ready[0]);
    guard(fds[0], ready[1], entry);
  }
  close(fds[0]);
  close(ready[1]);
  const int before = ready_fd.exchange(ready[0]);
  if (before >= 0) close(before);
  pid_ = pid;
  fd_ = fds[1];
  mark_ = entry;
  // Whatever starts from here on carries the mark: children made with this
  // environment (a check child, popen's shell) and those spawn_process makes.
  setenv(key.c_str(), secret.c_str(), 1);
  process_detail::guardian_mark = entry;
}

void process_detail::wait_for_guardian() {
  if (ready_fd.load(std::memory_order_acquire) < 0) return;
  const std::lock_guard lock(ready_mutex);
  const int fd = ready_fd.load();
  if (fd < 0) return;
  // A byte: ready. End-of-file: the guardian is gone, and nothing waiting
  // longer would change that.
  char byte = 0;
  while (read(fd, &byte, 1) < 0 && errno == EINTR) {
  }
  close(fd);
  ready_fd.store(-1, std::memory_order_release);
}

void Guardian::remove_on_exit(const std::string& dir) {
  if (fd_ < 0 || !dir.starts_with('/') || dir.find('\0') != std::string::npos) return;
  // A write that fails finds the guardian gone: nothing can be told any more.
  write_all(fd_, "P" + dir + std::string(1, '\0'));
}

// Whether the guardian still runs; one killed by someone (SIGKILL by its pid)
// is reaped here, and nothing is written to its pipe: no SIGPIPE for flowrun
// on its way out.
bool Guardian::running() {
  if (pid_ <= 0) return false;
  if (waitpid(pid_, nullptr, WNOHANG) == 0) return true;
  pid_ = -1;
  return false;
}

// Tells the guardian `record` ('d' or 'k') and waits until it has done its
// part and exited: once flowrun has exited nothing it started runs (an
// engine that ends a node's processes with its task, as Slurm's cgroups do,
// would otherwise cut the guardian's removal short). No reaper of flowrun's
// takes the guardian.
void Guardian::finish(std::string_view record) {
  if (fd_ < 0) return;
  if (running()) write_all(fd_, record);
  close(fd_);
  fd_ = -1;
  if (pid_ > 0) {
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
}

// A normal exit: nothing to kill.
void Guardian::disarm() { finish("d"); }

// Not disarmed: flowrun is leaving by an exception, perhaps with workers
// still running. The guardian is told so ('k': not end-of-file, which a
// forked child still holding the pipe's write end would hold back) and
// stops them.
Guardian::~Guardian() { finish("k"); }

}  // namespace flowrun
