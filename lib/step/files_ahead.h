// The files of a step's ranks on this host, made on a thread of their own
// while the ranks before each spawn: its directory and out/, the removal of
// an earlier attempt's traceback and end record, and its two log files,
// opened. A rank waits only for its own files. On a disk where a new inode
// is dear (ext4 without a journal, minutes after many files were deleted:
// tens of microseconds each) this took a third of the start-up of 8 ranks
// of /bin/true. Internal to lib/step.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace flowrun {

class FilesAhead {
 public:
  struct Rank {
    std::string out_dir;               // made with its parent, the rank's directory
    std::string error_file, end_file;  // an earlier attempt's, removed
    std::string stdout_log, stderr_log;
  };

  // Starts making `ranks`' files, in their order.
  explicit FilesAhead(std::vector<Rank> ranks);
  ~FilesAhead();  // waits for the thread; closes the logs nobody took
  FilesAhead(const FilesAhead&) = delete;
  FilesAhead& operator=(const FilesAhead&) = delete;

  // GroupOptions::open_log: the descriptor of a rank's log `path` once its
  // rank's files are made, as open_output_file gives it (-1 with errno
  // set); rethrows the Error its rank's directory could not be made with.
  // Another path is opened here and now.
  int open_log(const std::string& path);

 private:
  void run();

  std::vector<Rank> ranks_;
  std::map<std::string, std::size_t> slot_;  // a log's path: 2 * its rank's index, + 1 for stderr
  std::mutex mutex_;
  std::condition_variable made_;
  std::vector<int> fds_, errs_;  // by slot; -1 once taken
  std::size_t ready_ = 0;        // the ranks whose files are made
  std::exception_ptr failed_;    // the rank ready_'s, when its directory could not be made
  std::thread thread_;
};

}  // namespace flowrun
