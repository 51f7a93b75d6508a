// Folding: the same line printed by several ranks of a step is shown once,
// tagged with their ranks ("[train r0-7] epoch 1 loss 0.31"), so that a
// console of 64 ranks reads like one job. Pure, like LineSplitter: no I/O,
// no clock; the caller hands it whole lines and the time, and writes what it
// appends to `out`.
//
// Each shown stream of a rank is a source, with a queue of its lines not
// yet shown. Lines fold by position: while every live source has a line
// waiting, the first line of each is shown, those of the same text as one
// line with their ranks, and so on. While a live source has none, the
// others' lines wait for it, for `window_ns` at most from the first line's
// arrival (then that line is shown with the sources whose first line is the
// same). A flood is not folded: once more than `max_held` bytes came within
// a window_ns, every waiting line is shown and lines pass as they come for a
// window_ns.
// Guarantees, which tests/unit/line_fold_test.cpp checks:
//  - Order: each source's lines come out in the order it wrote them.
//  - Nothing lost, nothing twice: each line of each source is in exactly one
//    shown line, and only lines of the same text are one shown line.
//  - A line waits at most window_ns (once the loop calls due()), and the
//    lines waiting take max_held bytes at most.
//  - A line that only one rank printed looks as it does unfolded: its own
//    prefix. A source that never folds (rank < 0: a plain step, the head's
//    srun) is shown at once, and so is every line while one source is live
//    or window_ns is 0.
// Cost: one hash of the line per line, a copy into the source's queue, and
// per round of shown lines a sort of the sources' first lines.
#pragma once

#include <climits>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flowrun {

// "r0-3,5,8-9": ranks (sorted, duplicates once) as ranges. Past 6 ranges, the
// first 5 and "...+N" for the N ranks left ("r0,2,4,6,8,…+27").
std::string rank_ranges(std::vector<int> ranks);

class LineFolder {
 public:
  struct Options {
    std::string step;            // the folded lines' tag: "[STEP r0-7] "
    bool color = false;          // ANSI colour on that tag, as log_prefix's plain steps
    std::int64_t window_ns = 0;  // the longest a line waits for the other ranks; 0: no folding
    std::size_t max_held = 256 * 1024;
  };
  explicit LineFolder(Options options);

  // A new source: its lines' own prefix ("[train r3] ") and its rank (< 0:
  // it never folds). Returns its id. Sources are live until close().
  int add(std::string prefix, int rank);

  // A whole line of `source` (its text a + b, without '\n'; `continued`: a
  // piece after a cut, shown after kContinuation): held, or appended to
  // `out` with what it lets go. `now_ns`: monotonic time.
  void line(int source, bool continued, std::string_view a, std::string_view b, std::int64_t now_ns,
            std::string& out);

  // Whether a line of `source` at `now_ns` goes straight to the console:
  // its source never folds, folding is off, or no line waits and there is
  // no other live source to fold with, or the sources flood.
  bool passes(int source, std::int64_t now_ns) const {
    return sources_[static_cast<std::size_t>(source)].rank < 0 || options_.window_ns <= 0 ||
           (waiting_ == 0 && (live_ <= 1 || now_ns < flood_until_ns_));
  }

  // The source ended: its lines wait for nothing but the other sources'.
  void close(int source, std::string& out);

  // Shows the lines whose wait ended by `now_ns`.
  void due(std::int64_t now_ns, std::string& out);
  // When the first held line's wait ends; INT64_MAX when none is held.
  std::int64_t next_due_ns() const;

  // Shows every held line (flowrun is about to speak, or the step ended).
  void flush(std::string& out);
  bool empty() const { return held_bytes_ == 0 && waiting_ == 0; }

 private:
  struct Line {
    std::uint64_t hash = 0;
    std::size_t off = 0;  // of its text in the source's `text`
    std::size_t len = 0;
    std::int64_t at_ns = 0;
  };
  struct Source {
    std::string prefix;
    int rank = -1;
    bool live = true;
    std::vector<Line> lines;  // waiting, from `first`
    std::size_t first = 0;
    std::string text;  // the waiting lines' text (and shown ones' before `first`)
    bool waiting() const { return first < lines.size(); }
    std::string_view text_of(const Line& l) const { return {text.data() + l.off, l.len}; }
  };

  void show_line(std::vector<int>::const_iterator from, std::vector<int>::const_iterator to,
                 std::string& out);
  void pop(int id);
  // Shows the first line of every waiting source, like ones as one line.
  void round(std::string& out);
  // Shows the oldest first line, with the sources whose first line is the same.
  void oldest(std::string& out);
  void release(std::int64_t now_ns, std::string& out);

  Options options_;
  std::vector<Source> sources_;
  std::vector<int> queued_;  // the sources with lines waiting (a head keeps every attempt's sources)
  std::size_t waiting_ = 0;  // how many lines wait
  int live_ = 0;             // live sources that fold
  int live_idle_ = 0;        // of them, those with no line waiting
  std::size_t held_bytes_ = 0;
  mutable std::int64_t due_ns_ = INT64_MAX;  // next_due_ns(), while due_known_ (no line shown since)
  mutable bool due_known_ = true;
  std::int64_t flood_until_ns_ = INT64_MIN;    // lines pass unfolded until then (release)
  std::int64_t rate_from_ns_ = INT64_MIN / 2;  // the bytes that came since then, within a window_ns
  std::size_t rate_bytes_ = 0;
  struct Group {
    std::size_t from, to;  // in order_
    std::int64_t at_ns;
  };
  std::vector<Group> groups_;  // scratch: a round's like lines
  std::vector<int> order_;     // scratch: a round's sources
  std::vector<int> ranks_;     // scratch
  std::string joined_;         // scratch: a line's two pieces in one
};

}  // namespace flowrun
