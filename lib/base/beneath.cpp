#include "flowrun/beneath.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace flowrun {

namespace {

// Set once openat2 said ENOSYS (an old kernel, a seccomp filter), or by tests.
std::atomic<bool> g_walk_only{false};

constexpr int kMaxLinks = 40;  // as the kernel's MAXSYMLINKS

std::vector<std::string> components(std::string_view path) {
  std::vector<std::string> out;
  while (!path.empty()) {
    const std::size_t slash = std::min(path.find('/'), path.size());
    if (slash > 0) out.emplace_back(path.substr(0, slash));
    path.remove_prefix(std::min(slash + 1, path.size()));
  }
  return out;
}

std::string read_link_at(int dir, const char* name) {
  char buf[PATH_MAX];
  const ssize_t n = readlinkat(dir, name, buf, sizeof buf);
  if (n <= 0 || n >= static_cast<ssize_t>(sizeof buf)) return {};
  return std::string(buf, static_cast<std::size_t>(n));
}

// The directory and last component of `rel` ("" and "a" for "a").
std::pair<std::string_view, std::string_view> split_last(std::string_view rel) {
  while (!rel.empty() && rel.back() == '/') rel.remove_suffix(1);
  const std::size_t slash = rel.rfind('/');
  if (slash == std::string_view::npos) return {{}, rel};
  return {rel.substr(0, slash), rel.substr(slash + 1)};
}

// openat(dir, name, O_DIRECTORY | O_NOFOLLOW | extra): ELOOP, not the
// kernel's ENOTDIR, when `name` is a symlink, so a caller can say which.
int open_dir_nofollow(int dir, const char* name, int extra) {
  const int fd = openat(dir, name, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | extra);
  if (fd < 0 && errno == ENOTDIR) {
    struct stat st {};
    if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
      errno = ELOOP;
    else
      errno = ENOTDIR;
  }
  return fd;
}

}  // namespace

void set_beneath_walk_only(bool walk_only) { g_walk_only = walk_only; }

BeneathRoot BeneathRoot::open(const std::string& path, bool follow_last) {
  BeneathRoot root;
  root.path_ = path;
  root.fd_.reset(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | (follow_last ? 0 : O_NOFOLLOW)));
  if (!root.fd_) {
    root.error_ = errno;
    return root;
  }
  root.error_ = 0;
  // Its real path, for absolute symlinks; kept only when it is this very
  // directory (not one renamed into its place since).
  if (char* real = realpath(path.c_str(), nullptr)) {
    struct stat a {
    }, b{};
    if (::stat(real, &a) == 0 && fstat(root.fd(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
      root.real_ = real;
    free(real);
  }
  return root;
}

BeneathRoot BeneathRoot::open_under(const std::string& anchor, const std::string& dir, bool create,
                                    mode_t mode) {
  BeneathRoot root;
  root.path_ = dir;
  if (dir.size() <= anchor.size() + 1 || dir.compare(0, anchor.size(), anchor) != 0 ||
      dir[anchor.size()] != '/') {
    root.error_ = EINVAL;
    return root;
  }
  const std::string rel = dir.substr(anchor.size() + 1);
  BeneathRoot top = open(anchor);
  if (!top.ok()) {
    root.error_ = top.error();
    return root;
  }
  std::string leaf;
  UniqueFd parent(top.open_parent(rel, create, mode, &leaf));
  if (!parent) {
    root.error_ = errno;
    return root;
  }
  if (create && mkdirat(parent.get(), leaf.c_str(), mode) != 0 && errno != EEXIST) {
    root.error_ = errno;
    return root;
  }
  root.fd_.reset(open_dir_nofollow(parent.get(), leaf.c_str(), O_RDONLY));
  if (!root.fd_) {
    root.error_ = errno;
    return root;
  }
  root.error_ = 0;
  // Nothing between was a symlink: the anchor's real path and `rel` is this
  // directory's (with '.' and empty components gone: open_parent took none
  // of '..').
  if (!top.real_.empty()) {
    root.real_ = top.real_ == "/" ? "" : top.real_;
    for (const auto& part : components(rel))
      if (part != ".") root.real_ += "/" + part;
  }
  return root;
}

std::string BeneathRoot::path_of(std::string_view rel) const {
  return rel.empty() ? path_ : path_ + "/" + std::string(rel);
}

int BeneathRoot::open(std::string_view rel, int flags, Links links) const {
  if (!ok()) {
    errno = EBADF;
    return -1;
  }
  const std::string path = rel.empty() ? std::string(".") : std::string(rel);
  if (!g_walk_only) {
    open_how how{};
    how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC);
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | (links == Links::none ? RESOLVE_NO_SYMLINKS : 0);
    for (int tries = 0;; ++tries) {
      const long fd = syscall(SYS_openat2, fd_.get(), path.c_str(), &how, sizeof how);
      if (fd >= 0) return static_cast<int>(fd);
      // EAGAIN: a rename raced the lookup; try again, then walk.
      if (errno == EAGAIN && tries < 4) continue;
      if (errno == ENOSYS) g_walk_only = true;
      // EXDEV under Links::beneath may be an absolute link into the root.
      const bool walk =
          errno == ENOSYS || errno == EAGAIN || (errno == EXDEV && links == Links::beneath && !real_.empty());
      if (!walk) return -1;
      break;
    }
  }
  return walk(path, flags, links);
}

// RESOLVE_BENEATH by hand: a stack of the directories below the root that
// the path went through ('..' pops one; at the root it is an escape), each
// opened with O_NOFOLLOW from the one above, each symlink read and spliced
// into what is left of the path.
int BeneathRoot::walk(std::string_view rel, int flags, Links links) const {
  std::vector<UniqueFd> stack;
  auto here = [&] { return stack.empty() ? fd_.get() : stack.back().get(); };
  std::deque<std::string> todo;
  for (auto& part : components(rel)) todo.push_back(std::move(part));
  int followed = 0;
  while (!todo.empty()) {
    const std::string name = std::move(todo.front());
    todo.pop_front();
    if (name == ".") continue;
    if (name == "..") {
      if (stack.empty()) {
        errno = EXDEV;
        return -1;
      }
      stack.pop_back();
      continue;
    }
    struct stat st {};
    if (fstatat(here(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return -1;
    if (S_ISLNK(st.st_mode)) {
      if (links == Links::none || ++followed > kMaxLinks) {
        errno = ELOOP;
        return -1;
      }
      std::string target = read_link_at(here(), name.c_str());
      if (target.empty()) {
        errno = ENOENT;
        return -1;
      }
      if (target.front() == '/') {
        const bool inside = !real_.empty() && target.compare(0, real_.size(), real_) == 0 &&
                            (target.size() == real_.size() || target[real_.size()] == '/');
        if (!inside) {
          errno = EXDEV;
          return -1;
        }
        target.erase(0, real_.size());
        stack.clear();
      }
      auto parts = components(target);
      todo.insert(todo.begin(), parts.begin(), parts.end());
      continue;
    }
    if (!todo.empty()) {
      const int next = open_dir_nofollow(here(), name.c_str(), O_PATH);
      if (next < 0) return -1;  // ENOTDIR; ELOOP when it became a symlink since
      stack.emplace_back(next);
      continue;
    }
    return openat(here(), name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC);
  }
  return openat(here(), ".", flags | O_CLOEXEC);
}

int BeneathRoot::stat(std::string_view rel, struct stat* st, Links links) const {
  UniqueFd fd(open(rel, O_PATH, links));
  if (!fd) return errno;
  return fstat(fd.get(), st) == 0 ? 0 : errno;
}

int BeneathRoot::lstat(std::string_view rel, struct stat* st) const {
  const auto [dir, leaf] = split_last(rel);
  if (leaf.empty() || leaf == "." || leaf == "..") return stat(rel, st, Links::beneath);
  UniqueFd parent(open(dir, O_PATH | O_DIRECTORY, Links::beneath));
  if (!parent) return errno;
  return fstatat(parent.get(), std::string(leaf).c_str(), st, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : errno;
}

std::string BeneathRoot::read_link(std::string_view rel) const {
  const auto [dir, leaf] = split_last(rel);
  UniqueFd parent(open(dir, O_PATH | O_DIRECTORY, Links::beneath));
  if (!parent || leaf.empty()) return {};
  return read_link_at(parent.get(), std::string(leaf).c_str());
}

int BeneathRoot::open_regular(std::string_view rel, Links links, struct stat* st) const {
  // Looked at without opening it: an open(2) of a FIFO or a device can block
  // or act (a tape rewinds), O_NONBLOCK or not.
  if (const int err = stat(rel, st, links); err != 0) {
    errno = err;
    return -1;
  }
  if (!S_ISREG(st->st_mode)) return kNotRegular;
  const struct stat seen = *st;
  UniqueFd fd(open(rel, O_RDONLY | O_NONBLOCK | O_NOCTTY, links));
  if (!fd) return -1;
  if (fstat(fd.get(), st) != 0) return -1;
  if (!S_ISREG(st->st_mode) || st->st_dev != seen.st_dev || st->st_ino != seen.st_ino) {
    // Swapped since the look: say what is there now.
    return S_ISREG(st->st_mode) ? (errno = EAGAIN, -1) : kNotRegular;
  }
  return fd.release();
}

std::vector<std::string> BeneathRoot::list(std::string_view rel, Links links, int* err) const {
  std::vector<std::string> names;
  *err = 0;
  const int fd = open(rel, O_RDONLY | O_DIRECTORY, links);
  if (fd < 0) {
    *err = errno;
    return names;
  }
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    *err = errno;
    close(fd);
    return names;
  }
  while (dirent* e = readdir(d)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

int BeneathRoot::open_parent(std::string_view rel, bool create, mode_t mode, std::string* leaf) const {
  if (!ok()) {
    errno = EBADF;
    return -1;
  }
  std::vector<std::string> parts;
  for (auto& part : components(rel))
    if (part != ".") parts.push_back(std::move(part));
  if (parts.empty() || std::find(parts.begin(), parts.end(), "..") != parts.end()) {
    errno = EINVAL;
    return -1;
  }
  *leaf = parts.back();
  parts.pop_back();
  if (!create) {
    // One openat2 with no link allowed, as the walk below opens each
    // component with O_NOFOLLOW (a record written beside a rank's logs).
    std::string dir_rel;
    for (const auto& part : parts) dir_rel += (dir_rel.empty() ? "" : "/") + part;
    const int fd = open(dir_rel, O_RDONLY | O_DIRECTORY, Links::none);
    if (fd >= 0) return fd;  // else the walk says which component failed, and how
  }
  UniqueFd dir(fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0));
  if (!dir) return -1;
  for (const auto& part : parts) {
    if (create && mkdirat(dir.get(), part.c_str(), mode) != 0 && errno != EEXIST) return -1;
    UniqueFd next(open_dir_nofollow(dir.get(), part.c_str(), O_RDONLY));
    if (!next) return -1;
    dir = std::move(next);
  }
  return dir.release();
}

int BeneathRoot::create_file(std::string_view rel, mode_t mode, mode_t dir_mode, UniqueFd* parent) const {
  std::string leaf;
  UniqueFd dir(open_parent(rel, true, dir_mode, &leaf));
  if (!dir) return -1;
  const int fd = openat(dir.get(), leaf.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd >= 0 && parent != nullptr) *parent = std::move(dir);
  return fd;
}

// --- the tree ------------------------------------------------------------------

namespace {

struct Scan {
  const BeneathRoot& root;
  const std::function<bool()>& stop;
  std::vector<TreeEntry> out;
  bool stopped = false;

  void entry(int dir, const std::string& rel, const std::string& name, int depth) {
    TreeEntry e;
    e.rel = rel;
    if (fstatat(dir, name.c_str(), &e.st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return;  // gone since it was listed
      e.kind = TreeEntry::Kind::unreadable;
      e.err = errno;
      out.push_back(std::move(e));
      return;
    }
    if (S_ISDIR(e.st.st_mode)) {
      if (depth >= kMaxScanDepth) {
        e.kind = TreeEntry::Kind::unreadable;
        e.err = ENAMETOOLONG;  // deeper than kMaxScanDepth levels
        out.push_back(std::move(e));
        return;
      }
      UniqueFd sub(openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) {
        e.kind = TreeEntry::Kind::unreadable;
        e.err = errno;
        out.push_back(std::move(e));
        return;
      }
      walk(std::move(sub), rel, depth + 1);
      return;
    }
    if (S_ISREG(e.st.st_mode)) {
      out.push_back(std::move(e));
      return;
    }
    if (!S_ISLNK(e.st.st_mode)) {
      e.kind = TreeEntry::Kind::special;
      out.push_back(std::move(e));
      return;
    }
    e.target = read_link_at(dir, name.c_str());
    struct stat st {};
    const int err = root.stat(rel, &st, Links::beneath);
    if (err == EXDEV) {
      e.kind = TreeEntry::Kind::link_out;
    } else if (err == ELOOP) {
      e.kind = TreeEntry::Kind::link_loop;
    } else if (err == ENOENT || err == ENOTDIR) {
      e.kind = TreeEntry::Kind::link_dangling;
    } else if (err != 0) {
      e.kind = TreeEntry::Kind::unreadable;
      e.err = err;
    } else {
      e.st = st;
      e.kind = S_ISREG(st.st_mode)   ? TreeEntry::Kind::file
               : S_ISDIR(st.st_mode) ? TreeEntry::Kind::link_to_dir
                                     : TreeEntry::Kind::link_to_special;
    }
    out.push_back(std::move(e));
  }

  void walk(UniqueFd dir, const std::string& prefix, int depth) {
    std::vector<std::string> names;
    {
      const int fd = openat(dir.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      DIR* d = fd < 0 ? nullptr : fdopendir(fd);
      if (d == nullptr) {
        if (fd >= 0) close(fd);
        TreeEntry e;
        e.rel = prefix;
        e.kind = TreeEntry::Kind::unreadable;
        e.err = errno;
        out.push_back(std::move(e));
        return;
      }
      while (dirent* e = readdir(d)) {
        const std::string_view name = e->d_name;
        if (name != "." && name != "..") names.emplace_back(name);
      }
      closedir(d);
    }
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      if (stopped || (stop && stop())) {
        stopped = true;
        return;
      }
      entry(dir.get(), prefix.empty() ? name : prefix + "/" + name, name, depth);
    }
  }
};

}  // namespace

std::vector<TreeEntry> scan_tree(const BeneathRoot& root, const std::function<bool()>& stop, bool* stopped) {
  Scan scan{root, stop, {}};
  if (root.ok()) {
    UniqueFd top(fcntl(root.fd(), F_DUPFD_CLOEXEC, 0));
    if (top) scan.walk(std::move(top), "", 0);
  }
  std::sort(scan.out.begin(), scan.out.end(),
            [](const TreeEntry& a, const TreeEntry& b) { return a.rel < b.rel; });
  if (stopped != nullptr) *stopped = scan.stopped;
  return std::move(scan.out);
}

std::string file_type_name(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFLNK: return "a symlink";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    default: return "not a regular file";
  }
}

std::string refusal_text(const TreeEntry& e, std::string_view where) {
  const std::string link = "is a symlink to " + (e.target.empty() ? std::string("?") : e.target);
  switch (e.kind) {
    case TreeEntry::Kind::file: return "is a regular file";
    case TreeEntry::Kind::link_out: return link + ", outside " + std::string(where);
    case TreeEntry::Kind::link_loop:
      return link + ", which does not resolve (a loop, or a magic link of /proc)";
    case TreeEntry::Kind::link_dangling: return link + ", which does not exist";
    case TreeEntry::Kind::link_to_dir: return link + ", a directory (a link to a directory is not followed)";
    case TreeEntry::Kind::link_to_special:
      return link + ", " + file_type_name(e.st.st_mode) + ", not a regular file";
    case TreeEntry::Kind::special: return "is " + file_type_name(e.st.st_mode) + ", not a regular file";
    case TreeEntry::Kind::unreadable:
      if (e.err == ENAMETOOLONG)
        return "is a directory deeper than " + std::to_string(kMaxScanDepth) + " levels; not walked";
      return "cannot be read: " + std::string(std::strerror(e.err));
  }
  return {};
}

}  // namespace flowrun
