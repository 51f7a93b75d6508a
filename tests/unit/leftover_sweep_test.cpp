#include "leftover_sweep.h"

// The sweep of what a step's workers left behind, on real processes.
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "flowrun/process.h"

using namespace flowrun;

namespace {

extern "C" void take_sigterm(int) {}

// Polls `done` until it holds or `limit` passes; whether it held.
template <typename Done>
bool wait_until(Done done, std::chrono::seconds limit = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace

TEST_CASE(
    "the sweep signals a leftover again once it has exec'd: the SIGTERM before went to the code it replaced",
    "[leftover_sweep]") {
  // A shell's child between its fork and the exec of its program still runs
  // the shell's trap: the child here takes SIGTERM in a handler, then execs
  // sleep, which never had it.
  int ready[2], go[2];
  REQUIRE(pipe(ready) == 0);
  REQUIRE(pipe(go) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // sigaction with SA_RESTART, not signal(): what signal() asks for is the
    // C library's (ThreadSanitizer's asks for no restart), and the SIGTERM
    // must not end the read below with EINTR and the child with it.
    struct sigaction take = {};
    take.sa_handler = take_sigterm;
    take.sa_flags = SA_RESTART;
    sigemptyset(&take.sa_mask);
    if (sigaction(SIGTERM, &take, nullptr) != 0) _exit(125);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(126);
    ssize_t got;
    while ((got = read(go[0], &c, 1)) < 0 && errno == EINTR) {
    }
    if (got != 1) _exit(126);
    execlp("sleep", "sleep", "60", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(ready[1]);
  close(go[0]);
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);

  const WorkerList workers;
  boost::asio::io_context io;
  LeftoverSweep sweep(io, -1, workers, [] {});
  const std::vector<std::string> named = sweep.signal_new({pid}, false);
  CHECK(named.size() == 1);
  // Its handler has the SIGTERM before it reads `go` (a signal pending at the
  // return from read is handled first): then it execs.
  REQUIRE(write(go[1], &c, 1) == 1);
  int status = 0;
  bool ended_early = false;
  REQUIRE(wait_until([&] {
    ended_early = waitpid(pid, &status, WNOHANG) == pid;
    return ended_early || process_name(pid) == "sleep";
  }));
  INFO("the child ended before its exec: wait status " << status);
  REQUIRE_FALSE(ended_early);
  CHECK(sweep.signal_new({pid}, false).empty());  // signalled again, not named again

  const bool ended = wait_until([&] { return waitpid(pid, &status, WNOHANG) == pid; });
  if (!ended) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  REQUIRE(ended);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
  close(ready[0]);
  close(go[1]);
}
