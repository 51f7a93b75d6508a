#include "flowrun/line_fold.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "flowrun/logmux.h"

#include "ansi.h"

namespace flowrun {

namespace {

using ansi::kPlainColor;  // the mark of a folded line, as log_prefix's plain steps
using ansi::kReset;
constexpr std::size_t kMaxRanges = 6;

// FxHash over the continuation mark and the text: one multiply per 8
// bytes, enough to sort a round's lines; equal hashes are compared byte
// for byte.
std::uint64_t hash_line(bool continued, std::string_view s) {
  std::uint64_t h = continued ? 1 : 0;
  auto mix = [&h](std::uint64_t word) { h = (((h << 5) | (h >> 59)) ^ word) * 0x517cc1b727220a95ULL; };
  const char* p = s.data();
  std::size_t n = s.size();
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, p, 8);
    mix(word);
  }
  std::uint64_t last = 0;
  if (n > 0) std::memcpy(&last, p, n);  // an empty line's text may have no address
  mix(last ^ (static_cast<std::uint64_t>(n) << 56));
  return h;
}

}  // namespace

std::string rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out = "r";
  std::size_t ranges = 0;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (ranges == kMaxRanges - 1 && j + 1 < ranks.size()) {
      out += ",\xe2\x80\xa6+" + std::to_string(ranks.size() - i);  // "…+N"
      break;
    }
    if (ranges > 0) out += ',';
    out += std::to_string(ranks[i]);
    if (j > i) out += '-' + std::to_string(ranks[j]);
    ++ranges;
    i = j + 1;
  }
  return out;
}

LineFolder::LineFolder(Options options) : options_(std::move(options)) {}

int LineFolder::add(std::string prefix, int rank) {
  Source s;
  s.prefix = std::move(prefix);
  s.rank = rank;
  sources_.push_back(std::move(s));
  if (rank >= 0) {
    ++live_;
    ++live_idle_;
  }
  return static_cast<int>(sources_.size() - 1);
}

void LineFolder::line(int source, bool continued, std::string_view a, std::string_view b, std::int64_t now_ns,
                      std::string& out) {
  Source& src = sources_[static_cast<std::size_t>(source)];
  if (passes(source, now_ns)) {
    append_line(out, src.prefix, continued, a, b);
    return;
  }
  if (!src.waiting()) {
    src.lines.clear();
    src.text.clear();
    src.first = 0;
    if (src.live) --live_idle_;
    queued_.push_back(source);
  }
  if (now_ns - rate_from_ns_ >= options_.window_ns) {
    rate_from_ns_ = now_ns;
    rate_bytes_ = 0;
  }
  Line l;
  l.off = src.text.size();
  if (continued) src.text.append(kContinuation);
  src.text.append(a);
  src.text.append(b);
  l.len = src.text.size() - l.off;
  rate_bytes_ += l.len;
  l.hash = hash_line(continued, src.text_of(l));
  l.at_ns = now_ns;
  src.lines.push_back(l);
  if (due_known_) due_ns_ = std::min(due_ns_, now_ns + options_.window_ns);
  ++waiting_;
  held_bytes_ += l.len;
  release(now_ns, out);
}

void LineFolder::pop(int id) {
  Source& s = sources_[static_cast<std::size_t>(id)];
  due_known_ = false;
  held_bytes_ -= s.lines[s.first].len;
  --waiting_;
  ++s.first;
  if (!s.waiting()) {
    if (s.live) ++live_idle_;
    queued_.erase(std::find(queued_.begin(), queued_.end(), id));
  } else if (s.first >= 1024 && s.first * 2 >= s.lines.size()) {
    // A source shown by rounds never empties while its rank writes: drop what was shown.
    const std::size_t shown = s.lines[s.first].off;
    s.text.erase(0, shown);
    s.lines.erase(s.lines.begin(), s.lines.begin() + static_cast<std::ptrdiff_t>(s.first));
    s.first = 0;
    for (Line& l : s.lines) l.off -= shown;
  }
}

// One shown line for the sources in [from, to), whose first lines are the
// same; pops them.
void LineFolder::show_line(std::vector<int>::const_iterator from, std::vector<int>::const_iterator to,
                           std::string& out) {
  Source& head = sources_[static_cast<std::size_t>(*from)];
  if (to - from == 1) {
    out.append(head.prefix);
  } else {
    ranks_.clear();
    for (auto it = from; it != to; ++it) ranks_.push_back(sources_[static_cast<std::size_t>(*it)].rank);
    if (options_.color) out.append(kPlainColor);
    out.push_back('[');
    out.append(options_.step);
    out.push_back(' ');
    out.append(rank_ranges(ranks_));
    out.push_back(']');
    if (options_.color) out.append(kReset);
    out.push_back(' ');
  }
  out.append(head.text_of(head.lines[head.first]));
  out.push_back('\n');
  for (auto it = from; it != to; ++it) pop(*it);
}

void LineFolder::round(std::string& out) {
  order_ = queued_;
  auto first = [this](int i) -> const Line& {
    const Source& s = sources_[static_cast<std::size_t>(i)];
    return s.lines[s.first];
  };
  auto text = [this, &first](int i) { return sources_[static_cast<std::size_t>(i)].text_of(first(i)); };
  // Like lines next to each other (by hash, then text), each group in the
  // order of its sources; then the groups by their first line's arrival.
  std::sort(order_.begin(), order_.end(), [&](int x, int y) {
    const Line &lx = first(x), &ly = first(y);
    if (lx.hash != ly.hash) return lx.hash < ly.hash;
    if (const int c = text(x).compare(text(y)); c != 0) return c < 0;
    return x < y;
  });
  std::vector<Group>& groups = groups_;
  groups.clear();
  for (std::size_t i = 0; i < order_.size();) {
    std::size_t j = i + 1;
    std::int64_t at = first(order_[i]).at_ns;
    while (j < order_.size() && first(order_[j]).hash == first(order_[i]).hash &&
           text(order_[j]) == text(order_[i])) {
      at = std::min(at, first(order_[j]).at_ns);
      ++j;
    }
    groups.push_back({i, j, at});
    i = j;
  }
  std::sort(groups.begin(), groups.end(), [this](const Group& x, const Group& y) {
    return x.at_ns != y.at_ns ? x.at_ns < y.at_ns : order_[x.from] < order_[y.from];
  });
  for (const Group& g : groups)
    show_line(order_.begin() + static_cast<std::ptrdiff_t>(g.from),
              order_.begin() + static_cast<std::ptrdiff_t>(g.to), out);
}

void LineFolder::oldest(std::string& out) {
  auto at = [this](int id) {
    const Source& s = sources_[static_cast<std::size_t>(id)];
    return s.lines[s.first].at_ns;
  };
  int oldest = queued_.front();
  for (int id : queued_)
    if (at(id) < at(oldest) || (at(id) == at(oldest) && id < oldest)) oldest = id;
  const Source& o = sources_[static_cast<std::size_t>(oldest)];
  const Line& ol = o.lines[o.first];
  const std::string_view t = o.text_of(ol);
  order_.clear();
  for (int id : queued_) {
    const Source& s = sources_[static_cast<std::size_t>(id)];
    if (s.lines[s.first].hash == ol.hash && s.text_of(s.lines[s.first]) == t) order_.push_back(id);
  }
  std::sort(order_.begin(), order_.end());
  show_line(order_.begin(), order_.end(), out);
}

void LineFolder::release(std::int64_t now_ns, std::string& out) {
  if (held_bytes_ > options_.max_held || rate_bytes_ > options_.max_held) {
    // A flood: more than max_held within a wait. No one reads lines at that
    // rate, and folding them costs as much as showing them: every line
    // waiting is shown, and lines pass as they come until a wait from now.
    flush(out);
    flood_until_ns_ = now_ns + options_.window_ns;
    return;
  }
  while (waiting_ > 0) {
    if (live_idle_ == 0) {
      round(out);
    } else if (now_ns >= next_due_ns()) {
      oldest(out);
    } else {
      break;
    }
  }
}

void LineFolder::close(int source, std::string& out) {
  Source& src = sources_[static_cast<std::size_t>(source)];
  if (!src.live) return;
  src.live = false;
  if (src.rank < 0) return;
  --live_;
  if (!src.waiting()) --live_idle_;
  // Only the sources matter here, not the time: a line waits for the live ones.
  release(INT64_MIN, out);
}

void LineFolder::due(std::int64_t now_ns, std::string& out) { release(now_ns, out); }

std::int64_t LineFolder::next_due_ns() const {
  if (due_known_) return due_ns_;
  std::int64_t first = INT64_MAX;
  for (int id : queued_) {
    const Source& s = sources_[static_cast<std::size_t>(id)];
    first = std::min(first, s.lines[s.first].at_ns);
  }
  due_ns_ = first == INT64_MAX ? INT64_MAX : first + options_.window_ns;
  due_known_ = true;
  return due_ns_;
}

void LineFolder::flush(std::string& out) {
  while (waiting_ > 0) round(out);
}

}  // namespace flowrun
