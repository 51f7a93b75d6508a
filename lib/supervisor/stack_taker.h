// Taking the stacks of one host's live ranks (the pure parts are in
// flowrun/stacks.h). Before any signal, py-spy dumps every live rank's
// Python stack, all ranks at once, as children whose end the event loop
// waits for, within a total time; without py-spy the kernel tells
// (/proc/PID/wchan, /proc/PID/syscall, the state letter of /proc/PID/stat).
// Each rank's whole stack goes to its stack.txt, beside its logs (an
// agent's ranks have none there: the head writes theirs).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

#include "flowrun/result.h"
#include "flowrun/stacks.h"

namespace flowrun {

struct Worker;
using WorkerList = std::deque<Worker>;

// The py-spy to run: FLOWRUN_PY_SPY when set, else on flowrun's PATH, on a
// rank's, or beside its Python; "" with *looked saying where it looked.
std::string find_py_spy(const WorkerList& workers, std::string* looked);
// How a py-spy is scheduled: like flowrun (stacks a stop waits for), or
// on CPU time the ranks leave idle (the sampler's: SCHED_IDLE from its
// start, so a rank that wakes takes its CPU back at once; nice 19 where the
// kernel refuses SCHED_IDLE).
enum class SpyPriority { normal, idle };

// Starts `py_spy dump OPTIONS --full-filenames --pid TARGET`, its stdout
// and stderr to the files `out` and `err`, with spawn_process (lib/process):
// 0, or ENOENT or EACCES when it could not be run, EAGAIN when no process
// could be started.
int spawn_py_spy(const std::string& py_spy, pid_t target, const std::vector<std::string>& options, int out,
                 int err, pid_t* pid, SpyPriority priority = SpyPriority::normal);
// What a memory file holds, trimmed.
std::string read_back(int fd);

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
  bool start(const WorkerList& workers, double timeout_s, std::function<void(const std::string&)> say,
             std::function<void()> done);
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

// Who waits for the stacks being taken: requests on demand (take_stacks,
// SIGQUIT) and a stop, whose signals go out once the stacks are in. One
// taking serves every request that came while it ran.
class StackRounds {
 public:
  struct Links {
    // The observer's on_stacks; false: the supervisor reports them (`report`).
    std::function<bool(int request, const std::vector<RankStack>& found, const std::string& source)> deliver;
    std::function<void(const StackReport& report, std::int64_t requested_ns)> report;
    std::function<void()> stop;  // the stop's signals, once its stacks are in
    std::function<void(const std::string&)> say;
  };
  StackRounds(boost::asio::io_context& io, const WorkerList& workers, Links links)
      : taker_(io), workers_(workers), links_(std::move(links)) {}

  // A new group.
  void reset();
  // Stacks on demand; answered at once, with none, while the group stops.
  void request(int request, bool stopping, double timeout_s);
  // A stop: true when its stacks are being taken (links.stop runs when they
  // are in); false when no rank is alive (stop now).
  bool before_stop(double timeout_s);
  // The group ended: what py-spy had not given stays missing; the stop's
  // stacks, grouped (nullopt: none were taken before a stop).
  std::optional<StackReport> end_of_group();

 private:
  bool start(double timeout_s);
  void taken();
  void answer(const std::vector<RankStack>& found, const std::string& source);

  StackTaker taker_;
  const WorkerList& workers_;
  Links links_;
  std::vector<int> requests_;
  bool stop_after_ = false;
  std::optional<StackReport> stop_stacks_;
  std::int64_t requested_ns_ = 0;  // the first waiting request's arrival
};

}  // namespace flowrun
