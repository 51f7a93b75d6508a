// The supervisor with real processes (small /bin/sh scripts): output, the
// culprit and its victims, the shared grace deadline, timeouts, leftovers and
// commands that cannot start. The console is two temporary files.
#include "flowrun/supervisor.h"

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <signal.h>
#include <sstream>
#include <stdlib.h>
#include <unistd.h>

#include "flowrun/process.h"

using namespace flowrun;

namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class Fixture {
 public:
  Fixture() {
    std::string pattern = "/tmp/flowrun-supervisor-XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    dir_ = pattern;
    out_fd_ = open((dir_ + "/console.out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    err_fd_ = open((dir_ + "/console.err").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    become_subreaper();
  }
  ~Fixture() {
    close(out_fd_);
    close(err_fd_);
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;

  WorkerLaunch shell(int rank, const std::string& script) const {
    WorkerLaunch w;
    w.rank = rank;
    w.local_rank = rank;
    w.argv = {"/bin/sh", "-c", script};
    w.env = {"PATH=/usr/bin:/bin", "RANK=" + std::to_string(rank)};
    w.workdir = dir_;
    w.stdout_log = dir_ + "/r" + std::to_string(rank) + ".out";
    w.stderr_log = dir_ + "/r" + std::to_string(rank) + ".err";
    return w;
  }

  GroupOptions options(double grace_s = 5) const {
    GroupOptions o;
    o.step = "train";
    o.grace_s = grace_s;
    return o;
  }

  Supervisor make() const { return Supervisor(Console{out_fd_, err_fd_}, -1); }
  std::string console_out() const { return slurp(dir_ + "/console.out"); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int out_fd_ = -1;
  int err_fd_ = -1;
};

double seconds(const AttemptRecord& a) { return static_cast<double>(a.end_unix_ns - a.start_unix_ns) / 1e9; }

}  // namespace

TEST_CASE("workers' lines reach the console prefixed and the log files raw", "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  auto a = s.run_group({f.shell(0, "echo zero; printf 'no newline'"), f.shell(1, "echo one; echo oops >&2")},
                       f.options());
  CHECK(a.outcome == Outcome::succeeded);
  CHECK_FALSE(a.culprit.has_value());
  REQUIRE(a.workers.size() == 2);
  CHECK(a.workers[0].status.ok());
  CHECK(a.workers[0].role == Role::ok);
  const std::string out = f.console_out();
  CHECK(out.find("[train r0] zero\n") != std::string::npos);
  CHECK(out.find("[train r0] no newline\n") != std::string::npos);
  CHECK(out.find("[train r1] one\n") != std::string::npos);
  CHECK(slurp(f.dir() + "/r0.out") == "zero\nno newline");
  CHECK(slurp(f.dir() + "/r1.err") == "oops\n");
  CHECK(a.workers[1].stderr_tail == "oops\n");
}

TEST_CASE("the first failure is the culprit and the others are stopped at once", "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  auto a = s.run_group(
      {f.shell(0, "exec sleep 30"), f.shell(1, "echo boom >&2; exit 3"), f.shell(2, "exec sleep 30")},
      f.options(10));
  CHECK(a.outcome == Outcome::failed);
  REQUIRE(a.culprit == 1);
  CHECK(a.workers[1].role == Role::culprit);
  CHECK(a.workers[1].status.kind == ExitStatus::Kind::exited);
  CHECK(a.workers[1].status.code == 3);
  CHECK(a.workers[0].role == Role::victim);
  CHECK(a.workers[0].status.kind == ExitStatus::Kind::signaled);
  CHECK(a.workers[0].status.code == SIGTERM);
  CHECK(a.workers[2].role == Role::victim);
  CHECK(seconds(a) < 5);  // SIGTERM ended them; the 10 s grace was not needed
}

TEST_CASE("a worker that ignores SIGTERM is killed when the grace runs out", "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  auto a =
      s.run_group({f.shell(0, "trap '' TERM; sleep 30 & wait; sleep 30"), f.shell(1, "sleep 0.1; exit 1")},
                  f.options(0.5));
  CHECK(a.outcome == Outcome::failed);
  CHECK(a.culprit == 1);
  CHECK(a.workers[0].status.kind == ExitStatus::Kind::signaled);
  CHECK(a.workers[0].status.code == SIGKILL);
  CHECK(seconds(a) >= 0.5);
  CHECK(seconds(a) < 5);
}

TEST_CASE("a timeout stops the group with no culprit", "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  GroupOptions o = f.options(5);
  o.timeout_s = 0.3;
  auto a = s.run_group({f.shell(0, "exec sleep 30"), f.shell(1, "exec sleep 30")}, o);
  CHECK(a.outcome == Outcome::timed_out);
  CHECK_FALSE(a.culprit.has_value());
  CHECK(a.workers[0].role == Role::victim);
  CHECK(seconds(a) >= 0.3);
  CHECK(seconds(a) < 5);
}

TEST_CASE("descendants a worker leaves behind are stopped with the group", "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  const std::string pidfile = f.dir() + "/daemon.pid";
  auto a = s.run_group({f.shell(0, "setsid sleep 30 & echo $! > " + pidfile + "; exit 0")}, f.options(2));
  CHECK(a.outcome == Outcome::succeeded);
  const pid_t daemon = static_cast<pid_t>(std::stol(slurp(pidfile)));
  CHECK(kill(daemon, 0) != 0);  // gone (and reaped: not even a zombie)
  auto notes = s.sweep_leftovers(1);
  CHECK(notes.empty());
}

TEST_CASE("a command that cannot start fails the group with 127", "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  WorkerLaunch missing = f.shell(1, "");
  missing.argv = {"no-such-program-flowrun"};
  auto a = s.run_group({f.shell(0, "exec sleep 30"), missing}, f.options(5));
  CHECK(a.outcome == Outcome::failed);
  REQUIRE(a.culprit == 1);
  CHECK(a.workers[1].status.kind == ExitStatus::Kind::spawn_failed);
  CHECK(a.workers[1].status.shell_code() == 127);
  CHECK(a.workers[1].status.spawn_error == "no-such-program-flowrun: command not found");
  CHECK(a.workers[0].role == Role::victim);
}

TEST_CASE("a flood of output from several workers stays line-atomic", "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  std::vector<WorkerLaunch> ws;
  for (int r = 0; r < 4; ++r)
    ws.push_back(f.shell(r,
                         "i=0; while [ $i -lt 3000 ]; do echo \"line $i of rank $RANK xxxxxxxxxxxxxxxx\"; "
                         "i=$((i+1)); done"));
  auto a = s.run_group(ws, f.options());
  CHECK(a.outcome == Outcome::succeeded);
  std::istringstream lines(f.console_out());
  std::string line;
  int count[4] = {0, 0, 0, 0};
  int bad = 0;
  while (std::getline(lines, line)) {
    int r = -1, i = -1, r2 = -1;
    char tail[32] = {};
    if (std::sscanf(line.c_str(), "[train r%d] line %d of rank %d %31s", &r, &i, &r2, tail) == 4 && r == r2 &&
        r >= 0 && r < 4 && i == count[r] && std::string(tail) == "xxxxxxxxxxxxxxxx")
      ++count[r];
    else
      ++bad;
  }
  CHECK(bad == 0);
  for (int r = 0; r < 4; ++r) CHECK(count[r] == 3000);
}
