// The console's writer (lib/supervisor/console_writer.cpp) on real pipes: a
// reader that lags holds the workers' output instead of losing it; only one
// that takes nothing for the reader's wait has lines dropped and counted.
// Every wait is for an event (a hold, its release), bounded by a deadline
// that only a broken writer reaches.
#include "console_writer.h"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <fcntl.h>
#include <string>
#include <unistd.h>
#include <vector>

using namespace flowrun;

namespace {

// One console: stdout and stderr are pipes whose read ends the test holds.
struct Screen {
  boost::asio::io_context io;
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  std::vector<bool> holds;  // each hold(...) the writer asked for
  std::unique_ptr<ConsoleWriter> writer;

  explicit Screen(double wait_s) {
    REQUIRE(pipe2(out, O_CLOEXEC) == 0);
    REQUIRE(pipe2(err, O_CLOEXEC) == 0);
    fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
    Console console;
    console.out_fd = out[1];
    console.err_fd = err[1];
    console.reader_wait_s = wait_s;
    writer = std::make_unique<ConsoleWriter>(io, console, [this](bool hold) { holds.push_back(hold); });
  }
  ~Screen() {
    // A reader that is gone: the writer's end of run does not wait for it.
    close(out[0]);
    close(err[0]);
    writer.reset();
    close(out[1]);
    close(err[1]);
  }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  // 64 KiB of whole 100-byte lines, as the workers' output.
  void write_lines(std::size_t lines) {
    std::string text;
    for (std::size_t i = 0; i < lines; ++i) text += std::string(99, 'x') + "\n";
    writer->write(0, text, true);
  }

  // Runs the loop until `done`, reading stdout (when `read`) into `got`.
  template <class Done>
  void run_until(Done done, bool read, std::size_t* got = nullptr) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    char buffer[65536];
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      io.run_one_for(std::chrono::milliseconds(10));
      while (read) {
        const ssize_t n = ::read(out[0], buffer, sizeof buffer);
        if (n <= 0) break;
        if (got != nullptr) *got += static_cast<std::size_t>(n);
      }
    }
    REQUIRE(done());
  }
};

constexpr std::size_t kChunkLines = 655;  // 65,500 bytes

}  // namespace

TEST_CASE("console writer: a full backlog holds the workers; a reader that takes output gets every line",
          "[console]") {
  Screen s(30);  // a reader wait no test reaches
  std::size_t written = 0;
  while (s.holds.empty() && written < 64 * 1024 * 1024) {
    s.write_lines(kChunkLines);
    written += kChunkLines * 100;
  }
  REQUIRE(s.holds == std::vector<bool>{true});
  CHECK(written > 4 * 1024 * 1024);  // past the backlog, not before
  CHECK(s.writer->take_dropped() == 0);

  // The reader takes output: the hold ends once half of the backlog is left,
  // and everything written reaches it.
  std::size_t got = 0;
  s.run_until([&] { return s.holds.size() == 2; }, true, &got);
  CHECK(s.holds == std::vector<bool>{true, false});
  s.run_until([&] { return got == written; }, true, &got);
  CHECK(s.writer->take_dropped() == 0);
}

TEST_CASE(
    "console writer: a reader that takes nothing for the wait lets the workers go on, their lines counted",
    "[console]") {
  Screen s(0.05);
  while (s.holds.empty()) s.write_lines(kChunkLines);
  REQUIRE(s.holds == std::vector<bool>{true});

  // Nothing is read: after the wait the hold ends, and what comes next past
  // the backlog is dropped and counted.
  s.run_until([&] { return s.holds.size() == 2; }, false);
  CHECK(s.holds == std::vector<bool>{true, false});
  s.write_lines(kChunkLines);
  CHECK(s.writer->take_dropped() == kChunkLines);

  // The reader takes output again: it is waited for again.
  std::size_t got = 0;
  char buffer[65536];
  while (got < 65536) {
    const ssize_t n = read(s.out[0], buffer, sizeof buffer);
    REQUIRE(n > 0);
    got += static_cast<std::size_t>(n);
  }
  s.write_lines(kChunkLines);  // the write sees it take some: kept, and the workers held again
  CHECK(s.writer->take_dropped() == 0);
  CHECK(s.holds == std::vector<bool>{true, false, true});
}

TEST_CASE("console writer: a reader that takes some and then stops lets the workers go on too", "[console]") {
  Screen s(0.05);
  while (s.holds.empty()) s.write_lines(kChunkLines);
  // The reader empties the pipe once (the writer moves as much from its
  // backlog: it stays held, with more than half the backlog left), then stops.
  char buffer[65536];
  std::size_t got = 0;
  for (ssize_t n; (n = read(s.out[0], buffer, sizeof buffer)) > 0;) got += static_cast<std::size_t>(n);
  REQUIRE(got > 0);
  s.run_until([&] { return s.holds.size() == 2; }, false);
  CHECK(s.holds == std::vector<bool>{true, false});
  std::size_t dropped = 0;
  for (int i = 0; i < 100 && dropped == 0; ++i) {
    s.write_lines(kChunkLines);
    dropped = s.writer->take_dropped();
  }
  CHECK(dropped == kChunkLines);
  CHECK(s.holds.size() == 2);
}

TEST_CASE("console writer: a wait of 0 never holds; past the backlog lines are dropped at once",
          "[console]") {
  Screen s(0);
  std::size_t dropped = 0;
  for (int i = 0; i < 100 && dropped == 0; ++i) {
    s.write_lines(kChunkLines);
    dropped = s.writer->take_dropped();
  }
  CHECK(dropped == kChunkLines);
  CHECK(s.holds.empty());
}
