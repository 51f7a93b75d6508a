// File work on the ranks' directories that the head's loop hands to other
// threads: each rank's end record as it ends, and at an attempt's end the
// empty log of every stream that never wrote. On a step of thousands of
// ranks that is thousands of system calls between a lost node and its
// spare's seat. Each rank's work goes to one lane, always the same, so it
// runs in the order it was given; a step of few ranks runs it at once, on
// the loop. The lanes run at the lowest priority: what waits for their work
// (the next start, the step's report) says so (settle), and until then the
// loop and the nodes' agents come first. Internal to lib/head.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace flowrun::cluster {

class RankFiles {
 public:
  // Lanes for a step of `ranks` ranks: none below kRanksForLanes (the work
  // runs in post()), else up to kMaxLanes and the host's cores. Their
  // threads start at the first post, once the ranks run: with one idle lane
  // thread already there, 256 agents took 25 ms to join instead of 15.
  explicit RankFiles(std::size_t ranks);
  ~RankFiles();  // runs what was posted, then ends the lanes
  RankFiles(const RankFiles&) = delete;
  RankFiles& operator=(const RankFiles&) = delete;

  static constexpr std::size_t kRanksForLanes = 256;
  static constexpr std::size_t kMaxLanes = 4;
  static constexpr const char* kThreadName = "flowrun-files";  // each lane's thread, in /proc/PID/task/*/comm

  // `work` for rank `rank`'s files, after what was posted for it before.
  // It must not throw. One thread posts.
  void post(int rank, std::function<void()> work);
  // Returns once everything posted before the call has run. Any thread.
  void settle();

  std::size_t lanes() const { return wanted_; }

 private:
  struct Lane {
    std::mutex mutex;
    std::condition_variable wake, idle;
    std::deque<std::function<void()>> queue;
    bool busy = false;
    bool sleeping = false;  // its thread waits for work: a post wakes it
    bool ending = false;
    std::thread thread;
  };
  static void run(Lane& lane);

  std::size_t wanted_ = 0;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::atomic<bool> started_{false};  // lanes_ is made: settle() may read it
};

}  // namespace flowrun::cluster
