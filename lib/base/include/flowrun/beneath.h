// Paths resolved beneath a root directory. Everything that reads the files a
// rank left, or writes them into the run directory, goes through this: the
// join on one node (lib/join), an agent's uploads and the head's receiver
// (lib/head). So a symlink, a '..' or a directory a rank replaced by a
// link cannot lead outside the directory being gathered or written, and the
// rules (and the words for what is refused) are the same on one node and
// across nodes.
//
// Resolution is the kernel's openat2(2) with RESOLVE_BENEATH and
// RESOLVE_NO_MAGICLINKS (RESOLVE_NO_SYMLINKS for Links::none). Where openat2
// is missing (ENOSYS) the same rules are walked one component at a time with
// O_NOFOLLOW, reading each symlink with readlinkat(2). That walk also decides
// what openat2 refuses with EXDEV under Links::beneath, so that an absolute
// symlink naming a place inside the root (os.symlink(os.path.abspath(p), ...))
// counts as the relative one would.
#pragma once

#include <cerrno>
#include <functional>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <sys/types.h>
#include <vector>

#include "flowrun/fd.h"

namespace flowrun {

// Which symlinks a resolution beneath a root may follow.
enum class Links {
  // None: every component is a real directory or the file itself. For the
  // directories flowrun made (a rank's directory, outputs/), which a rank
  // may have replaced by a link.
  none,
  // Those that stay beneath the root: a relative target is read from the
  // link's directory, '..' never climbs above the root, an absolute target
  // counts only when it names a place under the root's real path, and a
  // magic link (/proc/PID/fd/N) is never followed. At most 40 links.
  beneath,
};

// Returned by BeneathRoot::open_regular for something that exists but is not
// a regular file (a directory, a FIFO, a device, a socket); it was not opened.
constexpr int kNotRegular = -2;

// Forces the O_NOFOLLOW walk even where openat2 exists (tests of both).
void set_beneath_walk_only(bool walk_only);

// An open directory that paths are resolved beneath.
class BeneathRoot {
 public:
  BeneathRoot() = default;  // not open: error() is EBADF

  // The directory at `path`, reached as given (its own path is trusted: it
  // may go through symlinks, as a workdir under /scratch -> /data may);
  // with `follow_last` false its last component must not be a symlink
  // (error() ELOOP or ENOTDIR).
  static BeneathRoot open(const std::string& path, bool follow_last = true);

  // The directory `dir` under the directory `anchor` (`dir` starts with
  // anchor + "/"), reached from the anchor with Links::none; with `create`,
  // the missing directories are made (with `mode`) on the way. Not open
  // when any component is a symlink (error() ELOOP), not a directory
  // (ENOTDIR), missing (ENOENT), or `dir` is not under `anchor` (EINVAL).
  static BeneathRoot open_under(const std::string& anchor, const std::string& dir, bool create,
                                mode_t mode = 0755);

  bool ok() const { return bool(fd_); }
  int error() const { return error_; }  // the errno of a failed open, 0 when ok()
  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }  // as given, for messages
  std::string path_of(std::string_view rel) const;   // path()/rel

  // openat2(fd(), rel, flags | O_CLOEXEC) under `links`; "" is the root
  // itself. Returns the fd, or -1 with errno: EXDEV (it leads out of the
  // root), ELOOP (a symlink Links::none does not allow, a magic link, too
  // many links), ENOENT, ENOTDIR, EACCES...
  int open(std::string_view rel, int flags, Links links) const;

  // What `rel` is, following the links `links` allows (through an O_PATH
  // fd: nothing is opened for reading, a FIFO or a device is not touched).
  // 0, or the errno open() would set.
  int stat(std::string_view rel, struct stat* st, Links links) const;

  // What the entry `rel` itself is (a symlink as a symlink); the directories
  // above it are resolved with Links::beneath. 0 or an errno.
  int lstat(std::string_view rel, struct stat* st) const;

  // The text of the symlink `rel` (directories above: Links::beneath);
  // empty when it is none or cannot be read.
  std::string read_link(std::string_view rel) const;

  // `rel` opened for reading, when it is a regular file: O_RDONLY, O_NONBLOCK
  // (a read that would block fails with EAGAIN instead) and O_NOCTTY. It is
  // looked at first through an O_PATH fd, so a FIFO or a device is refused
  // (kNotRegular, with *st saying what it is) without being opened; the fd
  // is then checked with fstat to be that same regular file. Returns the fd,
  // kNotRegular, or -1 with errno.
  int open_regular(std::string_view rel, Links links, struct stat* st) const;

  // The names in directory `rel` (no '.' or '..'), sorted; *err is 0 or why
  // it could not be listed.
  std::vector<std::string> list(std::string_view rel, Links links, int* err) const;

  // The directory that holds `rel`'s last component, reached with
  // Links::none; with `create` its missing directories are made with
  // `mode`. *leaf gets the last component. -1 with errno when a component
  // is a symlink or not a directory (ELOOP, ENOTDIR), `rel` has a '..' or
  // no last component (EINVAL), or a directory cannot be made.
  int open_parent(std::string_view rel, bool create, mode_t mode, std::string* leaf) const;

  // `rel` created as a new file for writing (O_CREAT | O_EXCL | O_NOFOLLOW,
  // with `mode`), its directories made with `dir_mode`, nothing followed on
  // the way; an existing entry is never replaced (EEXIST). With `parent`,
  // that gets the fd of its directory (to unlinkat it later). Returns the
  // fd, or -1 with errno.
  int create_file(std::string_view rel, mode_t mode, mode_t dir_mode, UniqueFd* parent = nullptr) const;

 private:
  int walk(std::string_view rel, int flags, Links links) const;

  UniqueFd fd_;
  int error_ = EBADF;
  std::string path_;
  std::string real_;  // its real path ("" unknown: an absolute symlink is then always outside)
};

// One entry of a tree that scan_tree() met.
struct TreeEntry {
  enum class Kind {
    file,             // a regular file, or a symlink that resolves beneath the root to one
    link_out,         // a symlink that leads out of the root
    link_loop,        // a symlink that does not end (a loop, more than 40 links, a magic link)
    link_dangling,    // a symlink to nothing
    link_to_dir,      // a symlink to a directory beneath the root: not followed
    link_to_special,  // a symlink to a FIFO, device or socket beneath the root
    special,          // a FIFO, device or socket
    unreadable,       // could not be looked at or listed (err says why)
  };
  std::string rel;  // relative to the root
  Kind kind = Kind::file;
  struct stat st {};   // a file's (through a symlink: its target's); a special's
  std::string target;  // a symlink's text
  int err = 0;
};

// How deep scan_tree() goes: a directory at this depth is reported as
// unreadable with err ENAMETOOLONG, not entered. A rank can nest directories
// without end (openat needs no long path), and each level costs the walk a
// stack frame and a descriptor.
inline constexpr int kMaxScanDepth = 256;

// Every entry of the tree under `root`, sorted by rel: regular files and
// what is refused, each once. Real directories are entered (reached with
// O_NOFOLLOW, so a rank cannot swap one for a link between the look and the
// open); symlinks to directories are not, so the walk ends. `stop` is asked
// before each entry; when it says true the scan ends and *stopped is set.
std::vector<TreeEntry> scan_tree(const BeneathRoot& root, const std::function<bool()>& stop = {},
                                 bool* stopped = nullptr);

// Why `entry` (not a file) is not taken, as the end of a sentence that
// starts with its name: "is a symlink to /etc/passwd, outside <where>",
// "is a FIFO, not a regular file". `where` names the root ("the output
// directory").
std::string refusal_text(const TreeEntry& entry, std::string_view where);

// "a FIFO", "a character device", "a socket", "a block device", "a
// directory", "a symlink": what the mode's file type is.
std::string file_type_name(mode_t mode);

}  // namespace flowrun
