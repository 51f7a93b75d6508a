// Gathering a parallel step's outputs: glob expansion over the workdir, the
// freshness filter, the layout and its collisions, then hard links or copies.
//
// Everything is decided before anything is written: the walk produces
// candidates, the plan maps each to one destination and finds every
// collision, and only then are files linked. So a collision never leaves one
// of its two files in outputs/ by accident of order.
#include "flowrun/join.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <limits>
#include <linux/fs.h>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>

#include "flowrun/beneath.h"
#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/glob.h"
#include "flowrun/path.h"
#include "flowrun/util.h"

namespace flowrun {

FileTime file_clock_now() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return FileTime{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

namespace {

constexpr std::size_t npos = std::string_view::npos;

// --- walking ----------------------------------------------------------------

struct Found {
  std::string rel;  // relative to the walk's root
  std::string abs;
  FileTime mtime = 0;
  std::uint64_t bytes = 0;
};

// Nanoseconds since the epoch, saturated: a rank may date a file past 2262,
// where the product would overflow.
FileTime mtime_of(const struct stat& st) {
  constexpr FileTime kMaxSeconds = std::numeric_limits<FileTime>::max() / 1'000'000'000 - 1;
  const FileTime seconds = std::clamp<FileTime>(st.st_mtim.tv_sec, -kMaxSeconds, kMaxSeconds);
  return seconds * 1'000'000'000 + st.st_mtim.tv_nsec;
}

std::string join_path(const std::string& dir, std::string_view name) {
  return dir.empty() ? std::string(name) : dir + "/" + std::string(name);
}

// Expands globs under one root, every path resolved beneath it
// (BeneathRoot, Links::beneath): a symlink out of the workdir is never
// followed, and one that a glob matches is refused (`refused`). Directories
// reached through a wildcard, a '**' or while taking a directory's files are
// entered only when they are real directories, so a symlink loop cannot make
// the walk endless; a component written without wildcards is looked up by
// name and may go through a symlink that stays beneath, which is bounded by
// the glob's length and the 40 links a lookup may follow.
class Walker {
 public:
  Walker(const BeneathRoot& root, bool skip_flowrun) : root_(root), skip_flowrun_(skip_flowrun) {}

  // Files matched by `glob`, or under a directory it matches, sorted by rel;
  // what it matched that is refused goes to *refused.
  std::vector<Found> glob(const Glob& glob, std::vector<TreeEntry>* refused) {
    found_.clear();
    refused_.clear();
    if (glob.names().empty())
      take_all("");
    else
      expand("", glob.names(), 0);
    for (auto& [rel, e] : refused_) refused->push_back(std::move(e));
    return sorted();
  }

 private:
  bool skipped(const std::string& dir, std::string_view name) const {
    return skip_flowrun_ && dir.empty() && name == ".flowrun";
  }

  std::vector<std::string> list(const std::string& dir) const {
    int err = 0;
    auto names = root_.list(dir, Links::beneath, &err);  // unreadable directories are passed over
    std::erase_if(names, [&](const std::string& name) { return skipped(dir, name); });
    return names;
  }

  void add(const std::string& rel, const struct stat& st) {
    found_.emplace(rel, Found{rel, root_.path_of(rel), mtime_of(st), static_cast<std::uint64_t>(st.st_size)});
  }

  // `rel` resolved beneath the root: 0 and *st, or an errno; a symlink that
  // leads out of it (or loops) is remembered as refused.
  int resolve(const std::string& rel, struct stat* st) {
    const int err = root_.stat(rel, st, Links::beneath);
    if (err == EXDEV || err == ELOOP) {
      TreeEntry e;
      e.rel = rel;
      e.kind = err == EXDEV ? TreeEntry::Kind::link_out : TreeEntry::Kind::link_loop;
      e.target = root_.read_link(rel);
      refused_.emplace(rel, std::move(e));
    }
    return err;
  }

  // An entry reached without naming it: a regular file (or a symlink to one
  // beneath the root) is a file, a real directory is a directory, anything
  // else is nothing. `last`: the glob ends here, so a symlink out of the
  // root is one it matched, and refused.
  enum class Kind { none, file, dir };
  Kind classify(const std::string& rel, struct stat* st, bool last) {
    if (root_.lstat(rel, st) != 0) return Kind::none;
    if (S_ISDIR(st->st_mode)) return Kind::dir;
    if (S_ISLNK(st->st_mode)) {
      if (!last)
        return root_.stat(rel, st, Links::beneath) == 0 && S_ISREG(st->st_mode) ? Kind::file : Kind::none;
      if (resolve(rel, st) != 0) return Kind::none;
    }
    return S_ISREG(st->st_mode) ? Kind::file : Kind::none;
  }

  void take_all(const std::string& dir) {
    for (const auto& name : list(dir)) {
      std::string rel = join_path(dir, name);
      struct stat st {};
      switch (classify(rel, &st, true)) {
        case Kind::file: add(rel, st); break;
        case Kind::dir: take_all(rel); break;
        case Kind::none: break;
      }
    }
  }

  void expand(const std::string& dir, const std::vector<GlobName>& parts, std::size_t i) {
    const GlobName& part = parts[i];
    const bool last = i + 1 == parts.size();
    auto descend = [&](const std::string& rel, const struct stat& st) {
      if (S_ISREG(st.st_mode)) {
        if (last) add(rel, st);
      } else if (S_ISDIR(st.st_mode)) {
        if (last)
          take_all(rel);
        else
          expand(rel, parts, i + 1);
      }
    };
    if (part.kind == GlobName::Kind::any_depth) {
      if (last) return take_all(dir);
      expand(dir, parts, i + 1);
      for (const auto& name : list(dir)) {
        std::string rel = join_path(dir, name);
        struct stat st {};
        if (classify(rel, &st, false) == Kind::dir) expand(rel, parts, i);
      }
    } else if (part.kind == GlobName::Kind::literal) {
      const std::string& name = part.text;
      if (name == "..") return;  // never above the root (the spec refuses it; the resolution would too)
      if (name == ".") {
        if (last) return take_all(dir);
        return expand(dir, parts, i + 1);
      }
      if (skipped(dir, name)) return;
      std::string rel = join_path(dir, name);
      struct stat st {};
      if (resolve(rel, &st) == 0) descend(rel, st);
    } else {
      for (const auto& name : list(dir)) {
        if (!part.matches(name)) continue;
        std::string rel = join_path(dir, name);
        struct stat st {};
        if (classify(rel, &st, last) != Kind::none) descend(rel, st);
      }
    }
  }

  std::vector<Found> sorted() const {
    std::vector<Found> out;
    for (const auto& [rel, f] : found_) out.push_back(f);
    return out;
  }

  const BeneathRoot& root_;
  bool skip_flowrun_;
  std::map<std::string, Found> found_;  // by rel: overlapping '**' expansions meet here
  std::map<std::string, TreeEntry> refused_;
};

// --- messages ---------------------------------------------------------------

std::string errno_text(int err) { return std::generic_category().message(err); }

std::string local_time(FileTime t, const char* format, bool millis) {
  std::time_t secs = static_cast<std::time_t>(t / 1'000'000'000);
  std::tm tm{};
  localtime_r(&secs, &tm);
  char buf[64];
  std::size_t n = std::strftime(buf, sizeof buf, format, &tm);
  std::string out(buf, n);
  if (millis) out += fmt::format(".{:03}", (t % 1'000'000'000) / 1'000'000);
  return out;
}

// "(written 2026-11-29 17:10:53, before the step started at 17:11:02)": the
// step's date only when it differs, milliseconds only when the seconds agree.
std::string written_before(FileTime written, FileTime started) {
  const bool same_day = local_time(written, "%F", false) == local_time(started, "%F", false);
  const bool same_second = written / 1'000'000'000 == started / 1'000'000'000;
  return fmt::format("(written {}, before the step started at {})", local_time(written, "%F %T", same_second),
                     local_time(started, same_day ? "%T" : "%F %T", same_second));
}

std::string missing_message(const JoinRequest& rq, const std::string& glob, const std::vector<Found>& stale) {
  std::string out = fmt::format("step '{}': output '{}' matches no file written during the step in {}.",
                                rq.step, glob, rq.workdir);
  if (stale.empty())
    return out +
           " Write it there (the glob is relative to the step's workdir), or correct the glob in outputs.";
  auto newest = std::max_element(stale.begin(), stale.end(),
                                 [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  if (stale.size() == 1)
    out += " A file there predates the step and is not collected: ";
  else
    out += fmt::format(" {} files there predate the step and are not collected; the newest: ", stale.size());
  return out + fmt::format("{} {}; write it again during the step, or correct the glob in outputs.",
                           printable(newest->abs), written_before(newest->mtime, rq.started));
}

// 'dir/model.pt' -> {'dir/model_rank<RANK>.pt', 'dir/model_rank*.pt'}.
std::pair<std::string, std::string> per_rank_names(const std::string& glob) {
  const std::size_t base = glob.size() - base_name(glob).size();
  std::size_t dot = glob.rfind('.');
  if (dot == npos || dot <= base) dot = glob.size();
  std::string stem = glob.substr(0, dot), ext = glob.substr(dot);
  return {stem + "_rank<RANK>" + ext, stem + "_rank*" + ext};
}

std::string shared_file_message(const JoinRequest& rq, const std::string& glob) {
  auto [name, pattern] = per_rank_names(glob);
  return fmt::format(
      "step '{}': with collect: all, output '{}' names one file, which the {} ranks on this node share, so "
      "it "
      "holds only the copy of the rank that wrote it last; write one file per rank (such as '{}', collected "
      "with the glob '{}'), or write it into $FLOWRUN_OUTPUT_DIR, or use collect: rank0.",
      rq.step, glob, rq.ranks_on_node, name, pattern);
}

// --- planning and writing ---------------------------------------------------

struct Candidate {
  const BeneathRoot* root = nullptr;  // where `file.rel` is resolved (Links::beneath)
  Found file;
  int rank = -1;       // -1: a glob match
  std::string origin;  // "matched by output 'x'", "from rank 1's $FLOWRUN_OUTPUT_DIR"
  std::string dest;
};

// A path or a link's text that a rank named: printable(), as the head
// shows a node's words, so a name cannot forge a line of flowrun's or drive
// the terminal, on one node as across nodes.
std::string describe(const Candidate& c) { return printable(c.file.abs) + " (" + c.origin + ")"; }

enum class Copied { done, read_failed, write_failed, stopped };

// Copies bytes [from, to) of `in` to the same offsets of `out`:
// copy_file_range while the kernel takes it, pread/pwrite otherwise, 64 MiB
// at a time between two questions to `stop`. A file that ends early (it
// shrank) ends the range. On a failure errno says why.
Copied copy_range(int in, int out, off_t from, off_t to, bool& plain, const std::function<bool()>& stop) {
  constexpr off_t kStep = 64 << 20;
  std::vector<char> buf;
  for (off_t at = from; at < to;) {
    if (stop && stop()) return Copied::stopped;
    const off_t step_end = std::min(to, at + kStep);
    if (!plain) {
      loff_t in_off = at, out_off = at;
      const ssize_t n =
          copy_file_range(in, &in_off, out, &out_off, static_cast<std::size_t>(step_end - at), 0);
      if (n > 0) {
        at += n;
        continue;
      }
      if (n == 0) return Copied::done;
      if (errno == EAGAIN) return Copied::read_failed;
      if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP && errno != EPERM)
        return errno == ENOSPC || errno == EDQUOT || errno == EFBIG ? Copied::write_failed
                                                                    : Copied::read_failed;
      plain = true;
    }
    buf.resize(1 << 16);
    while (at < step_end) {
      const ssize_t n = pread(in, buf.data(),
                              std::min<std::size_t>(buf.size(), static_cast<std::size_t>(step_end - at)), at);
      if (n == 0) return Copied::done;
      if (n < 0) {
        if (errno == EINTR) continue;
        return Copied::read_failed;  // EAGAIN too: a read that would block is not a file's content
      }
      for (ssize_t done = 0; done < n;) {
        const ssize_t w = pwrite(out, buf.data() + done, static_cast<std::size_t>(n - done), at + done);
        if (w < 0 && errno != EINTR) return Copied::write_failed;
        if (w > 0) done += w;
      }
      at += n;
    }
  }
  return Copied::done;
}

// Copies the `size` bytes of `in` to the empty `out`, holes kept: only the
// data that SEEK_DATA and SEEK_HOLE find is copied, and the file's length is
// set at the end, so a sparse checkpoint (or a rank's `truncate -s 1T`)
// costs the run directory what it costs the workdir, not its length. A file
// system without SEEK_DATA reports the whole file as data.
Copied copy_bytes(int in, int out, off_t size, const std::function<bool()>& stop) {
  bool plain = false;
  for (off_t at = 0; at < size;) {
    off_t data = lseek(in, at, SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;  // only a hole is left
    if (data < 0) data = at;
    if (data >= size) break;
    off_t hole = lseek(in, data, SEEK_HOLE);
    if (hole < 0 || hole > size) hole = size;
    if (hole <= data) hole = std::min(size, data + 1);  // the file changed under us: copy on
    if (const Copied c = copy_range(in, out, data, hole, plain, stop); c != Copied::done) return c;
    at = hole;
  }
  if (stop && stop()) return Copied::stopped;
  if (ftruncate(out, size) != 0) return Copied::write_failed;
  return Copied::done;
}

enum class Put { done, exists, unreadable, stopped };

// Creates `leaf` in `dir` with the content of the open file `in` (whose stat
// is `st`), with its permission bits (never set-user-ID, set-group-ID or
// sticky: the file is flowrun's) and mtime. A reflink (FICLONE) where the
// file system shares extents (Btrfs, XFS): instant, no space, and a later
// write to either file leaves the other as it was; else a copy that keeps
// holes. Either way the file in outputs/ is this run's own: the next run's
// torch.save rewriting the workdir's model.pt in place cannot change it.
Put copy_file(int in, const struct stat& st, int dir, const std::string& leaf, const std::string& source,
              const std::string& dest, const std::function<bool()>& stop, int* err) {
  UniqueFd out(openat(dir, leaf.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!out) {
    const int e = errno;
    if (e == EEXIST) return Put::exists;
    throw Error("cannot create " + dest + ": " + errno_text(e), kExitFailure, e);
  }
  const Copied copied =
      ioctl(out.get(), FICLONE, in) == 0 ? Copied::done : copy_bytes(in, out.get(), st.st_size, stop);
  const int e = errno;
  const timespec times[2] = {st.st_atim, st.st_mtim};
  if (copied == Copied::done && fchmod(out.get(), st.st_mode & 0777) == 0 && futimens(out.get(), times) == 0)
    return Put::done;
  const int write_err = copied == Copied::done ? errno : e;
  unlinkat(dir, leaf.c_str(), 0);
  switch (copied) {
    case Copied::stopped: return Put::stopped;
    case Copied::read_failed: *err = e; return Put::unreadable;
    default:
      throw Error("cannot copy " + source + " to " + dest + ": " + errno_text(write_err), kExitFailure,
                  write_err);
  }
}

// Into outputs/, never replacing a file there. A glob's match lies in the
// workdir, which later runs share and rewrite in place (torch.save opens
// model.pt with O_TRUNC): it is always reflinked or copied, never
// hard-linked, or every earlier run's outputs would become the new bytes.
// A file of a rank's own directory (`private_file`), which lies in this run
// directory and nowhere else, is hard-linked (no copy of a large
// checkpoint) when it is ours (another user's would stay theirs to change)
// and has no other name (st_nlink 1: a rank that linked the workdir's
// model.pt into $FLOWRUN_OUTPUT_DIR gets a copy). The link is made from the
// open fd, so it is the very file that was checked, not what a name points
// to by now.
Put put_file(int in, const struct stat& st, bool private_file, int dir, const std::string& leaf,
             const std::string& source, const std::string& dest, const std::function<bool()>& stop,
             int* err) {
  if (private_file && st.st_uid == geteuid() && st.st_nlink == 1) {
    int rc = linkat(in, "", dir, leaf.c_str(), AT_EMPTY_PATH);
    if (rc != 0 && errno != EEXIST && errno != EXDEV && errno != EMLINK) {
      // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH on older kernels.
      const std::string self = "/proc/self/fd/" + std::to_string(in);
      rc = linkat(AT_FDCWD, self.c_str(), dir, leaf.c_str(), AT_SYMLINK_FOLLOW);
    }
    if (rc == 0) return Put::done;
    switch (errno) {
      case EEXIST: return Put::exists;
      case EXDEV:
      case EPERM:
      case EMLINK:
      case EOPNOTSUPP:
      case ENOENT:  // no /proc, or the file was unlinked since it was opened
      case EACCES: break;
      default: {
        const int e = errno;
        throw Error("cannot link " + dest + ": " + errno_text(e), kExitFailure, e);
      }
    }
  }
  return copy_file(in, st, dir, leaf, source, dest, stop, err);
}

// "rank 1: FLOWRUN_OUTPUT_DIR is a symlink to /tmp/x, not the directory
// flowrun made; refused": the output directory itself could not be opened
// beneath the anchor.
std::string output_dir_problem(int rank, const std::string& dir, int err) {
  struct stat st {};
  const std::string head = fmt::format("rank {}: FLOWRUN_OUTPUT_DIR ", rank);
  if (::lstat(dir.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    char target[PATH_MAX] = {};
    const ssize_t n = readlink(dir.c_str(), target, sizeof target - 1);
    return head + fmt::format("is a symlink to {}, not the directory flowrun made; refused",
                              n > 0 ? std::string(target, static_cast<std::size_t>(n)) : "?");
  }
  if (err == ELOOP)
    return head + "was moved: a directory above it is now a symlink, not the directory flowrun made; refused";
  if (err == ENOTDIR && ::lstat(dir.c_str(), &st) == 0)
    return head + "is " + file_type_name(st.st_mode) + ", not the directory flowrun made; refused";
  return head + "cannot be read: " + errno_text(err) + "; refused";
}

}  // namespace

RankOutput scan_rank_output(int rank, const std::string& anchor, const std::string& dir,
                            const std::function<bool()>& stop) {
  RankOutput out;
  out.root = anchor.empty() ? BeneathRoot::open(dir) : BeneathRoot::open_under(anchor, dir, false);
  if (!out.root.ok()) {
    if (out.root.error() != ENOENT) out.errors.push_back(output_dir_problem(rank, dir, out.root.error()));
    return out;
  }
  for (auto& e : scan_tree(out.root, stop, &out.stopped)) {
    if (e.kind == TreeEntry::Kind::file)
      out.files.push_back(std::move(e));
    else
      out.errors.push_back(fmt::format("rank {}: FLOWRUN_OUTPUT_DIR/{} {}; refused", rank, e.rel,
                                       refusal_text(e, "the output directory")));
  }
  return out;
}

namespace {

// One gathering: the candidates found so far, what it says, and why it stopped.
struct Gathering {
  const JoinRequest& rq;
  JoinResult result;
  std::vector<Candidate> candidates;
  std::set<std::string> stale;
  std::string stopped_why;

  bool stop() {
    if (stopped_why.empty() && rq.stop) stopped_why = rq.stop();
    return !stopped_why.empty();
  }
  std::function<bool()> stop_fn() {
    return [this] { return stop(); };
  }
};

// The files the step's outputs globs match in the workdir, written since the
// step started (older ones are stale); a literal name that every rank on a
// node would write is refused.
void add_workdir_matches(Gathering& g, const BeneathRoot& workroot) {
  const JoinRequest& rq = g.rq;
  Walker workdir(workroot, true);
  for (const auto& glob : rq.outputs) {
    std::vector<Found> fresh, old;
    std::vector<TreeEntry> refused;
    const Glob parsed = Glob::parse(glob);
    for (auto& f : workdir.glob(parsed, &refused))
      (f.mtime >= rq.started ? fresh : old).push_back(std::move(f));
    for (const auto& f : old) g.stale.insert(f.abs);
    for (const auto& e : refused)
      g.result.errors.push_back(fmt::format("step '{}': output '{}': {} {}; refused", rq.step, glob,
                                            printable(workroot.path_of(e.rel)),
                                            printable(refusal_text(e, "the workdir"))));
    if (fresh.empty()) {
      if (refused.empty()) g.result.errors.push_back(missing_message(rq, glob, old));
      continue;
    }
    // The glob names the file itself when it has as many names as the path found (which has no
    // empty or '.' ones).
    const std::size_t found_names =
        static_cast<std::size_t>(std::count(fresh[0].rel.begin(), fresh[0].rel.end(), '/')) + 1;
    if (parsed.literal() && rq.collect == Collect::all && rq.ranks_on_node > 1 && fresh.size() == 1 &&
        found_names == parsed.names().size()) {
      g.result.errors.push_back(shared_file_message(rq, glob));
      continue;
    }
    for (auto& f : fresh) {
      std::string dest = f.rel;
      g.candidates.push_back(
          {&workroot, std::move(f), -1, "matched by output '" + glob + "'", std::move(dest)});
    }
  }
}

// Every file of each collected rank's $FLOWRUN_OUTPUT_DIR (rank 0's alone for
// collect: rank0), under rankN/ for collect: all. `rank_outputs` keeps the
// roots the candidates point at.
void add_rank_outputs(Gathering& g, std::vector<RankOutput>& rank_outputs) {
  const JoinRequest& rq = g.rq;
  const int ranks = rq.collect == Collect::rank0
                        ? std::min<int>(1, static_cast<int>(rq.rank_output_dirs.size()))
                        : static_cast<int>(rq.rank_output_dirs.size());
  rank_outputs.reserve(static_cast<std::size_t>(ranks));  // candidates point at their roots
  const auto stop = g.stop_fn();
  for (int rank = 0; rank < ranks && !g.stop(); ++rank) {
    const std::string prefix = rq.collect == Collect::all ? fmt::format("rank{}/", rank) : "";
    RankOutput& ro = rank_outputs.emplace_back(
        scan_rank_output(rank, rq.run_dir, rq.rank_output_dirs[static_cast<std::size_t>(rank)], stop));
    // The same words an agent sends, made printable as the head makes them.
    for (const auto& e : ro.errors)
      g.result.errors.push_back(fmt::format("step '{}': {}", rq.step, printable(e)));
    for (const auto& e : ro.files) {
      Found f{e.rel, ro.root.path_of(e.rel), mtime_of(e.st), static_cast<std::uint64_t>(e.st.st_size)};
      g.candidates.push_back({&ro.root, std::move(f), rank,
                              fmt::format("from rank {}'s $FLOWRUN_OUTPUT_DIR", rank), prefix + e.rel});
    }
  }
}

// Where each candidate goes, and the destinations dropped because two
// files would land there or a file's would be another's directory.
struct Destinations {
  std::map<std::string, const Candidate*> by_dest;
  std::set<std::string> dropped;
};

Destinations choose_destinations(Gathering& g) {
  Destinations d;
  // One candidate per destination; two globs matching one file is not a collision.
  for (const auto& c : g.candidates) {
    auto [it, inserted] = d.by_dest.emplace(c.dest, &c);
    if (inserted || it->second->file.abs == c.file.abs) continue;
    if (d.dropped.insert(c.dest).second)
      g.result.errors.push_back(fmt::format(
          "step '{}': two files would be collected as '{}': {} and {}; neither is collected. Rename one of "
          "them, or leave one out of outputs.",
          g.rq.step, c.dest, describe(*it->second), describe(c)));
  }
  // A file whose destination is another's directory: 'logs' and 'logs/a.txt'.
  for (const auto& [dest, c] : d.by_dest) {
    for (std::size_t slash = dest.find('/'); slash != npos; slash = dest.find('/', slash + 1)) {
      auto parent = d.by_dest.find(dest.substr(0, slash));
      if (parent == d.by_dest.end()) continue;
      if (d.dropped.insert(parent->first).second)
        g.result.errors.push_back(fmt::format(
            "step '{}': '{}' would be collected both as a file and as a directory: {} and {}; neither is "
            "collected. Rename one of them.",
            g.rq.step, parent->first, describe(*parent->second), describe(*c)));
      d.dropped.insert(dest);
    }
  }
  return d;
}

// outputs/ is made beneath the run directory, and every file in it beneath
// outputs/, without following a symlink: a rank that put one in their
// place cannot make flowrun write elsewhere.
BeneathRoot open_outputs_dir(const JoinRequest& rq) {
  BeneathRoot out;
  if (rq.run_dir.empty()) {
    make_dirs(rq.outputs_dir);
    out = BeneathRoot::open(rq.outputs_dir);
  } else {
    make_dirs(rq.run_dir);
    out = BeneathRoot::open_under(rq.run_dir, rq.outputs_dir, true);
  }
  if (!out.ok())
    throw Error("cannot create the directory " + rq.outputs_dir + ": " + errno_text(out.error()),
                kExitFailure, out.error());
  return out;
}

enum class Collected { done, failed, stopped };

// Links or copies one candidate to outputs/DEST; says why not when it cannot.
Collected collect_one(Gathering& g, const BeneathRoot& out, const std::string& dest, const Candidate& c) {
  const JoinRequest& rq = g.rq;
  const std::string target = printable(rq.outputs_dir + "/" + dest);  // for messages
  struct stat st {};
  const int fd = c.root->open_regular(c.file.rel, Links::beneath, &st);
  if (fd == kNotRegular || fd < 0) {
    g.result.errors.push_back(fmt::format(
        "step '{}': cannot collect {}: {}; make sure it stays in place and readable until the step's "
        "outputs are gathered.",
        rq.step, describe(c),
        fd == kNotRegular ? "it is now " + file_type_name(st.st_mode) + ", not a regular file"
        : errno == EXDEV  ? std::string("it is now a symlink out of its directory")
                          : errno_text(errno)));
    return Collected::failed;
  }
  UniqueFd in(fd);
  std::string leaf;
  UniqueFd dir(out.open_parent(dest, true, 0755, &leaf));
  if (!dir) {
    const int e = errno;
    throw Error("cannot create the directory for " + target + ": " + errno_text(e), kExitFailure, e);
  }
  int err = 0;
  switch (put_file(in.get(), st, c.rank >= 0, dir.get(), leaf, printable(c.file.abs), target, g.stop_fn(),
                   &err)) {
    case Put::done: break;
    case Put::stopped: return Collected::stopped;
    case Put::exists: {
      struct stat there {};
      if (fstatat(dir.get(), leaf.c_str(), &there, AT_SYMLINK_NOFOLLOW) == 0 && there.st_dev == st.st_dev &&
          there.st_ino == st.st_ino)
        break;
      g.result.errors.push_back(
          fmt::format("step '{}': cannot collect {}: {} already exists and is not overwritten; remove it, "
                      "or gather into "
                      "an empty directory.",
                      rq.step, describe(c), target));
      return Collected::failed;
    }
    case Put::unreadable:
      g.result.errors.push_back(fmt::format(
          "step '{}': cannot collect {}: {}; make sure it stays in place and readable until the step's "
          "outputs are gathered.",
          rq.step, describe(c), errno_text(err)));
      return Collected::failed;
  }
  g.result.files.push_back({c.file.abs, dest, c.rank, static_cast<std::uint64_t>(st.st_size)});
  return Collected::done;
}

}  // namespace

JoinResult gather_outputs(const JoinRequest& rq) {
  Gathering g{rq, {}, {}, {}, {}};
  const BeneathRoot workroot = BeneathRoot::open(rq.workdir);
  add_workdir_matches(g, workroot);
  std::vector<RankOutput> rank_outputs;
  add_rank_outputs(g, rank_outputs);
  const Destinations d = choose_destinations(g);
  const BeneathRoot out = open_outputs_dir(rq);
  std::size_t left = 0;
  for (const auto& [dest, c] : d.by_dest) {
    if (d.dropped.count(dest)) continue;
    if (g.stop() || collect_one(g, out, dest, *c) == Collected::stopped) ++left;
  }
  if (!g.stopped_why.empty()) {
    g.result.stopped = true;
    g.result.errors.push_back(fmt::format("step '{}': gathering its outputs stopped: {}; {} not collected",
                                          rq.step, g.stopped_why,
                                          left == 0   ? std::string("the rest is")
                                          : left == 1 ? std::string("1 file is")
                                                      : fmt::format("{} files are", left)));
  }
  g.result.stale.assign(g.stale.begin(), g.stale.end());
  return std::move(g.result);
}

}  // namespace flowrun
