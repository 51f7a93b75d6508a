// Naming the slow rank, the pure parts. flowrun samples each rank's Python
// stack at a low rate (py-spy, without pausing the rank) and counts, per
// rank, the samples that found its main thread waiting in a collective.
// In data-parallel training every rank waits in each all-reduce for the
// slowest, so step times are alike everywhere and cannot name a straggler;
// the shares can: the slow rank seldom waits while the others mostly do.
// The supervisor tallies its own ranks' samples; an agent sends its tallies
// to the head, which tallies every node's ranks together.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "flowrun/result.h"
#include "flowrun/stacks.h"

namespace flowrun {

// A rank's main thread as the kernel counts it (/proc/PID/task/PID/schedstat),
// read as it was sampled: its time on a CPU and waiting for one, both
// cumulative, and the monotonic clock then. pid 0: not read.
struct ThreadTimes {
  int pid = 0;
  std::int64_t at_ns = 0, on_cpu_ns = 0, runnable_ns = 0;
};

// One sample of one rank: whether its main thread was waiting in a
// collective, and where it was otherwise (where_in; "" when waiting);
// whether it was blocked at all (py-spy: idle; waiting implies it), and its
// thread's times then.
struct RankSample {
  int rank = -1;
  bool waiting = false;
  std::string frame;
  bool idle = false;
  ThreadTimes times = {};
};

// Whether the stack's main thread is blocked (py-spy: idle) inside torch's
// collectives or DDP/FSDP (torch.distributed, torch.nn.parallel), inside
// backward (torch.autograd: DDP waits there for its gradients' all-reduce),
// a CUDA synchronize (torch.cuda), or DeepSpeed's collectives. A rank busy
// in those (computing gradients) is not waiting; nor is one blocked
// elsewhere (its own data loader's queue, a file read).
bool waits_in_collective(const ParsedStack& stack);

// The sample a stack gives.
RankSample sample_of(int rank, const ParsedStack& stack);

// The least evidence before ranks are named: samples per rank, how far its
// share must be below the other ranks' share together, and the one-sided z
// score of that difference. The others must wait at least kMinOthersShare
// of the time: ranks that seldom wait have no straggler to wait for.
inline constexpr std::int64_t kMinSharesSamples = 20;
inline constexpr double kMinShareGap = 0.08;
inline constexpr double kSlowZScore = 3.5;
inline constexpr double kMinOthersShare = 0.2;
// A suspect: the same with less evidence. While there is one and no rank
// is named yet, the sampler samples kSuspectRate times as often, so that
// the evidence is solid within a minute while a run without a straggler
// pays only for the low rate.
inline constexpr std::int64_t kMinSuspectSamples = 10;
inline constexpr double kSuspectZScore = 1.5;
inline constexpr double kSuspectGap = 0.05;
inline constexpr double kSuspectRate = 8;

// Per-rank tallies of one attempt.
class ShareTally {
 public:
  // A sample of this host's rank. A rank's samples count from its first one
  // waiting in a collective: those before it are its start-up, not evidence.
  // Its blocked time counts from there too, while every sample has its
  // thread's times (a new process of the rank starts a new span).
  void add(const RankSample& sample);
  // A rank's tally as its node counted it (cumulative: replaces the last).
  void set(RankShare share);
  // Every rank's tally, by rank, frames the most first.
  std::vector<RankShare> ranks() const;
  // The ranks the evidence names as slow, or nullopt: a rank is slow when
  // it has kMinSharesSamples, its share is kMinShareGap below the other
  // ranks' together, with a z score of kSlowZScore; named only while at most
  // half the ranks are slow (with two ranks, one) and the others wait at
  // least kMinOthersShare of the time.
  std::optional<SlowRanks> slow() const;
  // Whether some rank is a suspect (kMinSuspectSamples, kSuspectGap,
  // kSuspectZScore).
  bool suspect() const;
  // The ranks flowrun named (its line is said once): they stay named for the
  // attempt, with the shares as they grow, though later samples bring the
  // evidence back under the bar.
  void keep_named(const SlowRanks& slow) { named_ = slow.ranks; }
  // slow(), else the ranks kept named, described by the samples so far.
  std::optional<SlowRanks> verdict() const;
  bool empty() const { return ranks_.empty(); }
  void clear() {
    ranks_.clear();
    spans_.clear();
    named_.clear();
  }

 private:
  std::optional<SlowRanks> slow_by(std::int64_t min_samples, double gap, double z) const;
  // `slow` against every other rank: both shares and the hottest frame.
  SlowRanks describe(const std::vector<int>& slow) const;

  // Where the span of this host's rank's current process began and ended,
  // and the spans of its earlier ones.
  struct Span {
    ThreadTimes first, last;
    std::int64_t blocked_before_ns = 0, span_before_ns = 0;
    bool lost = false;  // a sample without times: its span is not known
  };
  void count_time(RankShare& r, const ThreadTimes& times);

  std::map<int, RankShare> ranks_;
  std::map<int, Span> spans_;
  std::vector<int> named_;
};

// Every rank's shares and the verdict, as results.json keeps them.
WaitShares wait_shares(const ShareTally& tally, double sample_s);

// flowrun's console line naming the slow ranks of `step`: "train: rank 5
// (node3) is the slow rank: it waits in collectives 3% of the time, the
// other ranks 71%; its hottest frame is load_batch (data.py:88)". `node_of`
// names a rank's node ("" to leave it out).
std::string slow_ranks_line(const std::string& step, const SlowRanks& slow,
                            const std::function<std::string(int)>& node_of);

// "71%" for a share of 0.71: whole percents, "<1%" for a small non-zero one.
std::string share_percent(double share);

}  // namespace flowrun
