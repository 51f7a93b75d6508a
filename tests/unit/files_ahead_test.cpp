// The ranks' files made on a thread of their own as the ranks spawn
// (lib/step/files_ahead.h): each rank's directory and out/, an earlier
// attempt's end record and traceback removed, its logs opened and handed to
// its start; a directory that cannot be made fails that rank's start and
// every later one's, and the ranks before it keep theirs.
#include "files_ahead.h"

#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "flowrun/error.h"
#include "flowrun/files.h"

#include "testing.h"

using namespace flowrun;
namespace fs = std::filesystem;

namespace {

std::vector<FilesAhead::Rank> ranks_in(const std::string& work, int n) {
  std::vector<FilesAhead::Rank> ranks;
  for (int r = 0; r < n; ++r) {
    const std::string dir = work + "/rank" + std::to_string(r);
    ranks.push_back(
        {dir + "/out", dir + "/error.json", dir + "/end.json", dir + "/stdout.log", dir + "/stderr.log"});
  }
  return ranks;
}

// This process's open descriptors.
std::size_t open_descriptors() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Writes `text` to `fd` and closes it.
void write_and_close(int fd, const std::string& text) {
  REQUIRE(fd >= 0);
  CHECK(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fd);
}

}  // namespace

TEST_CASE(
    "files ahead: each rank's directory made and its logs opened for its start; an earlier attempt's end "
    "and traceback gone",
    "[files_ahead]") {
  testing::ScopedTempDir dir("ahead");
  const std::string work = dir.path() + "/work";
  fs::create_directories(work + "/rank1");
  flowrun::write_file(work + "/rank1/end.json", "{}");
  flowrun::write_file(work + "/rank1/error.json", "{}");
  flowrun::write_file(work + "/rank1/stdout.log", "the attempt before's output, longer than this one's\n");
  FilesAhead ahead(ranks_in(work, 3));
  for (int r = 0; r < 3; ++r) {
    const std::string rank = work + "/rank" + std::to_string(r);
    write_and_close(ahead.open_log(rank + "/stdout.log"), "out " + std::to_string(r) + "\n");
    write_and_close(ahead.open_log(rank + "/stderr.log"), "err " + std::to_string(r) + "\n");
    CHECK(fs::is_directory(rank + "/out"));
    CHECK(testing::read_file(rank + "/stdout.log") == "out " + std::to_string(r) + "\n");  // truncated first
    CHECK(testing::read_file(rank + "/stderr.log") == "err " + std::to_string(r) + "\n");
  }
  CHECK_FALSE(fs::exists(work + "/rank1/end.json"));
  CHECK_FALSE(fs::exists(work + "/rank1/error.json"));
  // Any other path is opened as it is asked for.
  write_and_close(ahead.open_log(dir.path() + "/other.log"), "other\n");
  CHECK(testing::read_file(dir.path() + "/other.log") == "other\n");
}

TEST_CASE(
    "files ahead: a rank whose directory cannot be made fails its start and every later one's with why; "
    "the ranks before it have theirs",
    "[files_ahead]") {
  testing::ScopedTempDir dir("ahead");
  const std::string work = dir.path() + "/work";
  fs::create_directories(work);
  flowrun::write_file(work + "/rank1", "a file where rank 1's directory goes");
  FilesAhead ahead(ranks_in(work, 3));
  write_and_close(ahead.open_log(work + "/rank0/stdout.log"), "");
  write_and_close(ahead.open_log(work + "/rank0/stderr.log"), "");
  CHECK_THROWS_WITH(ahead.open_log(work + "/rank1/stdout.log"),
                    "cannot create the directory " + work + "/rank1/out: Not a directory");
  CHECK_THROWS_AS(ahead.open_log(work + "/rank2/stdout.log"), Error);
  CHECK_FALSE(fs::exists(work + "/rank2"));  // nothing is made after the rank that failed
}

TEST_CASE("files ahead: a FIFO a rank left where its log goes is refused, not opened", "[files_ahead]") {
  testing::ScopedTempDir dir("ahead");
  const std::string work = dir.path() + "/work";
  fs::create_directories(work + "/rank0");
  REQUIRE(mkfifo((work + "/rank0/stderr.log").c_str(), 0644) == 0);
  FilesAhead ahead(ranks_in(work, 2));
  write_and_close(ahead.open_log(work + "/rank0/stdout.log"), "");
  errno = 0;
  CHECK(ahead.open_log(work + "/rank0/stderr.log") == -1);
  CHECK(errno == kErrNotRegular);
  write_and_close(ahead.open_log(work + "/rank1/stdout.log"), "");  // the next rank's are made all the same
}

TEST_CASE(
    "files ahead: the thread holds the logs of a few ranks ahead at most, goes on for a rank whose start "
    "waits, hands each log over once, and closes what no start took when released",
    "[files_ahead]") {
  testing::ScopedTempDir dir("ahead");
  const std::string work = dir.path() + "/work";
  const std::size_t before = open_descriptors();
  {
    FilesAhead ahead(ranks_in(work, 32));
    // Rank 20's start waits: the thread makes ranks 0 to 20 whatever it holds, then stops at rank 21,
    // holding more than kMaxHeld, until a log is taken or it is released.
    const int fd = ahead.open_log(work + "/rank20/stdout.log");
    REQUIRE(fd >= 0);
    CHECK(ahead.held() == 41);
    CHECK_FALSE(fs::exists(work + "/rank21"));
    CHECK(open_descriptors() == before + 42);
    ahead.release();  // the attempt ended: what no start took is closed
    CHECK(ahead.held() == 0);
    CHECK(open_descriptors() == before + 1);
    close(fd);
  }
  CHECK(open_descriptors() == before);
  // Released, the thread made the other ranks' files without holding them.
  for (int r = 0; r < 32; ++r) CHECK(fs::is_regular_file(work + "/rank" + std::to_string(r) + "/stdout.log"));
}

TEST_CASE("files ahead: a start takes its rank's logs from the thread, not opened again", "[files_ahead]") {
  testing::ScopedTempDir dir("ahead");
  const std::string work = dir.path() + "/work";
  const std::size_t before = open_descriptors();
  FilesAhead ahead(ranks_in(work, 4));
  const int last = ahead.open_log(work + "/rank3/stderr.log");  // every rank's files are made by now
  REQUIRE(last >= 0);
  CHECK(ahead.held() == 7);
  CHECK(open_descriptors() == before + 8);
  const int first = ahead.open_log(work + "/rank0/stdout.log");
  REQUIRE(first >= 0);
  CHECK(ahead.held() == 6);
  CHECK(open_descriptors() == before + 8);  // handed over: no descriptor more
  close(first);
  close(last);
}
