// The guardian outlives a SIGKILLed flowrun. It is forked before any thread
// exists, closes everything it inherited (so it never holds a pipe a reader
// waits on), ignores the signals a terminal or a `kill` of the group sends,
// and blocks on the read end of a pipe whose write end only flowrun holds.
// One byte means flowrun is exiting normally; end-of-file means flowrun died
// without a word, and the guardian kills every process carrying the run id.
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flowrun/error.h"
#include "flowrun/process.h"

namespace flowrun {

void Guardian::start(const std::string& run_id, const std::string& key) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("cannot create a pipe: ") + std::strerror(errno));
  const std::string entry = key + "=" + run_id;
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw Error(std::string("cannot start the guardian process (fork): ") + std::strerror(errno));
  }
  if (pid == 0) {
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU})
      signal(sig, SIG_IGN);
    const int keep = fds[0];
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, STDIN_FILENO);
      dup2(devnull, STDOUT_FILENO);
      dup2(devnull, STDERR_FILENO);
    }
    // Close every other inherited descriptor; keep the pipe's read end.
    if (keep > 3) close_range(3, static_cast<unsigned>(keep) - 1, 0);
    close_range(static_cast<unsigned>(keep) + 1, ~0U, 0);
    prctl(PR_SET_NAME, "flowrun-guard");
    char byte = 0;
    ssize_t n;
    do {
      n = read(keep, &byte, 1);
    } while (n < 0 && errno == EINTR);
    if (n == 1) _exit(0);
    kill_processes_with_env(entry);
    _exit(0);
  }
  close(fds[0]);
  pid_ = pid;
  fd_ = fds[1];
}

void Guardian::disarm() {
  if (fd_ < 0) return;
  const char byte = 'd';
  [[maybe_unused]] ssize_t n = write(fd_, &byte, 1);
  close(fd_);
  fd_ = -1;
}

// Not disarmed: flowrun is leaving by an exception, perhaps with workers
// still running; the guardian sees end-of-file and stops them.
Guardian::~Guardian() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace flowrun
