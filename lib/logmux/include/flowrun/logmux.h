// The log multiplexer: turns the raw bytes a worker writes into whole,
// prefixed console lines ("[train r3] loss 0.12"). Pure: it performs no I/O
// and reads no clock; the supervisor hands it bytes and the time, and writes
// what it returns. Raw bytes go to the per-rank log files untouched; only the
// console sees what this module makes.
//
// Guarantees, which tests/unit/logmux_test.cpp checks:
//  - Line-atomic: every piece appended to `out` is one or more whole lines,
//    each starting with the prefix and ending with '\n'. A caller that writes
//    `out` with one write(2) never interleaves two workers inside a line.
//  - Bounded: a stream never holds more than `max_line` bytes of a pending
//    line. A longer line is cut into pieces of at most max_line bytes; every
//    piece after the first carries the continuation mark (kContinuation) after
//    the prefix, so nothing is lost and memory stays flat however long the
//    line. A cut never splits a UTF-8 character (it moves back up to 3 bytes
//    to the character's first byte), so each piece prints cleanly.
//  - Split-independent: how the bytes are divided among feed() calls changes
//    nothing but the pacing of progress snapshots (which depends on now_ns).
//  - Carriage returns (tqdm and other progress bars): "\r\n" ends a line like
//    "\n". A bare '\r' rewrites the line in a terminal; here the text before it
//    is a progress snapshot. A snapshot is shown as a line only when at least
//    `progress_interval_ns` passed since this stream last showed one, so a bar
//    redrawn 10 times a second shows about once per interval; the text after
//    the last '\r' of a line (its final state) is always shown. Details:
//      * A snapshot's time is the now_ns of the feed() that brought its '\r'.
//      * An empty snapshot (tqdm writes '\r' before each redraw) shows nothing
//        and does not count for the pacing.
//      * Only snapshots count for the pacing; the final state does not.
//      * When the final state is empty ("50%\r" then '\n' or the end), the
//        last snapshot stands in for it if it was dropped; if it was shown,
//        nothing more is shown. An empty line without '\r' is kept.
//  - A last line without '\n' is shown by finish().
//
// Cost: feed() scans with memchr and appends with one reserve; a line that
// arrives whole is one prefix copy and one payload copy, no allocation once
// `out` and the splitter's buffers have grown (callers should reuse `out`).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flowrun {

// Marks a piece of a line cut at max_line bytes (UTF-8 for "↪ ").
inline constexpr std::string_view kContinuation = "\xe2\x86\xaa ";

// Appends one line as the console shows it: `prefix`, the continuation mark
// for a piece after a cut, its text (a + b) and '\n'.
inline void append_line(std::string& out, std::string_view prefix, bool continued, std::string_view a,
                        std::string_view b) {
  out.append(prefix);
  if (continued) out.append(kContinuation);
  out.append(a);
  out.append(b);
  out.push_back('\n');
}

// Marks a line TailBuffer truncated (UTF-8 for "…").
inline constexpr std::string_view kEllipsis = "\xe2\x80\xa6";

struct LogStyle {
  bool color = false;                // ANSI colours on the prefix
  std::int64_t fold_ns = 0;          // LineFolder's window: 0, the ranks' lines are not folded
  std::size_t max_line = 64 * 1024;  // bytes of a line held before cutting it (0 acts as 1)
  std::int64_t progress_interval_ns = 1'000'000'000;  // at most one progress snapshot per interval
};

// "[train r3] " for a rank of a parallel step, "[prepare] " for a plain step
// (rank < 0). With color, the bracketed tag is wrapped in an ANSI colour
// chosen by rank (so neighbouring ranks differ) and reset after it:
// "\x1b[33m[train r1]\x1b[0m ". Ranks cycle through 6 colours (rank % 6:
// cyan, yellow, green, magenta, blue, red); plain steps are bright blue.
std::string log_prefix(std::string_view step, int rank, bool color);

// One stream (stdout or stderr) of one worker.
class LineFolder;

class LineSplitter {
 public:
  LineSplitter(std::string prefix, const LogStyle& style);

  // Hands every line to `folder` as its `source` (LineFolder::line) instead
  // of appending it with the prefix: the folder appends it to `out`, now or
  // later. The splitter does not own the folder.
  void fold_into(LineFolder* folder, int source) {
    folder_ = folder;
    source_ = source;
  }

  // Appends to `out` every line completed by `data`, prefixed. `now_ns` is a
  // monotonic time, used only to pace progress snapshots.
  void feed(std::string_view data, std::int64_t now_ns, std::string& out);

  // The stream ended: appends the pending partial line, if any, with '\n'.
  // A '\r' that ended the stream makes the text before it a snapshot (and,
  // the final state being empty, it is shown if pacing dropped it). The
  // splitter is then empty and may take a new stream.
  void finish(std::string& out);

  // Bytes held for a line not yet complete (at most max_line).
  std::size_t pending() const { return pending_.size(); }

 private:
  // Cuts pieces of max_line bytes off pending_ + s while they exceed
  // max_line, and returns what is left of s (pending_ + rest <= max_line).
  std::string_view cut(std::string_view s, std::string& out);
  void emit(std::string_view a, std::string_view b, bool continued, std::string& out);
  void hold(std::string_view s, std::string& out);
  void snapshot(std::string_view s, std::int64_t at_ns, std::string& out);
  void end_line(std::string_view s, std::string& out);

  std::string prefix_;
  std::size_t max_line_;
  std::int64_t interval_ns_;
  std::string pending_;             // the current line so far (after its last '\r')
  bool pending_continued_ = false;  // pending_ continues a line already cut
  bool saw_cr_ = false;             // the last byte fed was a '\r' (bare, or half of "\r\n")
  std::int64_t cr_ns_ = 0;          // when that '\r' came
  bool line_cr_ = false;            // the current line had a bare '\r' (it is a progress line)
  std::string dropped_;             // the last snapshot of this line, when pacing dropped it
  bool dropped_continued_ = false;
  std::int64_t last_progress_ns_ = INT64_MIN / 2;
  LineFolder* folder_ = nullptr;
  int source_ = -1;
  std::int64_t now_ns_ = 0;  // the last feed()'s, for the folder
};

// The last `lines` lines of a stream, for the failure report: a ring of
// bounded memory. A line longer than max_line keeps its beginning and ends
// in kEllipsis, max_line bytes in all (cut at a UTF-8 character boundary;
// max_line below 8 acts as 8). A '\r' works as on a terminal that shows
// the last redraw: text written after a '\r' replaces the line, so a progress
// bar keeps its final state ("10%\r20%\n" keeps "20%", "20%\r\n" and
// "20%\r" keep "20%"); "\r\n" ends a line like "\n".
class TailBuffer {
 public:
  explicit TailBuffer(std::size_t lines = 20, std::size_t max_line = 4096);
  void feed(std::string_view data);
  // The kept lines, oldest first, each ending with '\n'; a pending partial
  // line comes last (also with '\n'). Empty when nothing was fed.
  std::string text() const;

 private:
  void add_segment(std::string_view s);  // text of one line, without '\n'
  void append_partial(std::string_view s);
  void push_line();

  std::size_t lines_;
  std::size_t max_line_;
  std::vector<std::string> ring_;
  std::size_t next_ = 0;
  std::size_t count_ = 0;
  std::string partial_;
  bool truncated_ = false;  // partial_ was cut and ends with kEllipsis
  bool overwrite_ = false;  // a '\r' came: the next text replaces partial_
};

}  // namespace flowrun
