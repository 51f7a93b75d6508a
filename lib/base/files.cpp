#include "flowrun/files.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <grp.h>
#include <memory>
#include <mutex>
#include <pwd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "flowrun/beneath.h"
#include "flowrun/error.h"
#include "flowrun/fd.h"
#include "flowrun/path.h"
#include "flowrun/text.h"

namespace flowrun {

void make_dirs(const std::string& path, mode_t mode) {
  // The directory itself first, and only where that finds a component
  // missing, its parent (the same way up): every rank's out/ under its
  // step's directory, thousands of them, is three calls, not one for each
  // component of the path.
  if (!path.empty() && mkdir(path.c_str(), mode) == 0) return;
  int err = path.empty() ? ENOENT : errno;
  if (err == ENOENT) {
    std::size_t end = path.size();
    while (end > 1 && path[end - 1] == '/') --end;  // "a/b/": its parent is "a"
    const std::size_t slash = path.rfind('/', end - 1);
    if (slash != std::string::npos && slash > 0) {
      make_dirs(path.substr(0, slash), mode);
      if (mkdir(path.c_str(), mode) == 0) return;
      err = errno;
    }
  }
  if (err != EEXIST)
    throw Error("cannot create the directory " + path + ": " + std::strerror(err), kExitFailure, err);
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error("cannot create the directory " + path + ": it exists and is not a directory", kExitFailure,
                ENOTDIR);
}

std::string file_error_text(int err) {
  return err == kErrNotRegular ? "not a regular file" : std::strerror(err);
}

namespace {

// `path` opened O_RDONLY | O_NONBLOCK when it is a regular file: looked at
// through O_PATH first (opening a FIFO or a device can block or act), then
// opened and checked to be the file looked at. -1 with *err.
int open_regular_file(const std::string& path, int* err) {
  int seen_fd;
  do {
    seen_fd = open(path.c_str(), O_PATH | O_CLOEXEC);
  } while (seen_fd < 0 && errno == EINTR);
  if (seen_fd < 0) {
    *err = errno;
    return -1;
  }
  const UniqueFd seen(seen_fd);
  struct stat before {};
  if (fstat(seen.get(), &before) != 0) {
    *err = errno;
    return -1;
  }
  if (!S_ISREG(before.st_mode)) {
    *err = kErrNotRegular;
    return -1;
  }
  int fd;
  do {
    fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  struct stat now {};
  if (fstat(fd, &now) != 0 || !S_ISREG(now.st_mode) || now.st_dev != before.st_dev ||
      now.st_ino != before.st_ino) {
    *err = kErrNotRegular;  // swapped between the look and the open
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

namespace {

// At most `limit` bytes of the open `fd`, closed after; every read that a
// signal interrupted retried.
std::optional<std::string> read_to_limit(int fd, std::size_t limit, int* err) {
  const UniqueFd closed_after(fd);
  return read_all(fd, limit, err);
}

}  // namespace

std::optional<std::string> try_read_file(const std::string& path, std::size_t limit, int* err) {
  int open_err = 0;
  const int fd = open_regular_file(path, &open_err);
  if (fd < 0) {
    if (err != nullptr) *err = open_err;
    return std::nullopt;
  }
  return read_to_limit(fd, limit, err);
}

std::optional<std::string> try_read_file_tail(const std::string& path, std::size_t bytes, int* err) {
  int open_err = 0;
  const int fd = open_regular_file(path, &open_err);
  if (fd < 0) {
    if (err != nullptr) *err = open_err;
    return std::nullopt;
  }
  const UniqueFd closed_after(fd);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    if (err != nullptr) *err = errno;
    return std::nullopt;
  }
  const auto size = static_cast<std::size_t>(std::max<off_t>(st.st_size, 0));
  const std::size_t from = size > bytes ? size - bytes : 0;
  if (from > 0 && lseek(fd, static_cast<off_t>(from), SEEK_SET) < 0) {
    if (err != nullptr) *err = errno;
    return std::nullopt;
  }
  return read_all(fd, bytes, err);
}

std::optional<std::string> try_read_given_file(const std::string& path, std::size_t limit, int* err) {
  int fd;
  do {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (err != nullptr) *err = errno;
    return std::nullopt;
  }
  return read_to_limit(fd, limit, err);
}

std::string read_file(const std::string& path, std::size_t limit) {
  int err = 0;
  auto text = try_read_file(path, limit, &err);
  if (!text) throw Error("cannot read " + path + ": " + file_error_text(err), kExitFailure, std::max(err, 0));
  return std::move(*text);
}

std::string scratch_parent(const char* tmpdir) {
  return tmpdir != nullptr && tmpdir[0] == '/' ? std::string(tmpdir) : std::string("/tmp");
}

std::string make_private_dir(const std::string& parent, const std::string& name) {
  const std::string fix = " (set TMPDIR to a directory of your own)";
  struct stat st {};
  if (stat(parent.c_str(), &st) != 0) {
    const int err = errno;
    throw Error("cannot make a private directory in " + parent + ": " + std::strerror(err) + fix,
                kExitFailure, err);
  }
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
  if (mkdtemp(path.data()) == nullptr) {
    const int err = errno;
    throw Error("cannot make a private directory in " + parent + ": " + std::strerror(err) + fix,
                kExitFailure, err);
  }
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

namespace {

// rm -rf as a walk from one open directory to the next: every call names an
// entry relative to the directory it is in, so no path is ever longer than a
// name (nftw's paths end at PATH_MAX, and a rank can build a tree deeper than
// that), and one descriptor is open at a time (a tree may be deeper than the
// descriptors a process may hold). Going up is openat(".."), checked against
// the device and inode seen on the way down: a directory moved meanwhile
// stops the walk instead of leading it elsewhere.
class TreeRemoval {
 public:
  explicit TreeRemoval(const std::string& root) : root_(root) {}

  std::string run() {
    UniqueFd fd = open_dir(AT_FDCWD, root_);
    if (!fd) {
      if (errno == ENOENT) return {};
      // A file or a link: removed, never followed.
      if ((errno != ENOTDIR && errno != ELOOP) || (unlink(root_.c_str()) != 0 && errno != ENOENT))
        note(root_, std::strerror(errno));
      return said();
    }
    levels_.push_back({});
    if (const int err = scan(fd.get())) {
      note(root_, std::strerror(err));
      return said();
    }
    while (levels_.size() > 1 || !levels_.back().subdirs.empty()) {
      Level& top = levels_.back();
      if (!top.subdirs.empty()) {
        std::string name = std::move(top.subdirs.back());
        top.subdirs.pop_back();
        UniqueFd child = open_dir(fd.get(), name);
        if (!child) {
          if (errno != ENOENT) failed(name, std::strerror(errno));
          continue;
        }
        levels_.push_back({std::move(name), {}, 0, 0, false});
        if (const int err = scan(child.get())) {
          name = std::move(levels_.back().name);
          levels_.pop_back();
          failed(name, std::strerror(err));
          continue;
        }
        fd = std::move(child);
        continue;
      }
      // Every entry of the top directory is handled: up, and remove it.
      UniqueFd parent(openat(fd.get(), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      struct stat st {};
      const Level done = std::move(levels_.back());
      levels_.pop_back();
      if (!parent || fstat(parent.get(), &st) != 0 || st.st_dev != levels_.back().dev ||
          st.st_ino != levels_.back().ino) {
        failed(done.name, "it was moved while it was being removed");
        return said();
      }
      fd = std::move(parent);
      if (unlinkat(fd.get(), done.name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT &&
          !(done.failed && errno == ENOTEMPTY))
        failed(done.name, std::strerror(errno));
    }
    fd.reset();
    if (rmdir(root_.c_str()) != 0 && errno != ENOENT && !(levels_.back().failed && errno == ENOTEMPTY))
      note(root_, std::strerror(errno));
    return said();
  }

 private:
  struct Level {
    std::string name;                  // in the directory above; "" for the root
    std::vector<std::string> subdirs;  // its directories still to remove
    dev_t dev = 0;
    ino_t ino = 0;
    bool failed = false;  // something beneath it is left
  };

  // `name` in `at` as a directory to read, never through a link. One this
  // user made without read or search permission (chmod 000 in a rank's
  // outputs) gets u+rwx first, through an O_PATH descriptor, not the name:
  // a link put in its place is never changed.
  static UniqueFd open_dir(int at, const std::string& name) {
    constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    UniqueFd fd(openat(at, name.c_str(), kFlags));
    if (fd || errno != EACCES) return fd;
    UniqueFd path(openat(at, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    const std::string proc = "/proc/self/fd/" + std::to_string(path.get());
    if (!path || fstat(path.get(), &st) != 0 || st.st_uid != geteuid() ||
        chmod(proc.c_str(), (st.st_mode & 07777) | S_IRWXU) != 0) {
      errno = EACCES;
      return fd;
    }
    return UniqueFd(openat(at, name.c_str(), kFlags));
  }

  // Reads the top level's directory `fd` whole, removes every entry that is
  // not a directory and keeps the directories' names for the walk. Returns 0,
  // or the errno of what kept it from being read.
  int scan(int fd) {
    Level& level = levels_.back();
    struct stat st {};
    if (fstat(fd, &st) != 0) return errno;
    level.dev = st.st_dev;
    level.ino = st.st_ino;
    // Its entries cannot be removed without write and search permission.
    if ((st.st_mode & S_IRWXU) != S_IRWXU && st.st_uid == geteuid())
      fchmod(fd, (st.st_mode & 07777) | S_IRWXU);
    const int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    DIR* dir = copy >= 0 ? fdopendir(copy) : nullptr;
    if (dir == nullptr) {
      const int err = errno;
      if (copy >= 0) close(copy);
      return err;
    }
    std::vector<std::string> others;
    errno = 0;
    while (const dirent* entry = readdir(dir)) {
      const std::string_view name = entry->d_name;
      if (name != "." && name != "..") (entry->d_type == DT_DIR ? level.subdirs : others).emplace_back(name);
    }
    const int err = errno;
    closedir(dir);
    if (err != 0) return err;
    for (const std::string& name : others) {
      if (unlinkat(fd, name.c_str(), 0) == 0 || errno == ENOENT) continue;
      if (errno == EISDIR) {
        level.subdirs.push_back(name);  // a file system that does not fill in d_type
      } else {
        failed(name, std::strerror(errno));
      }
    }
    return 0;
  }

  // `name`, in the top level's directory, is left.
  void failed(const std::string& name, const std::string& why) {
    std::string path;
    for (std::size_t i = 1; i < levels_.size(); ++i) path += "/" + levels_[i].name;
    path += "/" + name;
    // One deeper than PATH_MAX is shown by its ends.
    if (path.size() > 200) path = path.substr(0, 80) + "/.../" + path.substr(path.size() - 80);
    note(root_ + path, why);
  }

  void note(const std::string& path, const std::string& why) {
    for (Level& level : levels_) level.failed = true;
    if (++count_ == 1) first_ = path + ": " + why;
  }

  std::string said() const {
    if (count_ == 0) return {};
    if (count_ == 1) return "could not remove " + first_;
    return std::to_string(count_) + " entries under " + root_ + " could not be removed; the first, " + first_;
  }

  const std::string root_;
  std::vector<Level> levels_;
  std::size_t count_ = 0;
  std::string first_;
};

}  // namespace

std::string remove_tree(const std::string& path) { return TreeRemoval(path).run(); }

std::string keep_attempt(const std::string& rank_dir, int attempt, const std::vector<std::string>& also) {
  // Everything happens relative to the rank's directory, opened without
  // following a symlink, and to attemptN/ made in it: a rank that put a link
  // in either's place cannot make flowrun move its files elsewhere.
  const std::string name = "attempt" + std::to_string(attempt);
  const std::string kept = rank_dir + "/" + name;
  auto fail = [&](const std::string& what) {
    const int err = errno;
    throw Error("cannot keep attempt " + std::to_string(attempt) + "'s " + what + " in " + kept + ": " +
                    std::strerror(err),
                kExitFailure, err);
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

namespace {

// The directories anchor_directory() opened, by their normalised path.
struct Anchor {
  std::string path;
  std::shared_ptr<BeneathRoot> root;
};
std::mutex anchors_mutex;
std::vector<Anchor> anchors;

std::string normalised(const std::string& path) {
  std::string p = std::filesystem::path(path).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// The directory that holds `path`'s last component, opened (*leaf: that
// component): beneath the anchor `path` lies under, with no link followed,
// else by its path as given. -1 with errno.
int open_parent_of(const std::string& path, std::string* leaf) {
  const std::string p = normalised(path);
  std::shared_ptr<BeneathRoot> root;
  std::string rel;
  {
    const std::lock_guard<std::mutex> lock(anchors_mutex);
    for (const Anchor& a : anchors) {
      if (p.size() > a.path.size() + 1 && p.starts_with(a.path) && p[a.path.size()] == '/' &&
          (!root || a.path.size() > rel.size())) {
        root = a.root;
        rel = a.path;
      }
    }
  }
  if (root) return root->open_parent(std::string_view(p).substr(rel.size() + 1), false, 0755, leaf);
  *leaf = base_name(p);
  const std::string dir = p.find('/') == std::string::npos ? "." : std::string(dir_name(p));
  if (leaf->empty() || *leaf == "." || *leaf == "..") {
    errno = EINVAL;
    return -1;
  }
  return open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

}  // namespace

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  for (std::size_t got = 0; got < bytes;) {
    const ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      throw Error(std::string("cannot get random bytes from the kernel (getrandom): ") + std::strerror(err),
                  kExitFailure, err);
    }
    got += static_cast<std::size_t>(n);
  }
  return hex(raw);
}

namespace {

std::string fmt_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

std::string group_name(gid_t gid) {
  const group* g = getgrgid(gid);
  return g != nullptr ? std::string(g->gr_name) : std::to_string(gid);
}

// Whether `gid` is `uid`'s private group: named as the user is, with no
// member listed but the user (Debian's user private groups, umask 002).
bool private_group(gid_t gid, uid_t uid) {
  const passwd* pw = getpwuid(uid);
  if (pw == nullptr) return false;
  const std::string user = pw->pw_name;
  if (pw->pw_gid != gid) return false;
  const group* g = getgrgid(gid);
  if (g == nullptr || user != g->gr_name) return false;
  for (char** m = g->gr_mem; *m != nullptr; ++m)
    if (user != *m) return false;
  return true;
}

}  // namespace

void anchor_directory(const std::string& path) {
  const std::string p = normalised(path);
  auto root = std::make_shared<BeneathRoot>(BeneathRoot::open(p, false));
  if (!root->ok())
    throw Error("cannot open the directory " + p + ": " + std::strerror(root->error()), kExitFailure,
                root->error());
  const std::lock_guard<std::mutex> lock(anchors_mutex);
  std::erase_if(anchors, [&](const Anchor& a) { return a.path == p; });
  anchors.push_back({p, std::move(root)});
}

void release_directory(const std::string& path) {
  const std::string p = normalised(path);
  const std::lock_guard<std::mutex> lock(anchors_mutex);
  std::erase_if(anchors, [&](const Anchor& a) { return a.path == p; });
}

int try_write_file(const std::string& path, const std::string& text) {
  std::string leaf;
  const UniqueFd dir(open_parent_of(path, &leaf));
  if (!dir) return errno;
  std::string tmp;
  int fd = -1;
  for (int tries = 0; fd < 0 && tries < 8; ++tries) {
    tmp = leaf.substr(0, 200) + ".tmp-" + random_hex(8);
    fd = openat(dir.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) return errno;
  }
  if (fd < 0) return EEXIST;
  int err = write_all(fd, text) ? 0 : errno;
  // A file system may report a full disk only when the file is closed (NFS).
  if (close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && renameat(dir.get(), tmp.c_str(), dir.get(), leaf.c_str()) != 0) err = errno;
  if (err != 0) unlinkat(dir.get(), tmp.c_str(), 0);
  return err;
}

int open_output_file(const std::string& path, bool append, int* err) {
  std::string leaf;
  const UniqueFd dir(open_parent_of(path, &leaf));
  if (!dir) {
    *err = errno;
    return -1;
  }
  const int flags =
      O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (append ? O_APPEND : 0);
  // O_TRUNC only once it is known to be a regular file: truncating is an act.
  UniqueFd fd(openat(dir.get(), leaf.c_str(), flags, 0644));
  struct stat st {};
  if (!fd || fstat(fd.get(), &st) != 0) {
    *err = errno;
    // A FIFO with no reader (ENXIO), a socket (ENXIO), a device that is gone:
    // say what is there rather than the open's errno.
    if (fstatat(dir.get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode) &&
        !S_ISLNK(st.st_mode))
      *err = kErrNotRegular;
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    *err = kErrNotRegular;
    return -1;
  }
  if (!append && st.st_size > 0 && ftruncate(fd.get(), 0) != 0) {
    *err = errno;
    return -1;
  }
  const int fl = fcntl(fd.get(), F_GETFL);
  if (fl >= 0) fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK);
  return fd.release();
}

void require_private_directory(int fd, const std::string& path, const std::string& what, bool root_ok,
                               const std::string& fix) {
  struct stat st {};
  if (fstat(fd, &st) != 0)
    throw Error("cannot look at " + what + " " + path + ": " + std::strerror(errno) + "; " + fix, kExitUsage);
  const uid_t me = geteuid();
  if (st.st_uid != me && !(root_ok && st.st_uid == 0))
    throw Error("refusing " + what + " " + path + ": it belongs to another user (uid " +
                    std::to_string(st.st_uid) + "), who could put links in it or swap it; " + fix,
                kExitUsage);
  if ((st.st_mode & S_ISVTX) != 0 && st.st_uid != me) return;  // /tmp: others cannot touch what is ours
  if ((st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0)
    throw Error("refusing " + what + " " + path + ": every user may write it (mode " + fmt_mode(st.st_mode) +
                    ") and it is not sticky; " + fix,
                kExitUsage);
  if ((st.st_mode & S_IWGRP) != 0 && (st.st_mode & S_ISVTX) == 0 && !private_group(st.st_gid, me))
    throw Error("refusing " + what + " " + path + ": the other members of its group may write it (mode " +
                    fmt_mode(st.st_mode) + ", group " + group_name(st.st_gid) + "); " + fix,
                kExitUsage);
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
    throw Error("cannot write " + path + ": " + std::strerror(err), kExitFailure, err);
}

}  // namespace flowrun
