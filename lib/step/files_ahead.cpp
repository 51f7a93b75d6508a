#include "files_ahead.h"

#include <cerrno>
#include <unistd.h>

#include "flowrun/files.h"

namespace flowrun {

FilesAhead::FilesAhead(std::vector<Rank> ranks)
    : ranks_(std::move(ranks)), fds_(2 * ranks_.size(), -1), errs_(2 * ranks_.size(), 0) {
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    slot_.emplace(ranks_[i].stdout_log, 2 * i);
    slot_.emplace(ranks_[i].stderr_log, 2 * i + 1);
  }
  thread_ = std::thread([this] { run(); });
}

FilesAhead::~FilesAhead() {
  thread_.join();
  for (const int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

void FilesAhead::run() {
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    const Rank& r = ranks_[i];
    int fds[2] = {-1, -1}, errs[2] = {0, 0};
    std::exception_ptr failed;
    try {
      make_dirs(r.out_dir);
      ::unlink(r.error_file.c_str());  // a traceback from an earlier attempt is not this one's
      ::unlink(r.end_file.c_str());    // nor an end
      fds[0] = open_output_file(r.stdout_log, false, &errs[0]);
      fds[1] = open_output_file(r.stderr_log, false, &errs[1]);
    } catch (...) {
      failed = std::current_exception();
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    if (failed) {
      failed_ = failed;
      made_.notify_all();
      return;  // the ranks after it are not started
    }
    for (std::size_t k = 0; k < 2; ++k) {
      fds_[2 * i + k] = fds[k];
      errs_[2 * i + k] = errs[k];
    }
    ++ready_;
    made_.notify_all();
  }
}

int FilesAhead::open_log(const std::string& path) {
  const auto it = slot_.find(path);
  if (it == slot_.end()) {
    int err = 0;
    const int fd = open_output_file(path, false, &err);
    if (fd < 0) errno = err;
    return fd;
  }
  const std::size_t slot = it->second, rank = slot / 2;
  std::unique_lock<std::mutex> lock(mutex_);
  made_.wait(lock, [&] { return ready_ > rank || failed_; });
  if (ready_ <= rank) std::rethrow_exception(failed_);
  const int fd = fds_[slot];
  fds_[slot] = -1;
  if (fd < 0) errno = errs_[slot];
  return fd;
}

}  // namespace flowrun
