// Taking the stacks of one host's live ranks (the pure parts are in
// flowrun/stacks.h). Before any signal, py-spy dumps every live rank's
// Python stack, all ranks at once, as children whose end the event loop
// waits for, within a total time; without py-spy the kernel tells
// (/proc/PID/wchan, /proc/PID/syscall, the state letter of /proc/PID/stat).
// Each rank's whole stack goes to its stack.txt, beside its logs.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

#include "flowrun/result.h"
#include "flowrun/stacks.h"

namespace flowrun {

struct Worker;

// Takes the live workers' stacks on `io`, then calls `done` (on the loop).
// One taking at a time: a stop that comes while stacks are being taken on
// demand uses those (they are seconds old) rather than attach twice.
class StackTaker {
 public:
  explicit StackTaker(boost::asio::io_context& io);
  ~StackTaker();
  StackTaker(const StackTaker&) = delete;
  StackTaker& operator=(const StackTaker&) = delete;

  // False (and `done` not called) when no worker is alive. `say` gets
  // flowrun's one line about a missing py-spy (once per process).
  bool start(const std::vector<Worker>& workers, double timeout_s,
             std::function<void(const std::string&)> say, std::function<void()> done);
  // Whether a taking has started and `done` has not run yet.
  bool running() const { return running_; }
  // The group ended before py-spy did: what is missing stays missing, and
  // `done` is not called.
  void cut_short();
  // The last taking's findings, by rank, and where they came from
  // ("py-spy" or "kernel"); empty before the first.
  const std::vector<RankStack>& found() const { return found_; }
  const std::string& source() const { return source_; }

 private:
  struct Job;
  // `cut_short`: nullptr when py-spy ended; else it is killed, and the
  // stack is missing for that reason ("": the time ran out).
  void finish_one(Job& job, const char* cut_short);
  void maybe_done();

  boost::asio::io_context& io_;
  boost::asio::steady_timer deadline_;
  std::vector<std::unique_ptr<Job>> jobs_;
  std::function<void()> done_;
  std::vector<RankStack> found_;
  std::string source_;
  std::string looked_;  // why py-spy is missing, when it is
  double timeout_s_ = 0;
  bool running_ = false;
};

}  // namespace flowrun
