// The ranks' console batch and the words for a log file flowrun cannot write.
#include "flowrun/rank_output.h"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <cerrno>
#include <vector>

using namespace flowrun;

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
