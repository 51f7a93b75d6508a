// The supervisor's watch on its workers' silence: stall_timeout checked on
// a steady tick, the workers silent past it, and each live worker's silence
// and state noted once per group for the record.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <cstddef>
#include <functional>
#include <sys/types.h>
#include <vector>

#include "flowrun/clock.h"

#include "worker_pipes.h"

namespace flowrun {

class StallWatch {
 public:
  // Silence is measured on `time`'s steady clock (a worker's last_output_ns
  // is on it too); the tick itself is the loop's steady timer.
  StallWatch(boost::asio::io_context& io, WorkerList& workers, WorkerPipes& pipes,
             const TimeSource& time = system_time());

  // stall_timeout is checked on a steady tick (a 50th of it, between 20 ms
  // and 250 ms), so that workers that went silent together (all of them, in
  // a hung collective) are named together. Each tick runs `check` unless
  // `ended`; the ticks go on while `check` returns true.
  void start(double stall_timeout_s, std::function<bool()> ended, std::function<bool()> check);
  void cancel() { timer_.cancel(); }

  // The live workers silent for `limit_s` or more, by index; output in the
  // pipes that the loop has not read yet is not silence.
  std::vector<std::size_t> silent(double limit_s);

  // Each live worker's silence and state, once per group (until reset()),
  // before the stop signals change them.
  void note_silence();
  // Marks the workers `found` (silent()) stalled; their records.
  std::vector<WorkerRecord> mark_stalled(const std::vector<std::size_t>& found);
  void reset() { noted_ = false; }

 private:
  // Whether `pid` or a process under it is in the stopped state (T).
  static bool tree_suspended(pid_t pid, int depth = 0);
  void wait_tick(double every);

  boost::asio::steady_timer timer_;
  WorkerList& workers_;
  WorkerPipes& pipes_;
  const TimeSource& time_;
  std::function<bool()> ended_;
  std::function<bool()> check_;
  bool noted_ = false;
};

}  // namespace flowrun
