// run_helper on this machine: how a helper ends, its output, its limits.
// Every wait is for an event (a line, an exit); the limits a test sets are
// never raced against the helper's own timing.
#include "flowrun/child.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flowrun/process.h"

#include "testing.h"

using namespace flowrun;
using namespace std::chrono_literals;

namespace {

HelperOutcome run_sh(const std::string& script, HelperRequest request = {}) {
  request.argv = {"/bin/sh", "-c", script};
  return run_helper(request);
}

// Waits (up to 30 s) until `pid` is gone; reaps it when it became our child
// (a subreaper's).
bool wait_gone(pid_t pid) {
  for (int i = 0; i < 1500; ++i) {
    const pid_t got = waitpid(pid, nullptr, WNOHANG);
    const bool not_ours = got < 0 && errno == ECHILD;
    const char state = process_state(pid);
    if (got == pid || state == 0 || (state == 'Z' && not_ours)) return true;
    usleep(20'000);
  }
  return false;
}

// True when `pid` (a helper's, already reaped) no longer exists.
bool reaped(pid_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

pid_t first_number(const std::string& output) { return static_cast<pid_t>(std::atol(output.c_str())); }

}  // namespace

TEST_CASE("a helper's exit status and output come back as a value, and it is reaped", "[child]") {
  const HelperOutcome outcome = run_sh("echo $$; echo out; exit 3");
  CHECK(outcome.end == HelperEnd::exited);
  CHECK(outcome.code == 3);
  CHECK_FALSE(outcome.ok());
  CHECK(outcome.output.substr(outcome.output.find('\n') + 1) == "out\n");
  CHECK(reaped(first_number(outcome.output)));

  const HelperOutcome fine = run_sh("printf 'a\\nb'");
  CHECK(fine.ok());
  CHECK(fine.output == "a\nb");
}

TEST_CASE("a helper killed by a signal says which", "[child]") {
  const HelperOutcome outcome = run_sh("kill -TERM $$; sleep 600");
  CHECK(outcome.end == HelperEnd::signalled);
  CHECK(outcome.code == SIGTERM);
}

TEST_CASE("a helper that cannot start is a value that says why", "[child]") {
  HelperRequest request;
  request.argv = {"/nonexistent/flowrun-helper"};
  HelperOutcome outcome = run_helper(request);
  CHECK(outcome.end == HelperEnd::not_started);
  CHECK(outcome.exec_failed);
  CHECK(outcome.error == "/nonexistent/flowrun-helper: No such file or directory");

  request.argv = {"flowrun-no-such-helper"};
  outcome = run_helper(request);
  CHECK(outcome.end == HelperEnd::not_started);
  CHECK(outcome.error == "flowrun-no-such-helper: command not found");

  // Found and executable, but execve refuses it: the child says so.
  testing::ScopedTempDir dir("child");
  const std::string path = dir.path() + "/not-a-helper";
  std::ofstream(path) << "\x01\x02";
  REQUIRE(chmod(path.c_str(), 0755) == 0);
  request.argv = {path};
  outcome = run_helper(request);
  CHECK(outcome.end == HelperEnd::not_started);
  CHECK(outcome.exec_failed);
  CHECK(outcome.error == path + ": Exec format error");

  request.argv = {};
  CHECK(run_helper(request).end == HelperEnd::not_started);
}

TEST_CASE("a helper silent for longer than its limit is killed", "[child]") {
  HelperRequest request;
  request.silence_limit = 200ms;
  const HelperOutcome outcome = run_sh("exec sleep 600", request);
  CHECK(outcome.end == HelperEnd::silent);
}

TEST_CASE("a helper's limits hold after it closed its output", "[child]") {
  HelperRequest request;
  request.silence_limit = 200ms;
  HelperOutcome outcome = run_sh("exec >&-; exec sleep 600", request);
  CHECK(outcome.end == HelperEnd::silent);
  outcome = run_sh("exec >&-; exit 5");
  CHECK(outcome.end == HelperEnd::exited);
  CHECK(outcome.code == 5);
}

TEST_CASE("a helper that talks on past its deadline is killed", "[child]") {
  HelperRequest request;
  request.silence_limit = 600s;
  request.deadline = 300ms;
  request.output_limit = 64;
  const HelperOutcome outcome = run_sh("while :; do echo tick; sleep 0.01; done", request);
  CHECK(outcome.end == HelperEnd::overran);
  CHECK(outcome.output.size() <= 64);
}

TEST_CASE("a cancelled helper is killed at once", "[child]") {
  std::atomic<bool> cancel{false};
  HelperRequest request;
  request.cancel = &cancel;
  request.on_line = [&](std::string_view line) {
    if (line == "ready") cancel = true;
  };
  const HelperOutcome outcome = run_sh("echo ready; exec sleep 600", request);
  CHECK(outcome.end == HelperEnd::cancelled);
  CHECK(outcome.output == "ready\n");

  // Set before it starts: it never gets far.
  const HelperOutcome early = run_sh("sleep 600", request);
  CHECK(early.end == HelperEnd::cancelled);
}

TEST_CASE("a helper's output is kept up to the limit, and the rest drained", "[child]") {
  HelperRequest request;
  request.output_limit = 1000;
  const HelperOutcome outcome = run_sh("head -c 1000000 /dev/zero", request);
  CHECK(outcome.ok());  // it never blocked on a full pipe
  CHECK(outcome.output.size() == 1000);
  CHECK(outcome.output_cut);
}

TEST_CASE("a helper's stderr is inherited, discarded or captured", "[child]") {
  HelperRequest request;
  request.stderr_to = HelperStderr::capture;
  HelperOutcome outcome = run_sh("echo err >&2; echo out", request);
  CHECK(outcome.output == "out\n");
  CHECK(outcome.error_output == "err\n");

  request.stderr_to = HelperStderr::discard;
  outcome = run_sh("echo err >&2; echo out", request);
  CHECK(outcome.output == "out\n");
  CHECK(outcome.error_output.empty());
}

TEST_CASE("a helper's lines arrive as they come, and its done line shortens its silence limit", "[child]") {
  std::vector<std::string> lines;
  HelperRequest request;
  request.output_limit = 0;
  request.on_line = [&](std::string_view line) { lines.emplace_back(line); };
  HelperOutcome outcome = run_sh("printf 'one\\ntwo\\npartial'", request);
  CHECK(outcome.ok());
  CHECK(outcome.output.empty());
  CHECK(lines == std::vector<std::string>{"one", "two"});

  request.silence_limit = 600s;
  request.done_line = "done";
  request.silence_after_done = 100ms;
  outcome = run_sh("echo done; exec sleep 600", request);
  CHECK(outcome.end == HelperEnd::silent);
  CHECK(outcome.done);
}

TEST_CASE("a grandchild holding the pipe cannot keep run_helper waiting", "[child]") {
  SECTION("the helper has exited: what is left of its group is killed") {
    const HelperOutcome outcome = run_sh("sleep 600 & echo $!");
    CHECK(outcome.end == HelperEnd::exited);
    CHECK(outcome.code == 0);
    const pid_t grandchild = first_number(outcome.output);
    REQUIRE(grandchild > 0);
    CHECK(wait_gone(grandchild));
  }
  SECTION("the helper hangs too: the whole group is killed") {
    std::atomic<bool> cancel{false};
    HelperRequest request;
    request.cancel = &cancel;
    request.on_line = [&](std::string_view) { cancel = true; };
    const HelperOutcome outcome = run_sh("sleep 600 & echo $!; exec sleep 600", request);
    CHECK(outcome.end == HelperEnd::cancelled);
    const pid_t grandchild = first_number(outcome.output);
    REQUIRE(grandchild > 0);
    CHECK(wait_gone(grandchild));
  }
}

TEST_CASE("a function helper runs in the forked child, without flowrun's descriptors", "[child]") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);  // not close-on-exec: the child must close it all the same
  HelperRequest request;
  request.child_main = [&] {
    const bool closed = fcntl(fds[1], F_GETFD) == -1 && errno == EBADF;
    const char text[] = "from the child\n";
    if (write(STDOUT_FILENO, text, sizeof text - 1) < 0) return 2;
    return closed ? 7 : 1;
  };
  const HelperOutcome outcome = run_helper(request);
  close(fds[0]);
  close(fds[1]);
  CHECK(outcome.end == HelperEnd::exited);
  CHECK(outcome.code == 7);
  CHECK(outcome.output == "from the child\n");
}

namespace {
void note_signal(int) {}
}  // namespace

TEST_CASE("signals to flowrun while it waits for a helper change nothing", "[child]") {
  struct sigaction action {
  }, before{};
  action.sa_handler = note_signal;  // no SA_RESTART: poll and read return EINTR
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR1, &action, &before);
  const HelperOutcome outcome = run_sh("echo first; kill -USR1 $PPID; kill -USR1 $PPID; echo after; exit 4");
  sigaction(SIGUSR1, &before, nullptr);
  CHECK(outcome.end == HelperEnd::exited);
  CHECK(outcome.code == 4);
  CHECK(outcome.output == "first\nafter\n");
}

TEST_CASE("a helper gets this environment with the guardian's mark first", "[child]") {
  // In a stand-in for flowrun, which starts a guardian, as the mark stays
  // in the environment of the process that started one.
  const std::string secret = make_secret();
  int result[2];
  REQUIRE(pipe(result) == 0);
  const pid_t owner = fork();
  REQUIRE(owner >= 0);
  if (owner == 0) {
    close(result[0]);
    Guardian guardian;
    guardian.start("FLOWRUN_INVOCATION", secret);
    setenv("FLOWRUN_CHILD_TEST", "seen", 1);
    const HelperOutcome outcome =
        run_sh("tr '\\000' '\\n' < /proc/$$/environ | head -n 1; printf %s \"$FLOWRUN_CHILD_TEST\"");
    guardian.disarm();
    const ssize_t n = write(result[1], outcome.output.data(), outcome.output.size());
    _exit(n == static_cast<ssize_t>(outcome.output.size()) ? 0 : 1);
  }
  close(result[1]);
  std::string got;
  char buf[256];
  for (ssize_t n; (n = read(result[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
  close(result[0]);
  int status = 0;
  waitpid(owner, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(got == "FLOWRUN_INVOCATION=" + secret + "\nseen");
}
