#include "node_shares.h"

#include <fmt/format.h>
#include <set>

#include "flowrun/clock.h"
#include "flowrun/files.h"

namespace flowrun::cluster {

namespace {

// How often the step's shares.json is rewritten while the nodes send tallies.
constexpr std::int64_t kSharesWriteIntervalNs = 5'000'000'000;

}  // namespace

void NodeShares::reset(int attempt, double sample_s) {
  tally_.clear();
  node_of_.clear();
  attempt_ = attempt;
  rate_ = 1;  // each node's sampler starts the attempt at 1
  sample_s_ = sample_s;
  said_ = false;
  written_mono_ = 0;
}

std::optional<std::string> NodeShares::take(int node, const std::string& name, const Shares& m) {
  std::set<int> seen;
  for (const Shares::Rank& r : m.ranks) {
    if (r.rank < 0 || r.rank >= plan_.world_size ||
        plan_.ranks[static_cast<std::size_t>(r.rank)].node != node)
      return fmt::format("shares of rank {}, which does not run on node {}", r.rank, node);
    if (!seen.insert(r.rank).second) return fmt::format("shares of rank {} twice", r.rank);
    if (r.samples < 0 || r.waits < 0 || r.waits > r.samples || r.idles < 0 || r.idles > r.samples)
      return fmt::format("shares of rank {}: {} waits and {} blocked in {} samples", r.rank, r.waits, r.idles,
                         r.samples);
    if (r.blocked_us < 0 || r.span_us < 0 || r.blocked_us > r.span_us)
      return fmt::format("shares of rank {}: blocked {} us of a span of {} us", r.rank, r.blocked_us,
                         r.span_us);
  }
  if (m.attempt != attempt_) return std::nullopt;  // sent before the restart reached the node
  for (const Shares::Rank& r : m.ranks) {
    tally_.set(RankShare{r.rank, r.samples, r.waits, r.frames, r.idles, r.blocked_us, r.span_us});
    node_of_[r.rank] = name;
  }
  if (!said_) {
    if (const auto slow = tally_.slow()) {
      said_ = true;
      tally_.keep_named(*slow);
      say_("flowrun: " + slow_ranks_line(plan_.step, *slow, [this](int rank) {
             const auto found = node_of_.find(rank);
             return found == node_of_.end() ? std::string() : found->second;
           }));
    }
  }
  if (const int rate = !said_ && tally_.suspect() ? static_cast<int>(kSuspectRate) : 1; rate != rate_) {
    rate_ = rate;
    hurry_(rate);
  }
  if (const std::int64_t now = monotonic_now_ns(); now - written_mono_ >= kSharesWriteIntervalNs) {
    written_mono_ = now;
    write_file();
  }
  return std::nullopt;
}

void NodeShares::write_file() {
  if (shares_file_.empty() || tally_.empty()) return;
  (void)try_write_file(shares_file_, wait_shares_document(plan_.step, attempt_,
                                                          wait_shares(tally_, sample_s_), unix_now_ns()));
}

std::optional<WaitShares> NodeShares::record() {
  if (tally_.empty()) return std::nullopt;
  write_file();
  return wait_shares(tally_, sample_s_);
}

}  // namespace flowrun::cluster
