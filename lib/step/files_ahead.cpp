#include "files_ahead.h"

#include <cerrno>
#include <unistd.h>

#include "flowrun/files.h"

namespace flowrun {

FilesAhead::FilesAhead(std::vector<Rank> ranks) : ranks_(std::move(ranks)) {
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    rank_of_.emplace(ranks_[i].stdout_log, i);
    rank_of_.emplace(ranks_[i].stderr_log, i);
  }
  thread_ = std::thread([this] { run(); });
}

FilesAhead::~FilesAhead() { thread_.join(); }

void FilesAhead::prepare(const Rank& r) {
  make_dirs(r.out_dir);
  ::unlink(r.error_file.c_str());  // a traceback from an earlier attempt is not this one's
  ::unlink(r.end_file.c_str());    // nor an end
}

void FilesAhead::run() {
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    const Rank& r = ranks_[i];
    std::exception_ptr failed;
    try {
      prepare(r);
      // Created, and closed at once; what cannot be created (a FIFO in its
      // place) the rank's start meets again, and says.
      for (const std::string* log : {&r.stdout_log, &r.stderr_log}) {
        int err = 0;
        const int fd = open_output_file(*log, false, &err);
        if (fd >= 0) ::close(fd);
      }
    } catch (...) {
      failed = std::current_exception();
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    if (failed) {
      failed_ = failed;
      made_.notify_all();
      return;  // the ranks after it are not started
    }
    ++ready_;
    made_.notify_all();
  }
}

int FilesAhead::open_log(const std::string& path) {
  if (const auto it = rank_of_.find(path); it != rank_of_.end()) {
    const std::size_t rank = it->second;
    std::unique_lock<std::mutex> lock(mutex_);
    made_.wait(lock, [&] { return ready_ > rank || failed_; });
    if (ready_ <= rank) std::rethrow_exception(failed_);
  }
  int err = 0;
  const int fd = open_output_file(path, false, &err);
  if (fd < 0) errno = err;
  return fd;
}

}  // namespace flowrun
