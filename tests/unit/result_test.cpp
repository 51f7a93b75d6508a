// Worker outcomes: which worker is the root cause, the exact text of every
// kind of root-cause report, results.json, and reading torch's error files.
#include "flowrun/result.h"

#include <catch2/catch.hpp>

#include "flowrun/json.h"

#include "testing.h"

using namespace flowrun;

namespace {

// 2026-11-29T17:10:53.123Z
constexpr std::int64_t kStartNs = 1'795'972'253'123'000'000;
using testing::kMs;
const std::string kDir = "/w/.flowrun/runs/demo-20261129-171053-4f1c2a/train";

using testing::exited;
ExitStatus signaled(int sig) { return {ExitStatus::Kind::signaled, sig, ""}; }

WorkerRecord worker(int rank, ExitStatus status, std::int64_t end_ms) {
  WorkerRecord w;
  w.rank = rank;
  w.local_rank = rank;
  w.pid = 4240 + rank;
  w.status = status;
  w.start_unix_ns = kStartNs;
  w.end_unix_ns = kStartNs + end_ms * kMs;
  std::string dir = kDir + "/rank" + std::to_string(rank);
  w.stdout_log = dir + "/stdout.log";
  w.stderr_log = dir + "/stderr.log";
  w.error_file = dir + "/error.json";
  return w;
}

// `n` ranks all stopped by flowrun with SIGTERM at `end_ms`.
AttemptRecord all_stopped(int n, std::int64_t end_ms, std::vector<int>* stopped) {
  AttemptRecord a;
  a.start_unix_ns = kStartNs;
  a.end_unix_ns = kStartNs + end_ms * kMs;
  for (int r = 0; r < n; ++r) {
    a.workers.push_back(worker(r, signaled(15), end_ms));
    stopped->push_back(r);
  }
  return a;
}

StepRecord parallel_step(AttemptRecord attempt, Outcome outcome) {
  StepRecord s;
  s.step = "train";
  s.parallel = true;
  s.outcome = outcome;
  attempt.outcome = outcome;
  s.attempts.push_back(std::move(attempt));
  return s;
}

std::vector<Role> roles(const AttemptRecord& a) {
  std::vector<Role> out;
  for (const auto& w : a.workers) out.push_back(w.role);
  return out;
}

const std::string kTorchErrorFile =
    R"({"message": {"message": "ValueError: bo\u00e9m", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"train.py\", line 6, in <module>\n    main()\n  File \"train.py\", line 4, in main\nValueError: bo\u00e9m\n", "timestamp": "1700000000"}}})";

}  // namespace

TEST_CASE("result: signal names", "[result]") {
  CHECK(signal_name(1) == "SIGHUP");
  CHECK(signal_name(2) == "SIGINT");
  CHECK(signal_name(6) == "SIGABRT");
  CHECK(signal_name(9) == "SIGKILL");
  CHECK(signal_name(11) == "SIGSEGV");
  CHECK(signal_name(15) == "SIGTERM");
  CHECK(signal_name(17) == "SIGCHLD");
  CHECK(signal_name(31) == "SIGSYS");
  CHECK(signal_name(0) == "signal 0");
  CHECK(signal_name(32) == "signal 32");
  CHECK(signal_name(40) == "signal 40");
  CHECK(signal_name(-3) == "signal -3");
}

TEST_CASE("result: exit status codes and descriptions", "[result]") {
  CHECK(exited(0).ok());
  CHECK_FALSE(exited(3).ok());
  CHECK_FALSE(signaled(0).ok());
  CHECK_FALSE(ExitStatus{}.ok());
  CHECK(exited(3).shell_code() == 3);
  CHECK(exited(0).shell_code() == 0);
  CHECK(signaled(9).shell_code() == 137);
  CHECK(signaled(11).shell_code() == 139);
  ExitStatus spawn{ExitStatus::Kind::spawn_failed, 2, "python4: No such file or directory"};
  CHECK(spawn.shell_code() == 127);
  CHECK(ExitStatus{}.shell_code() == 1);
  CHECK(ExitStatus{ExitStatus::Kind::running, 0, ""}.shell_code() == 1);

  CHECK(exited(3).describe() == "exited with code 3");
  CHECK(signaled(9).describe() == "was killed by signal 9 (SIGKILL)");
  CHECK(signaled(40).describe() == "was killed by signal 40");
  CHECK(spawn.describe() == "could not start: python4: No such file or directory");
  CHECK(ExitStatus{ExitStatus::Kind::spawn_failed, 0, ""}.describe() == "could not start");
  CHECK(ExitStatus{}.describe() == "did not start");
  CHECK(ExitStatus{ExitStatus::Kind::running, 0, ""}.describe() == "is still running");
}

namespace {

// One attempt's ends, the ranks flowrun stopped, and what assign_roles makes of them.
struct RolesRow {
  const char* rule;
  std::vector<WorkerRecord> workers;
  std::vector<int> stopped;          // indices into workers
  std::optional<int> stale_culprit;  // set before, to be reset
  std::optional<int> culprit;
  std::vector<Role> roles;
};

}  // namespace

TEST_CASE("result: the culprit is the first failure flowrun did not cause; the others' roles", "[result]") {
  const RolesRow row = GENERATE(values<RolesRow>({
      {"the first failure flowrun did not cause is the culprit",
       {worker(0, signaled(15), 400), worker(1, exited(3), 310), worker(2, signaled(6), 350),
        worker(3, exited(0), 420)},
       {0, 3},
       std::nullopt,
       1,
       {Role::victim, Role::culprit, Role::failed_after, Role::victim}},
      // Rank 0 ended first, but by flowrun's signal: the culprit is rank 1.
      {"a stopped worker is never the culprit",
       {worker(0, signaled(15), 100), worker(1, exited(1), 200)},
       {0},
       std::nullopt,
       1,
       {Role::victim, Role::culprit}},
      {"a stopped worker that succeeded before the culprit failed is ok",
       {worker(0, exited(0), 100), worker(1, exited(4), 200), worker(2, exited(0), 300)},
       {0, 2},
       std::nullopt,
       1,
       {Role::ok, Role::culprit, Role::victim}},
      {"spawn failures fail; workers never started are victims (stopped indices out of range are ignored)",
       {worker(0, exited(0), 50), worker(1, {ExitStatus::Kind::spawn_failed, 2, "boom"}, 10),
        worker(2, ExitStatus{}, 0)},
       {7, -1},
       std::nullopt,
       1,
       {Role::ok, Role::culprit, Role::victim}},
      {"all ok means no culprit",
       {worker(0, exited(0), 50), worker(1, exited(0), 60)},
       {},
       0,
       std::nullopt,
       {Role::ok, Role::ok}},
  }));
  INFO(row.rule);
  AttemptRecord a;
  a.workers = row.workers;
  a.culprit = row.stale_culprit;
  assign_roles(a, row.stopped);
  CHECK(a.culprit == row.culprit);
  CHECK(roles(a) == row.roles);
}

TEST_CASE("result: culprit ties go to the lowest rank, then the lowest index", "[result]") {
  AttemptRecord a;
  a.workers = {worker(3, exited(1), 100), worker(2, signaled(11), 100), worker(1, exited(1), 200)};
  assign_roles(a, {});
  CHECK(a.culprit == 1);
  CHECK(roles(a) == std::vector{Role::failed_after, Role::culprit, Role::failed_after});

  AttemptRecord same;
  same.workers = {worker(0, exited(1), 100), worker(0, exited(2), 100)};
  assign_roles(same, {});
  CHECK(same.culprit == 0);
}

TEST_CASE("result: failures are ordered by when each rank wrote its error file, then by their ends",
          "[result]") {
  // Rank 1 recorded its failure at 100 ms and ended at 300; rank 0, whose
  // collective that broke, recorded at 150 and ended first, at 200.
  AttemptRecord a;
  a.workers = {worker(0, exited(1), 200), worker(1, exited(1), 300), worker(2, exited(1), 120)};
  a.workers[0].error_file_unix_ns = kStartNs + 150 * kMs;
  a.workers[1].error_file_unix_ns = kStartNs + 100 * kMs;
  assign_roles(a, {});
  CHECK(a.culprit == 1);
  CHECK(roles(a) == std::vector{Role::failed_after, Role::culprit, Role::failed_after});
  CHECK(failure_time(a.workers[1]) == kStartNs + 100 * kMs);
  CHECK(failure_time(a.workers[2]) == kStartNs + 120 * kMs);  // no error file: its end

  // A rank that ended before another's error file was written failed first.
  a.workers[2].end_unix_ns = kStartNs + 90 * kMs;
  assign_roles(a, {});
  CHECK(a.culprit == 2);

  // An error file stamped after the end (another process wrote it later) is
  // not when the rank failed.
  AttemptRecord late;
  late.workers = {worker(0, exited(1), 200), worker(1, exited(1), 250)};
  late.workers[0].error_file_unix_ns = kStartNs + 400 * kMs;
  assign_roles(late, {});
  CHECK(late.culprit == 0);
  CHECK(failure_time(late.workers[0]) == kStartNs + 200 * kMs);
}

TEST_CASE("result: a culprit that flowrun's stop killed after its error file has the error file's cause",
          "[result]") {
  AttemptRecord a;
  a.outcome = Outcome::failed;
  a.workers = {worker(0, exited(1), 200), worker(1, signaled(15), 300)};
  a.workers[1].error_file_unix_ns = kStartNs + 100 * kMs;
  assign_roles(a, {});
  REQUIRE(a.culprit == 1);
  const std::string error_file =
      R"({"message": {"message": "ValueError: loss is NaN", "extraInfo": {"py_callstack": "Traceback (most )"
      R"(recent call last):\n  File \"t.py\", line 3, in <module>\nValueError: loss is NaN\n"}}})";
  const FailureFacts facts = classify_failure(a, false, error_file);
  CHECK(facts.cause == FailureCause::exception);
  REQUIRE(facts.exception);
  CHECK(facts.exception->type == "ValueError");
  // Without an error file written before its end, a signal is the cause.
  a.workers[1].error_file_unix_ns = 0;
  CHECK(classify_failure(a, false, error_file).cause == FailureCause::signal);

  a.workers[1].error_file_unix_ns = kStartNs + 100 * kMs;
  const std::string report = format_failure_report(parallel_step(a, Outcome::failed), error_file);
  CHECK(report.find(
            "flowrun: step 'train' failed: rank 1 was killed by signal 15 (SIGTERM) after 0.30 s (pid 4241), "
            "stopped while it ended: it had failed first, as its error file says\n") == 0);
}

TEST_CASE("result: a timeout or interrupt has no culprit", "[result]") {
  std::vector<int> stopped;
  AttemptRecord a = all_stopped(3, 500, &stopped);
  a.workers.push_back(worker(3, exited(0), 100));  // had finished before the stop
  a.workers[1].status = exited(0);                 // exits 0 on SIGTERM: still cut short
  a.culprit = 2;                                   // stale: reset
  assign_roles(a, stopped);
  CHECK_FALSE(a.culprit.has_value());
  CHECK(roles(a) == std::vector{Role::victim, Role::victim, Role::victim, Role::ok});
}

TEST_CASE("result: report of a failed parallel step", "[result]") {
  AttemptRecord a;
  for (int r = 0; r < 8; ++r) a.workers.push_back(worker(r, signaled(15), 900));
  a.workers[1] = worker(1, exited(3), 310);
  a.workers[1].stderr_tail = "loading data\rloaded   \n[rank1] step 3\nsomething went wrong\n";
  a.workers[5] = worker(5, signaled(6), 700);
  assign_roles(a, {0, 2, 3, 4, 6, 7});
  StepRecord s = parallel_step(a, Outcome::failed);
  s.exit_code = 3;
  s.notes = {"stopped 1 process left behind by the step's workers: 812 (sleep)"};

  CHECK(format_failure_report(s, kTorchErrorFile) ==
        "flowrun: step 'train' failed: rank 1 exited with code 3 after 0.31 s (pid 4241)\n"
        "flowrun:   last 3 lines of its stderr (" +
            kDir +
            "/rank1/stderr.log):\n"
            "    loaded   \n"
            "    [rank1] step 3\n"
            "    something went wrong\n"
            "flowrun:   traceback from its error file (" +
            kDir +
            "/rank1/error.json):\n"
            "    Traceback (most recent call last):\n"
            "      File \"train.py\", line 6, in <module>\n"
            "        main()\n"
            "      File \"train.py\", line 4, in main\n"
            "    ValueError: bo\xC3\xA9m\n"
            "flowrun:   stopped by flowrun: ranks 0, 2-4, 6, 7\n"
            "flowrun:   failed after it: rank 5 (SIGABRT)\n"
            "flowrun:   stopped 1 process left behind by the step's workers: 812 (sleep)\n"
            "flowrun:   logs: " +
            kDir + "\n");

  // Without an error file (or with one that is not torch's) there is no traceback section.
  std::string plain = format_failure_report(s, "");
  CHECK(plain.find("error file") == std::string::npos);
  CHECK(format_failure_report(s, "not json") == plain);
}

TEST_CASE("result: the error file's traceback is not repeated when stderr shows it", "[result]") {
  AttemptRecord a;
  a.workers = {worker(0, signaled(15), 2000), worker(1, exited(1), 1500)};
  a.workers[1].stderr_tail =
      "Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\nValueError: x\n";
  assign_roles(a, {0});
  StepRecord s = parallel_step(a, Outcome::failed);
  const std::string error_file =
      R"({"message": {"message": "ValueError: x", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\nValueError: x\n", "timestamp": "1"}}})";
  CHECK(format_failure_report(s, error_file) ==
        "flowrun: step 'train' failed: rank 1 exited with code 1 after 1.50 s (pid 4241)\n"
        "flowrun:   last 3 lines of its stderr (" +
            kDir +
            "/rank1/stderr.log):\n"
            "    Traceback (most recent call last):\n"
            "      File \"t.py\", line 1, in <module>\n"
            "    ValueError: x\n"
            "flowrun:   stopped by flowrun: rank 0\n"
            "flowrun:   logs: " +
            kDir + "\n");
}

TEST_CASE("result: failures after the culprit are grouped by how they ended", "[result]") {
  AttemptRecord a;
  a.workers = {worker(0, exited(0), 50),        worker(1, signaled(11), 12'000),
               worker(2, signaled(15), 13'000), worker(3, signaled(15), 13'000),
               worker(4, signaled(15), 13'000), worker(5, signaled(6), 12'500),
               worker(6, exited(1), 12'600),    worker(7, exited(1), 12'700)};
  assign_roles(a, {2, 3, 4});
  StepRecord s = parallel_step(a, Outcome::failed);
  CHECK(format_failure_report(s, "") ==
        "flowrun: step 'train' failed: rank 1 was killed by signal 11 (SIGSEGV) after 12 s (pid 4241)\n"
        "flowrun:   its stderr was empty (" +
            kDir +
            "/rank1/stderr.log)\n"
            "flowrun:   stopped by flowrun: ranks 2-4\n"
            "flowrun:   failed after it: rank 5 (SIGABRT), ranks 6, 7 (exit code 1)\n"
            "flowrun:   had already succeeded: rank 0\n"
            "flowrun:   logs: " +
            kDir + "\n");
}

TEST_CASE(
    "result: each failure after the culprit shows its error file's traceback, else its last stderr line",
    "[result]") {
  AttemptRecord a;
  a.workers = {worker(0, signaled(15), 2000), worker(1, exited(1), 1500), worker(2, exited(1), 1510),
               worker(3, signaled(11), 1520), worker(4, exited(3), 1530)};
  a.workers[1].stderr_tail = "ModuleNotFoundError: No module named 'x'\n";
  a.workers[2].stderr_tail = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'x'\n";
  a.workers[3].stderr_tail = "Fatal Python error: Segmentation fault\n\n";
  assign_roles(a, {0});
  StepRecord s = parallel_step(a, Outcome::failed);
  const std::string error_file =
      R"({"message": {"message": "ModuleNotFoundError: x", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\nModuleNotFoundError: No module named 'x'\n", "timestamp": "1"}}})";
  // By index: rank 2's error file; rank 4 (nothing on stderr) has none.
  const std::vector<std::string> texts = {"", "", error_file, "not json", ""};
  CHECK(format_failure_report(s, "", texts) ==
        "flowrun: step 'train' failed: rank 1 exited with code 1 after 1.50 s (pid 4241)\n"
        "flowrun:   last line of its stderr (" +
            kDir +
            "/rank1/stderr.log):\n"
            "    ModuleNotFoundError: No module named 'x'\n"
            "flowrun:   the Python rank 1 ran has no module 'x': choose the Python that has it with --python "
            "PY "
            "(flowrun run, flowrun SPEC) or python: PY in the spec\n"
            "flowrun:   stopped by flowrun: rank 0\n"
            "flowrun:   failed after it: rank 2 (exit code 1), rank 3 (SIGSEGV), rank 4 (exit code 3)\n"
            "flowrun:   rank 2 exited with code 1 after 1.51 s (pid 4242); traceback from its error file (" +
            kDir +
            "/rank2/error.json):\n"
            "    Traceback (most recent call last):\n"
            "      File \"t.py\", line 1, in <module>\n"
            "    ModuleNotFoundError: No module named 'x'\n"
            "flowrun:   rank 3 was killed by signal 11 (SIGSEGV) after 1.52 s (pid 4243); last line of its "
            "stderr (" +
            kDir +
            "/rank3/stderr.log):\n"
            "    Fatal Python error: Segmentation fault\n"
            "flowrun:   logs: " +
            kDir + "\n");
}

TEST_CASE("result: a SIGKILL flowrun did not send points at the OOM killer", "[result]") {
  AttemptRecord a;
  a.workers = {worker(0, signaled(9), 65'000), worker(1, signaled(15), 66'000)};
  a.workers[0].peak_rss_kib = 31 * 1024 * 1024;
  a.workers[0].stderr_tail = "epoch 1\n";
  assign_roles(a, {1});
  StepRecord s = parallel_step(a, Outcome::failed);
  CHECK(format_failure_report(s, "") ==
        "flowrun: step 'train' failed: rank 0 was killed by signal 9 (SIGKILL) after 65 s (pid 4240)\n"
        "flowrun:   flowrun did not send that SIGKILL; it often comes from the kernel's out-of-memory killer "
        "(peak memory: 31 GiB)\n"
        "flowrun:   last line of its stderr (" +
            kDir +
            "/rank0/stderr.log):\n"
            "    epoch 1\n"
            "flowrun:   stopped by flowrun: rank 1\n"
            "flowrun:   logs: " +
            kDir + "\n");
}

TEST_CASE("result: report of a worker that could not start", "[result]") {
  AttemptRecord a;
  a.workers = {worker(0, {ExitStatus::Kind::spawn_failed, 2, "python4: No such file or directory"}, 1),
               worker(1, signaled(15), 20)};
  a.workers[0].pid = 0;
  assign_roles(a, {1});
  StepRecord s = parallel_step(a, Outcome::failed);
  s.exit_code = 127;
  CHECK(format_failure_report(s, "") ==
        "flowrun: step 'train' failed: rank 0 could not start: python4: No such file or directory\n"
        "flowrun:   stopped by flowrun: rank 1\n"
        "flowrun:   logs: " +
            kDir + "\n");
}

TEST_CASE("result: report after restarts names each earlier failure", "[result]") {
  StepRecord s;
  s.step = "train";
  s.parallel = true;
  s.outcome = Outcome::failed;
  for (int attempt = 0; attempt < 3; ++attempt) {
    AttemptRecord a;
    a.restart_count = attempt;
    a.outcome = Outcome::failed;
    a.workers = {worker(0, signaled(15), 900), worker(1, exited(2 + attempt), 500)};
    assign_roles(a, {0});
    s.attempts.push_back(a);
  }
  CHECK(format_failure_report(s, "") ==
        "flowrun: step 'train' failed after 2 restarts: rank 1 exited with code 4 after 0.50 s (pid 4241)\n"
        "flowrun:   its stderr was empty (" +
            kDir +
            "/rank1/stderr.log)\n"
            "flowrun:   stopped by flowrun: rank 0\n"
            "flowrun:   before restart 1: rank 1 exited with code 2 after 0.50 s (pid 4241)\n"
            "flowrun:   before restart 2: rank 1 exited with code 3 after 0.50 s (pid 4241)\n"
            "flowrun:   logs: " +
            kDir + "\n");
  s.attempts.pop_back();
  CHECK(format_failure_report(s, "").substr(0, 41) == "flowrun: step 'train' failed after 1 rest");
}

TEST_CASE("result: report of a failed plain step", "[result]") {
  StepRecord s;
  s.step = "prepare";
  s.outcome = Outcome::failed;
  s.exit_code = 2;
  AttemptRecord a;
  WorkerRecord w = worker(0, exited(2), 310);
  w.rank = -1;
  w.pid = 42;
  w.stdout_log = "/w/.flowrun/runs/ID/prepare/stdout.log";
  w.stderr_log = "/w/.flowrun/runs/ID/prepare/stderr.log";
  w.error_file.clear();
  w.stderr_tail =
      "usage: prepare.py [-h] --out OUT\nprepare.py: error: the following arguments are required: --out\n";
  a.workers.push_back(w);
  assign_roles(a, {});
  s.attempts.push_back(a);
  CHECK(format_failure_report(s, "") ==
        "flowrun: step 'prepare' failed: exited with code 2 after 0.31 s (pid 42)\n"
        "flowrun:   last 2 lines of its stderr (/w/.flowrun/runs/ID/prepare/stderr.log):\n"
        "    usage: prepare.py [-h] --out OUT\n"
        "    prepare.py: error: the following arguments are required: --out\n"
        "flowrun:   logs: /w/.flowrun/runs/ID/prepare\n");
}

TEST_CASE("result: report of a timed out parallel step", "[result]") {
  std::vector<int> stopped;
  AttemptRecord a = all_stopped(8, 30'004, &stopped);
  a.workers[3].stderr_tail = "not shown\n";
  assign_roles(a, stopped);
  StepRecord s = parallel_step(a, Outcome::timed_out);
  s.timeout_s = 30;
  s.exit_code = 124;
  CHECK(format_failure_report(s, kTorchErrorFile) ==
        "flowrun: step 'train' timed out after 30s; flowrun stopped ranks 0-7\n"
        "flowrun:   logs: " +
            kDir + "\n");

  // The timeout is written as a spec writes it.
  for (auto [seconds, text] : {std::pair{90.0, "1m30s"},
                               {43200.0, "12h"},
                               {5400.0, "1h30m"},
                               {1.5, "1.5s"},
                               {0.25, "0.25s"},
                               {172801.0, "2d1s"}}) {
    s.timeout_s = seconds;
    std::string report = format_failure_report(s, "");
    CHECK(report.substr(0, report.find('\n')) ==
          "flowrun: step 'train' timed out after " + std::string(text) + "; flowrun stopped ranks 0-7");
  }
}

TEST_CASE("result: a timeout names the ranks that wrote nothing the longest, and stopped ones", "[result]") {
  std::vector<int> stopped;
  AttemptRecord a = all_stopped(5, 5'000, &stopped);
  for (auto [rank, silent] : {std::pair{0, 0.21}, {1, 4.92}, {2, 4.1}, {3, 3.8}, {4, 0.04}})
    a.workers[static_cast<std::size_t>(rank)].silent_s = silent;
  a.workers[1].suspended = true;
  a.workers[4].suspended = true;
  assign_roles(a, stopped);
  StepRecord s = parallel_step(a, Outcome::timed_out);
  s.timeout_s = 5;
  // Rank 3 (3.8 s) is more than a second short of rank 1's 4.9 s; rank 4 is
  // named because it is stopped.
  CHECK(format_failure_report(s, "") ==
        "flowrun: step 'train' timed out after 5s; flowrun stopped ranks 0-4\n"
        "flowrun:   rank 1 (stopped) wrote nothing for the last 4.9 s, rank 2 for the last 4.1 s, rank 4 "
        "(stopped) for the last 0.0 s\n"
        "flowrun:   logs: " +
            kDir + "\n");

  // Ranks that went silent together are one group; nodes are named.
  for (auto& w : s.attempts[0].workers) {
    w.silent_s = 95.2;
    w.suspended = false;
    w.node = w.rank < 3 ? "node1" : "node2";
  }
  CHECK(
      format_failure_report(s, "").find(
          "flowrun:   ranks 0-2 on node1 wrote nothing for the last 1m35s, ranks 3, 4 on node2 for the last "
          "1m35s\n") != std::string::npos);

  // A worker flowrun never had to stop names nothing.
  for (auto& w : s.attempts[0].workers) w.silent_s.reset();
  CHECK(format_failure_report(s, "").find("wrote nothing") == std::string::npos);
}

TEST_CASE("result: a stalled step names its stalled ranks, on the console and in the report", "[result]") {
  std::vector<int> stopped;
  AttemptRecord a = all_stopped(4, 5'100, &stopped);
  for (auto [rank, silent] : {std::pair{0, 0.3}, {1, 5.04}, {2, 5.01}, {3, 5.02}})
    a.workers[static_cast<std::size_t>(rank)].silent_s = silent;
  for (int rank : {1, 2, 3}) a.workers[static_cast<std::size_t>(rank)].stalled = true;
  a.workers[1].suspended = true;
  assign_roles(a, stopped);
  CHECK(format_stall_message("train", {a.workers[1], a.workers[2], a.workers[3]}, 5) ==
        "flowrun: step 'train' stalled: rank 1 (stopped) wrote nothing for 5.0 s, ranks 2, 3 for 5.0 s "
        "(stall_timeout: 5s); stopping the step");
  StepRecord s = parallel_step(a, Outcome::stalled);
  s.stall_timeout_s = 5;
  s.exit_code = 124;
  CHECK(format_failure_report(s, "") ==
        "flowrun: step 'train' stalled: rank 1 (stopped) wrote nothing for 5.0 s, ranks 2, 3 for 5.0 s "
        "(stall_timeout: 5s); flowrun stopped ranks 0-3\n"
        "flowrun:   logs: " +
            kDir + "\n");

  WorkerRecord remote = a.workers[3];
  remote.node = "node2";
  remote.silent_s = 1800.4;
  CHECK(format_stall_message("train", {remote}, 1800) ==
        "flowrun: step 'train' stalled: rank 3 on node2 wrote nothing for 30m (stall_timeout: 30m); stopping "
        "the step");
  WorkerRecord plain = a.workers[1];
  plain.rank = -1;
  CHECK(format_stall_message("prepare", {plain}, 2.5) ==
        "flowrun: step 'prepare' stalled: it (stopped) wrote nothing for 5.0 s (stall_timeout: 2.5s); "
        "stopping the "
        "step");

  auto doc = parse_json(format_results_json(s));
  REQUIRE(doc.has_value());
  CHECK(doc->at("outcome") == "stalled");
  CHECK(doc->at("stall_timeout_ms") == 5000);
  CHECK(doc->at("timeout_ms").is_null());
  const auto& ranks = doc->at("ranks");
  REQUIRE(ranks.size() == 4);
  CHECK(ranks[0].at("stalled") == false);
  CHECK(ranks[0].at("silent_ms") == 300);
  CHECK(ranks[1].at("stalled") == true);
  CHECK(ranks[1].at("suspended") == true);
  CHECK(ranks[1].at("silent_ms") == 5040);
  CHECK(ranks[2].at("suspended") == false);
}

TEST_CASE("result: a step flowrun stopped because it could not write a log says so", "[result]") {
  std::vector<int> stopped;
  AttemptRecord a = all_stopped(2, 700, &stopped);
  a.write_error = "cannot write rank 1's stdout.log in /r/train/rank1: No space left on device";
  assign_roles(a, stopped);
  StepRecord s = parallel_step(a, Outcome::failed);
  CHECK(format_failure_report(s, "") ==
        "flowrun: step 'train' failed: cannot write rank 1's stdout.log in /r/train/rank1: No space left on "
        "device\n"
        "flowrun:   stopped by flowrun: ranks 0, 1\n"
        "flowrun:   logs: " +
            kDir + "\n");
  // A worker that had failed first stays the culprit; the write error follows.
  s.attempts[0].workers[0].status = exited(2);
  assign_roles(s.attempts[0], {1});
  const std::string report = format_failure_report(s, "");
  CHECK(report.rfind("flowrun: step 'train' failed: rank 0 exited with code 2 after 0.70 s (pid 4240)\n",
                     0) == 0);
  CHECK(
      report.find(
          "flowrun:   also: cannot write rank 1's stdout.log in /r/train/rank1: No space left on device\n") !=
      std::string::npos);
}

TEST_CASE("result: report of an interrupted parallel step", "[result]") {
  std::vector<int> stopped;
  AttemptRecord a = all_stopped(4, 800, &stopped);
  a.workers.push_back(worker(4, exited(0), 200));
  assign_roles(a, stopped);
  StepRecord s = parallel_step(a, Outcome::interrupted);
  s.exit_code = 130;
  CHECK(format_failure_report(s, "") ==
        "flowrun: step 'train' was interrupted; flowrun stopped ranks 0-3\n"
        "flowrun:   had already succeeded: rank 4\n"
        "flowrun:   logs: " +
            kDir + "\n");
}

TEST_CASE("result: an interrupt after a worker failed on its own names that worker", "[result]") {
  AttemptRecord a;
  a.workers = {worker(0, signaled(2), 800), worker(1, exited(1), 600)};
  assign_roles(a, {0});
  StepRecord s = parallel_step(a, Outcome::interrupted);
  CHECK(format_failure_report(s, "") ==
        "flowrun: step 'train' was interrupted; flowrun stopped rank 0\n"
        "flowrun:   before that, rank 1 exited with code 1 after 0.60 s (pid 4241)\n"
        "flowrun:   logs: " +
            kDir + "\n");
}

TEST_CASE("result: report of a timed out or interrupted plain step", "[result]") {
  StepRecord s;
  s.step = "prepare";
  s.outcome = Outcome::timed_out;
  s.timeout_s = 90;
  AttemptRecord a;
  WorkerRecord w = worker(0, signaled(15), 90'000);
  w.rank = -1;
  w.pid = 42;
  w.stderr_log = "/w/.flowrun/runs/ID/prepare/stderr.log";
  w.stderr_tail = "downloading 10%\rdownloading 20%\r";
  a.workers.push_back(w);
  assign_roles(a, {0});
  s.attempts.push_back(a);
  CHECK(format_failure_report(s, "") ==
        "flowrun: step 'prepare' timed out after 1m30s; flowrun stopped it (pid 42)\n"
        "flowrun:   last line of its stderr (/w/.flowrun/runs/ID/prepare/stderr.log):\n"
        "    downloading 20%\n"
        "flowrun:   logs: /w/.flowrun/runs/ID/prepare\n");

  s.outcome = Outcome::interrupted;
  s.attempts[0].workers[0].stderr_tail.clear();
  CHECK(format_failure_report(s, "") ==
        "flowrun: step 'prepare' was interrupted; flowrun stopped it (pid 42)\n"
        "flowrun:   logs: /w/.flowrun/runs/ID/prepare\n");
}

TEST_CASE("result: no report for a step that succeeded", "[result]") {
  StepRecord s = parallel_step(AttemptRecord{}, Outcome::succeeded);
  CHECK(format_failure_report(s, "").empty());
}

TEST_CASE("result: results.json of a failed parallel step", "[result]") {
  AttemptRecord a;
  a.restart_count = 0;
  a.master_port = 29500;
  a.start_unix_ns = kStartNs - 5 * kMs;
  a.end_unix_ns = kStartNs + 1333 * kMs;
  a.workers = {worker(0, signaled(15), 1300), worker(1, exited(3), 310)};
  a.workers[0].peak_rss_kib = 2048;
  a.workers[0].silent_s = 1.2504;
  a.workers[0].suspended = true;
  a.workers[1].stderr_tail = "not in the JSON\n";
  a.workers[1].node = "node2";
  a.workers[1].nccl_trace = "/w/.flowrun/runs/demo-20261129-171053-4f1c2a/train/rank1/nccl_trace_rank_1";
  assign_roles(a, {0});
  StepRecord s = parallel_step(a, Outcome::failed);
  s.exit_code = 3;
  s.timeout_s = 1.5;
  s.notes = {"a \"quoted\" note"};
  const std::string worker0 = R"({
      "rank": 0,
      "local_rank": 0,
      "pid": 4240,
      "status": "signaled",
      "exit_code": null,
      "signal": "SIGTERM",
      "spawn_error": null,
      "shell_code": 143,
      "role": "victim",
      "teardown": "signaled",
      "start": "2026-11-29T17:10:53.123Z",
      "end": "2026-11-29T17:10:54.423Z",
      "duration_ms": 1300,
      "peak_rss_kib": 2048,
      "stdout_log": "/w/.flowrun/runs/demo-20261129-171053-4f1c2a/train/rank0/stdout.log",
      "stderr_log": "/w/.flowrun/runs/demo-20261129-171053-4f1c2a/train/rank0/stderr.log",
      "error_file": "/w/.flowrun/runs/demo-20261129-171053-4f1c2a/train/rank0/error.json",
      "error_file_time": null,
      "node": null,
      "silent_ms": 1250,
      "suspended": true,
      "stalled": false,
      "nccl_trace": null
    })";
  const std::string worker1 = R"({
      "rank": 1,
      "local_rank": 1,
      "pid": 4241,
      "status": "exited",
      "exit_code": 3,
      "signal": null,
      "spawn_error": null,
      "shell_code": 3,
      "role": "culprit",
      "teardown": null,
      "start": "2026-11-29T17:10:53.123Z",
      "end": "2026-11-29T17:10:53.433Z",
      "duration_ms": 310,
      "peak_rss_kib": 0,
      "stdout_log": "/w/.flowrun/runs/demo-20261129-171053-4f1c2a/train/rank1/stdout.log",
      "stderr_log": "/w/.flowrun/runs/demo-20261129-171053-4f1c2a/train/rank1/stderr.log",
      "error_file": "/w/.flowrun/runs/demo-20261129-171053-4f1c2a/train/rank1/error.json",
      "error_file_time": null,
      "node": "node2",
      "silent_ms": null,
      "suspended": false,
      "stalled": false,
      "nccl_trace": "/w/.flowrun/runs/demo-20261129-171053-4f1c2a/train/rank1/nccl_trace_rank_1"
    })";
  auto indent = [](std::string text) {
    for (std::size_t p = text.find('\n'); p != std::string::npos; p = text.find('\n', p + 1))
      text.insert(p + 1, "    ");
    return text;
  };
  const std::string expected = R"({
  "format": 1,
  "step": "train",
  "parallel": true,
  "outcome": "failed",
  "exit_code": 3,
  "timeout_ms": 1500,
  "stall_timeout_ms": null,
  "start": "2026-11-29T17:10:53.118Z",
  "end": "2026-11-29T17:10:54.456Z",
  "duration_ms": 1338,
  "restarts": 0,
  "culprit_rank": 1,
  "notes": [
    "a \"quoted\" note"
  ],
  "ranks": [
    )" + worker0 + ",\n    " + worker1 +
                               R"(
  ],
  "stacks": null,
  "wait_shares": null,
  "attempts": [
    {
      "restart_count": 0,
      "master_port": 29500,
      "outcome": "failed",
      "culprit_rank": 1,
      "start": "2026-11-29T17:10:53.118Z",
      "end": "2026-11-29T17:10:54.456Z",
      "duration_ms": 1338,
      "workers": [
        )" + indent(worker0) + ",\n        " +
                               indent(worker1) + R"(
      ],
      "stacks": null,
      "wait_shares": null,
      "cause": null,
      "exception": null,
      "restarted": false,
      "restart_reason": null,
      "replaced_nodes": [],
      "world_size": 2,
      "dropped_nodes": [],
      "added_nodes": []
    }
  ],
  "failure_class": "failure",
  "retry_may_help": true,
  "retry_why": "rank 1 exited with code 3: one failure, not known to repeat, so a retry may tell; with restart: {max_restarts: 1} flowrun tries again itself, and classes a second identical failure as repeating",
  "continued_from": null,
  "node_checks": [],
  "excluded_nodes": []
}
)";
  CHECK(format_results_json(s) == expected);

  // Where the live ranks were when flowrun stopped them.
  s.attempts.back().stacks = StackReport{
      "py-spy", {{{0, 2}, "all_reduce (train.py:88)", ""}, {{3}, "", "py-spy did not finish within 3 s"}}, 3};
  const std::string with = format_results_json(s);
  CHECK(with.find(R"J("stacks": {
    "source": "py-spy",
    "groups": [
      {
        "ranks": [
          0,
          2
        ],
        "where": "all_reduce (train.py:88)",
        "missing": null
      },
      {
        "ranks": [
          3
        ],
        "where": null,
        "missing": "py-spy did not finish within 3 s"
      }
    ]
  },)J") != std::string::npos);
}

TEST_CASE("result: results.json of a plain step, a spawn failure and restarts", "[result]") {
  StepRecord s;
  s.step = "prepare";
  s.outcome = Outcome::failed;
  s.exit_code = 127;
  AttemptRecord a;
  WorkerRecord w;
  w.status = {ExitStatus::Kind::spawn_failed, 2, "python4: No such file or directory"};
  a.workers.push_back(w);
  assign_roles(a, {});
  a.outcome = Outcome::failed;
  s.attempts = {a, a};
  s.attempts[1].restart_count = 1;

  auto doc = parse_json(format_results_json(s));
  REQUIRE(doc.has_value());
  CHECK(doc->at("parallel") == false);
  CHECK(doc->at("timeout_ms").is_null());
  CHECK(doc->at("start").is_null());
  CHECK(doc->at("duration_ms").is_null());
  CHECK(doc->at("restarts") == 1);
  CHECK(doc->at("continued_from").is_null());
  s.continued_from = StepRecord::ContinuedFrom{"flow-a", "/w/.flowrun/runs/flow-a", 2, {}};
  const auto continued = parse_json(format_results_json(s));
  REQUIRE(continued.has_value());
  CHECK(continued->at("continued_from") ==
        Json{{"run_id", "flow-a"}, {"run_dir", "/w/.flowrun/runs/flow-a"}, {"restart_count", 2}});
  CHECK(doc->at("culprit_rank").is_null());
  CHECK(doc->at("notes").empty());
  REQUIRE(doc->at("attempts").size() == 2);
  CHECK(doc->at("attempts")[1].at("restart_count") == 1);
  REQUIRE(doc->at("ranks").size() == 1);
  const Json& r = doc->at("ranks")[0];
  CHECK(r.at("rank").is_null());
  CHECK(r.at("pid").is_null());
  CHECK(r.at("status") == "spawn_failed");
  CHECK(r.at("exit_code").is_null());
  CHECK(r.at("signal").is_null());
  CHECK(r.at("spawn_error") == "python4: No such file or directory");
  CHECK(r.at("shell_code") == 127);
  CHECK(r.at("role") == "culprit");
  CHECK(r.at("end").is_null());
  CHECK(r.at("stdout_log").is_null());
  CHECK(r.at("error_file").is_null());

  StepRecord empty;
  empty.step = "x";
  auto none = parse_json(format_results_json(empty));
  REQUIRE(none.has_value());
  CHECK(none->at("ranks").empty());
  CHECK(none->at("restarts") == 0);
}

TEST_CASE("result: error files from torch's @record", "[result]") {
  CHECK(parse_error_file(kTorchErrorFile) ==
        "Traceback (most recent call last):\n  File \"train.py\", line 6, in <module>\n    main()\n"
        "  File \"train.py\", line 4, in main\nValueError: bo\xC3\xA9m\n");
  // The agent's dump_error_file adds an errorCode; the traceback is still there.
  CHECK(parse_error_file(R"({"message": {"message": "M", "extraInfo": {"py_callstack": "T", "timestamp": "1"},
                              "errorCode": 9}})") == "T");
  // No (or an empty) callstack: the message.
  CHECK(
      parse_error_file(R"({"message": {"message": "ValueError: boom", "extraInfo": {"timestamp": "1"}}})") ==
      "ValueError: boom");
  CHECK(parse_error_file(R"({"message": {"message": "M", "extraInfo": {"py_callstack": ""}}})") == "M");
  CHECK(parse_error_file(R"({"message": {"message": "M", "extraInfo": "odd"}})") == "M");
  // The older shape: a plain string message.
  CHECK(parse_error_file(R"({"message": "Signal 6 (SIGABRT) received", "timestamp": 1700000000})") ==
        "Signal 6 (SIGABRT) received");

  CHECK_FALSE(parse_error_file("").has_value());
  CHECK_FALSE(parse_error_file("Traceback (most recent call last):").has_value());
  CHECK_FALSE(parse_error_file(R"({"message": {"message": "M")").has_value());
  CHECK_FALSE(parse_error_file(R"({"msg": "x"})").has_value());
  CHECK_FALSE(parse_error_file(R"({"message": ""})").has_value());
  CHECK_FALSE(parse_error_file(R"({"message": 42})").has_value());
  CHECK_FALSE(parse_error_file(R"({"message": {"extraInfo": {"timestamp": "1"}}})").has_value());
  CHECK_FALSE(parse_error_file(R"(["message"])").has_value());
  CHECK_FALSE(parse_error_file(R"("message")").has_value());
}

TEST_CASE("result: a rank on another node is named with its node, and a lost node's ranks say how",
          "[result]") {
  AttemptRecord a;
  a.start_unix_ns = kStartNs;
  a.end_unix_ns = kStartNs + 900 * kMs;
  a.workers = {worker(0, signaled(15), 800), worker(1, exited(0), 300)};
  a.workers[0].node = "node1";
  a.workers[1].node = "node2";
  a.workers[1].status.kind = ExitStatus::Kind::lost;
  a.workers[1].status.spawn_error = "its agent's connection closed";
  assign_roles(a, {0});
  REQUIRE(a.culprit == 1);
  StepRecord s = parallel_step(a, Outcome::failed);
  const std::string report = format_failure_report(s, "");
  CHECK(report.rfind("flowrun: step 'train' failed: rank 1 on node2 was lost with its node: its agent's "
                     "connection closed\n",
                     0) == 0);
  CHECK(a.workers[1].status.shell_code() == 1);
  const std::string json = format_results_json(s);
  CHECK(json.find(R"("status": "lost")") != std::string::npos);
  CHECK(json.find(R"("spawn_error": "its agent's connection closed")") != std::string::npos);
}

TEST_CASE("result: a missing Python module names the Python that ran and how to choose another", "[result]") {
  const std::string tail =
      "Traceback (most recent call last):\n"
      "  File \"train.py\", line 1, in <module>\n"
      "    import torch\n"
      "ModuleNotFoundError: No module named 'torch'\n";
  const std::string choose =
      ": choose the Python that has it with --python PY (flowrun run, flowrun SPEC) or python: PY in the "
      "spec";
  WorkerRecord w = worker(1, exited(1), 300);
  w.command = "python3";
  w.program = "/root/.pyenv/shims/python3";
  w.path_python = "/root/.pyenv/shims/python3";
  SECTION("a Python found on the rank's PATH") {
    CHECK(missing_module_hint(tail, w) ==
          "flowrun:   rank 1 ran /root/.pyenv/shims/python3 (python3 as found on "
          "its PATH), which has no module 'torch'" +
              choose);
  }
  SECTION("a Python named by its path, on another node; the last error counts") {
    w.command = w.program = "/opt/venv/bin/python3.11";
    w.node = "node2";
    CHECK(missing_module_hint("ModuleNotFoundError: No module named 'numpy'\n" + tail +
                                  "ModuleNotFoundError: No module named 'torch.distributed'\n",
                              w) ==
          "flowrun:   rank 1 on node2 ran /opt/venv/bin/python3.11, which has no module 'torch.distributed'" +
              choose);
  }
  SECTION("a shell script: the python3 its PATH finds") {
    w.command = w.program = "/bin/sh";
    CHECK(missing_module_hint(tail, w) ==
          "flowrun:   rank 1 ran /bin/sh, not Python itself; python3 on its PATH is "
          "/root/.pyenv/shims/python3: "
          "if that is the Python without module 'torch', write the full path of the one that has it in the "
          "step's run: (--python and python: replace only a run that starts with python or python3)");
    w.path_python.clear();
    CHECK(missing_module_hint(tail, w) ==
          "flowrun:   rank 1 ran /bin/sh, not Python itself; its PATH has no python3: write the full path of "
          "the Python that has module 'torch' in the step's run:");
  }
  SECTION("a plain step's process is 'it'; an unknown program is not named") {
    w.rank = -1;
    w.program.clear();
    CHECK(missing_module_hint(tail, w) == "flowrun:   the Python it ran has no module 'torch'" + choose);
  }
  SECTION("no such error, or a malformed one: no hint") {
    CHECK_FALSE(missing_module_hint("ValueError: boom\n", w));
    CHECK_FALSE(missing_module_hint("ModuleNotFoundError: No module named 'torch", w));
    CHECK_FALSE(missing_module_hint("ModuleNotFoundError: No module named ''", w));
    CHECK_FALSE(missing_module_hint("ModuleNotFoundError: No module named 'a b'", w));
  }
  SECTION("the report shows it after the culprit's stderr, from the tail or the error file") {
    AttemptRecord a;
    a.workers = {worker(0, signaled(15), 400), w};
    a.workers[1].stderr_tail = tail;
    assign_roles(a, {0});
    StepRecord s = parallel_step(a, Outcome::failed);
    const std::string report = format_failure_report(s, "");
    const std::string line = *missing_module_hint(tail, w) + "\n";
    CHECK(report.find("    ModuleNotFoundError: No module named 'torch'\n" + line +
                      "flowrun:   stopped by flowrun: rank 0\n") != std::string::npos);
    s.attempts.back().workers[1].stderr_tail = "exiting\n";
    const std::string file = R"({"message": "ModuleNotFoundError: No module named 'torch'", "timestamp": 1})";
    CHECK(format_failure_report(s, file).find(line) != std::string::npos);
    CHECK(format_failure_report(s, "").find("has no module") == std::string::npos);
  }
}

TEST_CASE("result: the report names the NCCL flight-recorder dumps and how fr_trace reads them", "[result]") {
  AttemptRecord a;
  a.workers = {worker(0, signaled(6), 900), worker(1, signaled(15), 1000), worker(2, signaled(15), 1000)};
  for (int r : {0, 1})
    a.workers[static_cast<std::size_t>(r)].nccl_trace =
        kDir + "/rank" + std::to_string(r) + "/nccl_trace_rank_" + std::to_string(r);
  CHECK(format_nccl_traces_line(a.workers) ==
        "flowrun:   NCCL flight recorder dumps of ranks 0, 1 (2 of 3): " + kDir +
            "/rank*/nccl_trace_rank_*; read them with: python -m torch.distributed.flight_recorder.fr_trace "
            "-j -p "
            "nccl_trace_rank_ " +
            kDir);
  a.workers[2].nccl_trace = kDir + "/rank2/nccl_trace_rank_2";
  assign_roles(a, {1, 2});
  StepRecord s = parallel_step(a, Outcome::failed);
  const std::string report = format_failure_report(s, "");
  // Every rank's dump: fr_trace matches the collectives across them (no -j).
  const std::string line = "flowrun:   NCCL flight recorder dumps of ranks 0-2: " + kDir +
                           "/rank*/nccl_trace_rank_*; read them with: python -m "
                           "torch.distributed.flight_recorder.fr_trace -p nccl_trace_rank_ " +
                           kDir + "\n";
  CHECK(report.find(line) != std::string::npos);
  CHECK(report.find(line + "flowrun:   logs: " + kDir + "\n") != std::string::npos);

  // After restarts the last attempt's prefix picks its dumps; a path with a space is quoted.
  std::vector<WorkerRecord> later = {worker(0, exited(1), 10)};
  later[0].nccl_trace = "/w w/train/rank0/nccl_trace_attempt2_rank_0";
  CHECK(
      format_nccl_traces_line(later) ==
      "flowrun:   NCCL flight recorder dumps of rank 0: /w w/train/rank*/nccl_trace_attempt2_rank_*; read "
      "them "
      "with: python -m torch.distributed.flight_recorder.fr_trace -p nccl_trace_attempt2_rank_ '/w w/train'");
  CHECK_FALSE(format_nccl_traces_line({worker(0, exited(1), 10)}).has_value());
}

TEST_CASE("result: every node's verdict, each attempt's, and the nodes left out once each", "[result]") {
  AttemptRecord first;
  first.node_checks = {NodeVerdict{"gpu-a", 0, true, 0.012, {{"gpu_health", true, "8 GPUs healthy"}}},
                       NodeVerdict{"gpu-b", 1, false, 0.02, {{"gpu_health", false, "GPU 1 has 1 ..."}}}};
  AttemptRecord second;
  second.node_checks = {NodeVerdict{"gpu-b", 1, false, 0.5, {}}, NodeVerdict{"gpu-c", 1, true, 0.25, {}}};
  StepRecord s = parallel_step(first, Outcome::succeeded);
  s.attempts.push_back(second);
  const auto doc = parse_json(format_results_json(s));
  REQUIRE(doc.has_value());
  const Json& verdicts = doc->at("node_checks");
  REQUIRE(verdicts.size() == 4);
  CHECK(verdicts[1] ==
        Json{{"node", "gpu-b"},
             {"node_rank", 1},
             {"ok", false},
             {"check_s", 0.02},
             {"checks",
              Json::array({Json{{"name", "gpu_health"}, {"ok", false}, {"detail", "GPU 1 has 1 ..."}}})}});
  CHECK(verdicts[3].at("node") == "gpu-c");
  CHECK(doc->at("excluded_nodes") == Json::array({"gpu-b"}));
}
