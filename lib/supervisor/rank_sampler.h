// Sampling the live ranks' Python stacks while a step runs, to name the slow
// rank (the pure parts are in flowrun/wait_shares.h). One `py-spy dump
// --nonblocking` at a time, which reads a rank's memory without pausing it,
// run at a low priority: a rank every sample_s / ranks seconds on average,
// the ranks in turn, each gap drawn at random around the mean so that the
// samples do not keep step with a training loop's period.
#pragma once

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "flowrun/wait_shares.h"

namespace flowrun {

struct Worker;
using WorkerList = std::deque<Worker>;

class RankSampler {
 public:
  struct Links {
    std::function<void(const RankSample&)> sample;  // each sample, on the loop
    std::function<void(const std::string&)> say;    // flowrun's line when it cannot sample
  };
  RankSampler(boost::asio::io_context& io, const WorkerList& workers, Links links);
  ~RankSampler();
  RankSampler(const RankSampler&) = delete;
  RankSampler& operator=(const RankSampler&) = delete;

  // Samples the group's live ranks every `sample_s` seconds per rank until
  // stop(); 0: never.
  void start(double sample_s);
  // No more samples: a py-spy still running is killed.
  void stop();
  // While paused (the ranks' stacks are being taken for a stop or on
  // demand), a sample that falls due is skipped.
  void pause(bool paused) { paused_ = paused; }
  // Samples `rate` times as often from the next sample on (1: as start said).
  void set_rate(double rate) { rate_ = rate; }
  std::int64_t taken() const { return taken_; }

 private:
  void arm();
  // Finds py-spy as the first sample falls due (a step that ends before
  // never looks); false, with the line said later, where there is none.
  bool look_up();
  void sample_next();
  void finished(bool timed_out);
  void close_run();

  boost::asio::io_context& io_;
  const WorkerList& workers_;
  Links links_;
  boost::asio::steady_timer timer_, deadline_;
  std::minstd_rand random_;
  std::string py_spy_;
  double sample_s_ = 0, rate_ = 1;
  std::size_t next_ = 0;  // the worker to sample next, in turn
  bool running_ = false, paused_ = false, said_ = false, looked_up_ = false;
  std::int64_t started_ns_ = 0;  // monotonic
  std::int64_t taken_ = 0, failed_in_a_row_ = 0;
  // The py-spy running now.
  pid_t pid_ = -1;
  int rank_ = -1;
  ThreadTimes times_;  // its rank's thread, read as it started
  int out_ = -1, err_ = -1;
  std::unique_ptr<boost::asio::posix::stream_descriptor> watch_;
};

// What a supervisor does with its ranks' samples: tallies them, unless its
// observer takes them (an agent, for the head); names the slow rank on the
// console once the evidence does (once per attempt); keeps the shares so far
// in the step's shares.json for flowrun status, and the attempt's in its
// record.
class SlowRankWatch {
 public:
  struct Links {
    std::function<bool(const RankSample&)> forward;  // true: the observer took it
    std::function<void(const std::string&)> say;
  };
  SlowRankWatch(boost::asio::io_context& io, const WorkerList& workers, Links links);

  // A new attempt; sample_s 0: no samples. `shares_file` "": none.
  void start(const std::string& step, int restart_count, double sample_s, const std::string& shares_file);
  // No more samples (the group stops).
  void stop() { sampler_.stop(); }
  // Samples at least `rate` times as often from the next sample on, until
  // the next start (the head's suspect, on an agent).
  void hurry(double rate) {
    hurried_ = rate;
    sampler_.set_rate(std::max(rate_now(), hurried_));
  }
  // The attempt's shares (nullopt: no sample was tallied here); the file
  // gets them too.
  std::optional<WaitShares> end_of_group();

 private:
  void on_sample(const RankSample& sample);
  void write_file();
  // kSuspectRate while a rank of this host is a suspect not yet named, else 1.
  double rate_now() const { return !said_ && tally_.suspect() ? kSuspectRate : 1; }

  RankSampler sampler_;
  Links links_;
  ShareTally tally_;
  std::string step_, shares_file_;
  int restart_count_ = 0;
  double sample_s_ = 0, hurried_ = 1;
  bool said_ = false, forwarded_ = false;
  std::int64_t written_mono_ = 0;
};

}  // namespace flowrun
