#include "flowrun/files.h"

// make_dirs and keep_attempt on real files under /tmp.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "flowrun/error.h"

namespace {

std::string scratch_dir() {
  char tmpl[] = "/tmp/flowrun-files-test-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

}  // namespace

TEST_CASE("make_dirs makes every missing directory and accepts existing ones", "[files]") {
  const std::string root = scratch_dir();
  flowrun::make_dirs(root + "/a/b/c");
  CHECK(exists(root + "/a/b/c"));
  flowrun::make_dirs(root + "/a/b/c");  // again: no error
  write(root + "/file", "x");
  CHECK_THROWS_AS(flowrun::make_dirs(root + "/file/sub"), flowrun::Error);
  CHECK_THROWS_WITH(flowrun::make_dirs(root + "/file"),
                    "cannot create the directory " + root + "/file: it exists and is not a directory");
  std::filesystem::remove_all(root);
}

TEST_CASE("keep_attempt moves a failed attempt's logs, traceback and outputs aside", "[files]") {
  const std::string root = scratch_dir();
  const std::string rank = root + "/rank1";
  flowrun::make_dirs(rank + "/out/sub");
  write(rank + "/stdout.log", "attempt 0 out\n");
  write(rank + "/stderr.log", "Traceback\n");
  write(rank + "/error.json", "{}");
  write(rank + "/out/sub/partial.pt", "partial");

  CHECK(flowrun::keep_attempt(rank, 0) == rank + "/attempt0");
  CHECK(slurp(rank + "/attempt0/stdout.log") == "attempt 0 out\n");
  CHECK(slurp(rank + "/attempt0/stderr.log") == "Traceback\n");
  CHECK(slurp(rank + "/attempt0/error.json") == "{}");
  CHECK(slurp(rank + "/attempt0/out/sub/partial.pt") == "partial");
  CHECK_FALSE(exists(rank + "/out"));
  CHECK_FALSE(exists(rank + "/stdout.log"));

  SECTION("a second restart keeps its own attempt; nothing to keep makes nothing") {
    write(rank + "/stdout.log", "attempt 1 out\n");
    CHECK(flowrun::keep_attempt(rank, 1) == rank + "/attempt1");
    CHECK(slurp(rank + "/attempt1/stdout.log") == "attempt 1 out\n");
    CHECK(slurp(rank + "/attempt0/stdout.log") == "attempt 0 out\n");
    CHECK(flowrun::keep_attempt(rank, 2).empty());
    CHECK_FALSE(exists(rank + "/attempt2"));
  }
  std::filesystem::remove_all(root);
}

TEST_CASE("keep_attempt moves nothing through a link a rank put in place", "[files]") {
  const std::string root = scratch_dir();
  const std::string rank = root + "/rank1";
  flowrun::make_dirs(root + "/elsewhere");
  flowrun::make_dirs(rank + "/out");
  write(rank + "/stdout.log", "attempt 0 out\n");

  SECTION("attemptN/ is a link: refused, nothing moved") {
    std::filesystem::create_directory_symlink(root + "/elsewhere", rank + "/attempt0");
    CHECK_THROWS_WITH(
        flowrun::keep_attempt(rank, 0),
        Catch::Contains("cannot keep attempt 0's " + rank + "/stdout.log in " + rank + "/attempt0"));
    CHECK(slurp(rank + "/stdout.log") == "attempt 0 out\n");
  }
  SECTION("the rank's directory is a link: refused") {
    std::filesystem::rename(rank, root + "/real");
    std::filesystem::create_directory_symlink(root + "/real", rank);
    CHECK_THROWS_WITH(flowrun::keep_attempt(rank, 0),
                      Catch::Contains("cannot keep attempt 0's " + rank + " in"));
    CHECK(exists(root + "/real/stdout.log"));
  }
  CHECK(std::filesystem::is_empty(root + "/elsewhere"));
  std::filesystem::remove_all(root);
}

TEST_CASE("try_write_file writes a file whole or not at all", "[files]") {
  const std::string root = scratch_dir();
  CHECK(flowrun::try_write_file(root + "/report.txt", "first\n") == 0);
  CHECK(flowrun::try_write_file(root + "/report.txt", "second, longer\n") == 0);
  CHECK(slurp(root + "/report.txt") == "second, longer\n");
  CHECK_FALSE(exists(root + "/report.txt.tmp"));
  // A directory that is not there: the errno, nothing written, no temporary file left.
  CHECK(flowrun::try_write_file(root + "/missing/report.txt", "x") == ENOENT);
  CHECK_FALSE(exists(root + "/missing"));
  CHECK_THROWS_WITH(flowrun::write_file(root + "/missing/report.txt", "x"),
                    "cannot write " + root + "/missing/report.txt: No such file or directory");
  std::filesystem::remove_all(root);
}
