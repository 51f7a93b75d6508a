#include "flowrun/rank_output.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include "flowrun/clock.h"
#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/path.h"
#include "flowrun/supervisor.h"

namespace flowrun {

namespace {

// Console output waits for the end of the loop's current batch of ready
// pipes, so one write carries the lines of every rank that was ready, unless
// it grows past this.
constexpr std::size_t kConsoleBatch = 1 << 20;

}  // namespace

ConsoleBatch::ConsoleBatch(boost::asio::io_context& io, std::function<void(std::string&, std::string&)> write)
    : io_(io), write_(std::move(write)) {}

ConsoleBatch::~ConsoleBatch() = default;

void ConsoleBatch::fold(const std::string& step, const LogStyle& style) {
  flush();
  for (auto& f : folders_) f.reset();
  if (style.fold_ns <= 0) return;
  for (auto& f : folders_)
    f = std::make_unique<LineFolder>(LineFolder::Options{step, style.color, style.fold_ns});
  if (!timer_) timer_ = std::make_unique<boost::asio::steady_timer>(io_);
}

void ConsoleBatch::schedule() {
  arm();
  if (out.size() + err.size() >= kConsoleBatch) {
    write_ready();
    return;
  }
  if (posted_ || (out.empty() && err.empty())) return;
  posted_ = true;
  boost::asio::post(io_, [this] {
    posted_ = false;
    write_ready();
  });
}

void ConsoleBatch::flush() {
  if (folders_[0]) folders_[0]->flush(out);
  if (folders_[1]) folders_[1]->flush(err);
  if (!out.empty() || !err.empty()) write_ready();
}

void ConsoleBatch::arm() {
  if (!timer_) return;
  std::int64_t due = INT64_MAX;
  for (const auto& f : folders_)
    if (f) due = std::min(due, f->next_due_ns());
  if (due == INT64_MAX || (armed_ns_ != 0 && armed_ns_ <= due)) return;
  armed_ns_ = due;
  timer_->expires_after(std::chrono::nanoseconds(std::max<std::int64_t>(due - monotonic_now_ns(), 0)));
  timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    armed_ns_ = 0;
    const std::int64_t now = monotonic_now_ns();
    if (folders_[0]) folders_[0]->due(now, out);
    if (folders_[1]) folders_[1]->due(now, err);
    if (!out.empty() || !err.empty()) write_ready();
    arm();
  });
}

struct RankLog::Stream {
  const std::string* path = nullptr;
  int fd = -1;
  bool opened = false;  // created (or tried): a failed file is not tried again
  bool closed = false;
  std::optional<LineSplitter> splitter;
  std::string* console = nullptr;  // the batch's out or err
  LineFolder* folder = nullptr;    // the batch's, when it folds
  int source = -1;                 // this stream's in the folder
};

RankLog::RankLog(Options options, ConsoleBatch& console)
    : options_(std::move(options)),
      console_(console),
      out_(std::make_unique<Stream>()),
      err_(std::make_unique<Stream>()),
      tail_(20, 4096) {
  out_->path = &options_.stdout_log;
  err_->path = &options_.stderr_log;
  out_->console = &console_.out;
  err_->console = &console_.err;
  if (!options_.prefix.empty() && options_.shows.out) out_->splitter.emplace(options_.prefix, options_.style);
  if (!options_.prefix.empty() && options_.shows.err) err_->splitter.emplace(options_.prefix, options_.style);
  for (bool is_err : {false, true}) {
    Stream& s = stream(is_err);
    s.folder = console_.folder(is_err);
    if (s.splitter && s.folder) {
      s.source = s.folder->add(options_.prefix, options_.rank);
      s.splitter->fold_into(s.folder, s.source);
    }
  }
}

RankLog::~RankLog() {
  for (Stream* s : {out_.get(), err_.get()}) {
    if (s->fd >= 0) ::close(s->fd);
  }
}

RankLog::Stream& RankLog::stream(bool is_err) { return is_err ? *err_ : *out_; }

// The stream's descriptor, opening the file the first time; -1 with errno
// set when it could not be created, and -1 after that.
int RankLog::file(Stream& s) {
  if (s.opened || s.path->empty()) return s.fd;
  s.opened = true;
  if (options_.open) {
    s.fd = options_.open(*s.path);
    return s.fd;
  }
  // Never through a link or into a FIFO a rank left in its directory, and
  // beneath the anchored run directory (open_output_file).
  int err = 0;
  s.fd = open_output_file(*s.path, false, &err);
  if (s.fd < 0) errno = err;  // kErrNotRegular included: file_error_text says it
  return s.fd;
}

void RankLog::open_files() {
  for (Stream* s : {out_.get(), err_.get()}) {
    if (!s->opened && !s->path->empty() && file(*s) < 0)
      throw Error("cannot create the log file " + *s->path + ": " + file_error_text(errno));
  }
}

std::optional<RankLog::WriteError> RankLog::keep(bool is_err, std::string_view data) {
  Stream& s = stream(is_err);
  if (is_err) tail_.feed(data);
  if (s.path->empty() || (s.opened && s.fd < 0)) return std::nullopt;  // nothing kept, or lost already
  const int fd = file(s);
  if (fd >= 0 && write_all(fd, data.data(), data.size())) return std::nullopt;
  const int err = errno;
  if (s.fd >= 0) ::close(s.fd);
  s.fd = -1;
  return WriteError{log_write_error(options_.who, *s.path, err), err};
}

void RankLog::show(bool is_err, std::string_view data, std::int64_t now_ns) {
  Stream& s = stream(is_err);
  if (s.splitter) s.splitter->feed(data, now_ns, *s.console);
}

void RankLog::close(bool is_err) {
  Stream& s = stream(is_err);
  if (s.closed) return;
  s.closed = true;
  if (!s.opened && !s.path->empty() && options_.create_later) {
    s.opened = true;
    options_.create_later(*s.path);
  } else {
    file(s);
  }
  if (s.splitter) s.splitter->finish(*s.console);
  if (s.splitter && s.folder) s.folder->close(s.source, *s.console);
  s.splitter.reset();
  if (s.fd >= 0) ::close(s.fd);
  s.fd = -1;
}

std::string RankLog::tail() const { return tail_.text(); }

std::string log_write_error(const std::string& who, const std::string& path, int err) {
  return fmt::format("cannot write {}{} in {}: {}", who, base_name(path), dir_name(path),
                     file_error_text(err));
}

std::string log_failed_message(const std::string& step, const std::string& write_error, bool stopping,
                               int err, const std::string& run_dir) {
  return fmt::format("flowrun: error: step '{}': {}; {}{}", step, write_error,
                     stopping ? "the step is stopping" : "stopping the step",
                     run_dir.empty() ? "" : write_failure_hint(err, run_dir));
}

}  // namespace flowrun
