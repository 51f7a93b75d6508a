// The guardian outlives a SIGKILLed flowrun. It is forked before any thread
// exists, closes everything it inherited (so it never holds a pipe a reader
// waits on), ignores the signals a terminal or a `kill` of the group sends,
// and blocks on the read end of a pipe whose write end only flowrun holds.
// One byte means flowrun is exiting normally; end-of-file means flowrun died
// without a word, and the guardian kills every process carrying the run id
// (an srun among them gets SIGTERM first, so it can end its job).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "flowrun/error.h"
#include "flowrun/process.h"

namespace flowrun {

namespace {

bool alive(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  int ignored = 0;
  char state = 'Z';
  char comm[64];
  const int got = std::fscanf(f, "%d %63s %c", &ignored, comm, &state);
  std::fclose(f);
  return got == 3 && state != 'Z' && state != 'X';
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

}  // namespace

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
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU})
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
    end_srun_gently(entry);
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
