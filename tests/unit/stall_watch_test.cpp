// The supervisor's stall watch (lib/supervisor/stall_watch.cpp): who is
// silent past the limit, output still in a pipe not counting as silence,
// and the silence noted once per group. Times are set relative to now; no
// test waits.
#include "stall_watch.h"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <string_view>
#include <unistd.h>
#include <vector>

#include "testing.h"

using namespace flowrun;

namespace {

using testing::kSecond;

struct Group {
  boost::asio::io_context io;
  WorkerList workers;
  std::vector<std::string> read;  // what the pipes handed on
  WorkerPipes pipes{io, workers,
                    [this](Worker&, bool, std::string_view data, std::int64_t) { read.emplace_back(data); },
                    [] {}};
  StallWatch stall{io, workers, pipes};

  // `n` live workers (this process stands for each), silent for `silent_s`.
  explicit Group(const std::vector<double>& silent_s) : workers(silent_s.size()) {
    const std::int64_t now = monotonic_now_ns();
    for (std::size_t i = 0; i < silent_s.size(); ++i) {
      workers[i].index = i;
      workers[i].pid = getpid();
      workers[i].alive = true;
      workers[i].last_output_ns = now - static_cast<std::int64_t>(silent_s[i] * kSecond);
    }
  }
};

}  // namespace

TEST_CASE("StallWatch: the live workers silent past the limit, by index", "[stall_watch]") {
  Group g({10, 1, 30, 20});
  g.workers[3].alive = false;  // ended: never stalled
  CHECK(g.stall.silent(5) == std::vector<std::size_t>{0, 2});
  CHECK(g.stall.silent(15) == std::vector<std::size_t>{2});
  CHECK(g.stall.silent(60).empty());
}

TEST_CASE("StallWatch: output still in a worker's pipe is not silence", "[stall_watch]") {
  Group g({10, 10});
  int child_end = -1;
  g.pipes.open_stream(g.workers[0].out, false, &child_end);
  REQUIRE(write(child_end, "step 7\n", 7) == 7);
  CHECK(g.stall.silent(5) == std::vector<std::size_t>{1});
  CHECK(g.read == std::vector<std::string>{"step 7\n"});
  CHECK(g.stall.silent(5) == std::vector<std::size_t>{1});  // read now: still not silent
  close(child_end);
}

TEST_CASE("StallWatch: each live worker's silence is noted once, until reset", "[stall_watch]") {
  Group g({10, 2});
  g.workers[1].alive = false;
  g.stall.note_silence();
  REQUIRE(g.workers[0].record.silent_s.has_value());
  CHECK(*g.workers[0].record.silent_s >= 10.0);
  CHECK(*g.workers[0].record.silent_s < 100.0);
  CHECK_FALSE(g.workers[0].record.suspended);
  CHECK_FALSE(g.workers[1].record.silent_s.has_value());

  g.workers[0].last_output_ns -= 100 * kSecond;
  g.stall.note_silence();
  CHECK(*g.workers[0].record.silent_s < 100.0);  // noted already
  g.stall.reset();
  g.stall.note_silence();
  CHECK(*g.workers[0].record.silent_s >= 110.0);
}

TEST_CASE("StallWatch: silence measured on the time it is handed, stepped without a wait", "[stall_watch]") {
  boost::asio::io_context io;
  WorkerList workers(2);
  WorkerPipes pipes{io, workers, [](Worker&, bool, std::string_view, std::int64_t) {}, [] {}};
  FakeTime time(1'000 * kSecond);
  StallWatch stall{io, workers, pipes, time};
  for (std::size_t i = 0; i < workers.size(); ++i) workers[i].index = i;
  for (auto& w : workers) {
    w.pid = getpid();
    w.alive = true;
    w.last_output_ns = time.steady_ns();
  }
  workers[1].last_output_ns += 2 * kSecond;  // spoke two seconds later
  CHECK(stall.silent(5).empty());
  time.advance_ns(5 * kSecond);
  CHECK(stall.silent(5) == std::vector<std::size_t>{0});
  time.advance_ns(2 * kSecond);
  CHECK(stall.silent(5) == std::vector<std::size_t>{0, 1});
  stall.note_silence();
  CHECK(workers[0].record.silent_s == 7.0);
  CHECK(workers[1].record.silent_s == 5.0);
}
