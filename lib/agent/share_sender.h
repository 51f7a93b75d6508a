// An agent's tallies of its ranks' samples (forensics' sample), for the head,
// which tallies every node's ranks together: sent every few seconds while
// samples come, and before each rank's exit, each rank's tally whole.
// Internal to lib/agent.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>

#include "flowrun/messages.h"
#include "flowrun/wait_shares.h"

namespace flowrun {

class ShareSender {
 public:
  // How often the tallies go to the head while samples come; while the
  // head hurries the sampling (it holds a suspect: SampleRate), as often as
  // the rate is higher, but not more than every kHurriedEveryNs: its verdict
  // waits on them.
  static constexpr std::int64_t kEveryNs = 2'000'000'000;
  static constexpr std::int64_t kHurriedEveryNs = 500'000'000;

  explicit ShareSender(std::function<void(const Shares&)> send) : send_(std::move(send)) {}

  // A new attempt.
  void reset(int attempt) {
    tally_.clear();
    attempt_ = attempt;
    dirty_ = false;
    every_ns_ = kEveryNs;
  }
  // The head's SampleRate: the tallies go `rate` times as often (1: back to kEveryNs).
  void hurry(double rate) {
    every_ns_ =
        rate > 1 ? std::max(kHurriedEveryNs, static_cast<std::int64_t>(static_cast<double>(kEveryNs) / rate))
                 : kEveryNs;
  }
  // A sample; the tallies go when they are due.
  void add(const RankSample& sample, std::int64_t now_ns) {
    tally_.add(sample);
    dirty_ = true;
    if (now_ns - sent_ns_ >= every_ns_) flush(now_ns);
  }
  // The tallies now, when a sample came since they last went.
  void flush(std::int64_t now_ns) {
    sent_ns_ = now_ns;
    if (!dirty_) return;
    dirty_ = false;
    Shares m{attempt_, {}};
    for (RankShare& r : tally_.ranks())
      m.ranks.push_back({r.rank, r.samples, r.waits, std::move(r.frames), r.idles, r.blocked_us, r.span_us});
    send_(m);
  }

 private:
  std::function<void(const Shares&)> send_;
  ShareTally tally_;
  int attempt_ = 0;
  bool dirty_ = false;
  std::int64_t sent_ns_ = 0;
  std::int64_t every_ns_ = kEveryNs;
};

}  // namespace flowrun
