#include "console_writer.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

namespace flowrun {

namespace asio = boost::asio;

namespace {

// What waits for a console reader that does not keep up; past it, the
// ranks are held until the reader has taken half of it.
constexpr std::size_t kConsoleBacklog = 4 << 20;

// Output a hold cannot stop (the head's lines from other nodes, already on
// their way) is kept up to this much, then dropped and counted.
constexpr std::size_t kConsoleBacklogCap = 16 * kConsoleBacklog;

// How long the end of the run waits for a console reader that takes none
// of what is still in the backlog.
constexpr std::chrono::milliseconds kIdleWait{1000};

// A descriptor for writing to `fd` without blocking, or -1 to write to `fd`
// itself: a pipe or a terminal is opened again through /proc, so that
// O_NONBLOCK is set on flowrun's own open file and not on the one it shares
// with the shell (a terminal's stdin among them). A file or /dev/null never
// blocks for long.
int nonblocking_twin(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))) return -1;
  if (S_ISCHR(st.st_mode) && isatty(fd) != 1) return -1;  // /dev/null and the like
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  return open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
}

}  // namespace

// The console's one stream (stdout or stderr): a backlog the loop writes as
// the reader takes it.
struct ConsoleWriter::Stream {
  int fd = -1;      // where to write
  int own_fd = -1;  // nonblocking_twin's, closed at the end
  // What the reader has not taken: backlog from `sent` on. Written from
  // the front without moving the rest each time; compacted once the part
  // already written is the larger half.
  std::string backlog;
  std::size_t sent = 0;
  std::size_t dropped_lines = 0;                          // not shown since the reader last took output
  std::size_t dropped_total = 0;                          // since take_dropped()
  std::unique_ptr<asio::posix::stream_descriptor> watch;  // waits for room
  bool waiting = false;
  // monotonic: when the reader last took output (or the backlog was empty,
  // so that there was nothing for it to take).
  std::int64_t taken_ns = 0;
  // It took nothing for the reader's wait: the workers' lines past the
  // backlog are dropped instead of held.
  bool idle = false;

  bool nonblocking() const { return own_fd >= 0; }
  std::size_t pending() const { return backlog.size() - sent; }
  bool full() const { return pending() > kConsoleBacklog; }      // holds the workers
  bool held() const { return pending() > kConsoleBacklog / 2; }  // keeps them held

  void append(const std::string& text) {
    if (sent > 0 && sent >= pending()) {
      backlog.erase(0, sent);
      sent = 0;
    }
    backlog += text;
  }

  // Writes what the descriptor takes now; true when the backlog is empty.
  bool write_some() {
    if (pending() == 0) taken_ns = monotonic_now_ns();
    while (pending() > 0) {
      const ssize_t n = ::write(fd, backlog.data() + sent, pending());
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        taken_ns = monotonic_now_ns();
        idle = false;
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && errno == EAGAIN) {
        return false;
      } else {
        sent = backlog.size();  // the reader is gone (EPIPE): nothing more to show
        dropped_lines = 0;
      }
    }
    backlog.clear();
    sent = 0;
    return true;
  }
};

ConsoleWriter::ConsoleWriter(asio::io_context& io, const Console& console, std::function<void(bool)> hold)
    : err_fd_(console.err_fd),
      hold_(std::move(hold)),
      reader_wait_ns_(static_cast<std::int64_t>(std::max(0.0, console.reader_wait_s) * 1e9)),
      idle_timer_(io) {
  // A console reader that went away (`flowrun f.yaml | head`) must not
  // kill flowrun with its workers running: writes fail with EPIPE instead.
  signal(SIGPIPE, SIG_IGN);
  // A console that is a pipe (`flowrun f.yaml | tee log`) gets a 1 MiB
  // buffer instead of 64 KiB: fewer round trips to the reader when ranks
  // write fast. Best effort.
  for (int fd : {console.out_fd, console.err_fd}) {
    struct stat st {};
    if (fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) && fcntl(fd, F_GETPIPE_SZ) < (1 << 20))
      fcntl(fd, F_SETPIPE_SZ, 1 << 20);
  }
  for (int i = 0; i < 2; ++i) {
    streams_[i] = std::make_unique<Stream>();
    Stream& cs = *streams_[i];
    const int fd = i == 0 ? console.out_fd : console.err_fd;
    cs.own_fd = nonblocking_twin(fd);
    cs.fd = cs.own_fd >= 0 ? cs.own_fd : fd;
    // The loop's own copy, close-on-exec like every descriptor of flowrun's.
    if (cs.own_fd >= 0)
      cs.watch = std::make_unique<asio::posix::stream_descriptor>(io, fcntl(cs.own_fd, F_DUPFD_CLOEXEC, 3));
  }
}

ConsoleWriter::~ConsoleWriter() {
  // The run is over: what the console has not taken yet is written while
  // its reader takes it, so one that lags (a busy `| tee`) still gets every
  // line. A reader that takes nothing for kIdleWait (a paused pager, a pipe
  // nobody reads) does not hold flowrun up; what it missed is counted on
  // stderr, never dropped unsaid (the log files have every line).
  std::size_t missed = 0;
  for (auto& cs : streams_) {
    if (cs->nonblocking()) {
      std::size_t left = cs->pending();
      while (!cs->write_some()) {
        if (cs->pending() < left) {
          left = cs->pending();  // it took some: wait again
        }
        pollfd p{cs->fd, POLLOUT, 0};
        const int ready = poll(&p, 1, static_cast<int>(kIdleWait.count()));
        if (ready == 0 && cs->pending() >= left) break;  // nothing taken for kIdleWait
        if (ready < 0 && errno != EINTR) break;
      }
      missed += static_cast<std::size_t>(
          std::count(cs->backlog.begin() + static_cast<std::ptrdiff_t>(cs->sent), cs->backlog.end(), '\n'));
      missed += cs->dropped_lines;
    }
    if (cs->watch) cs->watch.reset();
  }
  if (missed > 0) {
    const std::string line = fmt::format(
        "flowrun: {} line{} of the workers' output not shown here: the console did not take {} in time "
        "(the log files have every line)\n",
        missed, missed == 1 ? "" : "s", missed == 1 ? "it" : "them");
    // Never blocks on a stderr reader that takes nothing either.
    if (streams_[1]->nonblocking()) {
      const ssize_t written = ::write(streams_[1]->fd, line.data(), line.size());
      (void)written;
    } else {
      write_all(err_fd_, line.data(), line.size());
    }
  }
  for (auto& cs : streams_) {
    if (cs->own_fd >= 0) close(cs->own_fd);
  }
}

void ConsoleWriter::write(int i, std::string& text, bool droppable) {
  if (text.empty()) return;
  Stream& cs = *streams_[i];
  if (!cs.nonblocking()) {
    write_all(cs.fd, text.data(), text.size());
    text.clear();
    return;
  }
  cs.write_some();
  const std::size_t room = cs.idle || reader_wait_ns_ == 0 ? kConsoleBacklog : kConsoleBacklogCap;
  if (droppable && cs.pending() + text.size() > room) {
    const auto lines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
    cs.dropped_lines += lines;
    cs.dropped_total += lines;
  } else {
    cs.append(text);
  }
  text.clear();
  cs.write_some();
  wait_for_room(i);
  update_hold();
}

void ConsoleWriter::update_hold() {
  if (!hold_ || reader_wait_ns_ == 0) return;
  bool full = false, drained = true;
  for (auto& cs : streams_) {
    if (cs->idle) continue;  // dropping: holding the ranks would not help its reader
    full = full || cs->full();
    drained = drained && !cs->held();
  }
  if (!holding_ && full) {
    holding_ = true;
    hold_(true);
    watch_reader();
  } else if (holding_ && drained) {
    holding_ = false;
    idle_timer_.cancel();
    hold_(false);
  }
}

void ConsoleWriter::watch_reader() {
  // The earliest moment the reader of a stream that keeps the workers held
  // has taken nothing for the wait.
  std::int64_t due = 0;
  for (auto& cs : streams_) {
    if (cs->idle || !cs->held()) continue;
    const std::int64_t at = cs->taken_ns + reader_wait_ns_;
    due = due == 0 ? at : std::min(due, at);
  }
  if (due == 0) return;
  idle_timer_.expires_after(std::chrono::nanoseconds(std::max<std::int64_t>(0, due - monotonic_now_ns())));
  idle_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !holding_) return;
    const std::int64_t now = monotonic_now_ns();
    for (auto& cs : streams_) {
      if (!cs->idle && cs->held() && now - cs->taken_ns >= reader_wait_ns_) cs->idle = true;
    }
    update_hold();
    if (holding_) watch_reader();
  });
}

std::size_t ConsoleWriter::take_dropped() {
  std::size_t dropped = 0;
  for (auto& cs : streams_) {
    dropped += cs->dropped_total;
    cs->dropped_total = 0;
    cs->dropped_lines = 0;  // the caller says them: the console does not say them again
  }
  return dropped;
}

void ConsoleWriter::wait_for_room(int i) {
  Stream& cs = *streams_[i];
  if (cs.pending() == 0 && cs.dropped_lines == 0) return;
  if (cs.waiting || !cs.watch) return;
  cs.waiting = true;
  cs.watch->async_wait(
      asio::posix::stream_descriptor::wait_write, [this, i](const boost::system::error_code& ec) {
        Stream& s = *streams_[i];
        s.waiting = false;
        if (ec) return;
        const bool was_idle = s.idle;
        if (s.write_some() && s.dropped_lines > 0) {
          // The reader takes output again: say what it missed first.
          s.backlog = fmt::format(
              "flowrun: {} line{} of the workers' output not shown here: the console "
              "did not take {} in time (the log files have every line)\n",
              s.dropped_lines, s.dropped_lines == 1 ? "" : "s", s.dropped_lines == 1 ? "it" : "them");
          s.dropped_lines = 0;
          s.write_some();
        }
        wait_for_room(i);
        if (was_idle != s.idle || holding_) update_hold();
      });
}

}  // namespace flowrun
