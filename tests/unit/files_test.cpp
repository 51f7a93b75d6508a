#include "flowrun/files.h"

// make_dirs and keep_attempt on real files under /tmp.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "flowrun/error.h"

#include "testing.h"

namespace {

using flowrun::testing::read_file;
using flowrun::testing::ScopedTempDir;

using flowrun::testing::write_text;

using flowrun::testing::exists;

}  // namespace

TEST_CASE("make_dirs makes every missing directory and accepts existing ones", "[files]") {
  const ScopedTempDir tmp("files-test");
  const std::string& root = tmp.path();
  flowrun::make_dirs(root + "/a/b/c");
  CHECK(exists(root + "/a/b/c"));
  flowrun::make_dirs(root + "/a/b/c");  // again: no error
  flowrun::make_dirs(root + "/a/b/d");  // its parent there already: the one call
  CHECK(exists(root + "/a/b/d"));
  flowrun::make_dirs(root + "/a/x/y/");  // two missing below one there, a trailing slash
  CHECK(exists(root + "/a/x/y"));
  flowrun::make_dirs(root + "/p//q//r//");  // doubled slashes, walked up bottom first
  CHECK(exists(root + "/p/q/r"));
  write_text(root + "/file", "x");
  CHECK_THROWS_AS(flowrun::make_dirs(root + "/file/sub"), flowrun::Error);
  CHECK_THROWS_WITH(flowrun::make_dirs(root + "/file"),
                    "cannot create the directory " + root + "/file: it exists and is not a directory");
}

TEST_CASE("keep_attempt moves a failed attempt's logs, traceback and outputs aside", "[files]") {
  const ScopedTempDir tmp("files-test");
  const std::string& root = tmp.path();
  const std::string rank = root + "/rank1";
  flowrun::make_dirs(rank + "/out/sub");
  write_text(rank + "/stdout.log", "attempt 0 out\n");
  write_text(rank + "/stderr.log", "Traceback\n");
  write_text(rank + "/error.json", "{}");
  write_text(rank + "/out/sub/partial.pt", "partial");

  CHECK(flowrun::keep_attempt(rank, 0) == rank + "/attempt0");
  CHECK(read_file(rank + "/attempt0/stdout.log") == "attempt 0 out\n");
  CHECK(read_file(rank + "/attempt0/stderr.log") == "Traceback\n");
  CHECK(read_file(rank + "/attempt0/error.json") == "{}");
  CHECK(read_file(rank + "/attempt0/out/sub/partial.pt") == "partial");
  CHECK_FALSE(exists(rank + "/out"));
  CHECK_FALSE(exists(rank + "/stdout.log"));

  SECTION("the names asked for too, when they are there") {
    write_text(rank + "/stdout.log", "attempt 1 out\n");
    write_text(rank + "/nccl_trace_attempt1_rank_1", "dump");
    CHECK(flowrun::keep_attempt(rank, 1, {"nccl_trace_attempt1_rank_1", "absent"}) == rank + "/attempt1");
    CHECK(read_file(rank + "/attempt1/nccl_trace_attempt1_rank_1") == "dump");
    CHECK_FALSE(exists(rank + "/nccl_trace_attempt1_rank_1"));
    CHECK_FALSE(exists(rank + "/attempt1/absent"));
  }
  SECTION("a second restart keeps its own attempt; nothing to keep makes nothing") {
    write_text(rank + "/stdout.log", "attempt 1 out\n");
    CHECK(flowrun::keep_attempt(rank, 1) == rank + "/attempt1");
    CHECK(read_file(rank + "/attempt1/stdout.log") == "attempt 1 out\n");
    CHECK(read_file(rank + "/attempt0/stdout.log") == "attempt 0 out\n");
    CHECK(flowrun::keep_attempt(rank, 2).empty());
    CHECK_FALSE(exists(rank + "/attempt2"));
  }
}

TEST_CASE("keep_attempt moves nothing through a link a rank put in place", "[files]") {
  const ScopedTempDir tmp("files-test");
  const std::string& root = tmp.path();
  const std::string rank = root + "/rank1";
  flowrun::make_dirs(root + "/elsewhere");
  flowrun::make_dirs(rank + "/out");
  write_text(rank + "/stdout.log", "attempt 0 out\n");

  SECTION("attemptN/ is a link: refused, nothing moved") {
    std::filesystem::create_directory_symlink(root + "/elsewhere", rank + "/attempt0");
    CHECK_THROWS_WITH(
        flowrun::keep_attempt(rank, 0),
        Catch::Contains("cannot keep attempt 0's " + rank + "/stdout.log in " + rank + "/attempt0"));
    CHECK(read_file(rank + "/stdout.log") == "attempt 0 out\n");
  }
  SECTION("the rank's directory is a link: refused") {
    std::filesystem::rename(rank, root + "/real");
    std::filesystem::create_directory_symlink(root + "/real", rank);
    CHECK_THROWS_WITH(flowrun::keep_attempt(rank, 0),
                      Catch::Contains("cannot keep attempt 0's " + rank + " in"));
    CHECK(exists(root + "/real/stdout.log"));
  }
  CHECK(std::filesystem::is_empty(root + "/elsewhere"));
}

TEST_CASE("try_write_file writes a file whole or not at all", "[files]") {
  const ScopedTempDir tmp("files-test");
  const std::string& root = tmp.path();
  CHECK(flowrun::try_write_file(root + "/report.txt", "first\n") == 0);
  CHECK(flowrun::try_write_file(root + "/report.txt", "second, longer\n") == 0);
  CHECK(read_file(root + "/report.txt") == "second, longer\n");
  CHECK_FALSE(exists(root + "/report.txt.tmp"));
  // A directory that is not there: the errno, nothing written, no temporary file left.
  CHECK(flowrun::try_write_file(root + "/missing/report.txt", "x") == ENOENT);
  CHECK_FALSE(exists(root + "/missing"));
  CHECK_THROWS_WITH(flowrun::write_file(root + "/missing/report.txt", "x"),
                    "cannot write " + root + "/missing/report.txt: No such file or directory");
}

TEST_CASE("nothing another process can make blocks a reader or a writer", "[files]") {
  // A FIFO, with no writer, where a record or a log was: opening it for
  // reading would block forever. Each reader refuses it at once.
  const ScopedTempDir tmp("files-test");
  const std::string& root = tmp.path();
  REQUIRE(mkfifo((root + "/run.json").c_str(), 0644) == 0);
  int err = 0;
  CHECK_FALSE(flowrun::try_read_file(root + "/run.json", 10, &err));
  CHECK(err == flowrun::kErrNotRegular);
  CHECK_THROWS_WITH(flowrun::read_file(root + "/run.json", 10),
                    "cannot read " + root + "/run.json: not a regular file");
  // Through a link to it, and to a device, the same.
  std::filesystem::create_symlink(root + "/run.json", root + "/link.json");
  CHECK_FALSE(flowrun::try_read_file(root + "/link.json", 10, &err));
  CHECK(err == flowrun::kErrNotRegular);
  CHECK_FALSE(flowrun::try_read_file("/dev/zero", 10, &err));
  CHECK(err == flowrun::kErrNotRegular);
  // A log opened for writing: a FIFO (opening it for writing with no reader
  // would block) or a link in its place is refused, a regular file truncated.
  CHECK(flowrun::open_output_file(root + "/run.json", false, &err) < 0);
  CHECK(err == flowrun::kErrNotRegular);
  write_text(root + "/target.txt", "kept\n");
  std::filesystem::create_symlink(root + "/target.txt", root + "/stdout.log");
  CHECK(flowrun::open_output_file(root + "/stdout.log", false, &err) < 0);
  CHECK(err == ELOOP);
  CHECK(read_file(root + "/target.txt") == "kept\n");
  write_text(root + "/stderr.log", "old\n");
  const int fd = flowrun::open_output_file(root + "/stderr.log", false, &err);
  REQUIRE(fd >= 0);
  CHECK((fcntl(fd, F_GETFL) & O_NONBLOCK) == 0);
  CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  close(fd);
  CHECK(read_file(root + "/stderr.log").empty());
}

TEST_CASE("try_write_file never writes through a name someone planted", "[files]") {
  const ScopedTempDir tmp("files-test");
  const std::string& root = tmp.path();
  write_text(root + "/outside.txt", "outside\n");
  // The old fixed temporary name, as a link and as a FIFO: neither is used.
  std::filesystem::create_symlink(root + "/outside.txt", root + "/end.json.tmp");
  REQUIRE(mkfifo((root + "/results.json.tmp").c_str(), 0644) == 0);
  CHECK(flowrun::try_write_file(root + "/end.json", "{}\n") == 0);
  CHECK(flowrun::try_write_file(root + "/results.json", "{}\n") == 0);
  CHECK(read_file(root + "/outside.txt") == "outside\n");
  CHECK(read_file(root + "/end.json") == "{}\n");
  // A link at the file's own name is replaced, its target untouched.
  std::filesystem::create_symlink(root + "/outside.txt", root + "/run.json");
  CHECK(flowrun::try_write_file(root + "/run.json", "run\n") == 0);
  CHECK_FALSE(std::filesystem::is_symlink(root + "/run.json"));
  CHECK(read_file(root + "/outside.txt") == "outside\n");
  // Each temporary name is new: two names, and none left behind.
  std::set<std::string> names;
  for (int i = 0; i < 2; ++i) names.insert(flowrun::random_hex(8));
  CHECK(names.size() == 2);
  for (const auto& e : std::filesystem::directory_iterator(root))
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
}

TEST_CASE("under an anchored directory, writes never follow a link a rank put in", "[files]") {
  const ScopedTempDir tmp("files-test");
  const std::string& root = tmp.path();
  const std::string run = root + "/run";
  std::filesystem::create_directories(run + "/train/rank0");
  std::filesystem::create_directories(root + "/elsewhere");
  flowrun::anchor_directory(run);
  CHECK(flowrun::try_write_file(run + "/train/rank0/end.json", "ok\n") == 0);
  // The rank swaps its directory for a link out of the run.
  std::filesystem::rename(run + "/train/rank0", run + "/train/rank0.moved");
  std::filesystem::create_directory_symlink(root + "/elsewhere", run + "/train/rank0");
  CHECK(flowrun::try_write_file(run + "/train/rank0/end.json", "x\n") == ELOOP);
  int err = 0;
  CHECK(flowrun::open_output_file(run + "/train/rank0/stdout.log", false, &err) < 0);
  CHECK(err == ELOOP);
  CHECK(std::filesystem::is_empty(root + "/elsewhere"));
  // Not anchored any more: the path is taken as given.
  flowrun::release_directory(run);
  CHECK(flowrun::try_write_file(run + "/train/rank0/end.json", "x\n") == 0);
  CHECK(exists(root + "/elsewhere/end.json"));
}

TEST_CASE("require_private_directory refuses what others may change", "[files]") {
  const ScopedTempDir tmp("files-test");
  const std::string& root = tmp.path();
  auto verdict = [&](mode_t mode, bool root_ok) -> std::string {
    chmod(root.c_str(), mode);
    const int fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    std::string what = "ok";
    try {
      flowrun::require_private_directory(fd, root, "the run directory", root_ok, "FIX");
    } catch (const flowrun::Error& e) {
      what = e.what();
      CHECK(e.exit_code() == 2);
    }
    close(fd);
    return what;
  };
  CHECK(verdict(0755, false) == "ok");
  CHECK(verdict(0700, false) == "ok");
  CHECK(verdict(01777, false) == "ok");  // sticky: others cannot move what is ours
  CHECK(verdict(0757, false) == "refusing the run directory " + root +
                                    ": every user may write it (mode 0757) and it is not sticky; FIX");
  chmod(root.c_str(), 0755);
}

TEST_CASE("try_read_file reads at most its limit and says why it cannot", "[files]") {
  const ScopedTempDir tmp("files-test");
  const std::string& root = tmp.path();
  const std::string big(200'000, 'x');  // more than one read
  write_text(root + "/big.txt", big);
  CHECK(flowrun::try_read_file(root + "/big.txt", 1 << 20) == big);
  CHECK(flowrun::try_read_file(root + "/big.txt", 1000) == big.substr(0, 1000));
  CHECK(flowrun::try_read_file(root + "/big.txt", big.size() + 1)->size() == big.size());
  write_text(root + "/empty.txt", "");
  CHECK(flowrun::try_read_file(root + "/empty.txt", 10) == "");
  int err = 0;
  CHECK_FALSE(flowrun::try_read_file(root + "/missing.txt", 10, &err));
  CHECK(err == ENOENT);
  CHECK_FALSE(flowrun::try_read_file(root, 10, &err));  // not a regular file: never opened
  CHECK(err == flowrun::kErrNotRegular);
  CHECK(flowrun::file_error_text(err) == "not a regular file");
  CHECK(flowrun::read_file(root + "/big.txt", 3) == "xxx");
  CHECK_THROWS_WITH(flowrun::read_file(root + "/missing.txt", 10),
                    "cannot read " + root + "/missing.txt: No such file or directory");
}

TEST_CASE("try_read_file_tail reads a file's last bytes, and only a regular file's", "[files]") {
  const ScopedTempDir tmp("files-test");
  const std::string& root = tmp.path();
  std::string big;
  for (int i = 0; i < 20'000; ++i) big += std::to_string(i) + "\n";
  write_text(root + "/big.txt", big);
  CHECK(flowrun::try_read_file_tail(root + "/big.txt", 10) == big.substr(big.size() - 10));
  CHECK(flowrun::try_read_file_tail(root + "/big.txt", big.size() + 5) == big);
  write_text(root + "/empty.txt", "");
  CHECK(flowrun::try_read_file_tail(root + "/empty.txt", 10) == "");
  int err = 0;
  CHECK_FALSE(flowrun::try_read_file_tail(root + "/missing.txt", 10, &err));
  CHECK(err == ENOENT);
  // A FIFO a rank left in a log's place: refused, never opened, so nothing blocks.
  REQUIRE(mkfifo((root + "/fifo").c_str(), 0600) == 0);
  CHECK_FALSE(flowrun::try_read_file_tail(root + "/fifo", 10, &err));
  CHECK(err == flowrun::kErrNotRegular);
}

TEST_CASE("make_private_dir makes a new directory of this user's, mode 0700, never one made before",
          "[files]") {
  const ScopedTempDir tmp("files-test");
  const std::string& root = tmp.path();
  // Someone made the name a run would have had, and planted a link to their own.
  mkdir((root + "/flowrun-run-1-node0").c_str(), 0777);
  symlink((root + "/flowrun-run-1-node0").c_str(), (root + "/flowrun-run-1-node1").c_str());
  const std::string a = flowrun::make_private_dir(root, "flowrun-run-1-node0");
  const std::string b = flowrun::make_private_dir(root, "flowrun-run-1-node0");
  CHECK(a != b);
  for (const auto& dir : {a, b}) {
    CHECK(dir.rfind(root + "/flowrun-run-1-node0-", 0) == 0);
    CHECK(dir.size() == root.size() + 1 + 19 + 7);
    struct stat st {};
    REQUIRE(lstat(dir.c_str(), &st) == 0);
    CHECK(S_ISDIR(st.st_mode));
    CHECK((st.st_mode & 07777) == 0700);
    CHECK(st.st_uid == geteuid());
  }
  // A name is only ever a file name: a run id with '/' or '..' cannot climb out.
  const std::string c = flowrun::make_private_dir(root, "flowrun-../../x y");
  CHECK(c.rfind(root + "/flowrun-.._.._x_y-", 0) == 0);
  CHECK(flowrun::scratch_parent(nullptr) == "/tmp");
  CHECK(flowrun::scratch_parent("relative/dir") == "/tmp");
  CHECK(flowrun::scratch_parent("/scratch/me") == "/scratch/me");
  CHECK(flowrun::remove_tree(root).empty());
  CHECK_FALSE(exists(root));
}

TEST_CASE("make_private_dir refuses a parent another user could swap it out of", "[files]") {
  const ScopedTempDir tmp("files-test");
  const std::string& root = tmp.path();
  const std::string open_dir = root + "/open";
  REQUIRE(mkdir(open_dir.c_str(), 0700) == 0);
  chmod(open_dir.c_str(), 0777);  // writable by all, not sticky
  CHECK_THROWS_WITH(flowrun::make_private_dir(open_dir, "flowrun-x"),
                    "refusing to make a private directory in " + open_dir +
                        ": other users may write it and it is not sticky (chmod +t) (set TMPDIR to a "
                        "directory of your own)");
  chmod(open_dir.c_str(), 01777);  // as /tmp is
  CHECK_NOTHROW(flowrun::make_private_dir(open_dir, "flowrun-x"));
  if (geteuid() == 0) {
    const std::string theirs = root + "/theirs";
    REQUIRE(mkdir(theirs.c_str(), 0755) == 0);
    REQUIRE(chown(theirs.c_str(), 65534, 65534) == 0);
    CHECK_THROWS_WITH(flowrun::make_private_dir(theirs, "flowrun-x"),
                      "refusing to make a private directory in " + theirs +
                          ": it belongs to another user (uid 65534) (set TMPDIR to a directory of your own)");
  }
  CHECK_THROWS_WITH(flowrun::make_private_dir(root + "/none", "flowrun-x"),
                    "cannot make a private directory in " + root +
                        "/none: No such file or directory (set TMPDIR to a directory of your own)");
  CHECK(flowrun::remove_tree(root).empty());
}

TEST_CASE("remove_tree removes a link, never what it points to", "[files]") {
  const ScopedTempDir tmp("files-test");
  const std::string& root = tmp.path();
  const ScopedTempDir kept_tmp("files-test");
  const std::string& kept = kept_tmp.path();
  write_text(kept + "/precious", "x");
  flowrun::make_dirs(root + "/a/b");
  symlink(kept.c_str(), (root + "/a/b/link").c_str());
  CHECK(flowrun::remove_tree(root).empty());
  CHECK_FALSE(exists(root));
  CHECK(read_file(kept + "/precious") == "x");
  CHECK(flowrun::remove_tree(kept).empty());
}

namespace {

// A chain of `depth` directories named `name` under `root`, made each relative
// to the one above (a path to the last is longer than PATH_MAX), with a file
// and a directory without permissions at the bottom.
void make_deep_tree(const std::string& root, int depth, const std::string& name) {
  int fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  for (int i = 0; i < depth; ++i) {
    REQUIRE(mkdirat(fd, name.c_str(), 0755) == 0);
    const int next = openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(fd);
    REQUIRE(next >= 0);
    fd = next;
  }
  const int file = openat(fd, "result.txt", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  REQUIRE(file >= 0);
  close(file);
  REQUIRE(mkdirat(fd, "locked", 0) == 0);
  close(fd);
}

}  // namespace

TEST_CASE("remove_tree removes a tree deeper than PATH_MAX and than the descriptors one may hold",
          "[files]") {
  const ScopedTempDir tmp("files-test");
  const std::string& root = tmp.path();
  make_deep_tree(root, 60, std::string(100, 'd'));  // 6000 bytes of path
  make_deep_tree(root, 3000, "e");                  // 3000 levels, over a default limit of 1024 fds
  CHECK(flowrun::remove_tree(root).empty());
  CHECK_FALSE(exists(root));
  CHECK(flowrun::remove_tree(root).empty());  // gone already: nothing to say
}

TEST_CASE("remove_tree says what it could not remove and goes on past it", "[files]") {
  // As an ordinary user (uid 65534 when the test runs as root, who may remove
  // anything): `tree` sits in a directory that user may not write.
  const ScopedTempDir tmp("files-test");
  const std::string& root = tmp.path();
  chmod(root.c_str(), 0755);
  const std::string parent = root + "/parent", tree = parent + "/tree";
  REQUIRE(mkdir(parent.c_str(), 0755) == 0);
  if (geteuid() == 0) REQUIRE(chown(parent.c_str(), 65534, 65534) == 0);
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
    flowrun::make_dirs(tree + "/a/b");
    write_text(tree + "/a/b/file", "x");
    chmod(parent.c_str(), 0555);
    const std::string said = flowrun::remove_tree(tree);
    const bool inside_gone = !exists(tree + "/a");
    const std::string out = (inside_gone ? "gone\n" : "left\n") + said;
    _exit(::write(pipe_fds[1], out.data(), out.size()) == static_cast<ssize_t>(out.size()) ? 0 : 4);
  }
  close(pipe_fds[1]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
  close(pipe_fds[0]);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(got == "gone\ncould not remove " + tree + ": Permission denied");
  chmod(parent.c_str(), 0755);
  CHECK(flowrun::remove_tree(root).empty());
}
