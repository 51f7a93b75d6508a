// The ranks' output as flowrun shows and keeps it, shared by the supervisor
// (ranks on this host) and the head (ranks on the nodes): the console batch
// their lines wait in, and what flowrun says when a rank's log file cannot
// be written.
#pragma once

#include <functional>
#include <string>

namespace boost::asio {
class io_context;
}

namespace flowrun {

// The ranks' whole prefixed lines on their way to the console. Lines are
// appended to `out` and `err`; schedule() writes them once the loop has
// handled what is ready now (one write for many ranks' lines), or at once
// past 1 MiB.
class ConsoleBatch {
 public:
  // `write` hands both buffers to the console and clears them
  // (Supervisor::write_console).
  ConsoleBatch(boost::asio::io_context& io, std::function<void(std::string& out, std::string& err)> write);

  void schedule();
  void flush() { write_(out, err); }

  std::string out, err;

 private:
  boost::asio::io_context& io_;
  std::function<void(std::string&, std::string&)> write_;
  bool posted_ = false;
};

// What could not be written: "cannot write rank 0's stdout.log in DIR: No
// space left on device". `who` reads before the file's name ("rank 0's ",
// "its ").
std::string log_write_error(const std::string& who, const std::string& path, int err);

// flowrun's line about it, said once per attempt: "flowrun: error: step 'S':
// WRITE_ERROR; stopping the step (free space there, then: flowrun resume
// RUN_DIR)" ("the step is stopping" when it already is; no hint without
// `run_dir`).
std::string log_failed_message(const std::string& step, const std::string& write_error, bool stopping,
                               int err, const std::string& run_dir);

}  // namespace flowrun
