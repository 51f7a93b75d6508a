#include "rank_files.h"

#include <algorithm>
#include <pthread.h>
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

// A lane's thread: its queue in order until it is empty and ending.
void RankFiles::run(Lane& lane) {
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
