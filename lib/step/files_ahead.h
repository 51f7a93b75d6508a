// The files of a step's ranks on this host, made on a thread of their own
// while the ranks before each spawn: its directory and out/, the removal of
// an earlier attempt's traceback and end record, and its two log files,
// opened (created empty). A rank's start waits only for its own files and
// takes its logs' descriptors from the thread. On a disk where a new inode
// is dear (ext4 without a journal, minutes after many files were deleted:
// tens of microseconds each) making them took a third of the start-up of 8
// ranks of /bin/true; opening the logs (each through its directories, never
// through a link) was 8% of the work of the thread that starts the
// ranks. It holds the logs of a few ranks ahead at most (kMaxHeld), which
// are among those the group needs once they run; the count of descriptors
// a group needs (require_descriptors, through GroupOptions::logs_held)
// counts them once, and stays the first thing to meet a low limit, with
// descriptors left to say it and to close the run's record. release() at
// the attempt's end closes what no start took. Internal to lib/step.
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

  // A rank's directory and out/ made, an earlier attempt's traceback and end
  // record removed: what the thread does for each rank before its logs, and
  // what a group without the thread does itself. Throws Error.
  static void prepare(const Rank& r);

  // Starts making `ranks`' files, in their order.
  explicit FilesAhead(std::vector<Rank> ranks);
  ~FilesAhead();  // waits for the thread
  FilesAhead(const FilesAhead&) = delete;
  FilesAhead& operator=(const FilesAhead&) = delete;

  // GroupOptions::open_log: a rank's log `path` (open_output_file: -1 with
  // errno set) once its rank's files are made, the thread's descriptor when
  // it could open it, else opened here (what cannot be opened, a FIFO in its
  // place, is said as before); rethrows the Error its rank's directory could
  // not be made with. Another path is opened at once.
  int open_log(const std::string& path);

  // GroupOptions::logs_held: the logs opened ahead and not yet taken.
  std::size_t held() const;

  // Closes the logs no start took, and those the thread opens from now on:
  // the attempt is over (or failed before its ranks started). The destructor
  // does it too.
  void release();

  static constexpr std::size_t kMaxHeld = 16;  // descriptors: 8 ranks' logs

 private:
  void run();

  std::vector<Rank> ranks_;
  std::map<std::string, std::size_t> rank_of_;  // a log's path: its rank's index
  mutable std::mutex mutex_;
  std::condition_variable made_;
  std::size_t ready_ = 0;              // the ranks whose files are made
  std::exception_ptr failed_;          // the rank ready_'s, when its directory could not be made
  std::map<std::string, int> opened_;  // a log's path: its descriptor, opened ahead and not yet taken
  std::size_t wanted_ = 0;  // the last rank a start waits for: the thread makes it whatever it holds
  bool released_ = false;
  std::condition_variable room_;  // a log taken, a rank wanted, or released
  std::thread thread_;
};

}  // namespace flowrun
