#include "flowrun/files.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <ftw.h>
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

std::optional<std::string> try_read_file(const std::string& path, std::size_t limit, int* err) {
  int fd;
  do {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (err != nullptr) *err = errno;
    return std::nullopt;
  }
  std::string text;
  char buf[65536];
  while (text.size() < limit) {
    const ssize_t n = read(fd, buf, std::min(sizeof buf, limit - text.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (err != nullptr) *err = errno;
      close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  return text;
}

std::string read_file(const std::string& path, std::size_t limit) {
  int err = 0;
  auto text = try_read_file(path, limit, &err);
  if (!text) throw Error("cannot read " + path + ": " + std::strerror(err));
  return std::move(*text);
}

std::string scratch_parent(const char* tmpdir) {
  return tmpdir != nullptr && tmpdir[0] == '/' ? std::string(tmpdir) : std::string("/tmp");
}

std::string make_private_dir(const std::string& parent, const std::string& name) {
  const std::string fix = " (set TMPDIR to a directory of your own)";
  struct stat st {};
  if (stat(parent.c_str(), &st) != 0)
    throw Error("cannot make a private directory in " + parent + ": " + std::strerror(errno) + fix);
  if (!S_ISDIR(st.st_mode))
    throw Error("cannot make a private directory in " + parent + ": not a directory" + fix);
  // Another user who may rename entries of PARENT could move ours away and
  // put theirs in its place between two uses of the path.
  if (st.st_uid != geteuid() && st.st_uid != 0)
    throw Error("refusing to make a private directory in " + parent + ": it belongs to another user (uid " +
                std::to_string(st.st_uid) + ")" + fix);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
    throw Error("refusing to make a private directory in " + parent +
                ": other users may write it and it is not sticky (chmod +t)" + fix);
  std::string safe;
  for (char c : name.substr(0, 64)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    safe.push_back(ok ? c : '_');
  }
  std::string path = parent + (parent.ends_with('/') ? "" : "/") + safe + "-XXXXXX";
  if (mkdtemp(path.data()) == nullptr)
    throw Error("cannot make a private directory in " + parent + ": " + std::strerror(errno) + fix);
  chmod(path.c_str(), 0700);  // whatever the umask took away from the owner
  struct stat made {};
  const int err = lstat(path.c_str(), &made) != 0 ? errno : 0;
  if (err != 0 || !S_ISDIR(made.st_mode) || made.st_uid != geteuid() || (made.st_mode & 07777) != 0700) {
    if (err == 0 && S_ISDIR(made.st_mode)) rmdir(path.c_str());
    throw Error("the private directory " + path + " is not what mkdtemp made (" +
                (err != 0 ? std::string(std::strerror(err)) : "not a directory of this user with mode 0700") +
                "); something else changes " + parent + fix);
  }
  return path;
}

void remove_tree(const std::string& path) {
  nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, FTW*) {
        remove(p);
        return 0;  // go on: remove what can be removed
      },
      16, FTW_DEPTH | FTW_PHYS);
}

std::string keep_attempt(const std::string& rank_dir, int attempt, const std::vector<std::string>& also) {
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
  std::vector<std::string> entries = {"stdout.log", "stderr.log", "error.json", "end.json", "out"};
  entries.insert(entries.end(), also.begin(), also.end());
  for (const std::string& name_of_entry : entries) {
    const char* entry = name_of_entry.c_str();
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

int replace_symlink(const std::string& path, const std::string& target) {
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  unlink(tmp.c_str());  // one a killed flowrun of this pid left
  if (symlink(target.c_str(), tmp.c_str()) != 0) return errno;
  if (rename(tmp.c_str(), path.c_str()) == 0) return 0;
  const int err = errno;
  unlink(tmp.c_str());
  return err;
}

void write_file(const std::string& path, const std::string& text) {
  if (const int err = try_write_file(path, text); err != 0)
    throw Error("cannot write " + path + ": " + std::strerror(err));
}

}  // namespace flowrun
