// The supervisor's workers and the pipes it reads their output from: a
// worker's stdout and stderr read on the loop, a few chunks per wakeup so
// that ranks which flood take turns, and held in the pipes while output is
// paused (the observer's sink is full, or the console's reader lags), which
// is flowrun's flow control.
#pragma once

#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

#include "flowrun/process.h"
#include "flowrun/rank_output.h"
#include "flowrun/supervisor.h"

namespace boost::asio {
class io_context;
}

namespace flowrun {

struct Stream {
  int fd = -1;  // our read end
  bool is_err = false;
  std::unique_ptr<boost::asio::posix::stream_descriptor> desc;
  bool parked = false;  // readable, left unread while output is paused
  bool open() const { return fd >= 0; }
};

struct Worker {
  const WorkerLaunch* launch = nullptr;
  std::size_t index = 0;  // in the group: what the observer calls it
  WorkerRecord record;
  pid_t pid = -1;
  bool alive = false;
  Stream out, err;
  std::unique_ptr<RankLog> log;     // its log files, stderr tail and console lines
  std::int64_t last_output_ns = 0;  // monotonic: when it last wrote (or the group started)
  // A pidfd becomes readable when the worker exits. Exits then arrive in the
  // order they happened (epoll's ready list is first come, first served),
  // which is what names the right culprit when peers die a moment after it.
  std::unique_ptr<boost::asio::posix::stream_descriptor> exit_watch;
  // flowrun's stop as it reached the worker: SIGTERM to its main process
  // (term_sent), which then caught or blocked SIGTERM or SIGCONT (takes_stop:
  // its own code runs on the signal, and may end it any way), SIGKILL to its
  // group (kill_sent). stopped: once it ended, whether that end can be
  // flowrun's doing (Supervisor::ended_by_stop says the rule).
  bool term_sent = false;
  bool takes_stop = false;
  bool kill_sent = false;
  bool stopped = false;

  // Becomes `l`'s worker, its record naming its rank and files.
  void assign(const WorkerLaunch& l) {
    launch = &l;
    record.rank = l.rank;
    record.local_rank = l.local_rank;
    record.stdout_log = l.stdout_log;
    record.stderr_log = l.stderr_log;
    record.error_file = l.error_file;
  }
};

// A group's workers, in launch order. A deque: a worker added to a running
// group (Supervisor::add_worker) moves none of the others, whose reads and
// exit watches hold references to them.
using WorkerList = std::deque<Worker>;

class WorkerPipes {
 public:
  // What a read took from worker `w`'s stream (`is_err`), read at `now`
  // (monotonic); after each wakeup's reads, `after_read`.
  using Sink = std::function<void(Worker& w, bool is_err, std::string_view data, std::int64_t now)>;

  WorkerPipes(boost::asio::io_context& io, WorkerList& workers, Sink sink, std::function<void()> after_read);

  // A pipe for `s`: its read end non-blocking and watched by the loop, its
  // write end (for the worker) in `child_end`.
  void open_stream(Stream& s, bool is_err, int* child_end);

  // A pipe holding `text` and then end-of-file; returns its read end. The
  // text (a token) is small: it fits the pipe's buffer, so this never blocks.
  static int stdin_with(const std::string& text);

  // The worker's log files, created now (an error flowrun cannot go on
  // from), its tail and its console tag.
  static void open_log(Worker& w, const GroupOptions& options, ConsoleBatch& batch);

  // Starts `launch` as `w` with its stdout and stderr into `w`'s pipes (and
  // its stdin from its text, if any); the pipes' other ends are closed here.
  SpawnResult spawn(Worker& w, const WorkerLaunch& launch);

  void start_read(Worker& w, Stream& s);

  // Reads what is there (at most `reads` chunks, none once output is
  // paused): raw to the log file, whole prefixed lines to the console buffers.
  void drain(Worker& w, Stream& s, int reads);

  void close_stream(Worker& w, Stream& s);

  // Every worker and leftover has ended: takes what is still in the pipes
  // (paused output first waits for the observer to resume it).
  void drain_rest();

  // Who holds the output: the observer (Supervisor::pause_output), the
  // console (its reader lags). It flows again once neither does.
  enum Holder : unsigned { kObserver = 1, kConsole = 2 };
  void hold_output(Holder by, bool hold);
  bool paused() const { return output_paused_; }

 private:
  void resume_output(Holder by);

  boost::asio::io_context& io_;
  WorkerList& workers_;
  Sink sink_;
  std::function<void()> after_read_;
  // Not zeroed (make_unique_for_overwrite): its pages are touched only by the reads that fill them, so
  // ranks that print little never map most of it.
  std::unique_ptr<char[]> buffer_;
  unsigned held_by_ = 0;           // Holder bits
  bool output_paused_ = false;     // held_by_ != 0
  std::int64_t paused_at_ns_ = 0;  // monotonic, when output was paused
};

}  // namespace flowrun
