// A rank's log (files, stderr tail, console lines), the ranks' console batch
// and the words for a log file flowrun cannot write.
#include "flowrun/rank_output.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <cerrno>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <vector>

#include "flowrun/error.h"

#include "testing.h"

using namespace flowrun;

namespace {

using testing::exists;

// A rank's log in a temporary directory, its console lines in `batch`.
struct LogFixture {
  testing::ScopedTempDir dir{"rank-log"};
  boost::asio::io_context io;
  ConsoleBatch batch{io, [](std::string&, std::string&) {}};

  RankLog::Options options(const std::string& prefix = "[train r0] ") const {
    RankLog::Options o;
    o.stdout_log = dir.path() + "/stdout.log";
    o.stderr_log = dir.path() + "/stderr.log";
    o.prefix = prefix;
    o.who = "rank 0's ";
    return o;
  }
};

}  // namespace

TEST_CASE("a rank's lines split across chunks reach the console whole, its bytes the file", "[rank_output]") {
  LogFixture f;
  RankLog log(f.options(), f.batch);
  for (std::string_view chunk : {"step 1 lo", "ss 0.5\nstep", " 2 loss 0.4\n"}) {
    CHECK_FALSE(log.keep(false, chunk));
    log.show(false, chunk, 0);
  }
  CHECK(f.batch.out == "[train r0] step 1 loss 0.5\n[train r0] step 2 loss 0.4\n");
  CHECK(f.batch.err.empty());
  log.close();
  CHECK(testing::read_file(f.dir.path() + "/stdout.log") == "step 1 loss 0.5\nstep 2 loss 0.4\n");
  CHECK(testing::read_file(f.dir.path() + "/stderr.log").empty());  // every rank has both files
}

TEST_CASE("a rank's stream that never wrote is handed to create_later at close, not made there",
          "[rank_output]") {
  LogFixture f;
  std::vector<std::string> later;
  RankLog::Options o = f.options();
  o.create_later = [&later](const std::string& path) { later.push_back(path); };
  RankLog log(o, f.batch);
  CHECK_FALSE(log.keep(false, "step 1\n"));
  log.close();
  CHECK(later == std::vector<std::string>{f.dir.path() + "/stderr.log"});
  CHECK_FALSE(exists(f.dir.path() + "/stderr.log"));
  CHECK(testing::read_file(f.dir.path() + "/stdout.log") == "step 1\n");
  log.close();  // once
  CHECK(later.size() == 1);
}

TEST_CASE("a rank's stream the console does not show still reaches its file", "[rank_output]") {
  LogFixture f;
  RankLog::Options o = f.options();
  o.shows.out = false;
  RankLog log(std::move(o), f.batch);
  for (bool is_err : {false, true}) {
    CHECK_FALSE(log.keep(is_err, is_err ? "e\n" : "o\n"));
    log.show(is_err, is_err ? "e\n" : "o\n", 0);
  }
  log.close();
  CHECK(f.batch.out.empty());
  CHECK(f.batch.err == "[train r0] e\n");
  CHECK(testing::read_file(f.dir.path() + "/stdout.log") == "o\n");
  CHECK(testing::read_file(f.dir.path() + "/stderr.log") == "e\n");
}

TEST_CASE("a rank's torn last line is shown at close, once", "[rank_output]") {
  LogFixture f;
  RankLog log(f.options(), f.batch);
  log.keep(true, "Traceback\nValueError: x");
  log.show(true, "Traceback\nValueError: x", 0);
  CHECK(f.batch.err == "[train r0] Traceback\n");
  log.close(true);
  CHECK(f.batch.err == "[train r0] Traceback\n[train r0] ValueError: x\n");
  log.close();  // again: nothing more
  CHECK(f.batch.err == "[train r0] Traceback\n[train r0] ValueError: x\n");
  CHECK(testing::read_file(f.dir.path() + "/stderr.log") == "Traceback\nValueError: x");
  CHECK(log.tail() == "Traceback\nValueError: x\n");
}

TEST_CASE("a rank's long line is cut on the console and whole in its file", "[rank_output]") {
  LogFixture f;
  RankLog::Options o = f.options("[p] ");
  o.style.max_line = 8;
  RankLog log(std::move(o), f.batch);
  log.keep(false, "123456789\n");
  log.show(false, "123456789\n", 0);
  CHECK(f.batch.out == "[p] 12345678\n[p] " + std::string(kContinuation) + "9\n");
  log.close();
  CHECK(testing::read_file(f.dir.path() + "/stdout.log") == "123456789\n");
}

TEST_CASE("a rank's stderr tail is bounded; stdout stays out of it", "[rank_output]") {
  LogFixture f;
  RankLog log(f.options(""), f.batch);  // not shown on the console
  std::string all;
  for (int i = 0; i < 100; ++i) all += "line " + std::to_string(i) + "\n";
  all += std::string(10000, 'x') + "\n";
  log.keep(true, all);
  log.keep(false, "stdout line\n");
  log.show(true, all, 0);
  CHECK(f.batch.err.empty());
  const std::string tail = log.tail();
  CHECK(std::count(tail.begin(), tail.end(), '\n') == 20);
  CHECK(tail.rfind("line 81\n", 0) == 0);
  CHECK(tail.find("stdout") == std::string::npos);
  CHECK(tail.size() < 20 * 4096);
  log.close();
  CHECK(testing::read_file(f.dir.path() + "/stderr.log") == all);  // the file keeps every byte
}

TEST_CASE("a rank's log file that cannot be written is said once", "[rank_output]") {
  LogFixture f;
  RankLog::Options o = f.options();
  o.stdout_log = "/dev/full";  // every write fails with ENOSPC; opened as given, not as a log file is
  o.open = [](const std::string& path) { return ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644); };
  RankLog log(std::move(o), f.batch);
  const auto error = log.keep(false, "a\n");
  REQUIRE(error);
  CHECK(error->err == ENOSPC);
  CHECK(error->text == "cannot write rank 0's full in /dev: No space left on device");
  CHECK_FALSE(log.keep(false, "b\n"));  // lost already: not said again
  log.show(false, "a\nb\n", 0);
  CHECK(f.batch.out == "[train r0] a\n[train r0] b\n");  // the console still shows it
  CHECK_FALSE(log.keep(true, "err\n"));                  // the other file is fine
  CHECK(log.tail() == "err\n");
}

TEST_CASE("a rank's log file that cannot be created is said at its first write, or thrown", "[rank_output]") {
  LogFixture f;
  RankLog::Options o = f.options();
  o.stdout_log = f.dir.path() + "/missing/stdout.log";
  SECTION("opened when it first writes") {
    RankLog log(o, f.batch);
    const auto error = log.keep(false, "a\n");
    REQUIRE(error);
    CHECK(error->err == ENOENT);
    CHECK(error->text ==
          "cannot write rank 0's stdout.log in " + f.dir.path() + "/missing: No such file or directory");
    CHECK_FALSE(log.keep(false, "b\n"));
  }
  SECTION("opened now") {
    RankLog log(o, f.batch);
    CHECK_THROWS_WITH(log.open_files(),
                      "cannot create the log file " + o.stdout_log + ": No such file or directory");
  }
}

TEST_CASE("a rank's log opens its files through the owner's opener, and none without a path",
          "[rank_output]") {
  LogFixture f;
  RankLog::Options o = f.options();
  o.stderr_log.clear();  // nothing kept
  std::vector<std::string> opened;
  o.open = [&](const std::string& path) {
    opened.push_back(path);
    errno = EACCES;
    return -1;
  };
  RankLog log(std::move(o), f.batch);
  CHECK(opened.empty());  // nothing until it writes
  CHECK_FALSE(log.keep(true, "e\n"));
  const auto error = log.keep(false, "a\n");
  REQUIRE(error);
  CHECK(error->err == EACCES);
  log.close();
  CHECK(opened == std::vector<std::string>{f.dir.path() + "/stdout.log"});
  CHECK_FALSE(exists(f.dir.path() + "/stderr.log"));
}

TEST_CASE("the console batch writes once the loop has handled what is ready", "[rank_output]") {
  boost::asio::io_context io;
  std::vector<std::string> writes;
  ConsoleBatch batch(io, [&](std::string& out, std::string& err) {
    writes.push_back(out + "|" + err);
    out.clear();
    err.clear();
  });
  batch.schedule();  // nothing waits: nothing is posted
  CHECK(io.poll() == 0);
  io.restart();  // it ran out of work
  batch.out += "[train r0] a\n";
  batch.schedule();
  batch.err += "[train r1] b\n";
  batch.schedule();  // one write for both
  CHECK(writes.empty());
  io.poll();
  CHECK(writes == std::vector<std::string>{"[train r0] a\n|[train r1] b\n"});
  CHECK(batch.out.empty());

  // Past 1 MiB it goes at once.
  batch.out.assign(1 << 20, 'x');
  batch.schedule();
  CHECK(writes.size() == 2);
  CHECK(batch.out.empty());
}

TEST_CASE("a log file that cannot be written, in flowrun's words", "[rank_output]") {
  const std::string error = log_write_error("rank 3's ", "/r/run/train/rank3/stdout.log", ENOSPC);
  CHECK(error == "cannot write rank 3's stdout.log in /r/run/train/rank3: No space left on device");
  CHECK(log_failed_message("train", error, false, ENOSPC, "/r/run") ==
        "flowrun: error: step 'train': " + error +
            "; stopping the step (free space there, then: flowrun resume /r/run)");
  CHECK(log_failed_message("train", error, true, EIO, "/r/run") ==
        "flowrun: error: step 'train': " + error +
            "; the step is stopping (fix that, then: flowrun resume /r/run)");
  CHECK(log_failed_message("prep", "cannot write its stdout.log in /x: Input/output error", false, EIO, "") ==
        "flowrun: error: step 'prep': cannot write its stdout.log in /x: Input/output error; stopping the "
        "step");
}
