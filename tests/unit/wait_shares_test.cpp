// Naming the slow rank (lib/supervisor/wait_shares.cpp): what a sample of a
// rank's stack says, the tallies, the evidence that names a rank (and that
// which does not), and the console's line.
#include "flowrun/wait_shares.h"

#include <catch2/catch.hpp>
#include <string>

using namespace flowrun;

namespace {

std::string dump(const std::string& state, const std::string& frames) {
  return "Process 4242: /usr/bin/python3 train.py\nPython v3.11.2 (/usr/bin/python3.11)\n\nThread 4242 (" +
         state + "): \"MainThread\"\n" + frames;
}

const std::string kBackward =
    "    backward (/usr/lib/python3/dist-packages/torch/autograd/__init__.py:197)\n"
    "    backward (/usr/lib/python3/dist-packages/torch/_tensor.py:488)\n"
    "    train_step (/work/proj/train.py:40)\n"
    "    <module> (/work/proj/train.py:90)\n";
const std::string kAllReduce =
    "    all_reduce (/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:1322)\n"
    "    sync (/work/proj/train.py:60)\n";
const std::string kLoadingStack =
    "    load_batch (/work/proj/data.py:88)\n"
    "    <module> (/work/proj/train.py:30)\n";
const std::string kQueue =
    "    get (/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:1150)\n"
    "    <module> (/work/proj/train.py:30)\n";
const std::string kForward =
    "    forward (/usr/lib/python3/dist-packages/torch/nn/parallel/distributed.py:1040)\n"
    "    _call_impl (/usr/lib/python3/dist-packages/torch/nn/modules/module.py:1194)\n"
    "    <module> (/work/proj/train.py:35)\n";

RankSample sample(int rank, const std::string& state, const std::string& frames) {
  const auto stack = parse_py_spy_dump(dump(state, frames));
  REQUIRE(stack);
  return sample_of(rank, *stack);
}

// `waits` of `samples` samples of `rank` waiting, the rest in `elsewhere`.
void add(ShareTally& tally, int rank, int samples, int waits, const std::string& elsewhere = kLoadingStack) {
  for (int i = 0; i < samples; ++i)
    tally.add(i < waits ? sample(rank, "idle", kBackward) : sample(rank, "active", elsewhere));
}

}  // namespace

TEST_CASE("a sample waits when the main thread is blocked inside torch's collectives or backward",
          "[wait_shares]") {
  CHECK(sample(0, "idle", kBackward).waiting);
  CHECK(sample(0, "idle", kAllReduce).waiting);
  CHECK(sample(0, "idle", kForward).waiting);  // DDP's buffer broadcast
  // Busy in backward is computing, not waiting.
  CHECK_FALSE(sample(0, "active", kBackward).waiting);
  CHECK_FALSE(sample(0, "active+gil", kAllReduce).waiting);
  // Blocked elsewhere (its own data loader, a read) is the rank's own time.
  CHECK_FALSE(sample(0, "idle", kQueue).waiting);
  CHECK_FALSE(sample(0, "idle", kLoadingStack).waiting);
  // A look-alike directory is not torch's.
  CHECK_FALSE(sample(0, "idle", "    f (/work/mytorch/distributed/x.py:3)\n").waiting);
  CHECK(sample(0, "idle", "    f (torch/distributed/x.py:3)\n").waiting);
}

TEST_CASE("a sample not waiting says where the rank was", "[wait_shares]") {
  const RankSample s = sample(3, "active", kLoadingStack);
  CHECK(s.rank == 3);
  CHECK(s.frame == "load_batch (data.py:88)");
  CHECK(sample(0, "idle", kBackward).frame.empty());
  // A module's __call__ is a wrapper: the frame names what it ran.
  CHECK(sample(0, "active", kForward).frame == "forward (train.py:35)");
  // A file name a rank made never sends a terminal its control bytes.
  const std::string frame = sample(0, "active", "    f (/w/\x1b]0;owned\x07x.py:3)\n").frame;
  CHECK(frame.find('\x1b') == std::string::npos);
  CHECK(frame.find('\x07') == std::string::npos);
}

TEST_CASE("the thread py-spy marks idle is the main thread's, wherever it is listed", "[wait_shares]") {
  const std::string text =
      "Process 1: python3 x.py\nPython v3.11.2\n\nThread 7 (active): \"pin_memory\"\n    run (/x/y.py:1)\n"
      "Thread 1 (idle): \"MainThread\"\n" +
      kBackward;
  const auto stack = parse_py_spy_dump(text);
  REQUIRE(stack);
  CHECK(stack->main_idle);
  CHECK(waits_in_collective(*stack));
  const auto other = parse_py_spy_dump(
      "Thread 7 (idle): \"pin_memory\"\n    run (/x/y.py:1)\nThread 1 (active): \"MainThread\"\n" +
      kBackward);
  REQUIRE(other);
  CHECK_FALSE(other->main_idle);
}

TEST_CASE("the tally keeps each rank's places, the most first, and caps them", "[wait_shares]") {
  ShareTally tally;
  tally.add({1, true, ""});
  tally.add({1, false, "a (x.py:1)"});
  tally.add({1, false, "b (x.py:2)"});
  tally.add({1, false, "b (x.py:2)"});
  auto ranks = tally.ranks();
  REQUIRE(ranks.size() == 1);
  CHECK(ranks[0].samples == 4);
  CHECK(ranks[0].waits == 1);
  REQUIRE(ranks[0].frames.size() == 2);
  CHECK(ranks[0].frames[0] == std::pair<std::string, std::int64_t>{"b (x.py:2)", 2});
  for (int i = 0; i < 100; ++i) tally.add({1, false, "f" + std::to_string(i)});
  ranks = tally.ranks();
  CHECK(ranks[0].frames.size() == kMaxShareFrames);
  std::int64_t counted = 0;
  for (const auto& [frame, n] : ranks[0].frames) counted += n;
  CHECK(counted == ranks[0].samples - ranks[0].waits);
  CHECK(std::any_of(ranks[0].frames.begin(), ranks[0].frames.end(),
                    [](const auto& f) { return f.first == kOtherFrames && f.second > 1; }));
}

TEST_CASE("a rank's samples count from its first wait in a collective, not during its start-up",
          "[wait_shares]") {
  ShareTally tally;
  // Imports and the model, at each rank's own pace: not evidence.
  for (int i = 0; i < 30; ++i) tally.add({0, false, "<module> (train.py:1)"});
  for (int i = 0; i < 5; ++i) tally.add({1, false, "<module> (train.py:1)"});
  CHECK(tally.empty());
  CHECK(tally.ranks().empty());
  tally.add({0, true, ""});
  tally.add({0, false, "load_batch (data.py:88)"});
  const auto ranks = tally.ranks();
  REQUIRE(ranks.size() == 1);
  CHECK(ranks[0].rank == 0);
  CHECK(ranks[0].samples == 2);
  CHECK(ranks[0].waits == 1);
  CHECK(ranks[0].frames == std::vector<std::pair<std::string, std::int64_t>>{{"load_batch (data.py:88)", 1}});
  // A node's cumulative tallies are its own agent's count, taken as they come.
  tally.set(RankShare{1, 7, 0, {{"<module> (train.py:1)", 7}}});
  CHECK(tally.ranks().size() == 2);
}

TEST_CASE("the rank that seldom waits is named once the evidence is solid", "[wait_shares]") {
  ShareTally tally;
  for (int r = 0; r < 8; ++r) add(tally, r, 60, r == 5 ? 2 : 43, r == 5 ? kLoadingStack : kForward);
  const auto slow = tally.slow();
  REQUIRE(slow);
  CHECK(slow->ranks == std::vector<int>{5});
  CHECK(slow->slow_share == Approx(2.0 / 60));
  CHECK(slow->others_share == Approx(43.0 / 60));
  // Where it is beyond the others, not where everyone is.
  CHECK(slow->frame == "load_batch (data.py:88)");
  CHECK(
      slow_ranks_line("train", *slow, [](int rank) { return "node" + std::to_string(rank / 2); }) ==
      "train: rank 5 (node2) is the slow rank: it waits in collectives 3% of the time, the other ranks 72%; "
      "its hottest frame is load_batch (data.py:88)");
}

TEST_CASE("the hottest frame is a function, its lines counted together, named by its most frequent line",
          "[wait_shares]") {
  ShareTally tally;
  tally.set(RankShare{0, 60, 54, {{"forward (train.py:41)", 6}}});
  // 4 samples in forward beyond rank 0's, but 6 in load_batch over two of its lines.
  tally.set(RankShare{1,
                      60,
                      12,
                      {{"forward (train.py:41)", 10},
                       {"load_batch (data.py:33)", 4},
                       {"load_batch (data.py:34)", 3},
                       {"<module> (x:y.py:2)", 1}}});
  const auto slow = tally.slow();
  REQUIRE(slow);
  CHECK(slow->ranks == std::vector<int>{1});
  CHECK(slow->frame == "load_batch (data.py:33)");
}

TEST_CASE("too few samples, too small a gap, or ranks that seldom wait name nobody", "[wait_shares]") {
  SECTION("too few samples") {
    ShareTally tally;
    add(tally, 0, kMinSharesSamples - 1, 15);
    add(tally, 1, kMinSharesSamples - 1, 1);
    CHECK_FALSE(tally.slow());
    CHECK(tally.suspect());
  }
  SECTION("ranks alike") {
    ShareTally tally;
    for (int r = 0; r < 8; ++r) add(tally, r, 200, 100 + (r % 3) * 5);
    CHECK_FALSE(tally.slow());
    CHECK_FALSE(tally.suspect());
  }
  SECTION("a gap within chance") {
    ShareTally tally;
    add(tally, 0, 30, 15);
    add(tally, 1, 30, 9);
    CHECK_FALSE(tally.slow());
  }
  SECTION("nobody waits much") {
    ShareTally tally;
    add(tally, 0, 400, 60);
    add(tally, 1, 400, 0);
    CHECK_FALSE(tally.slow());
  }
  SECTION("more than half the ranks are below the rest: the rest are not the normal ones") {
    ShareTally tally;
    for (int r = 0; r < 4; ++r) add(tally, r, 200, r == 0 ? 150 : 10);
    CHECK_FALSE(tally.slow());
  }
}

TEST_CASE("a whole slow node's ranks are named together", "[wait_shares]") {
  ShareTally tally;
  for (int r = 0; r < 8; ++r) add(tally, r, 100, r >= 6 ? 5 : 70);
  const auto slow = tally.slow();
  REQUIRE(slow);
  CHECK(slow->ranks == std::vector<int>{6, 7});
  CHECK(slow_ranks_line("train", *slow, nullptr)
            .rfind("train: rank 6 and rank 7 are the slow ranks: they wait", 0) == 0);
}

TEST_CASE("a node's tally replaces what it sent before", "[wait_shares]") {
  ShareTally tally;
  tally.set({2, 10, 1, {{"a", 3}, {"b", 6}}});
  tally.set({2, 40, 2, {{"a", 30}, {"b", 8}}});
  const auto ranks = tally.ranks();
  REQUIRE(ranks.size() == 1);
  CHECK(ranks[0].samples == 40);
  CHECK(ranks[0].frames.front().first == "a");
  const WaitShares shares = wait_shares(tally, 1.5);
  CHECK(shares.sample_s == 1.5);
  CHECK(shares.ranks == ranks);
  CHECK_FALSE(shares.slow);
}

TEST_CASE("shares read as whole percents", "[wait_shares]") {
  CHECK(share_percent(0) == "0%");
  CHECK(share_percent(0.004) == "<1%");
  CHECK(share_percent(0.714) == "71%");
  CHECK(share_percent(1) == "100%");
}

TEST_CASE("a rank named stays named for the attempt, described by the samples so far", "[wait_shares]") {
  ShareTally tally;
  add(tally, 0, 60, 40, kForward);
  add(tally, 1, 60, 5, kLoadingStack);
  const auto slow = tally.slow();
  REQUIRE(slow);
  tally.keep_named(*slow);
  // Later samples bring the gap back under the bar.
  add(tally, 0, 200, 100, kForward);
  add(tally, 1, 200, 130, kForward);
  CHECK_FALSE(tally.slow());
  const auto kept = tally.verdict();
  REQUIRE(kept);
  CHECK(kept->ranks == std::vector<int>{1});
  CHECK(kept->slow_share == Approx(135.0 / 260));
  CHECK(kept->others_share == Approx(140.0 / 260));
  CHECK(wait_shares(tally, 1).slow == kept);
  tally.clear();
  CHECK_FALSE(tally.verdict());
}

namespace {

// `samples` samples of `rank`, a second apart, from the process `pid`: its
// main thread blocked `blocked` of the time by the kernel's count; `waits`
// samples find it waiting in a collective, `idle_elsewhere` blocked in
// load_batch, the rest busy in forward.
void add_timed(ShareTally& tally, int rank, int samples, int waits, int idle_elsewhere, double blocked,
               int pid = 4242) {
  for (int i = 0; i < samples; ++i) {
    RankSample s = i < waits                    ? RankSample{rank, true, "", true}
                   : i < waits + idle_elsewhere ? RankSample{rank, false, "load_batch (data.py:88)", true}
                                                : RankSample{rank, false, "forward (train.py:35)", false};
    const auto at = static_cast<std::int64_t>(i) * 1'000'000'000;
    s.times = ThreadTimes{pid, at, static_cast<std::int64_t>(static_cast<double>(at) * (1 - blocked) * 0.8),
                          static_cast<std::int64_t>(static_cast<double>(at) * (1 - blocked) * 0.2)};
    tally.add(s);
  }
}

}  // namespace

TEST_CASE("a sample is blocked when py-spy marks the main thread idle, waiting or not", "[wait_shares]") {
  CHECK(sample(0, "idle", kBackward).idle);
  CHECK(sample(0, "idle", kQueue).idle);
  CHECK_FALSE(sample(0, "active", kBackward).idle);
}

TEST_CASE("a rank's blocked time is the kernel's count over the span of its samples", "[wait_shares]") {
  ShareTally tally;
  add_timed(tally, 0, 11, 4, 0, 0.4);
  auto ranks = tally.ranks();
  REQUIRE(ranks.size() == 1);
  CHECK(ranks[0].idles == 4);
  CHECK(ranks[0].span_us == 10'000'000);
  CHECK(ranks[0].blocked_us == Approx(4'000'000).margin(1));
  // Blocked 40% of the time, and every blocked sample waiting: it waited 40%.
  CHECK(waiting_share(ranks[0]) == Approx(0.4).margin(1e-6));
  // A new process of the rank (a wrapper's Python started again) starts a
  // span of its own; the spans add up.
  add_timed(tally, 0, 6, 0, 0, 0.9, 5151);
  ranks = tally.ranks();
  CHECK(ranks[0].span_us == 15'000'000);
  CHECK(ranks[0].blocked_us == Approx(8'500'000).margin(2));
  // A sample without its thread's times (no schedstat) leaves the span
  // unknown for the attempt: the samples alone count then.
  tally.add(RankSample{0, true, "", true});
  ranks = tally.ranks();
  CHECK(ranks[0].span_us == 0);
  CHECK(waiting_share(ranks[0]) == Approx(5.0 / 18));
  tally.clear();
  add_timed(tally, 0, 3, 1, 0, 0.5);
  CHECK(tally.ranks()[0].span_us == 2'000'000);
}

TEST_CASE("with the blocked time known, a rank blocked outside the collectives is named on fewer samples",
          "[wait_shares]") {
  // Rank 0 is blocked 42% of the time, always in a collective; rank 1 33%,
  // in a collective a quarter of that (it sleeps in load_batch the rest).
  // 24 samples each cannot tell them apart beyond chance by the samples alone.
  ShareTally counted, timed;
  add(counted, 0, 24, 10, kForward);
  add(counted, 1, 24, 2, kLoadingStack);
  CHECK_FALSE(counted.slow());
  add_timed(timed, 0, 24, 10, 0, 0.42);
  add_timed(timed, 1, 24, 2, 6, 0.33);
  const auto slow = timed.slow();
  REQUIRE(slow);
  CHECK(slow->ranks == std::vector<int>{1});
  CHECK(slow->others_share == Approx(0.42).margin(1e-6));
  CHECK(slow->slow_share == Approx(0.33 * 2 / 8).margin(1e-6));
  CHECK(slow->frame == "load_batch (data.py:88)");
  // The shares in results.json are the same estimate.
  const WaitShares shares = wait_shares(timed, 1);
  REQUIRE(shares.ranks.size() == 2);
  CHECK(waiting_share(shares.ranks[1]) == Approx(slow->slow_share));
}

TEST_CASE("a rank blocked far less than the others, all in collectives, is named on the kernel's count",
          "[wait_shares]") {
  // A rank computing slowly (a throttled GPU, a slower CPU) waits less by the
  // clock, though every sample that finds it blocked finds it in a collective.
  ShareTally tally;
  add_timed(tally, 0, kMinSharesSamples, 12, 0, 0.6);
  add_timed(tally, 1, kMinSharesSamples, 6, 0, 0.3);
  const auto slow = tally.slow();
  REQUIRE(slow);
  CHECK(slow->ranks == std::vector<int>{1});
  CHECK(slow->slow_share == Approx(0.3).margin(1e-6));
  CHECK(slow->others_share == Approx(0.6).margin(1e-6));
}

TEST_CASE("ranks blocked alike are not named on a chance difference in where they were blocked",
          "[wait_shares]") {
  ShareTally tally;
  add_timed(tally, 0, 20, 10, 0, 0.5);
  add_timed(tally, 1, 20, 8, 2, 0.5);
  CHECK_FALSE(tally.slow());
  // Nor on a blocked time a little apart, under the gap.
  ShareTally close;
  add_timed(close, 0, 200, 100, 0, 0.5);
  add_timed(close, 1, 200, 90, 0, 0.45);
  CHECK_FALSE(close.slow());
  // Nor when one rank's span is unknown: every rank is then compared by its
  // samples alone, which cannot tell these apart.
  ShareTally mixed;
  add_timed(mixed, 0, 24, 10, 0, 0.42);
  add(mixed, 1, 24, 2, kLoadingStack);
  CHECK_FALSE(mixed.slow());
}
