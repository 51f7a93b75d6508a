// The lanes the head hands the ranks' file work to (lib/head/rank_files.h).
#include "rank_files.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <sys/resource.h>
#include <thread>
#include <vector>

using flowrun::cluster::RankFiles;

TEST_CASE("rank files: a step of few ranks does the work at once, on the caller's thread", "[rank_files]") {
  RankFiles files(RankFiles::kRanksForLanes - 1);
  CHECK(files.lanes() == 0);
  std::thread::id ran_on;
  files.post(3, [&] { ran_on = std::this_thread::get_id(); });
  CHECK(ran_on == std::this_thread::get_id());
  files.settle();  // nothing to wait for
}

namespace {

// The lanes' threads of this process, as /proc lists them by name (a
// sanitizer's run-time may start threads of its own at the first thread).
std::size_t threads_now() {
  std::size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(entry.path() / "comm");
    std::string name;
    if (std::getline(comm, name) && name == RankFiles::kThreadName) ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("rank files: the lanes' threads start at the first post, not before", "[rank_files]") {
  const std::size_t before = threads_now();
  RankFiles files(4096);
  REQUIRE(files.lanes() >= 1);
  CHECK(threads_now() == before);
  files.settle();  // nothing posted: nothing to wait for, and no thread started
  CHECK(threads_now() == before);
  bool ran = false;
  files.post(0, [&ran] { ran = true; });
  CHECK(threads_now() == before + files.lanes());
  files.settle();
  CHECK(ran);
}

TEST_CASE("rank files: each rank's work runs in the order it was posted; settle waits for all of it",
          "[rank_files]") {
  const int ranks = 4096;
  std::mutex mutex;
  std::map<int, std::vector<int>> done;  // rank: its work's numbers, in the order they ran
  std::set<std::thread::id> threads;
  {
    RankFiles files(ranks);
    const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
    CHECK(files.lanes() == std::min<std::size_t>(RankFiles::kMaxLanes, cores));
    for (int round = 0; round < 3; ++round) {
      for (int rank = 0; rank < ranks; ++rank) {
        files.post(rank, [&, rank, round] {
          const std::lock_guard lock(mutex);
          done[rank].push_back(round);
          threads.insert(std::this_thread::get_id());
        });
      }
      files.settle();
      const std::lock_guard lock(mutex);
      REQUIRE(done.size() == static_cast<std::size_t>(ranks));
      for (const auto& [rank, rounds] : done) REQUIRE(rounds.size() == static_cast<std::size_t>(round + 1));
    }
    // Work posted and never settled: the lanes run it before they end.
    for (int rank = 0; rank < ranks; ++rank)
      files.post(rank, [&, rank] {
        const std::lock_guard lock(mutex);
        done[rank].push_back(3);
      });
  }
  for (const auto& [rank, rounds] : done) CHECK(rounds == std::vector<int>{0, 1, 2, 3});
  CHECK(threads.count(std::this_thread::get_id()) == 0);  // none ran on the poster's thread
}

TEST_CASE("rank files: the lanes run at the lowest priority, the posting thread at its own", "[rank_files]") {
  errno = 0;
  const int own = getpriority(PRIO_PROCESS, 0);  // Linux: 0 is the calling thread
  REQUIRE(errno == 0);
  RankFiles files(4096);
  REQUIRE(files.lanes() >= 1);
  std::mutex mutex;
  std::set<int> nices;
  for (int rank = 0; rank < 4096; ++rank) {
    files.post(rank, [&] {
      errno = 0;
      const int nice = getpriority(PRIO_PROCESS, 0);
      const std::lock_guard lock(mutex);
      nices.insert(errno == 0 ? nice : -100);
    });
  }
  files.settle();
  CHECK(nices == std::set<int>{19});
  CHECK(getpriority(PRIO_PROCESS, 0) == own);
}
