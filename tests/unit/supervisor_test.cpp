// The supervisor with real processes (small /bin/sh scripts): output, the
// culprit and its victims, the shared grace deadline, timeouts, leftovers,
// commands that cannot start and paused output. The console is two
// temporary files.
#include "flowrun/supervisor.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <signal.h>
#include <sstream>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flowrun/process.h"

#include "exit_watch.h"
#include "testing.h"

using namespace flowrun;

namespace {

namespace fs = std::filesystem;

class Fixture {
 public:
  Fixture() {
    out_fd_ = open((dir() + "/console.out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    err_fd_ = open((dir() + "/console.err").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    become_subreaper();
  }
  ~Fixture() {
    close(out_fd_);
    close(err_fd_);
  }
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;

  WorkerLaunch shell(int rank, const std::string& script) const {
    WorkerLaunch w;
    w.rank = rank;
    w.local_rank = rank;
    w.argv = {"/bin/sh", "-c", script};
    w.env = {"PATH=/usr/bin:/bin", "RANK=" + std::to_string(rank)};
    w.workdir = dir();
    w.stdout_log = dir() + "/r" + std::to_string(rank) + ".out";
    w.stderr_log = dir() + "/r" + std::to_string(rank) + ".err";
    return w;
  }

  GroupOptions options(double grace_s = 5) const {
    GroupOptions o;
    o.step = "train";
    o.grace_s = grace_s;
    return o;
  }

  Supervisor make() const { return Supervisor(Console{out_fd_, err_fd_}, -1); }
  std::string console_out() const { return testing::read_file(dir() + "/console.out"); }
  std::string console_err() const { return testing::read_file(dir() + "/console.err"); }
  const std::string& dir() const { return scratch_.path(); }

 private:
  testing::ScopedTempDir scratch_{"supervisor"};
  int out_fd_ = -1;
  int err_fd_ = -1;
};

double seconds(const AttemptRecord& a) { return static_cast<double>(a.end_unix_ns - a.start_unix_ns) / 1e9; }

// An observer that pauses output at the first bytes it gets and resumes it
// `resume_after_s` later (as the agent does when its queue to the head
// fills and drains), recording what came meanwhile.
class Pauser : public GroupObserver {
 public:
  Pauser(Supervisor& s, double resume_after_s) : s_(s), timer_(s.io()), resume_after_s_(resume_after_s) {}

  void on_output(std::size_t index, bool is_err, std::string_view data) override {
    (void)is_err;
    bytes[index] += data.size();
    if (paused) bytes_while_paused += data.size();
    if (paused_at_ns != 0) return;
    paused_at_ns = unix_now_ns();
    paused = true;
    s_.pause_output();
    timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(resume_after_s_)));
    timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      paused = false;
      resumed_at_ns = unix_now_ns();
      s_.resume_output();
    });
  }

  bool on_exit(std::size_t index, const WorkerRecord& record) override {
    exited_while_paused[index] = paused;
    return !record.status.ok();
  }

  std::size_t bytes[2] = {0, 0};
  std::size_t bytes_while_paused = 0;  // bytes handed on after pause_output(): none are expected
  bool exited_while_paused[2] = {false, false};
  bool paused = false;
  std::int64_t paused_at_ns = 0, resumed_at_ns = 0;

 private:
  Supervisor& s_;
  boost::asio::steady_timer timer_;
  double resume_after_s_;
};

// Stops the group as a timeout would once `count` workers have said "ready":
// the stop comes when every worker is where the test wants it, not after a
// time.
class StopWhenReady : public GroupObserver {
 public:
  StopWhenReady(Supervisor& s, int count) : s_(s), left_(count) {}
  void on_output(std::size_t, bool, std::string_view data) override {
    if (data.find("ready") == std::string_view::npos || --left_ != 0) return;
    boost::asio::post(s_.io(), [this] { s_.stop_group(Outcome::timed_out, false); });
  }
  bool on_exit(std::size_t, const WorkerRecord& record) override { return !record.status.ok(); }

 private:
  Supervisor& s_;
  int left_;
};

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
  CHECK(testing::read_file(f.dir() + "/r0.out") == "zero\nno newline");
  CHECK(testing::read_file(f.dir() + "/r1.err") == "oops\n");
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

TEST_CASE(
    "the python3 a worker's PATH finds is recorded for a worker that failed, not looked up for one that "
    "succeeded",
    "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  const std::string bin = f.dir() + "/bin";
  std::filesystem::create_directories(bin);
  testing::write_text(bin + "/python3", "#!/bin/sh\n");
  std::filesystem::permissions(bin + "/python3", std::filesystem::perms::owner_all);
  auto on_path = [&](WorkerLaunch w) {
    w.env = {"PATH=" + bin + ":/usr/bin:/bin", "RANK=0"};
    return w;
  };
  auto ok = s.run_group({on_path(f.shell(0, "exit 0"))}, f.options());
  REQUIRE(ok.workers.size() == 1);
  CHECK(ok.workers[0].path_python.empty());
  auto failed = s.run_group({on_path(f.shell(0, "exit 3"))}, f.options());
  REQUIRE(failed.workers.size() == 1);
  CHECK(failed.workers[0].status.code == 3);
  CHECK(failed.workers[0].path_python == bin + "/python3");
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

TEST_CASE("an end flowrun's SIGTERM cannot cause is the rank's own; one after the stop began is no culprit",
          "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  StopWhenReady stopper(s, 3);
  // Worker 0 ignores SIGTERM and exits 3 once worker 2, which flowrun signals
  // after it, has died of its SIGTERM; worker 1's handler exits 3.
  auto a =
      s.run_group({f.shell(0,
                           "trap '' TERM; while [ ! -s p2 ]; do sleep 0.01; done; p=$(cat p2); echo ready; "
                           "while kill -0 $p 2>/dev/null; do sleep 0.01; done; exit 3"),
                   f.shell(1, "trap 'exit 3' TERM; echo ready; while :; do sleep 0.01; done"),
                   f.shell(2, "echo $$ > p2.tmp && mv p2.tmp p2; echo ready; exec sleep 30")},
                  f.options(10), &stopper);
  CHECK(a.outcome == Outcome::timed_out);
  CHECK_FALSE(a.culprit.has_value());  // worker 0 failed only after the stop began
  CHECK(a.workers[0].role == Role::failed_after);
  CHECK(a.workers[0].status.kind == ExitStatus::Kind::exited);
  CHECK(a.workers[0].status.code == 3);
  CHECK(a.workers[1].role == Role::victim);  // its own code, but its handler ran on flowrun's signal
  CHECK(a.workers[1].status.code == 3);
  CHECK(a.workers[2].role == Role::victim);
  CHECK(a.workers[2].status.kind == ExitStatus::Kind::signaled);
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

TEST_CASE("a stopped (SIGSTOP) worker gets its SIGTERM at once, and a timeout notes who was silent",
          "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  GroupOptions o = f.options(30);
  o.timeout_s = 1;
  auto a =
      s.run_group({f.shell(0, "while :; do echo tick; sleep 0.05; done"), f.shell(1, "kill -STOP $$")}, o);
  CHECK(a.outcome == Outcome::timed_out);
  CHECK(seconds(a) < 5);  // SIGCONT after SIGTERM: the 30 s grace was not needed
  for (const auto& w : a.workers) {
    CHECK(w.status.kind == ExitStatus::Kind::signaled);
    CHECK(w.status.code == SIGTERM);
    CHECK_FALSE(w.stalled);
    REQUIRE(w.silent_s.has_value());
  }
  CHECK_FALSE(a.workers[0].suspended);
  CHECK(*a.workers[0].silent_s < 0.5);
  CHECK(a.workers[1].suspended);
  CHECK(*a.workers[1].silent_s >= 0.9);
}

TEST_CASE("stall_timeout stops the group and names every worker silent that long", "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  GroupOptions o = f.options(30);
  o.stall_timeout_s = 0.5;
  auto a = s.run_group({f.shell(0, "while :; do echo tick; sleep 0.05; done"), f.shell(1, "kill -STOP $$"),
                        f.shell(2, "exec sleep 30")},
                       o);
  CHECK(a.outcome == Outcome::stalled);
  CHECK_FALSE(a.culprit.has_value());
  CHECK(seconds(a) >= 0.5);
  CHECK(seconds(a) < 5);
  CHECK_FALSE(a.workers[0].stalled);
  CHECK(a.workers[1].stalled);
  CHECK(a.workers[1].suspended);
  CHECK(a.workers[2].stalled);
  CHECK_FALSE(a.workers[2].suspended);
  for (const auto& w : a.workers) {
    CHECK(w.role == Role::victim);
    CHECK(w.status.code == SIGTERM);
  }
  for (int r : {1, 2}) {
    CHECK(*a.workers[static_cast<std::size_t>(r)].silent_s >= 0.5);
    CHECK(*a.workers[static_cast<std::size_t>(r)].silent_s < 0.8);
  }
  const std::string err = f.console_err();
  CHECK_THAT(err, Catch::Matches(
                      "flowrun: step 'train' stalled: rank 1 \\(stopped\\) wrote nothing for 0\\.[5-7] s, "
                      "rank 2 for 0\\.[5-7] s \\(stall_timeout: 0\\.5s\\); stopping the step\n"));
  // A worker that keeps writing never stalls.
  GroupOptions quiet = f.options(30);
  quiet.stall_timeout_s = 0.3;
  auto b = s.run_group({f.shell(0, "for i in 1 2 3 4 5 6 7 8 9 10; do echo $i; sleep 0.1; done")}, quiet);
  CHECK(b.outcome == Outcome::succeeded);
}

TEST_CASE("time with output paused does not count towards stall_timeout", "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  GroupOptions o = f.options(30);
  o.stall_timeout_s = 0.4;
  Pauser p(s, 1.2);  // paused for three times the stall_timeout, at the first line
  auto a = s.run_group({f.shell(0, "for i in $(seq 40); do echo line $i; sleep 0.05; done")}, o, &p);
  CHECK(a.outcome == Outcome::succeeded);
  CHECK_FALSE(a.workers[0].stalled);
  CHECK(p.resumed_at_ns - p.paused_at_ns >= 1'100'000'000);
}

TEST_CASE("a log file that cannot be written stops the group, and the console goes on", "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  WorkerLaunch full = f.shell(0, "echo first; sleep 0.3; echo second; exec sleep 30");
  full.stdout_log = "/dev/full";  // every write fails with ENOSPC
  GroupOptions o = f.options(30);
  o.run_dir = "/r";
  // Opened as given: as a log file, a device would be refused.
  o.open_log = [](const std::string& path) {
    return ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  };
  auto a = s.run_group({full, f.shell(1, "exec sleep 30")}, o);
  CHECK(a.outcome == Outcome::failed);
  CHECK_FALSE(a.culprit.has_value());
  CHECK(a.write_error == "cannot write rank 0's full in /dev: No space left on device");
  CHECK(seconds(a) < 5);
  for (const auto& w : a.workers) {
    CHECK(w.role == Role::victim);
    CHECK(w.status.code == SIGTERM);
  }
  CHECK(f.console_err() ==
        "flowrun: error: step 'train': cannot write rank 0's full in /dev: No space left on device; stopping "
        "the "
        "step (free space there, then: flowrun resume /r)\n");
  CHECK(f.console_out().find("[train r0] first\n") != std::string::npos);
}

TEST_CASE("descendants a worker leaves behind are stopped with the group", "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  const std::string pidfile = f.dir() + "/daemon.pid";
  auto a = s.run_group({f.shell(0, "setsid sleep 30 & echo $! > " + pidfile + "; exit 0")}, f.options(2));
  CHECK(a.outcome == Outcome::succeeded);
  const pid_t daemon = static_cast<pid_t>(std::stol(testing::read_file(pidfile)));
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

TEST_CASE("paused output: pipes are not read, exits go on, every byte arrives before the group ends",
          "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  Pauser p(s, 0.5);
  // Rank 0 writes about 4.8 MB, more than its pipe holds: it blocks until
  // output resumes. Rank 1 ends while output is paused, its line unread.
  auto a = s.run_group({f.shell(0, "seq 1 700000"), f.shell(1, "sleep 0.1; echo done")}, f.options(), &p);
  CHECK(a.outcome == Outcome::succeeded);
  CHECK(p.bytes_while_paused == 0);
  CHECK(p.exited_while_paused[1]);
  CHECK_FALSE(p.exited_while_paused[0]);
  REQUIRE(p.resumed_at_ns != 0);
  CHECK(a.workers[0].end_unix_ns >= p.resumed_at_ns);  // it waited on its full pipe
  CHECK(a.end_unix_ns >= p.resumed_at_ns);
  std::string seq;
  for (int i = 1; i <= 700000; ++i) seq += std::to_string(i) + "\n";
  CHECK(p.bytes[0] == seq.size());
  CHECK(testing::read_file(f.dir() + "/r0.out") == seq);
  CHECK(p.bytes[1] == 5);
  CHECK(testing::read_file(f.dir() + "/r1.out") == "done\n");
}

TEST_CASE("paused output: the step's timeout still stops the workers", "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  Pauser p(s, 1.0);
  GroupOptions o = f.options(5);
  o.timeout_s = 0.3;
  auto a = s.run_group({f.shell(0, "exec yes flood")}, o, &p);
  CHECK(a.outcome == Outcome::timed_out);
  CHECK(a.workers[0].status.kind == ExitStatus::Kind::signaled);
  CHECK(a.workers[0].status.code == SIGTERM);
  CHECK(p.exited_while_paused[0]);  // stopped and reaped while its pipe was full and unread
  CHECK(p.bytes_while_paused == 0);
  REQUIRE(p.resumed_at_ns != 0);
  CHECK(a.workers[0].end_unix_ns < p.resumed_at_ns);
  CHECK(a.end_unix_ns >= p.resumed_at_ns);  // what was left in the pipe was read after the resume
  CHECK(p.bytes[0] == fs::file_size(f.dir() + "/r0.out"));
  CHECK(p.bytes[0] > 0);
}

TEST_CASE("--signals-to-handle names stop signals; SIGUSR1 and SIGUSR2 are always forwarded",
          "[supervisor]") {
  std::string error;
  CHECK(parse_signals_to_handle("SIGTERM,SIGINT,SIGHUP", &error) == kStopSignals);
  // Listed, SIGQUIT stops as in torchrun; unlisted, it takes the ranks' stacks.
  CHECK(parse_signals_to_handle("SIGTERM,SIGINT,SIGHUP,SIGQUIT", &error) ==
        std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  CHECK(parse_signals_to_handle("term, int,SIGTERM", &error) == std::vector<int>{SIGTERM, SIGINT});
  CHECK(parse_signals_to_handle("SIGTERM,SIGUSR1,SIGUSR2", &error) == std::vector<int>{SIGTERM});
  CHECK(parse_signals_to_handle("", &error) == std::vector<int>{});
  CHECK_FALSE(parse_signals_to_handle("SIGTERM,SIGKILL", &error));
  CHECK(error ==
        "'SIGKILL': flowrun handles SIGTERM, SIGINT, SIGHUP and SIGQUIT (stop signals) and forwards SIGUSR1 "
        "and SIGUSR2");
  CHECK_FALSE(parse_signals_to_handle("SIGNOPE", &error));
}

TEST_CASE("a worker added to a running group is watched as its own: output, exit and record",
          "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  // Worker 0 waits for the file the added worker writes: the group cannot
  // end before the added one ran.
  const std::string mark = f.dir() + "/added-ran";
  const std::vector<WorkerLaunch> first = {
      f.shell(0, "echo ready; while [ ! -e " + mark + " ]; do sleep 0.01; done")};
  const WorkerLaunch added = f.shell(1, "echo from the added one; touch " + mark + "; exit 4");
  struct Adder : GroupObserver {
    Supervisor& s;
    const WorkerLaunch& launch;
    std::optional<std::size_t> index;
    bool asked = false;
    std::map<std::size_t, std::string> out;
    std::map<std::size_t, int> exits;
    Adder(Supervisor& sup, const WorkerLaunch& l) : s(sup), launch(l) {}
    void on_output(std::size_t i, bool, std::string_view data) override {
      out[i] += data;
      // From a handler of its own, as add_worker asks.
      if (i == 0 && !asked) boost::asio::post(s.io(), [this] { index = s.add_worker(launch); });
      asked = true;
    }
    bool on_exit(std::size_t i, const WorkerRecord& record) override {
      exits[i] = record.status.code;
      return false;  // the added one's exit 4 is not the group's failure here
    }
  } adder(s, added);
  s.start_group(first, f.options(), &adder);
  s.run_until([&] { return adder.exits.size() == 2; });
  const AttemptRecord a = s.finish_group();
  REQUIRE(adder.index == std::optional<std::size_t>(1));
  CHECK(adder.out[1] == "from the added one\n");
  CHECK(adder.exits == std::map<std::size_t, int>{{0, 0}, {1, 4}});
  REQUIRE(a.workers.size() == 2);
  CHECK(a.workers[1].rank == 1);
  CHECK(a.workers[1].status.code == 4);
  CHECK(f.console_out().find("[train r1] from the added one\n") != std::string::npos);
  CHECK(testing::read_file(f.dir() + "/r1.out") == "from the added one\n");
  // No group runs now: nothing is added.
  CHECK_FALSE(s.add_worker(added).has_value());
}

TEST_CASE("a stopping group takes no added worker", "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  const std::vector<WorkerLaunch> first = {f.shell(0, "echo ready; exec sleep 30")};
  const WorkerLaunch added = f.shell(1, "echo never");
  StopWhenReady stopper(s, 1);
  s.start_group(first, f.options(), &stopper);
  s.run_until([&] { return s.stopping(); });
  CHECK_FALSE(s.add_worker(added).has_value());
  const AttemptRecord a = s.finish_group();
  CHECK(a.workers.size() == 1);
  CHECK(f.console_out().find("never") == std::string::npos);
}

TEST_CASE("a rank that wrote its error file before a peer failed is the culprit, though the stop killed it",
          "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  // Worker 1 records its failure and goes on ending (a slow teardown) until
  // flowrun's SIGTERM; worker 0, whose collective that failure broke, exits 1
  // first.
  WorkerLaunch first = f.shell(1, "printf '{}\\n' > e1.json; touch failed1; exec sleep 30");
  first.error_file = f.dir() + "/e1.json";
  WorkerLaunch second = f.shell(0, "while [ ! -e failed1 ]; do sleep 0.01; done; exit 1");
  second.error_file = f.dir() + "/e0.json";
  auto a = s.run_group({second, first, f.shell(2, "exec sleep 30")}, f.options(10));
  CHECK(a.outcome == Outcome::failed);
  REQUIRE(a.culprit == 1);
  CHECK(a.workers[1].status.kind == ExitStatus::Kind::signaled);
  CHECK(a.workers[1].status.code == SIGTERM);
  CHECK(a.workers[1].error_file_unix_ns > 0);
  CHECK(a.workers[1].error_file_unix_ns < a.workers[0].end_unix_ns);
  CHECK_FALSE(s.ended_by_stop(1));
  CHECK(a.workers[0].role == Role::failed_after);
  CHECK(a.workers[0].error_file_unix_ns == 0);  // it wrote none
  CHECK(a.workers[2].role == Role::victim);
}

TEST_CASE("a rank's error file counts only as a regular file with content, written since its start",
          "[supervisor]") {
  testing::ScopedTempDir d{"error_file_time"};
  const std::string file = d.path() + "/error.json";
  const std::int64_t before = unix_now_ns();
  std::ofstream(file) << "{}";
  const std::int64_t written = error_file_time(file, before);
  CHECK(written > 0);
  CHECK(written <= unix_now_ns());
  CHECK(error_file_time(file, unix_now_ns() + 60'000'000'000) == 0);  // from before the start
  CHECK(error_file_time(d.path() + "/none.json", before) == 0);
  CHECK(error_file_time("", before) == 0);
  std::ofstream(d.path() + "/empty.json").flush();
  CHECK(error_file_time(d.path() + "/empty.json", before) == 0);
  REQUIRE(mkfifo((d.path() + "/fifo.json").c_str(), 0600) == 0);
  CHECK(error_file_time(d.path() + "/fifo.json", before) == 0);  // not opened: it would block
  REQUIRE(symlink(file.c_str(), (d.path() + "/link.json").c_str()) == 0);
  CHECK(error_file_time(d.path() + "/link.json", before) == 0);
}

TEST_CASE("a process a rank leaves behind that ends while the ranks run is reaped then, not left a zombie",
          "[supervisor]") {
  Fixture f;
  Supervisor s = f.make();
  // The subshell ends at once: its child comes to this process (the
  // subreaper), writes its pid, and ends while rank 0 still runs (until it
  // is released, or gives up after some 30 s: then the check below fails).
  const std::vector<WorkerLaunch> ranks = {
      f.shell(0,
              "(sh -c 'echo $$ > orphan.tmp && mv orphan.tmp orphan.pid' &); "
              "i=0; while [ ! -e release ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done")};
  struct : GroupObserver {
    bool rank_ended = false;
    bool on_exit(std::size_t, const WorkerRecord&) override {
      rank_ended = true;
      return false;
    }
  } watch;
  s.start_group(ranks, f.options(), &watch);
  pid_t orphan = 0;
  auto reaped = [&] {
    if (orphan == 0 && fs::exists(f.dir() + "/orphan.pid"))
      orphan = static_cast<pid_t>(std::stol(testing::read_file(f.dir() + "/orphan.pid")));
    // A zombie keeps its /proc entry until it is reaped.
    return orphan > 0 && !fs::exists("/proc/" + std::to_string(orphan));
  };
  s.run_until([&] { return reaped() || watch.rank_ended; });
  REQUIRE(reaped());
  CHECK_FALSE(watch.rank_ended);  // reaped while the group ran, not at its end
  std::ofstream(f.dir() + "/release").close();
  const AttemptRecord a = s.finish_group();
  CHECK(a.outcome == Outcome::succeeded);
}
