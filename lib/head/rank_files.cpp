#include "rank_files.h"

#include <algorithm>
#include <pthread.h>
#include <sys/resource.h>
#include <utility>

namespace flowrun::cluster {

RankFiles::RankFiles(std::size_t ranks) {
  if (ranks < kRanksForLanes) return;
  const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
  wanted_ = std::min({kMaxLanes, cores, ranks / kRanksForLanes});
}

RankFiles::~RankFiles() {
  for (auto& lane : lanes_) {
    {
      std::lock_guard lock(lane->mutex);
      lane->ending = true;
    }
    lane->wake.notify_one();
  }
  for (auto& lane : lanes_) lane->thread.join();
}

void RankFiles::post(int rank, std::function<void()> work) {
  if (wanted_ == 0) {
    work();
    return;
  }
  if (!started_.load(std::memory_order_relaxed)) {
    for (std::size_t i = 0; i < wanted_; ++i) {
      lanes_.push_back(std::make_unique<Lane>());
      Lane& lane = *lanes_.back();
      lane.thread = std::thread([&lane] { run(lane); });
      pthread_setname_np(lane.thread.native_handle(), kThreadName);  // as `top -H` and py-spy show it
    }
    started_.store(true, std::memory_order_release);
  }
  Lane& lane = *lanes_[static_cast<std::size_t>(std::max(rank, 0)) % lanes_.size()];
  bool wake = false;
  {
    std::lock_guard lock(lane.mutex);
    lane.queue.push_back(std::move(work));
    wake = lane.sleeping;  // else its thread takes the queue's next before it waits
  }
  if (wake) lane.wake.notify_one();
}

void RankFiles::settle() {
  if (!started_.load(std::memory_order_acquire)) return;  // nothing was posted
  for (auto& lane : lanes_) {
    std::unique_lock lock(lane->mutex);
    lane->idle.wait(lock, [&] { return lane->queue.empty() && !lane->busy; });
  }
}

// A lane's thread: its queue in order until it is empty and ending. At the
// lowest priority (nice 19, this thread alone), as the ranks' directories
// are made (head_launch.cpp): the files are needed before the next start
// and the step's report, which wait for them (settle), not by the loop. A
// lost node's stop, its agents' answers and its spare's seat go first: at
// nice 0 two lanes creating 4,096 end records took a third of a core from
// the head's loop and the agents' answers between the loss and the seat.
void RankFiles::run(Lane& lane) {
  (void)setpriority(PRIO_PROCESS, 0, 19);  // Linux: 0 is the calling thread
  std::unique_lock lock(lane.mutex);
  while (true) {
    lane.sleeping = true;
    lane.wake.wait(lock, [&] { return !lane.queue.empty() || lane.ending; });
    lane.sleeping = false;
    if (lane.queue.empty()) return;  // ending, and everything posted ran
    std::function<void()> work = std::move(lane.queue.front());
    lane.queue.pop_front();
    lane.busy = true;
    lock.unlock();
    work();
    lock.lock();
    lane.busy = false;
    if (lane.queue.empty()) lane.idle.notify_all();
  }
}

}  // namespace flowrun::cluster
