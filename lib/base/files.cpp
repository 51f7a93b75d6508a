#include "flowrun/files.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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
  const std::string kept = rank_dir + "/attempt" + std::to_string(attempt);
  bool made = false;
  for (const char* name : {"stdout.log", "stderr.log", "error.json", "out"}) {
    const std::string from = rank_dir + "/" + name;
    struct stat st {};
    if (lstat(from.c_str(), &st) != 0) continue;
    if (!made) {
      make_dirs(kept);
      made = true;
    }
    if (std::rename(from.c_str(), (kept + "/" + name).c_str()) != 0)
      throw Error("cannot keep attempt " + std::to_string(attempt) + "'s " + from + " in " + kept + ": " +
                  std::strerror(errno));
  }
  return made ? kept : std::string();
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
