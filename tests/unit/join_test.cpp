// The join on real files: a scratch workdir and run directory under /tmp,
// file times set with utimensat, so freshness is decided by the test and not
// by the clock. Messages that reach the user are compared whole.
#include "flowrun/join.h"

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "flowrun/glob.h"

#include "testing.h"

using namespace flowrun;

namespace {

namespace fs = std::filesystem;

using testing::kSecond;
constexpr FileTime kStarted = 1795972262 * kSecond;  // 2026-11-29 17:11:02 UTC
constexpr FileTime kFresh = kStarted + kSecond;
constexpr FileTime kStale = kStarted - 9 * kSecond;  // 17:10:53

// Messages show local times; the tests read them in UTC.
class UtcZone {
 public:
  UtcZone() {
    if (const char* tz = getenv("TZ")) saved_ = tz;
    setenv("TZ", "UTC", 1);
    tzset();
  }
  ~UtcZone() {
    if (saved_)
      setenv("TZ", saved_->c_str(), 1);
    else
      unsetenv("TZ");
    tzset();
  }

 private:
  std::optional<std::string> saved_;
};

void set_mtime(const std::string& path, FileTime t) {
  timespec times[2];
  times[0].tv_sec = times[1].tv_sec = t / kSecond;
  times[0].tv_nsec = times[1].tv_nsec = t % kSecond;
  REQUIRE(utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW) == 0);
}

void write(const std::string& path, const std::string& text, FileTime mtime = kFresh) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
  set_mtime(path, mtime);
}

struct Scratch {
  UtcZone utc;
  testing::ScopedTempDir tmp{"join"};
  std::string work = tmp.path() + "/work";
  std::string run = tmp.path() + "/work/.flowrun/runs/r1/train";
  std::string outputs = run + "/outputs";

  Scratch() { fs::create_directories(work); }

  std::string rank_dir(int rank) const { return run + "/rank" + std::to_string(rank) + "/out"; }

  JoinRequest request(std::vector<std::string> globs, Collect collect = Collect::rank0, int ranks = 2) const {
    JoinRequest rq;
    rq.step = "train";
    rq.workdir = work;
    rq.outputs = std::move(globs);
    rq.collect = collect;
    rq.world_size = ranks;
    rq.ranks_on_node = ranks;
    for (int r = 0; r < ranks; ++r) rq.rank_output_dirs.push_back(rank_dir(r));
    rq.outputs_dir = outputs;
    rq.started = kStarted;
    rq.run_dir = tmp.path() + "/work/.flowrun/runs/r1";
    return rq;
  }
};

std::vector<std::string> dests(const JoinResult& result) {
  std::vector<std::string> out;
  for (const auto& f : result.files) out.push_back(f.dest);
  return out;
}

// Every regular file under `dir`, relative, sorted.
std::vector<std::string> tree(const std::string& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out.push_back(fs::relative(e.path(), dir).string());
  std::sort(out.begin(), out.end());
  return out;
}

ino_t inode(const std::string& path) {
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  return st.st_ino;
}

}  // namespace

TEST_CASE("collect: rank0 puts rank 0's private files and the glob matches directly in outputs/", "[join]") {
  Scratch s;
  write(s.work + "/model.pt", "weights");
  write(s.work + "/checkpoints/epoch1.pt", "e1");
  write(s.work + "/checkpoints/epoch2.pt", "e2");
  write(s.work + "/checkpoints/notes.txt", "not matched");
  write(s.rank_dir(0) + "/metrics/loss.json", "{}");
  write(s.rank_dir(1) + "/metrics/loss.json", "rank 1's, not collected");

  JoinResult result = gather_outputs(s.request({"model.pt", "checkpoints/*.pt"}));

  CHECK(result.errors.empty());
  CHECK(result.ok());
  CHECK(result.stale.empty());
  CHECK(dests(result) == std::vector<std::string>{"checkpoints/epoch1.pt", "checkpoints/epoch2.pt",
                                                  "metrics/loss.json", "model.pt"});
  CHECK(result.files[0].source == s.work + "/checkpoints/epoch1.pt");
  CHECK(result.files[0].rank == -1);
  CHECK(result.files[0].bytes == 2);
  CHECK(result.files[2].source == s.rank_dir(0) + "/metrics/loss.json");
  CHECK(result.files[2].rank == 0);
  CHECK(tree(s.outputs) == dests(result));
  CHECK(testing::read_file(s.outputs + "/model.pt") == "weights");
  CHECK(testing::read_file(s.outputs + "/metrics/loss.json") == "{}");
}

TEST_CASE("collect: all puts each rank's private files under rank<R>/ and the node's matches on top",
          "[join]") {
  Scratch s;
  write(s.work + "/ckpt/model_rank0.pt", "r0");
  write(s.work + "/ckpt/model_rank1.pt", "r1");
  write(s.rank_dir(0) + "/log.txt", "log 0");
  write(s.rank_dir(1) + "/log.txt", "log 1");
  write(s.rank_dir(1) + "/sub/extra.bin", "x");
  // rank 2's private directory was never created: nothing to collect, no error.

  JoinResult result = gather_outputs(s.request({"ckpt/model_rank*.pt"}, Collect::all, 3));

  CHECK(result.errors.empty());
  CHECK(dests(result) == std::vector<std::string>{"ckpt/model_rank0.pt", "ckpt/model_rank1.pt",
                                                  "rank0/log.txt", "rank1/log.txt", "rank1/sub/extra.bin"});
  CHECK(result.files[0].rank == -1);
  CHECK(result.files[2].rank == 0);
  CHECK(result.files[3].rank == 1);
  CHECK(tree(s.outputs) == dests(result));
  CHECK(testing::read_file(s.outputs + "/rank1/log.txt") == "log 1");
}

TEST_CASE("an empty private directory and no outputs globs gather nothing, without error", "[join]") {
  Scratch s;
  fs::create_directories(s.rank_dir(0));
  JoinResult result = gather_outputs(s.request({}));
  CHECK(result.ok());
  CHECK(result.files.empty());
  CHECK(fs::is_directory(s.outputs));
  CHECK(tree(s.outputs).empty());
}

TEST_CASE("private files count whatever their mtime", "[join]") {
  Scratch s;
  write(s.rank_dir(0) + "/copied.pt", "cp -p keeps the old time", kStale);
  JoinResult result = gather_outputs(s.request({}));
  CHECK(result.ok());
  CHECK(dests(result) == std::vector<std::string>{"copied.pt"});
  CHECK(result.stale.empty());
}

TEST_CASE("** matches any number of directories, and a matched directory brings every file under it",
          "[join]") {
  Scratch s;
  write(s.work + "/top.pt", "");
  write(s.work + "/a/b/deep.pt", "");
  write(s.work + "/a/b/deep.txt", "");
  write(s.work + "/.hidden/h.pt", "");
  write(s.work + "/logs/run1/events.out", "");
  write(s.work + "/logs/metrics.json", "");

  SECTION("**/*.pt") {
    JoinResult result = gather_outputs(s.request({"**/*.pt"}));
    CHECK(result.errors.empty());
    CHECK(dests(result) == std::vector<std::string>{".hidden/h.pt", "a/b/deep.pt", "top.pt"});
  }
  SECTION("a directory named by a glob") {
    JoinResult result = gather_outputs(s.request({"logs"}));
    CHECK(result.errors.empty());
    CHECK(dests(result) == std::vector<std::string>{"logs/metrics.json", "logs/run1/events.out"});
  }
  SECTION("a trailing **") {
    JoinResult result = gather_outputs(s.request({"a/**"}));
    CHECK(dests(result) == std::vector<std::string>{"a/b/deep.pt", "a/b/deep.txt"});
  }
  SECTION("* matches directories too") {
    JoinResult result = gather_outputs(s.request({"*/b/*.txt", "l*"}));
    CHECK(result.errors.empty());
    CHECK(dests(result) ==
          std::vector<std::string>{"a/b/deep.txt", "logs/metrics.json", "logs/run1/events.out"});
  }
  SECTION("two globs matching one file collect it once") {
    JoinResult result = gather_outputs(s.request({"top.pt", "*.pt"}));
    CHECK(result.errors.empty());
    CHECK(dests(result) == std::vector<std::string>{"top.pt"});
  }
}

TEST_CASE("the walk collects exactly what Glob::matches accepts", "[join]") {
  Scratch s;
  const std::vector<std::string> files = {"a.pt",        "b.txt",     "x/a.pt",   "x/y/a.pt",
                                          "x/y/z/b.txt", "y/a1.pt",   "y/a2.pt",  "y/ab.pt",
                                          "z/x/a.pt",    ".dot/a.pt", "[x]/a.pt", "x/y/.z/c.pt"};
  for (const auto& f : files) write(s.work + "/" + f, "");
  const char* globs[] = {
      "*",           "**",           "*.pt",    "**/*.pt", "x/**",    "x/**/a.pt", "?/a.pt",
      "y/a[0-9].pt", "y/a[!0-9].pt", "**/x/**", "*/*/*",   "\\[x]/*", "**/.z/*",   "x"};
  for (const char* glob : globs) {
    INFO(glob);
    fs::remove_all(s.outputs);
    std::vector<std::string> expected;
    for (const auto& f : files) {
      // The file, or a directory above it, matches.
      bool match = false;
      for (std::size_t end = f.find('/'); !match; end = f.find('/', end + 1)) {
        match = Glob::parse(glob).matches(f.substr(0, end));
        if (end == std::string::npos) break;
      }
      if (match) expected.push_back(f);
    }
    std::sort(expected.begin(), expected.end());
    CHECK(dests(gather_outputs(s.request({glob}))) == expected);
  }
}

TEST_CASE("files older than the step are not collected and are listed as stale", "[join]") {
  Scratch s;
  write(s.work + "/checkpoints/old.pt", "", kStale);
  write(s.work + "/checkpoints/new.pt", "");
  write(s.work + "/checkpoints/exactly_at_start.pt", "", kStarted);

  JoinResult result = gather_outputs(s.request({"checkpoints/*.pt"}));

  CHECK(result.errors.empty());
  CHECK(dests(result) == std::vector<std::string>{"checkpoints/exactly_at_start.pt", "checkpoints/new.pt"});
  CHECK(result.stale == std::vector<std::string>{s.work + "/checkpoints/old.pt"});
  CHECK_FALSE(fs::exists(s.outputs + "/checkpoints/old.pt"));
}

TEST_CASE("a declared output that matches no fresh file is an error that names it", "[join]") {
  Scratch s;
  write(s.work + "/other.pt", "");

  SECTION("nothing there") {
    JoinResult result = gather_outputs(s.request({"model.pt", "other.pt"}));
    CHECK_FALSE(result.ok());
    CHECK(result.errors ==
          std::vector<std::string>{
              "step 'train': output 'model.pt' matches no file written during the step in " + s.work +
              ". Write it there (the glob is relative to the step's workdir), or correct the "
              "glob in outputs."});
    CHECK(dests(result) == std::vector<std::string>{"other.pt"});  // the rest is still gathered
  }
  SECTION("one stale file there") {
    write(s.work + "/model.pt", "", kStale);
    JoinResult result = gather_outputs(s.request({"model.pt"}));
    CHECK(result.errors == std::vector<std::string>{
                               "step 'train': output 'model.pt' matches no file written during the step in " +
                               s.work + ". A file there predates the step and is not collected: " + s.work +
                               "/model.pt (written 2026-11-29 17:10:53, before the step started at "
                               "17:11:02); write it again during the step, or correct the glob in outputs."});
    CHECK(result.stale == std::vector<std::string>{s.work + "/model.pt"});
  }
  SECTION("several stale files, on another day and within the same second") {
    write(s.work + "/ckpt/a.pt", "", kStarted - 86400 * kSecond);
    write(s.work + "/ckpt/b.pt", "", kStarted + 250'000'000);
    JoinRequest rq = s.request({"ckpt/*.pt"});
    rq.started = kStarted + 600'000'000;
    JoinResult result = gather_outputs(rq);
    CHECK(result.errors ==
          std::vector<std::string>{
              "step 'train': output 'ckpt/*.pt' matches no file written during the step in " + s.work +
              ". 2 files there predate the step and are not collected; the newest: " + s.work +
              "/ckpt/b.pt (written 2026-11-29 17:11:02.250, before the step started at "
              "17:11:02.600); write it again during the step, or correct the glob in outputs."});
    write(s.work + "/ckpt/b.pt", "", kStarted - 300 * kSecond);
    fs::remove_all(s.outputs);
    result = gather_outputs(s.request({"ckpt/b.pt"}));
    REQUIRE(result.errors.size() == 1);
    CHECK_THAT(result.errors[0], Catch::Contains("(written 2026-11-29 17:06:02, before the step started at "
                                                 "17:11:02)"));
    write(s.work + "/ckpt/b.pt", "", kStarted - 86400 * kSecond);
    result = gather_outputs(s.request({"ckpt/b.pt"}));
    REQUIRE(result.errors.size() == 1);
    CHECK_THAT(result.errors[0], Catch::Contains("(written 2026-11-28 17:11:02, before the step started at "
                                                 "2026-11-29 17:11:02)"));
  }
}

TEST_CASE("with collect: all, one file named by a literal glob is shared by the node's ranks", "[join]") {
  Scratch s;
  write(s.work + "/checkpoints/model.pt", "last writer wins");

  SECTION("several ranks on the node: a collision") {
    JoinResult result = gather_outputs(s.request({"checkpoints/model.pt"}, Collect::all, 4));
    CHECK(result.errors ==
          std::vector<std::string>{"step 'train': with collect: all, output 'checkpoints/model.pt' names one "
                                   "file, which the 4 ranks on "
                                   "this node share, so it holds only the copy of the rank that wrote it "
                                   "last; write one file per rank "
                                   "(such as 'checkpoints/model_rank<RANK>.pt', collected with the glob "
                                   "'checkpoints/model_rank*.pt'), "
                                   "or write it into $FLOWRUN_OUTPUT_DIR, or use collect: rank0."});
    CHECK(result.files.empty());
  }
  SECTION("one rank on the node: its file") {
    JoinResult result = gather_outputs(s.request({"checkpoints/model.pt"}, Collect::all, 1));
    CHECK(result.errors.empty());
    CHECK(dests(result) == std::vector<std::string>{"checkpoints/model.pt"});
  }
  SECTION("collect: rank0 takes it") {
    JoinResult result = gather_outputs(s.request({"checkpoints/model.pt"}, Collect::rank0, 4));
    CHECK(result.errors.empty());
    CHECK(dests(result) == std::vector<std::string>{"checkpoints/model.pt"});
  }
  SECTION("a literal glob naming a directory is not one file") {
    write(s.work + "/checkpoints/model_rank1.pt", "");
    JoinResult result = gather_outputs(s.request({"checkpoints"}, Collect::all, 4));
    CHECK(result.errors.empty());
    CHECK(dests(result) == std::vector<std::string>{"checkpoints/model.pt", "checkpoints/model_rank1.pt"});
  }
}

TEST_CASE("a private file and a glob match for one destination: a collision, neither collected", "[join]") {
  Scratch s;
  write(s.work + "/model.pt", "glob's");
  write(s.rank_dir(0) + "/model.pt", "rank 0's");
  write(s.work + "/logs", "a file");
  write(s.rank_dir(0) + "/logs/a.txt", "");
  write(s.rank_dir(0) + "/fine.txt", "");

  JoinResult result = gather_outputs(s.request({"model.pt", "logs"}));

  CHECK(
      result.errors ==
      std::vector<std::string>{
          "step 'train': two files would be collected as 'model.pt': " + s.work +
              "/model.pt (matched by output 'model.pt') and " + s.rank_dir(0) +
              "/model.pt (from rank 0's $FLOWRUN_OUTPUT_DIR); neither is collected. Rename one of them, or "
              "leave one out of outputs.",
          "step 'train': 'logs' would be collected both as a file and as a directory: " + s.work +
              "/logs (matched by output 'logs') and " + s.rank_dir(0) +
              "/logs/a.txt (from rank 0's $FLOWRUN_OUTPUT_DIR); neither is collected. Rename one of them."});
  CHECK(tree(s.outputs) == std::vector<std::string>{"fine.txt"});
}

TEST_CASE("with collect: all, a glob match under rank<R>/ collides with rank R's private file", "[join]") {
  Scratch s;
  write(s.work + "/rank1/x.pt", "");
  write(s.rank_dir(1) + "/x.pt", "");
  JoinResult result = gather_outputs(s.request({"rank*/*.pt"}, Collect::all, 2));
  REQUIRE(result.errors.size() == 1);
  CHECK_THAT(result.errors[0],
             Catch::StartsWith("step 'train': two files would be collected as 'rank1/x.pt': "));
}

TEST_CASE("a glob match is copied, a rank's own file hard-linked, across file systems copied", "[join]") {
  Scratch s;
  write(s.work + "/model.pt", "weights");
  chmod((s.work + "/model.pt").c_str(), 0640);

  SECTION("a glob match in the shared workdir: this run's own copy, which a rewrite in place leaves alone") {
    JoinResult result = gather_outputs(s.request({"model.pt"}));
    REQUIRE(result.ok());
    CHECK(inode(s.outputs + "/model.pt") != inode(s.work + "/model.pt"));
    std::ofstream(s.work + "/model.pt", std::ios::trunc) << "the next run's";
    CHECK(testing::read_file(s.outputs + "/model.pt") == "weights");
    struct stat st {};
    REQUIRE(stat((s.outputs + "/model.pt").c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0640);
    CHECK(st.st_mtim.tv_sec == kFresh / kSecond);
  }
  SECTION("a rank's own file with no other name: the same inode") {
    write(s.rank_dir(0) + "/weights.bin", "mine");
    JoinResult result = gather_outputs(s.request({}));
    REQUIRE(result.ok());
    CHECK(inode(s.outputs + "/weights.bin") == inode(s.rank_dir(0) + "/weights.bin"));
  }
  SECTION("a rank's file that is also a name in the workdir: a copy") {
    fs::create_directories(s.rank_dir(0));
    REQUIRE(link((s.work + "/model.pt").c_str(), (s.rank_dir(0) + "/model.pt").c_str()) == 0);
    JoinResult result = gather_outputs(s.request({}));
    REQUIRE(result.ok());
    CHECK(inode(s.outputs + "/model.pt") != inode(s.work + "/model.pt"));
    std::ofstream(s.work + "/model.pt", std::ios::trunc) << "the next run's";
    CHECK(testing::read_file(s.outputs + "/model.pt") == "weights");
  }
  SECTION("another file system: a copy with the mode and mtime") {
    testing::ScopedTempDir shm("join", "/dev/shm");
    struct stat a {
    }, b{};
    REQUIRE(stat(s.work.c_str(), &a) == 0);
    REQUIRE(stat(shm.path().c_str(), &b) == 0);
    if (a.st_dev == b.st_dev) {
      WARN("/dev/shm and /tmp are one file system here; the copy is not tested");
      return;
    }
    JoinRequest rq = s.request({"model.pt"});
    rq.outputs_dir = shm.path() + "/outputs";
    rq.run_dir.clear();  // outputs/ is not under it here: every directory is opened as given
    JoinResult result = gather_outputs(rq);
    REQUIRE(result.ok());
    const std::string copy = rq.outputs_dir + "/model.pt";
    CHECK(testing::read_file(copy) == "weights");
    struct stat st {};
    REQUIRE(stat(copy.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0640);
    CHECK(st.st_mtim.tv_sec == kFresh / kSecond);
    CHECK(result.files[0].bytes == 7);
  }
}

TEST_CASE("a copy keeps the holes of a sparse file", "[join]") {
  Scratch s;
  constexpr off_t kGiB = off_t{1} << 30;
  write(s.work + "/sparse.bin", "");
  {
    const int fd = open((s.work + "/sparse.bin").c_str(), O_WRONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(pwrite(fd, "head", 4, 0) == 4);
    REQUIRE(pwrite(fd, "middle", 6, 32 * kGiB) == 6);
    REQUIRE(ftruncate(fd, 64 * kGiB) == 0);  // ends in a hole
    const timespec times[2] = {{0, UTIME_OMIT}, {kFresh / kSecond, kFresh % kSecond}};
    REQUIRE(futimens(fd, times) == 0);
    close(fd);
  }
  JoinResult result = gather_outputs(s.request({"sparse.bin"}));
  REQUIRE(result.ok());
  const std::string copy = s.outputs + "/sparse.bin";
  struct stat st {};
  REQUIRE(stat(copy.c_str(), &st) == 0);
  CHECK(st.st_size == 64 * kGiB);
  CHECK(st.st_blocks * 512 <= 1 << 20);
  CHECK(result.files[0].bytes == static_cast<std::uint64_t>(64 * kGiB));
  std::ifstream in(copy, std::ios::binary);
  std::string head(4, '\0'), middle(6, '\0');
  in.read(head.data(), 4);
  in.seekg(32 * kGiB);
  in.read(middle.data(), 6);
  CHECK(head == "head");
  CHECK(middle == "middle");
}

TEST_CASE("a file already in outputs/ is never replaced", "[join]") {
  Scratch s;
  write(s.work + "/model.pt", "new");

  SECTION("a different file: an error") {
    write(s.outputs + "/model.pt", "someone else's");
    JoinResult result = gather_outputs(s.request({"model.pt"}));
    CHECK(result.errors ==
          std::vector<std::string>{"step 'train': cannot collect " + s.work +
                                   "/model.pt (matched by output 'model.pt'): " + s.outputs +
                                   "/model.pt already exists and is not overwritten; remove it, "
                                   "or gather into an empty directory."});
    CHECK(testing::read_file(s.outputs + "/model.pt") == "someone else's");
  }
  SECTION("the same file (a rank's own, linked): gathering again is fine") {
    write(s.rank_dir(0) + "/metrics.json", "{}");
    REQUIRE(gather_outputs(s.request({})).ok());
    JoinResult again = gather_outputs(s.request({}));
    CHECK(again.ok());
    CHECK(dests(again) == std::vector<std::string>{"metrics.json"});
  }
}

TEST_CASE(".flowrun at the workdir's root is never searched", "[join]") {
  Scratch s;
  write(s.work + "/model.pt", "");
  write(s.work + "/.flowrun/runs/old/train/outputs/model.pt", "");
  write(s.work + "/sub/.flowrun/model.pt", "");  // only the root's is flowrun's

  CHECK(dests(gather_outputs(s.request({"**/model.pt"}))) ==
        std::vector<std::string>{"model.pt", "sub/.flowrun/model.pt"});
  fs::remove_all(s.outputs);
  CHECK(dests(gather_outputs(s.request({"*"}))) ==
        std::vector<std::string>{"model.pt", "sub/.flowrun/model.pt"});
  fs::remove_all(s.outputs);
  JoinResult literal = gather_outputs(s.request({".flowrun/runs/old/train/outputs/model.pt"}));
  CHECK(literal.files.empty());
  CHECK(literal.errors.size() == 1);
}

TEST_CASE("symlinks: files count as their targets, directories are followed only when named", "[join]") {
  Scratch s;
  write(s.work + "/real/epoch3.pt", "e3");
  fs::create_directory_symlink(".", s.work + "/loop");  // a loop: loop/loop/loop/...
  fs::create_directory_symlink("..", s.work + "/real/up");
  fs::create_symlink("epoch3.pt", s.work + "/real/latest.pt");
  fs::create_symlink("missing.pt", s.work + "/real/dangling.pt");
  fs::create_directory_symlink("real", s.work + "/ckpt");

  SECTION("** over a loop ends, and sees each real file once") {
    JoinResult result = gather_outputs(s.request({"**/*.pt"}));
    CHECK(result.errors.empty());
    CHECK(dests(result) == std::vector<std::string>{"real/epoch3.pt", "real/latest.pt"});
    CHECK(result.files[1].source == s.work + "/real/latest.pt");
    CHECK(testing::read_file(s.outputs + "/real/latest.pt") == "e3");
    struct stat st {};
    REQUIRE(lstat((s.outputs + "/real/latest.pt").c_str(), &st) == 0);
    CHECK(S_ISREG(st.st_mode));
  }
  SECTION("a wildcard does not enter a symlinked directory") {
    CHECK(dests(gather_outputs(s.request({"*/epoch3.pt"}))) == std::vector<std::string>{"real/epoch3.pt"});
  }
  SECTION("a name written out goes through the symlink") {
    CHECK(dests(gather_outputs(s.request({"ckpt/epoch3.pt"}))) == std::vector<std::string>{"ckpt/epoch3.pt"});
    fs::remove_all(s.outputs);
    CHECK(dests(gather_outputs(s.request({"ckpt"}))) ==
          std::vector<std::string>{"ckpt/epoch3.pt", "ckpt/latest.pt"});
  }
  SECTION("a loop named literally matches nothing, without hanging") {
    fs::create_symlink("self", s.work + "/self");
    JoinResult result = gather_outputs(s.request({"self/x.pt", "loop/loop/loop/real/epoch3.pt"}));
    CHECK(result.errors.size() == 1);
    CHECK(dests(result) == std::vector<std::string>{"loop/loop/loop/real/epoch3.pt"});
  }
}

TEST_CASE("file_clock_now() never runs ahead of a file written after it", "[join]") {
  testing::ScopedTempDir tmp{"join"};
  for (int i = 0; i < 50; ++i) {
    FileTime before = file_clock_now();
    std::string path = tmp.path() + "/f" + std::to_string(i);
    std::ofstream(path) << i;
    struct stat st {};
    REQUIRE(stat(path.c_str(), &st) == 0);
    CHECK(FileTime{st.st_mtim.tv_sec} * kSecond + st.st_mtim.tv_nsec >= before);
  }
}

TEST_CASE("outputs stay confined: nothing outside the workdir or a rank's directory is read", "[join]") {
  Scratch s;
  write(s.tmp.path() + "/secret.txt", "secret");
  write(s.work + "/model.pt", "m");

  SECTION("a glob that matches a symlink out of the workdir refuses it") {
    fs::create_symlink(s.tmp.path() + "/secret.txt", s.work + "/stolen.pt");
    fs::create_symlink("/etc/passwd", s.work + "/passwd.pt");
    JoinResult result = gather_outputs(s.request({"*.pt"}));
    CHECK(result.errors == std::vector<std::string>{
                               "step 'train': output '*.pt': " + s.work +
                                   "/passwd.pt is a symlink to /etc/passwd, outside the workdir; refused",
                               "step 'train': output '*.pt': " + s.work + "/stolen.pt is a symlink to " +
                                   s.tmp.path() + "/secret.txt, outside the workdir; refused",
                           });
    CHECK(tree(s.outputs) == std::vector<std::string>{"model.pt"});
  }
  SECTION("an escaped '..' matches nothing, and nothing is written above outputs/") {
    JoinResult result = gather_outputs(s.request({"\\.\\./secret.txt", "\\.\\./\\.\\./secret.txt"}));
    CHECK(result.files.empty());
    CHECK(result.errors.size() == 2);
    CHECK(!fs::exists(s.run + "/secret.txt"));
    CHECK(!fs::exists(s.outputs + "/../secret.txt"));
  }
  SECTION("a link in a rank's directory to a file outside it is refused, in the agent's words") {
    write(s.rank_dir(0) + "/result.txt", "r0");
    fs::create_symlink("/etc/passwd", s.rank_dir(0) + "/passwd");
    JoinResult result = gather_outputs(s.request({}));
    CHECK(result.errors == std::vector<std::string>{
                               "step 'train': rank 0: FLOWRUN_OUTPUT_DIR/passwd is a symlink to /etc/passwd, "
                               "outside the output directory; refused"});
    CHECK(tree(s.outputs) == std::vector<std::string>{"result.txt"});
  }
  SECTION("a rank that replaced its directory by a link to another has nothing of it collected") {
    fs::create_directories(s.tmp.path() + "/elsewhere");
    write(s.tmp.path() + "/elsewhere/private.key", "k");
    fs::create_directories(s.run + "/rank0");
    fs::create_directory_symlink(s.tmp.path() + "/elsewhere", s.rank_dir(0));
    JoinResult result = gather_outputs(s.request({}));
    CHECK(result.errors ==
          std::vector<std::string>{"step 'train': rank 0: FLOWRUN_OUTPUT_DIR is a symlink to " +
                                   s.tmp.path() + "/elsewhere, not the directory flowrun made; refused"});
    CHECK(tree(s.outputs).empty());
  }
  SECTION("outputs/ replaced by a link: flowrun writes nothing through it") {
    fs::create_directories(s.tmp.path() + "/elsewhere");
    fs::create_directories(s.run);
    fs::create_directory_symlink(s.tmp.path() + "/elsewhere", s.outputs);
    CHECK_THROWS_WITH(gather_outputs(s.request({"model.pt"})),
                      "cannot create the directory " + s.outputs + ": Too many levels of symbolic links");
    CHECK(tree(s.tmp.path() + "/elsewhere").empty());
  }
  SECTION("a link to a directory inside a rank's directory is refused, as an agent refuses it") {
    write(s.rank_dir(0) + "/ckpt/epoch3.pt", "e3");
    fs::create_directory_symlink("ckpt", s.rank_dir(0) + "/latest");
    JoinResult result = gather_outputs(s.request({}));
    CHECK(result.errors ==
          std::vector<std::string>{
              "step 'train': rank 0: FLOWRUN_OUTPUT_DIR/latest is a symlink to ckpt, a directory "
              "(a link to a directory is not followed); refused"});
    CHECK(tree(s.outputs) == std::vector<std::string>{"ckpt/epoch3.pt"});
    RankOutput scanned = scan_rank_output(0, s.run, s.rank_dir(0));
    CHECK(scanned.errors ==
          std::vector<std::string>{"rank 0: FLOWRUN_OUTPUT_DIR/latest is a symlink to ckpt, a "
                                   "directory (a link to a directory is not followed); refused"});
  }
  SECTION("a FIFO, or a link to one, is refused without being opened") {
    fs::create_directories(s.rank_dir(0));
    REQUIRE(mkfifo((s.rank_dir(0) + "/kmsg").c_str(), 0644) == 0);
    REQUIRE(mkfifo((s.work + "/fifo.pt").c_str(), 0644) == 0);
    JoinResult result = gather_outputs(s.request({"*.pt"}));
    CHECK(result.errors ==
          std::vector<std::string>{
              "step 'train': rank 0: FLOWRUN_OUTPUT_DIR/kmsg is a FIFO, not a regular file; refused"});
    CHECK(tree(s.outputs) == std::vector<std::string>{"model.pt"});
  }
}

TEST_CASE("a file that is not ours is copied, never hard-linked, and loses set-user-ID", "[join]") {
  if (geteuid() != 0) {
    WARN("skipped: needs root to give a file to another user");
    return;
  }
  Scratch s;
  write(s.rank_dir(0) + "/theirs.bin", "theirs");
  write(s.rank_dir(0) + "/ours.bin", "ours");
  REQUIRE(chown((s.rank_dir(0) + "/theirs.bin").c_str(), 65534, 65534) == 0);
  REQUIRE(chmod((s.rank_dir(0) + "/theirs.bin").c_str(), 04755) == 0);
  JoinResult result = gather_outputs(s.request({}));
  REQUIRE(result.ok());
  CHECK(inode(s.outputs + "/ours.bin") == inode(s.rank_dir(0) + "/ours.bin"));
  CHECK(inode(s.outputs + "/theirs.bin") != inode(s.rank_dir(0) + "/theirs.bin"));
  CHECK(testing::read_file(s.outputs + "/theirs.bin") == "theirs");
  struct stat st {};
  REQUIRE(stat((s.outputs + "/theirs.bin").c_str(), &st) == 0);
  CHECK(st.st_uid == 0);
  CHECK((st.st_mode & 07777) == 0755);
}

TEST_CASE("gathering stops when told, and says what it did not collect", "[join]") {
  Scratch s;
  write(s.work + "/a.pt", "a");
  write(s.work + "/b.pt", "b");
  JoinRequest rq = s.request({"*.pt"});
  int asked = 0;
  rq.stop = [&]() -> std::string { return ++asked > 1 ? "flowrun received SIGINT" : ""; };
  JoinResult result = gather_outputs(rq);
  CHECK(result.stopped);
  CHECK(result.files.size() <= 1);
  CHECK(result.errors.back().starts_with(
      "step 'train': gathering its outputs stopped: flowrun received SIGINT; "));
}
