#include "files_ahead.h"

#include <cerrno>
#include <unistd.h>
#include <utility>

#include "flowrun/files.h"

namespace flowrun {

FilesAhead::FilesAhead(std::vector<Rank> ranks) : ranks_(std::move(ranks)) {
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    rank_of_.emplace(ranks_[i].stdout_log, i);
    rank_of_.emplace(ranks_[i].stderr_log, i);
  }
  thread_ = std::thread([this] { run(); });
}

FilesAhead::~FilesAhead() {
  release();
  thread_.join();
}

void FilesAhead::release() {
  const std::lock_guard<std::mutex> lock(mutex_);
  released_ = true;
  for (const auto& [path, fd] : opened_) ::close(fd);
  opened_.clear();
  room_.notify_all();
}

void FilesAhead::prepare(const Rank& r) {
  make_dirs(r.out_dir);
  ::unlink(r.error_file.c_str());  // a traceback from an earlier attempt is not this one's
  ::unlink(r.end_file.c_str());    // nor an end
}

void FilesAhead::run() {
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    const Rank& r = ranks_[i];
    {
      // Few logs held at once: a limit of descriptors too low for the step
      // is met by the step's own count, with descriptors left to say it.
      std::unique_lock<std::mutex> lock(mutex_);
      room_.wait(lock, [&] { return opened_.size() < kMaxHeld || released_ || wanted_ >= i; });
    }
    std::exception_ptr failed;
    std::vector<std::pair<const std::string*, int>> opened;
    try {
      prepare(r);
      // What cannot be opened (a FIFO in its place) the rank's start meets
      // again, and says.
      for (const std::string* log : {&r.stdout_log, &r.stderr_log}) {
        int err = 0;
        const int fd = open_output_file(*log, false, &err);
        if (fd >= 0) opened.emplace_back(log, fd);
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
    for (const auto& [log, fd] : opened) {
      if (released_ || !opened_.emplace(*log, fd).second) ::close(fd);  // taken by nobody now
    }
    ++ready_;
    made_.notify_all();
  }
}

int FilesAhead::open_log(const std::string& path) {
  if (const auto it = rank_of_.find(path); it != rank_of_.end()) {
    const std::size_t rank = it->second;
    std::unique_lock<std::mutex> lock(mutex_);
    if (rank > wanted_) {
      wanted_ = rank;
      room_.notify_all();  // this rank's start waits: the thread goes on however many it holds
    }
    made_.wait(lock, [&] { return ready_ > rank || failed_; });
    if (ready_ <= rank) std::rethrow_exception(failed_);
    if (const auto held = opened_.find(path); held != opened_.end()) {
      const int fd = held->second;
      opened_.erase(held);
      room_.notify_all();
      return fd;
    }
  }
  int err = 0;
  const int fd = open_output_file(path, false, &err);
  if (fd < 0) errno = err;
  return fd;
}

std::size_t FilesAhead::held() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return opened_.size();
}

}  // namespace flowrun
