// Paths resolved beneath a root, on real files under /tmp: links out, links
// inside, '..', FIFOs and devices, replaced directories. Every case runs twice:
// through openat2 and through the O_NOFOLLOW walk that stands in for it where
// the kernel has none, and both must say the same.
#include "flowrun/beneath.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "testing.h"

using namespace flowrun;

namespace {

namespace fs = std::filesystem;

class Tree {
 public:
  Tree() {
    fs::create_directories(root() + "/sub/deep");
    put(root() + "/top.txt", "top");
    put(root() + "/sub/deep/file.txt", "deep");
    put(base() + "/secret.txt", "secret");
  }
  ~Tree() { set_beneath_walk_only(false); }
  Tree(const Tree&) = delete;
  Tree& operator=(const Tree&) = delete;
  std::string root() const { return base() + "/root"; }
  const std::string& base() const { return base_.path(); }
  static void put(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

 private:
  testing::ScopedTempDir base_{"beneath"};
};

std::string read_fd(int fd) {
  std::string out;
  char buf[256];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  close(fd);
  return out;
}

int stat_err(const BeneathRoot& root, const std::string& rel, Links links = Links::beneath) {
  struct stat st {};
  return root.stat(rel, &st, links);
}

}  // namespace

TEST_CASE("beneath: links stay inside the root or are refused", "[beneath]") {
  const bool walk_only = GENERATE(false, true);
  CAPTURE(walk_only);
  Tree t;
  set_beneath_walk_only(walk_only);
  fs::create_symlink("sub/deep/file.txt", t.root() + "/rel-link");
  fs::create_symlink(t.root() + "/sub/deep/file.txt", t.root() + "/abs-link");
  fs::create_symlink("../secret.txt", t.root() + "/up-link");
  fs::create_symlink(t.base() + "/secret.txt", t.root() + "/abs-out");
  fs::create_symlink("/etc/passwd", t.root() + "/passwd");
  fs::create_symlink("a", t.root() + "/b");
  fs::create_symlink("b", t.root() + "/a");
  fs::create_directory_symlink("sub", t.root() + "/sub-link");
  fs::create_directory_symlink("..", t.root() + "/sub/parent");
  const BeneathRoot root = BeneathRoot::open(t.root());
  REQUIRE(root.ok());

  SECTION("inside: a relative link, an absolute one that names the root, '..' that stays in") {
    struct stat st {};
    for (const char* rel : {"rel-link", "abs-link", "sub/../sub/deep/file.txt", "sub-link/deep/file.txt",
                            "sub/parent/top.txt"}) {
      CAPTURE(rel);
      const int fd = root.open_regular(rel, Links::beneath, &st);
      REQUIRE(fd >= 0);
      CHECK((fcntl(fd, F_GETFL) & O_NONBLOCK) != 0);
      const std::string want = std::string(rel) == "sub/parent/top.txt" ? "top" : "deep";
      CHECK(read_fd(fd) == want);
    }
  }
  SECTION("out: '..' above the root, a link up, an absolute link elsewhere") {
    for (const char* rel : {"..", "../secret.txt", "sub/../../secret.txt", "up-link", "abs-out", "passwd"}) {
      CAPTURE(rel);
      CHECK(stat_err(root, rel) == EXDEV);
      struct stat st {};
      CHECK(root.open_regular(rel, Links::beneath, &st) == -1);
    }
  }
  SECTION("a loop is ELOOP, not a hang") { CHECK(stat_err(root, "a") == ELOOP); }
  SECTION("Links::none refuses every symlink, also one that stays inside") {
    CHECK(stat_err(root, "rel-link", Links::none) == ELOOP);
    CHECK(stat_err(root, "sub-link/deep/file.txt", Links::none) == ELOOP);
    CHECK(stat_err(root, "sub/deep/file.txt", Links::none) == 0);
  }
  SECTION("lstat sees the link itself; read_link its text") {
    struct stat st {};
    REQUIRE(root.lstat("passwd", &st) == 0);
    CHECK(S_ISLNK(st.st_mode));
    CHECK(root.read_link("passwd") == "/etc/passwd");
    CHECK(root.read_link("top.txt").empty());
  }
}

TEST_CASE("beneath: a FIFO or a device is refused without being opened", "[beneath]") {
  const bool walk_only = GENERATE(false, true);
  CAPTURE(walk_only);
  Tree t;
  set_beneath_walk_only(walk_only);
  REQUIRE(mkfifo((t.root() + "/fifo").c_str(), 0644) == 0);
  fs::create_symlink("fifo", t.root() + "/fifo-link");
  const BeneathRoot root = BeneathRoot::open(t.root());
  struct stat st {};
  // A blocking open of a FIFO without a writer would never return.
  CHECK(root.open_regular("fifo", Links::beneath, &st) == kNotRegular);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK(root.open_regular("fifo-link", Links::beneath, &st) == kNotRegular);
  CHECK(root.open_regular("sub", Links::beneath, &st) == kNotRegular);
  CHECK(S_ISDIR(st.st_mode));
  if (geteuid() == 0) {
    // A character device of the kind /proc/kmsg or a tape is: /dev/null's numbers.
    REQUIRE(mknod((t.root() + "/null").c_str(), S_IFCHR | 0644, makedev(1, 3)) == 0);
    CHECK(root.open_regular("null", Links::beneath, &st) == kNotRegular);
    CHECK(S_ISCHR(st.st_mode));
  }
}

TEST_CASE("beneath: a directory reached from an anchor without links", "[beneath]") {
  const bool walk_only = GENERATE(false, true);
  CAPTURE(walk_only);
  Tree t;
  set_beneath_walk_only(walk_only);
  const std::string anchor = t.root();

  SECTION("made with its parents, then opened again") {
    const BeneathRoot made = BeneathRoot::open_under(anchor, anchor + "/train/rank0/out", true, 0700);
    REQUIRE(made.ok());
    struct stat st {};
    REQUIRE(::stat((anchor + "/train/rank0/out").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
    CHECK(BeneathRoot::open_under(anchor, anchor + "/train/rank0/out", false).ok());
    // Its real path is known, so an absolute link that names a place in it counts as inside.
    fs::create_symlink(anchor + "/train/rank0/out/f", anchor + "/train/rank0/out/abs");
    Tree::put(anchor + "/train/rank0/out/f", "f");
    CHECK(stat_err(made, "abs") == 0);
  }
  SECTION("a link in its place, or in a parent's, is refused") {
    fs::create_directories(t.base() + "/elsewhere");
    fs::create_directories(anchor + "/train/rank1");
    fs::create_directory_symlink(t.base() + "/elsewhere", anchor + "/train/rank1/out");
    fs::create_directory_symlink("train", anchor + "/moved");
    CHECK(BeneathRoot::open_under(anchor, anchor + "/train/rank1/out", false).error() == ELOOP);
    CHECK(BeneathRoot::open_under(anchor, anchor + "/train/rank1/out", true).error() == ELOOP);
    CHECK(BeneathRoot::open_under(anchor, anchor + "/moved/rank1", false).error() == ELOOP);
    CHECK(!fs::exists(t.base() + "/elsewhere/x"));
  }
  SECTION("missing, not a directory, or not under the anchor") {
    CHECK(BeneathRoot::open_under(anchor, anchor + "/nothing", false).error() == ENOENT);
    CHECK(BeneathRoot::open_under(anchor, anchor + "/top.txt", false).error() == ENOTDIR);
    CHECK(BeneathRoot::open_under(anchor, t.base() + "/secret", false).error() == EINVAL);
    CHECK(BeneathRoot::open_under(anchor, anchor + "/../x", true).error() == EINVAL);
  }
}

TEST_CASE("beneath: files are created beneath the root, never through a link", "[beneath]") {
  Tree t;
  const BeneathRoot root = BeneathRoot::open(t.root());
  fs::create_directory_symlink(t.base(), t.root() + "/out-dir");
  fs::create_symlink(t.base() + "/secret.txt", t.root() + "/secret-link");

  UniqueFd parent;
  UniqueFd fd(root.create_file("new/dir/file.txt", 0644, 0755, &parent));
  REQUIRE(fd);
  CHECK(parent);
  CHECK(fs::is_regular_file(t.root() + "/new/dir/file.txt"));
  errno = 0;
  CHECK(root.create_file("out-dir/planted.txt", 0644, 0755) == -1);
  CHECK(errno == ELOOP);  // a symlink where a directory was to be
  CHECK(!fs::exists(t.base() + "/planted.txt"));
  CHECK(root.create_file("secret-link", 0644, 0755) == -1);
  CHECK(errno == EEXIST);  // never replaced, never followed
  CHECK(root.create_file("../escape.txt", 0644, 0755) == -1);
  CHECK(errno == EINVAL);
  CHECK(!fs::exists(t.base() + "/escape.txt"));
  CHECK(testing::read_file(t.base() + "/secret.txt") == "secret");
}

TEST_CASE("scan_tree: files, and each thing refused with its reason", "[beneath]") {
  const bool walk_only = GENERATE(false, true);
  CAPTURE(walk_only);
  Tree t;
  set_beneath_walk_only(walk_only);
  const std::string r = t.root();
  fs::create_symlink("top.txt", r + "/copy.txt");
  fs::create_symlink("/etc/passwd", r + "/passwd");
  fs::create_symlink("missing", r + "/dangling");
  fs::create_directory_symlink("sub", r + "/sub-link");
  fs::create_directory_symlink(".", r + "/sub/deep/loop");
  REQUIRE(mkfifo((r + "/fifo").c_str(), 0644) == 0);
  fs::create_symlink("fifo", r + "/fifo-link");

  bool stopped = true;
  const auto entries = scan_tree(BeneathRoot::open(r), {}, &stopped);
  CHECK(!stopped);
  std::vector<std::string> seen;
  for (const auto& e : entries)
    seen.push_back(e.rel + ": " + (e.kind == TreeEntry::Kind::file ? "file" : refusal_text(e, "the root")));
  CHECK(seen == std::vector<std::string>{
                    "copy.txt: file",
                    "dangling: is a symlink to missing, which does not exist",
                    "fifo: is a FIFO, not a regular file",
                    "fifo-link: is a symlink to fifo, a FIFO, not a regular file",
                    "passwd: is a symlink to /etc/passwd, outside the root",
                    "sub-link: is a symlink to sub, a directory (a link to a directory is not followed)",
                    "sub/deep/file.txt: file",
                    "sub/deep/loop: is a symlink to ., a directory (a link to a directory is not followed)",
                    "top.txt: file",
                });
  // A link to a file counts as its target: its size and type.
  CHECK(entries[0].st.st_size == 3);
  CHECK(S_ISREG(entries[0].st.st_mode));

  SECTION("stop ends the walk") {
    int asked = 0;
    scan_tree(
        BeneathRoot::open(r), [&] { return ++asked > 2; }, &stopped);
    CHECK(stopped);
  }
}

TEST_CASE("scan_tree: a tree nested deeper than kMaxScanDepth is refused, not walked to its end",
          "[beneath]") {
  Tree t;
  // 300 levels, made with mkdirat (no path is ever long), a file at the bottom.
  int dir = open(t.root().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(dir >= 0);
  for (int i = 0; i < 300; ++i) {
    REQUIRE(mkdirat(dir, "d", 0700) == 0);
    const int next = openat(dir, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(dir);
    REQUIRE(next >= 0);
    dir = next;
  }
  const int file = openat(dir, "bottom.txt", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  REQUIRE(file >= 0);
  close(file);
  close(dir);
  const auto entries = scan_tree(BeneathRoot::open(t.root() + "/sub"));  // untouched: two levels
  CHECK(entries.size() == 1);
  std::vector<std::string> refused;
  std::size_t files = 0;
  for (const auto& e : scan_tree(BeneathRoot::open(t.root()))) {
    if (e.kind == TreeEntry::Kind::file) {
      ++files;
    } else {
      refused.push_back(e.rel.substr(e.rel.size() > 10 ? e.rel.size() - 10 : 0) + ": " +
                        refusal_text(e, "the root") + " (" +
                        std::to_string(std::count(e.rel.begin(), e.rel.end(), '/') + 1) + " components)");
    }
  }
  CHECK(files == 2);  // top.txt and sub/deep/file.txt; not bottom.txt
  CHECK(refused == std::vector<std::string>{
                       "/d/d/d/d/d: is a directory deeper than 256 levels; not walked (257 components)"});
  std::error_code ignored;
  // remove_all recurses too; 300 levels is well within its reach.
  fs::remove_all(t.root() + "/d", ignored);
}
