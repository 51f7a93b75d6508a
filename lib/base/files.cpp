#include "flowrun/files.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flowrun/beneath.h"
#include "flowrun/error.h"

namespace flowrun {

void make_dirs(const std::string& path, mode_t mode) {
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    const std::string partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), mode) != 0 && errno != EEXIST)
      throw Error("cannot create the directory " + partial + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error("cannot create the directory " + path + ": it exists and is not a directory");
}

std::string keep_attempt(const std::string& rank_dir, int attempt) {
  // Everything happens relative to the rank's directory, opened without
  // following a symlink, and to attemptN/ made in it: a rank that put a link
  // in either's place cannot make flowrun move its files elsewhere.
  const std::string name = "attempt" + std::to_string(attempt);
  const std::string kept = rank_dir + "/" + name;
  auto fail = [&](const std::string& what) {
    throw Error("cannot keep attempt " + std::to_string(attempt) + "'s " + what + " in " + kept + ": " +
                std::strerror(errno));
  };
  UniqueFd dir(open(rank_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) {
    if (errno == ENOENT) return {};
    fail(rank_dir);
  }
  UniqueFd into;
  for (const char* entry : {"stdout.log", "stderr.log", "error.json", "out"}) {
    struct stat st {};
    if (fstatat(dir.get(), entry, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!into) {
      if (mkdirat(dir.get(), name.c_str(), 0755) != 0 && errno != EEXIST) fail(rank_dir + "/" + entry);
      into.reset(openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!into) fail(rank_dir + "/" + entry);
    }
    if (renameat(dir.get(), entry, into.get(), entry) != 0) fail(rank_dir + "/" + entry);
  }
  return into ? kept : std::string();
}

int try_write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int err = 0;
  for (std::size_t done = 0; done < text.size() && err == 0;) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  // A file system may report a full disk only when the file is closed (NFS).
  if (close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) unlink(tmp.c_str());
  return err;
}

void write_file(const std::string& path, const std::string& text) {
  if (const int err = try_write_file(path, text); err != 0)
    throw Error("cannot write " + path + ": " + std::strerror(err));
}

}  // namespace flowrun
