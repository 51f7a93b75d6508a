// A glob is matched in the workdir, which every run of a flow there shares,
// and a file counts when its mtime is after the step's start: two live runs
// in one workdir would each take the other's model.pt as its own. The lock
// is the workdir's, not a flow's: a copy of the flow under another name
// writes the same files. A step that writes only into $FLOWRUN_OUTPUT_DIR
// (each run's own) takes none.
#include "workdir_lock.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flowrun/error.h"
#include "flowrun/util.h"

namespace flowrun {

namespace {

// What the lock's line says of its holder ("run RUN of flow FLOW (flowrun
// pid PID on HOST)"), printable: the file may be another user's.
std::string holder_of(int fd) {
  char buf[512] = {};
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  std::string line(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  line = line.substr(0, line.find('\n'));
  std::vector<std::string> words;
  for (std::size_t at = 0; at < line.size();) {
    const std::size_t space = std::min(line.find(' ', at), line.size());
    words.push_back(line.substr(at, space - at));
    at = space + 1;
  }
  if (words.size() != 4) return "another flowrun";
  return fmt::format("run {} of flow {} (flowrun pid {} on {})", printable(words[2]), printable(words[3]),
                     printable(words[0]), printable(words[1]));
}

// The lock file of `workdir`, opened without following a link and without
// blocking (a FIFO planted in its place is not a lock): an fd, or -1 and
// *why for a warning.
int open_lock(const std::string& workdir, std::string* why) {
  UniqueFd dir(open(workdir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir && mkdirat(dir.get(), ".flowrun", 0755) != 0 && errno != EEXIST) dir.reset();
  UniqueFd sub(dir ? openat(dir.get(), ".flowrun", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1);
  if (!sub) {
    *why = fmt::format("cannot open {}/.flowrun: {}", workdir, std::strerror(errno));
    return -1;
  }
  const int flags = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
  int fd = openat(sub.get(), "outputs.lock", O_RDWR | O_CREAT | flags, 0644);
  if (fd < 0 && (errno == EACCES || errno == EROFS))  // another user's lock: it locks all the same
    fd = openat(sub.get(), "outputs.lock", O_RDONLY | flags);
  struct stat st {};
  if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    close(fd);
    fd = -1;
    errno = EINVAL;
  }
  if (fd < 0)
    *why = fmt::format("cannot open {}/.flowrun/outputs.lock: {}", workdir,
                       errno == EINVAL ? "it is not a regular file" : std::strerror(errno));
  return fd;
}

}  // namespace

WorkdirLocks WorkdirLocks::take(const Spec& spec, const std::string& run_id, const std::string& host) {
  std::vector<std::string> workdirs;
  for (const auto& step : spec.steps) {
    if (step.is_parallel() && !step.outputs.empty() &&
        std::find(workdirs.begin(), workdirs.end(), step.workdir) == workdirs.end())
      workdirs.push_back(step.workdir);
  }
  WorkdirLocks locks;
  for (const auto& workdir : workdirs) {
    std::string why;
    UniqueFd fd(open_lock(workdir, &why));
    if (!fd) {
      locks.warnings_.push_back(fmt::format(
          "flowrun: warning: {}; another run gathering outputs from {} at the same time would not be "
          "detected",
          why, workdir));
      continue;
    }
    int rc;
    do {
      rc = flock(fd.get(), LOCK_EX | LOCK_NB);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0 && errno == EWOULDBLOCK)
      throw Error(
          fmt::format("the workdir {} is in use by {}, which gathers its outputs from there too; each run "
                      "would take the other's files for its own. Wait until it ends, or give this run a "
                      "workdir of its own (the spec's workdir:), or have the ranks write into "
                      "$FLOWRUN_OUTPUT_DIR, which is each run's own",
                      workdir, holder_of(fd.get())),
          kExitUsage);
    if (rc != 0) {
      locks.warnings_.push_back(fmt::format(
          "flowrun: warning: cannot lock {}/.flowrun/outputs.lock: {}; another run gathering outputs from "
          "{} at the same time would not be detected",
          workdir, std::strerror(errno), workdir));
      continue;
    }
    const std::string line = fmt::format("{} {} {} {}\n", getpid(), host.empty() ? "-" : host, run_id,
                                         spec.name.empty() ? "-" : spec.name);
    if (ftruncate(fd.get(), 0) != 0 || pwrite(fd.get(), line.data(), line.size(), 0) < 0) {
      // The lock holds all the same (a lock of another user's, opened to
      // read); only the name of its holder is missing.
    }
    locks.held_.push_back(std::move(fd));
  }
  return locks;
}

}  // namespace flowrun
