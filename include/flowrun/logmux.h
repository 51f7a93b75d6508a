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
//    line. A longer line is cut into pieces of max_line bytes; every piece
//    after the first carries the continuation mark (kContinuation) after the
//    prefix, so nothing is lost and memory stays flat however long the line.
//  - Carriage returns (tqdm and other progress bars): "\r\n" ends a line like
//    "\n". A bare '\r' rewrites the line in a terminal; here the text before it
//    is a progress snapshot. A snapshot is shown as a line only when at least
//    `progress_interval_ns` passed since this stream last showed one, so a bar
//    redrawn 10 times a second shows about once per interval; the text after
//    the last '\r' of a line (its final state) is always shown.
//  - A last line without '\n' is shown by finish().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flowrun {

// Marks a piece of a line cut at max_line bytes (UTF-8 for "↪ ").
inline constexpr std::string_view kContinuation = "\xe2\x86\xaa ";

struct LogStyle {
  bool color = false;                                 // ANSI colours on the prefix
  std::size_t max_line = 64 * 1024;                   // bytes of a line held before cutting it
  std::int64_t progress_interval_ns = 1'000'000'000;  // at most one progress snapshot per interval
};

// "[train r3] " for a rank of a parallel step, "[prepare] " for a plain step
// (rank < 0). With color, the bracketed tag is wrapped in an ANSI colour
// chosen by rank (so neighbouring ranks differ) and reset after it.
std::string log_prefix(std::string_view step, int rank, bool color);

// One stream (stdout or stderr) of one worker.
class LineSplitter {
 public:
  LineSplitter(std::string prefix, const LogStyle& style);

  // Appends to `out` every line completed by `data`, prefixed. `now_ns` is a
  // monotonic time, used only to pace progress snapshots.
  void feed(std::string_view data, std::int64_t now_ns, std::string& out);

  // The stream ended: appends the pending partial line, if any, with '\n'.
  void finish(std::string& out);

  // Bytes held for a line not yet complete (at most max_line).
  std::size_t pending() const { return pending_.size(); }

 private:
  void emit(std::string_view text, bool continued, std::string& out);

  std::string prefix_;
  LogStyle style_;
  std::string pending_;           // the current line so far (after its last '\r')
  bool pending_continued_ = false;  // pending_ continues a line already cut
  bool saw_cr_ = false;             // the previous byte fed was a bare '\r' candidate
  std::int64_t last_progress_ns_ = INT64_MIN / 2;
};

// The last `lines` lines of a stream, for the failure report: a ring of
// bounded memory (each kept line at most max_line bytes).
class TailBuffer {
 public:
  explicit TailBuffer(std::size_t lines = 20, std::size_t max_line = 4096);
  void feed(std::string_view data);
  // The kept lines, oldest first; a pending partial line comes last.
  std::string text() const;

 private:
  std::size_t lines_;
  std::size_t max_line_;
  std::vector<std::string> ring_;
  std::size_t next_ = 0;
  std::size_t count_ = 0;
  std::string partial_;
};

}  // namespace flowrun
