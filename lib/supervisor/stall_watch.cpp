#include "stall_watch.h"

#include <algorithm>
#include <chrono>

#include "flowrun/clock.h"
#include "flowrun/process.h"

namespace flowrun {

StallWatch::StallWatch(boost::asio::io_context& io, WorkerList& workers, WorkerPipes& pipes,
                       const TimeSource& time)
    : timer_(io), workers_(workers), pipes_(pipes), time_(time) {}

bool StallWatch::tree_suspended(pid_t pid, int depth) {
  if (process_state(pid) == 'T') return true;
  if (depth > 32) return false;
  for (pid_t child : children_of(pid)) {
    if (tree_suspended(child, depth + 1)) return true;
  }
  return false;
}

void StallWatch::note_silence() {
  if (noted_) return;
  noted_ = true;
  const std::int64_t now = time_.steady_ns();
  for (auto& w : workers_) {
    if (!w.alive) continue;
    w.record.silent_s = static_cast<double>(now - w.last_output_ns) / 1e9;
    w.record.suspended = tree_suspended(w.pid);
  }
}

void StallWatch::start(double stall_timeout_s, std::function<bool()> ended, std::function<bool()> check) {
  ended_ = std::move(ended);
  check_ = std::move(check);
  const double every = std::clamp(stall_timeout_s / 50, 0.02, 0.25);
  timer_.expires_after(steady_seconds(every));
  wait_tick(every);
}

void StallWatch::wait_tick(double every) {
  timer_.async_wait([this, every](const boost::system::error_code& ec) {
    if (ec || ended_()) return;
    if (!check_()) return;
    timer_.expires_at(timer_.expiry() + steady_seconds(every));
    wait_tick(every);
  });
}

std::vector<std::size_t> StallWatch::silent(double limit_s) {
  const auto limit = static_cast<std::int64_t>(limit_s * 1e9);
  std::vector<std::size_t> found;
  for (auto& w : workers_) {
    if (!w.alive || time_.steady_ns() - w.last_output_ns < limit) continue;
    // Output in the pipes that the loop has not read yet is not silence.
    for (Stream* s : {&w.out, &w.err}) {
      if (s->open()) pipes_.drain(w, *s, 1);
    }
    if (w.alive && time_.steady_ns() - w.last_output_ns >= limit) found.push_back(w.index);
  }
  return found;
}

std::vector<WorkerRecord> StallWatch::mark_stalled(const std::vector<std::size_t>& found) {
  std::vector<WorkerRecord> stalled;
  for (std::size_t i : found) {
    workers_[i].record.stalled = true;
    stalled.push_back(workers_[i].record);
  }
  return stalled;
}

}  // namespace flowrun
