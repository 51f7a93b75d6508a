#include "flowrun/wait_shares.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <string_view>

namespace flowrun {

namespace {

// Code where a blocked main thread waits for the other ranks.
bool collective_file(std::string_view file) {
  for (std::string_view part :
       {"torch/distributed/", "torch/nn/parallel/", "torch/autograd/", "torch/cuda/", "deepspeed/comm/"}) {
    const std::size_t at = file.find(part);
    if (at != std::string_view::npos && (at == 0 || file[at - 1] == '/')) return true;
  }
  return false;
}

double share(std::int64_t waits, std::int64_t samples) {
  return samples > 0 ? static_cast<double>(waits) / static_cast<double>(samples) : 0;
}

// The one-sided z score of "the rank waits less than the others": the
// difference of the two shares over its standard error under one pooled share.
double z_score(std::int64_t waits, std::int64_t samples, std::int64_t others_waits,
               std::int64_t others_samples) {
  if (samples == 0 || others_samples == 0) return 0;
  const double pooled = share(waits + others_waits, samples + others_samples);
  const double variance = pooled * (1 - pooled) *
                          (1.0 / static_cast<double>(samples) + 1.0 / static_cast<double>(others_samples));
  if (variance <= 0) return 0;
  return (share(others_waits, others_samples) - share(waits, samples)) / std::sqrt(variance);
}

// The function of a frame "load_batch (data.py:88)": "load_batch (data.py",
// so that a function's lines count together; the frame itself when it has
// no line.
std::string_view function_of(std::string_view frame) {
  const std::size_t open = frame.rfind(" (");
  const std::size_t colon = frame.rfind(':');
  if (open == std::string_view::npos || colon == std::string_view::npos || colon < open) return frame;
  return frame.substr(0, colon);
}

std::int64_t count_in(const RankShare& r, std::string_view function) {
  std::int64_t n = 0;
  for (const auto& [name, count] : r.frames) {
    if (name != kOtherFrames && function_of(name) == function) n += count;
  }
  return n;
}

// The function where `slow` spends the most of its samples beyond the share
// the other ranks spend there (its lines counted together), named by its
// most frequent line; its most frequent frame when it is nowhere beyond them.
std::string hottest_frame(const RankShare& slow, const std::vector<const RankShare*>& others) {
  std::int64_t others_samples = 0;
  for (const RankShare* o : others) others_samples += o->samples;
  std::string best;
  double best_excess = 0;
  for (const auto& [frame, n] : slow.frames) {  // the most frequent first: the first line of each function
    if (frame == kOtherFrames) continue;
    const std::string_view function = function_of(frame);
    std::int64_t elsewhere = 0;
    for (const RankShare* o : others) elsewhere += count_in(*o, function);
    const double excess = share(count_in(slow, function), slow.samples) - share(elsewhere, others_samples);
    if (excess > best_excess) best = frame, best_excess = excess;
  }
  if (best.empty() && !slow.frames.empty() && slow.frames.front().first != kOtherFrames)
    best = slow.frames.front().first;
  return best;
}

}  // namespace

bool waits_in_collective(const ParsedStack& stack) {
  if (stack.threads.empty() || !stack.main_idle) return false;
  const auto& frames = stack.threads[std::min(stack.main, stack.threads.size() - 1)];
  return std::any_of(frames.begin(), frames.end(),
                     [](const StackFrame& f) { return collective_file(f.file); });
}

RankSample sample_of(int rank, const ParsedStack& stack) {
  RankSample sample;
  sample.rank = rank;
  sample.waiting = waits_in_collective(stack);
  if (!sample.waiting) sample.frame = where_in(stack);
  return sample;
}

void ShareTally::add(const RankSample& sample) {
  // A rank's samples count from its first wait in a collective: before it,
  // the rank was starting (imports, the model, the first batches), which
  // every rank does at its own pace and which would only dilute the shares.
  const auto known = ranks_.find(sample.rank);
  if (known == ranks_.end() && !sample.waiting) return;
  RankShare& r = known != ranks_.end() ? known->second : ranks_[sample.rank];
  r.rank = sample.rank;
  ++r.samples;
  if (sample.waiting) {
    ++r.waits;
    return;
  }
  auto found =
      std::find_if(r.frames.begin(), r.frames.end(), [&](const auto& f) { return f.first == sample.frame; });
  if (found == r.frames.end()) {
    // Past the cap, a new place is counted as elsewhere.
    const bool room = r.frames.size() + 1 < kMaxShareFrames;
    const std::string name = room ? sample.frame : std::string(kOtherFrames);
    found = std::find_if(r.frames.begin(), r.frames.end(), [&](const auto& f) { return f.first == name; });
    if (found == r.frames.end()) found = r.frames.insert(r.frames.end(), {name, 0});
  }
  ++found->second;
  // Keep the most first: the count went up by one, so it moves forward.
  while (found != r.frames.begin() && (found - 1)->second < found->second) {
    std::iter_swap(found, found - 1);
    --found;
  }
}

void ShareTally::set(RankShare share) {
  const int rank = share.rank;
  std::stable_sort(share.frames.begin(), share.frames.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (share.frames.size() > kMaxShareFrames) share.frames.resize(kMaxShareFrames);
  ranks_[rank] = std::move(share);
}

std::vector<RankShare> ShareTally::ranks() const {
  std::vector<RankShare> out;
  out.reserve(ranks_.size());
  for (const auto& [rank, r] : ranks_) out.push_back(r);
  return out;
}

std::optional<SlowRanks> ShareTally::slow() const {
  return slow_by(kMinSharesSamples, kMinShareGap, kSlowZScore);
}

bool ShareTally::suspect() const {
  return slow_by(kMinSuspectSamples, kSuspectGap, kSuspectZScore).has_value();
}

std::optional<SlowRanks> ShareTally::slow_by(std::int64_t min_samples, double gap, double z) const {
  std::int64_t all_samples = 0, all_waits = 0;
  for (const auto& [rank, r] : ranks_) all_samples += r.samples, all_waits += r.waits;
  std::vector<const RankShare*> slow, others;
  for (const auto& [rank, r] : ranks_) {
    const std::int64_t others_samples = all_samples - r.samples, others_waits = all_waits - r.waits;
    const double mine = share(r.waits, r.samples), theirs = share(others_waits, others_samples);
    const bool named = r.samples >= min_samples && theirs - mine >= gap &&
                       z_score(r.waits, r.samples, others_waits, others_samples) >= z;
    (named ? slow : others).push_back(&r);
  }
  if (slow.empty() || others.empty() || slow.size() * 2 > ranks_.size()) return std::nullopt;
  std::vector<int> ranks;
  for (const RankShare* r : slow) ranks.push_back(r->rank);
  SlowRanks verdict = describe(ranks);
  if (verdict.others_share < kMinOthersShare) return std::nullopt;
  return verdict;
}

SlowRanks ShareTally::describe(const std::vector<int>& ranks) const {
  std::vector<const RankShare*> slow, others;
  for (const auto& [rank, r] : ranks_)
    (std::find(ranks.begin(), ranks.end(), rank) != ranks.end() ? slow : others).push_back(&r);
  std::int64_t slow_samples = 0, slow_waits = 0, others_samples = 0, others_waits = 0;
  for (const RankShare* r : slow) slow_samples += r->samples, slow_waits += r->waits;
  for (const RankShare* r : others) others_samples += r->samples, others_waits += r->waits;
  SlowRanks verdict;
  verdict.ranks = ranks;
  verdict.slow_share = share(slow_waits, slow_samples);
  verdict.others_share = share(others_waits, others_samples);
  if (slow.empty()) return verdict;
  const RankShare* slowest = *std::min_element(slow.begin(), slow.end(), [](const auto* a, const auto* b) {
    return share(a->waits, a->samples) < share(b->waits, b->samples);
  });
  verdict.frame = hottest_frame(*slowest, others);
  return verdict;
}

std::optional<SlowRanks> ShareTally::verdict() const {
  if (auto slow = this->slow()) return slow;
  if (named_.empty()) return std::nullopt;
  return describe(named_);
}

WaitShares wait_shares(const ShareTally& tally, double sample_s) {
  WaitShares shares;
  shares.sample_s = sample_s;
  shares.ranks = tally.ranks();
  shares.slow = tally.verdict();
  return shares;
}

std::string share_percent(double share) {
  const double percent = share * 100;
  if (percent > 0 && percent < 1) return "<1%";
  return fmt::format("{:.0f}%", percent);
}

std::string slow_ranks_line(const std::string& step, const SlowRanks& slow,
                            const std::function<std::string(int)>& node_of) {
  std::vector<std::string> named;
  for (int rank : slow.ranks) {
    const std::string node = node_of ? node_of(rank) : std::string();
    named.push_back(node.empty() ? fmt::format("rank {}", rank) : fmt::format("rank {} ({})", rank, node));
  }
  std::string who;
  for (std::size_t i = 0; i < named.size(); ++i)
    who += (i == 0 ? "" : i + 1 == named.size() ? " and " : ", ") + named[i];
  const bool one = slow.ranks.size() == 1;
  std::string line =
      fmt::format("{}: {} {} the slow rank{}: {} in collectives {} of the time, the other ranks {}", step,
                  who, one ? "is" : "are", one ? "" : "s", one ? "it waits" : "they wait",
                  share_percent(slow.slow_share), share_percent(slow.others_share));
  if (!slow.frame.empty()) line += fmt::format("; {} hottest frame is {}", one ? "its" : "their", slow.frame);
  return line;
}

}  // namespace flowrun
