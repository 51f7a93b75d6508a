#include "exit_watch.h"

#include <boost/asio/io_context.hpp>
#include <cerrno>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flowrun/process.h"

namespace flowrun {

namespace asio = boost::asio;

std::int64_t error_file_time(const std::string& path, std::int64_t since_ns) {
  // A file system stamps with its coarse clock, up to a tick behind the
  // clock that stamped the start.
  constexpr std::int64_t kCoarseTickNs = 20'000'000;
  struct stat st {};
  if (path.empty() || ::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return 0;
  const std::int64_t written = std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  return written >= since_ns - kCoarseTickNs ? written : 0;
}

ExitWatch::ExitWatch(asio::io_context& io, pid_t guardian, WorkerList& workers,
                     std::function<void(Worker&)> ended, std::function<void()> after)
    : io_(io), guardian_(guardian), workers_(workers), ended_(std::move(ended)), after_(std::move(after)) {}

void ExitWatch::reap() {
  for (pid_t pid : children_of(getpid())) {
    if (pid == guardian_) continue;
    Worker* watched = nullptr;
    for (auto& w : workers_) {
      if (w.pid == pid && w.alive) watched = &w;
    }
    if (watched != nullptr && watched->exit_watch) continue;
    int status = 0;
    rusage usage{};
    if (wait4(pid, &status, WNOHANG, &usage) != pid) continue;
    if (watched != nullptr) on_exit(*watched, status, usage);
  }
}

void ExitWatch::settle() {
  for (auto& w : workers_) {
    if (!w.alive || w.pid <= 0) continue;
    int status = 0;
    rusage usage{};
    pid_t got;
    do {
      got = wait4(w.pid, &status, WNOHANG, &usage);
    } while (got < 0 && errno == EINTR);
    if (got == w.pid) on_exit(w, status, usage);
  }
}

void ExitWatch::watch(Worker& w) {
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, w.pid, 0));
  if (fd < 0) return;  // an old kernel: SIGCHLD reaps it
  w.exit_watch = std::make_unique<asio::posix::stream_descriptor>(io_, fd);
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
                             after_();
                           });
}

void ExitWatch::on_exit(Worker& w, int status, const rusage& usage) {
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
  if (!w.record.status.ok() && w.launch != nullptr) {
    w.record.error_file_unix_ns = error_file_time(w.launch->error_file, w.record.start_unix_ns);
    // For the hint of a module it lacks (failure_hints.cpp): looked up for a
    // worker that failed, not at every start (a PATH walk per rank).
    w.record.path_python = find_program("python3", w.launch->env);
  }
  if (w.exit_watch) {
    w.exit_watch->cancel();
    w.exit_watch.reset();  // closes the pidfd
  }
  ended_(w);
}

}  // namespace flowrun
