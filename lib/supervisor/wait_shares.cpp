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

// Ranks' tallies together. Their blocked time counts only where every
// rank's span is known (`timed`), so that all shares compared are alike.
RankShare pooled(const std::vector<const RankShare*>& ranks, bool timed) {
  RankShare sum;
  for (const RankShare* r : ranks) {
    sum.samples += r->samples, sum.waits += r->waits, sum.idles += r->idles;
    sum.blocked_us += r->blocked_us, sum.span_us += r->span_us;
  }
  if (!timed) sum.blocked_us = sum.span_us = 0;
  return sum;
}

bool all_timed(const std::map<int, RankShare>& ranks) {
  return std::all_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.second.span_us > 0; });
}

// The one-sided z score of "the rank waits less than the others": the
// difference of the two shares (waiting_share) over its standard error
// under one pooled proportion. With both spans known only the share of the
// blocked samples in a collective is sampled, the blocked share being the
// kernel's count: the error is that of the first, scaled by the second
// (smoothed by half a sample, so that ranks always or never waiting when
// blocked keep some doubt). Else the error of the waiting samples' share.
double z_score(const RankShare& mine, const RankShare& others) {
  if (mine.samples == 0 || others.samples == 0) return 0;
  const double gap = waiting_share(others) - waiting_share(mine);
  double variance = 0;
  if (mine.span_us > 0 && others.span_us > 0) {
    const double p = (static_cast<double>(mine.waits + others.waits) + 0.5) /
                     (static_cast<double>(mine.idles + others.idles) + 1);
    const auto part = [](const RankShare& r) {
      const double blocked = static_cast<double>(r.blocked_us) / static_cast<double>(r.span_us);
      return blocked * blocked / static_cast<double>(std::max<std::int64_t>(r.idles, 1));
    };
    variance = p * (1 - p) * (part(mine) + part(others));
  } else {
    const double p = share(mine.waits + others.waits, mine.samples + others.samples);
    variance =
        p * (1 - p) * (1.0 / static_cast<double>(mine.samples) + 1.0 / static_cast<double>(others.samples));
  }
  if (variance <= 0) return 0;
  return gap / std::sqrt(variance);
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
  sample.idle = !stack.threads.empty() && stack.main_idle;
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
  count_time(r, sample.times);
  if (sample.waiting || sample.idle) ++r.idles;
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

void ShareTally::count_time(RankShare& r, const ThreadTimes& times) {
  auto [it, first] = spans_.try_emplace(r.rank);
  Span& span = it->second;
  if (span.lost || times.pid <= 0) {
    span.lost = true;
    r.blocked_us = r.span_us = 0;
    return;
  }
  const auto blocked_ns = [](const ThreadTimes& a, const ThreadTimes& b) {
    return std::max<std::int64_t>(
        0, (b.at_ns - a.at_ns) - (b.on_cpu_ns - a.on_cpu_ns) - (b.runnable_ns - a.runnable_ns));
  };
  if (first) {
    span.first = span.last = times;
  } else if (times.pid != span.first.pid || times.at_ns < span.last.at_ns ||
             times.on_cpu_ns < span.last.on_cpu_ns) {
    // Another process (a wrapper's new Python) starts a span of its own.
    span.blocked_before_ns += blocked_ns(span.first, span.last);
    span.span_before_ns += span.last.at_ns - span.first.at_ns;
    span.first = span.last = times;
  } else {
    span.last = times;
  }
  r.blocked_us = (span.blocked_before_ns + blocked_ns(span.first, span.last)) / 1000;
  r.span_us = (span.span_before_ns + span.last.at_ns - span.first.at_ns) / 1000;
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
  std::vector<const RankShare*> all, slow, others;
  for (const auto& [rank, r] : ranks_) all.push_back(&r);
  const bool timed = all_timed(ranks_);
  const RankShare sum = pooled(all, timed);
  for (const auto& [rank, r] : ranks_) {
    const RankShare mine = pooled({&r}, timed);
    // The others together: every rank's sum less this one's.
    RankShare theirs;
    theirs.samples = sum.samples - r.samples, theirs.waits = sum.waits - r.waits;
    theirs.idles = sum.idles - r.idles;
    theirs.blocked_us = sum.blocked_us - mine.blocked_us, theirs.span_us = sum.span_us - mine.span_us;
    const bool named = r.samples >= min_samples && waiting_share(theirs) - waiting_share(mine) >= gap &&
                       z_score(mine, theirs) >= z;
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
  SlowRanks verdict;
  verdict.ranks = ranks;
  const bool timed = all_timed(ranks_);
  verdict.slow_share = waiting_share(pooled(slow, timed));
  verdict.others_share = waiting_share(pooled(others, timed));
  if (slow.empty()) return verdict;
  const RankShare* slowest =
      *std::min_element(slow.begin(), slow.end(), [timed](const RankShare* a, const RankShare* b) {
        return waiting_share(pooled({a}, timed)) < waiting_share(pooled({b}, timed));
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
