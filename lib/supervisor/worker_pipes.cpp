#include "worker_pipes.h"

#include <boost/asio/io_context.hpp>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include "flowrun/error.h"
#include "flowrun/logmux.h"

namespace flowrun {

namespace asio = boost::asio;

namespace {

constexpr std::size_t kReadChunk = 256 * 1024;
constexpr int kReadsPerWakeup = 4;  // fairness between ranks that flood

}  // namespace

WorkerPipes::WorkerPipes(asio::io_context& io, WorkerList& workers, Sink sink,
                         std::function<void()> after_read)
    : io_(io),
      workers_(workers),
      sink_(std::move(sink)),
      after_read_(std::move(after_read)),
      buffer_(std::make_unique_for_overwrite<char[]>(kReadChunk)) {}

void WorkerPipes::open_stream(Stream& s, bool is_err, int* child_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("cannot create a pipe: ") + std::strerror(errno));
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  fcntl(fds[0], F_SETPIPE_SZ, 1 << 20);  // fewer wakeups when a rank floods; best effort
  s.fd = fds[0];
  *child_end = fds[1];
  s.is_err = is_err;
  s.desc = std::make_unique<asio::posix::stream_descriptor>(io_, s.fd);
}

int WorkerPipes::stdin_with(const std::string& text) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("cannot create a pipe: ") + std::strerror(errno));
  const bool ok = text.size() <= 4096 && write_all(fds[1], text.data(), text.size());
  close(fds[1]);
  if (!ok) {
    close(fds[0]);
    throw Error("cannot write a process's standard input");
  }
  return fds[0];
}

void WorkerPipes::open_log(Worker& w, const GroupOptions& options, ConsoleBatch& batch) {
  const WorkerLaunch& launch = *w.launch;
  RankLog::Options o;
  o.stdout_log = launch.stdout_log;
  o.stderr_log = launch.stderr_log;
  o.open = options.open_log;
  o.style = options.style;
  o.shows = launch.console;
  o.rank = launch.label.empty() ? launch.rank : -1;
  if (launch.console.any()) {
    o.prefix = launch.label.empty() ? log_prefix(options.step, launch.rank, options.style.color)
                                    : log_prefix(launch.label, -1, options.style.color);
  }
  o.who = launch.rank >= 0        ? fmt::format("rank {}'s ", launch.rank)
          : !launch.label.empty() ? launch.label + "'s "
                                  : std::string("its ");
  w.log = std::make_unique<RankLog>(std::move(o), batch);
  w.log->open_files();
}

SpawnResult WorkerPipes::spawn(Worker& w, const WorkerLaunch& launch) {
  int out_end = -1, err_end = -1;
  open_stream(w.out, false, &out_end);
  open_stream(w.err, true, &err_end);
  SpawnRequest request;
  request.argv = launch.argv;
  request.env = launch.env;
  request.workdir = launch.workdir;
  request.stdout_fd = out_end;
  request.stderr_fd = err_end;
  request.cpus = launch.cpus;
  int in_end = -1;
  if (!launch.stdin_text.empty()) in_end = stdin_with(launch.stdin_text);
  request.stdin_fd = in_end;
  w.record.start_unix_ns = unix_now_ns();
  SpawnResult spawned;
  try {
    spawned = spawn_process(request);
  } catch (...) {
    close(out_end);
    close(err_end);
    if (in_end >= 0) close(in_end);
    throw;
  }
  close(out_end);
  close(err_end);
  if (in_end >= 0) close(in_end);
  return spawned;
}

void WorkerPipes::start_read(Worker& w, Stream& s) {
  s.desc->async_wait(asio::posix::stream_descriptor::wait_read,
                     [this, &w, &s](const boost::system::error_code& ec) {
                       if (ec || !s.open()) return;
                       if (!output_paused_) {
                         drain(w, s, kReadsPerWakeup);
                         after_read_();
                       }
                       if (!s.open()) return;
                       if (output_paused_) {
                         s.parked = true;  // resume_output() watches it again
                       } else {
                         start_read(w, s);
                       }
                     });
}

void WorkerPipes::hold_output(Holder by, bool hold) {
  if (!hold) {
    resume_output(by);
    return;
  }
  held_by_ |= by;
  if (output_paused_) return;
  output_paused_ = true;
  paused_at_ns_ = monotonic_now_ns();
}

void WorkerPipes::resume_output(Holder by) {
  held_by_ &= ~static_cast<unsigned>(by);
  if (!output_paused_ || held_by_ != 0) return;
  output_paused_ = false;
  // A worker held back by flowrun was not silent: the pause does not count
  // towards its stall_timeout.
  const std::int64_t paused_for = monotonic_now_ns() - paused_at_ns_;
  for (auto& w : workers_) w.last_output_ns += paused_for;
  for (auto& w : workers_) {
    for (Stream* s : {&w.out, &w.err}) {
      if (!s->parked) continue;
      s->parked = false;
      if (s->open()) start_read(w, *s);
    }
  }
}

void WorkerPipes::drain(Worker& w, Stream& s, int reads) {
  const std::int64_t now = monotonic_now_ns();
  for (int i = 0; i < reads && s.open() && !output_paused_; ++i) {
    const ssize_t n = read(s.fd, buffer_.get(), kReadChunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;  // EAGAIN: nothing more now
    if (n == 0) {
      close_stream(w, s);
      break;
    }
    const std::string_view data(buffer_.get(), static_cast<std::size_t>(n));
    w.last_output_ns = now;
    sink_(w, s.is_err, data, now);
    if (static_cast<std::size_t>(n) < kReadChunk) break;
  }
}

void WorkerPipes::close_stream(Worker& w, Stream& s) {
  if (!s.open()) return;
  w.log->close(s.is_err);
  if (s.desc) {
    s.desc->cancel();
    s.desc->release();
    s.desc.reset();
  }
  close(s.fd);
  s.fd = -1;
}

void WorkerPipes::drain_rest() {
  for (auto& w : workers_) {
    for (Stream* s : {&w.out, &w.err}) {
      while (s->open()) {
        while (output_paused_) io_.run_one();
        drain(w, *s, 1 << 20);
        if (s->open() && !output_paused_) close_stream(w, *s);  // EAGAIN with no writer left: done
      }
    }
  }
}

}  // namespace flowrun
