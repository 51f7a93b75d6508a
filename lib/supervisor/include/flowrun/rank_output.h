// The ranks' output as flowrun shows and keeps it, shared by the supervisor
// (ranks on this host) and the head (ranks on the nodes): each rank's log
// files, stderr tail and console lines (RankLog), the console batch their
// lines wait in, and what flowrun says when a rank's log file cannot be
// written.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "flowrun/line_fold.h"
#include "flowrun/logmux.h"

namespace flowrun {

// Which of a worker's two streams flowrun's console shows (its log files
// keep both either way).
struct ConsoleShows {
  bool out = true;
  bool err = true;
  bool any() const { return out || err; }
  static ConsoleShows none() { return {false, false}; }
};

// The ranks' whole prefixed lines on their way to the console. Lines are
// appended to `out` and `err`; schedule() writes them once the loop has
// handled what is ready now (one write for many ranks' lines), or at once
// past 1 MiB. With fold(), the ranks' lines pass through a LineFolder per
// stream first: a line several ranks print is shown once, and a held line
// is written when its wait ends (a timer of the batch's own).
class ConsoleBatch {
 public:
  // `write` hands both buffers to the console and clears them
  // (Supervisor::write_console).
  ConsoleBatch(boost::asio::io_context& io, std::function<void(std::string& out, std::string& err)> write);
  ~ConsoleBatch();  // writes nothing: flush() before the console goes
  ConsoleBatch(const ConsoleBatch&) = delete;
  ConsoleBatch& operator=(const ConsoleBatch&) = delete;

  // Folds the lines of the ranks whose RankLog is made after this call, as
  // step `step`, with `style`'s colour and window (LogStyle::fold_ns; 0:
  // no folding). Lines still held are written first.
  void fold(const std::string& step, const LogStyle& style);
  // The folder of stdout (`is_err` false) or stderr; null when not folding.
  LineFolder* folder(bool is_err) { return folders_[is_err ? 1 : 0].get(); }

  void schedule();
  // Writes every line, held ones too (flowrun is about to speak, the step ended).
  void flush();

  std::string out, err;

 private:
  void write_ready() { write_(out, err); }
  void arm();  // the timer, for the first held line's end of wait

  boost::asio::io_context& io_;
  std::function<void(std::string&, std::string&)> write_;
  bool posted_ = false;
  std::unique_ptr<LineFolder> folders_[2];
  std::unique_ptr<boost::asio::steady_timer> timer_;
  std::int64_t armed_ns_ = 0;  // when the timer fires; 0: not armed
};

// One rank's output (or one process's: a plain step, the head's srun), by
// stream: every byte raw to its log file, the last lines of its stderr for
// the report, and its whole lines, prefixed, to the console batch. The
// owner reads the bytes (a pipe, the head's output messages) and decides
// what a write error means for the group; nothing here runs the loop.
class RankLog {
 public:
  struct Options {
    std::string stdout_log, stderr_log;  // empty: no files (an agent's ranks: their output goes to the head)
    std::string prefix;                  // its console tag ("[train r0] "); empty: not shown on the console
    int rank = -1;       // its rank, whose lines the console may fold with others'; < 0: never
    ConsoleShows shows;  // with a prefix: which of its streams the console shows
    LogStyle style;
    std::string who;  // read before a file's name in a write error ("rank 0's ", "its ")
    // Creates (or empties) a log file for writing: its descriptor, or -1
    // with errno set. Empty: open(2) with O_CREAT | O_TRUNC.
    std::function<int(const std::string& path)> open;
    // Set: close() hands it the file of a stream that never wrote, to be
    // created (empty) there, instead of creating it itself.
    std::function<void(const std::string& path)> create_later;
  };

  // A log file that could not be created or written: log_write_error's
  // words, and the errno.
  struct WriteError {
    std::string text;
    int err = 0;
  };

  RankLog(Options options, ConsoleBatch& console);
  ~RankLog();  // closes the files; a torn last line is not shown (close() shows it)
  RankLog(const RankLog&) = delete;
  RankLog& operator=(const RankLog&) = delete;

  // Opens both log files now (else each is opened when its stream first
  // writes, or at close, so that thousands of ranks cost nothing until they
  // print). Throws Error "cannot create the log file PATH: REASON".
  void open_files();

  // What the rank wrote to stdout (`is_err` false) or stderr, to its log
  // file (and stderr's to the tail). Returns the error the first time the
  // file could not be created or written; the file is closed then, and the
  // stream's later bytes go to the tail and the console only.
  std::optional<WriteError> keep(bool is_err, std::string_view data);

  // The same bytes to the console: every line they complete, prefixed, to
  // the batch's out or err (`now_ns`, monotonic, paces progress snapshots).
  // Nothing when it is not shown. Apart from keep(), so that flowrun's line
  // about a write error comes before them, and for flowrun's own line about
  // the rank ("flowrun: cannot start: ..."), which is kept but not shown.
  void show(bool is_err, std::string_view data, std::int64_t now_ns);

  // The stream ended: a torn last line goes to the console with a '\n',
  // and the file is closed (created first if it never was: every rank has
  // both files, also one that printed nothing; Options::create_later, when
  // set, is handed that work). A second call does nothing.
  void close(bool is_err);
  void close() {
    close(false);
    close(true);
  }

  // The last lines of its stderr (TailBuffer's text).
  std::string tail() const;

 private:
  struct Stream;
  Stream& stream(bool is_err);
  int file(Stream& s);

  Options options_;
  ConsoleBatch& console_;
  std::unique_ptr<Stream> out_, err_;
  TailBuffer tail_;
};

// What could not be written: "cannot write rank 0's stdout.log in DIR: No
// space left on device". `who` reads before the file's name ("rank 0's ",
// "its ").
std::string log_write_error(const std::string& who, const std::string& path, int err);

// flowrun's line about it, said once per attempt: "flowrun: error: step 'S':
// WRITE_ERROR; stopping the step (free space there, then: flowrun resume
// RUN_DIR)" ("the step is stopping" when it already is; no hint without
// `run_dir`).
std::string log_failed_message(const std::string& step, const std::string& write_error, bool stopping,
                               int err, const std::string& run_dir);

}  // namespace flowrun
