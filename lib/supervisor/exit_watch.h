// The supervisor's watch on its workers' exits: a pidfd per worker, so that
// exits arrive in the order they happened, and SIGCHLD's reaping of what no
// pidfd watches (orphans that came to flowrun as the subreaper, a worker
// whose pidfd could not be opened). Each exit is written into the worker's
// record before the supervisor hears of it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <sys/resource.h>
#include <sys/types.h>
#include <vector>

#include "worker_pipes.h"

namespace boost::asio {
class io_context;
}

namespace flowrun {

// When the regular file at `path` (a rank's TORCHELASTIC_ERROR_FILE) was
// last written, if it has content and was written since `since_ns` (the
// rank's start, wall clock); else 0. It never follows a link or opens the
// file: a rank may leave anything there, a FIFO or a link to a device.
std::int64_t error_file_time(const std::string& path, std::int64_t since_ns);

class ExitWatch {
 public:
  // `ended` hears of each worker's exit; `after` runs after each pidfd's.
  // `guardian` is flowrun's own child, never reaped here.
  ExitWatch(boost::asio::io_context& io, pid_t guardian, WorkerList& workers,
            std::function<void(Worker&)> ended, std::function<void()> after);

  void watch(Worker& w);
  void reap();
  // Reaps, in worker order, every watched worker that has ended by now,
  // whether or not the loop has heard of it yet: called before flowrun takes
  // stacks or sends a stop signal, so that a rank that had already ended on
  // its own is neither sampled nor taken for one that flowrun stopped.
  void settle();

 private:
  void on_exit(Worker& w, int status, const rusage& usage);

  boost::asio::io_context& io_;
  pid_t guardian_;
  WorkerList& workers_;
  std::function<void(Worker&)> ended_;
  std::function<void()> after_;
};

}  // namespace flowrun
