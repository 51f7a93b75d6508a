// The step runner over a scripted worker group: restarts, kept attempts,
// attempt records, exit codes and what the join gets, with no process.
#include "flowrun/step_runner.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <unistd.h>

#include "testing.h"

using namespace flowrun;
namespace fs = std::filesystem;

namespace {

// flowrun's console, written to a file the test reads.
class CapturedConsole {
 public:
  explicit CapturedConsole(const std::string& dir) : path_(dir + "/console.txt") {
    fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    REQUIRE(fd_ >= 0);
  }
  ~CapturedConsole() { close(fd_); }
  CapturedConsole(const CapturedConsole&) = delete;
  CapturedConsole& operator=(const CapturedConsole&) = delete;
  Console console() const { return Console{fd_, fd_}; }
  std::string text() const { return testing::read_file(path_); }

 private:
  std::string path_;
  int fd_ = -1;
};

using testing::exited;

// An attempt of `codes.size()` ranks ending with these exit codes; the
// first non-zero is the culprit (the others were stopped).
AttemptResult attempt_of(const std::vector<int>& codes, Outcome outcome = Outcome::failed) {
  AttemptResult result;
  std::vector<int> stopped;
  bool failed = false;
  for (std::size_t i = 0; i < codes.size(); ++i) {
    WorkerRecord w;
    w.rank = static_cast<int>(i);
    w.node = "node" + std::to_string(i);
    w.status = exited(codes[i]);
    w.end_unix_ns = 1000 + static_cast<std::int64_t>(i);
    if (failed && codes[i] != 0) stopped.push_back(static_cast<int>(i));
    failed = failed || codes[i] != 0;
    result.record.workers.push_back(w);
  }
  result.record.outcome = failed ? outcome : Outcome::succeeded;
  assign_roles(result.record, stopped);
  return result;
}

// Returns scripted attempts in turn, as a group whose ranks ran would: each
// attempt leaves a stdout.log in every rank's directory, and the records
// name the files there.
class FakeWorkerGroup : public WorkerGroup {
 public:
  FakeWorkerGroup(const RunLayout& layout, std::string step, std::vector<AttemptResult> script)
      : layout_(layout), step_(std::move(step)), script_(std::move(script)) {}

  std::optional<AttemptResult> preflight() override {
    ++preflights;
    if (preflight_ok) return std::nullopt;
    AttemptResult refused;
    refused.started = false;
    refused.record.outcome = Outcome::failed;
    refused.errors.push_back("the preflight check of its GPUs failed");
    return refused;
  }

  AttemptResult run_attempt(const Attempt& attempt) override {
    REQUIRE(next_ < script_.size());
    asked.push_back(attempt);
    AttemptResult result = script_[next_++];
    CHECK(static_cast<bool>(attempt.keep_previous) == !attempt.first);
    if (!result.started) return result;  // nothing started: nothing is kept
    if (attempt.keep_previous) attempt.keep_previous();
    result.record.restart_count = attempt.restart;
    for (auto& w : result.record.workers) {
      const std::string dir = layout_.rank_dir(step_, w.rank);
      fs::create_directories(dir);
      std::ofstream(dir + "/stdout.log") << "attempt " << attempt.restart << " rank " << w.rank << "\n";
      w.stdout_log = dir + "/stdout.log";
      w.stderr_log = dir + "/stderr.log";
      w.error_file = dir + "/error.json";
      // torch's flight recorder, dumping as a collective times out.
      if (std::find(dumps.begin(), dumps.end(), std::pair{attempt.restart, w.rank}) != dumps.end())
        std::ofstream(layout_.nccl_trace(step_, w.rank, attempt.restart)) << "dump";
    }
    if (during) during(attempt.restart);
    if (next_ == interrupt_after) interrupt = SIGINT;
    return result;
  }

  void stop(Outcome why) override { stops.push_back(why); }
  void kill() override { ++kills; }
  int interrupt_signal() override { return interrupt; }
  std::string placement() const override { return placement_; }

  std::vector<Attempt> asked;  // every attempt the runner ran, in order
  std::vector<Outcome> stops;
  int kills = 0;
  int preflights = 0;
  bool preflight_ok = true;
  int interrupt = 0;
  std::size_t interrupt_after = 0;  // flowrun gets SIGINT as attempt N (1-based) ends; 0: never
  std::string placement_;
  std::vector<std::pair<int, int>> dumps;   // (attempt, rank): the rank leaves a flight-recorder dump
  std::function<void(int restart)> during;  // runs while attempt `restart` runs

 private:
  const RunLayout& layout_;
  std::string step_;
  std::vector<AttemptResult> script_;
  std::size_t next_ = 0;
};

struct RunnerFixture {
  testing::ScopedTempDir tmp{"step"};
  CapturedConsole out{tmp.path()};
  RunLayout layout{tmp.path() + "/run"};
  Step step;
  StepPlan plan;
  std::optional<double> time_left;

  explicit RunnerFixture(int world_size, int max_restarts) {
    step.name = "train";
    step.workdir = tmp.path();
    plan.step = "train";
    plan.world_size = world_size;
    plan.max_restarts = max_restarts;
    plan.nodes.resize(1);
    plan.nodes.front().procs = world_size;
    for (int r = 0; r < world_size; ++r) {
      RankPlan rank;
      rank.rank = r;
      rank.local_rank = r;
      plan.ranks.push_back(rank);
    }
  }

  StepRun run(FakeWorkerGroup& group, bool preflight = false, int carried = 0) {
    StepRunner runner(step, plan, layout, out.console(), preflight, [this] { return time_left; });
    if (carried > 0) runner.continue_count(carried);
    runner.on_attempts([this](int n) { started.push_back(n); });
    return runner.run(group);
  }
  std::vector<int> started;  // what the runner noted as each attempt started (or did not)
};

}  // namespace

TEST_CASE("rank 1 fails, then the group succeeds: one restart, the failed attempt kept", "[step_runner]") {
  RunnerFixture f(2, 2);
  FakeWorkerGroup group(f.layout, "train", {attempt_of({0, 3}), attempt_of({0, 0})});
  const StepRun run = f.run(group);

  REQUIRE(group.asked.size() == 2);
  CHECK(group.asked[0].restart == 0);
  CHECK(group.asked[1].restart == 1);
  REQUIRE(run.attempts.size() == 2);
  CHECK(run.attempts[0].restart_count == 0);
  CHECK(run.attempts[0].outcome == Outcome::failed);
  REQUIRE(run.attempts[0].culprit == 1);
  CHECK(run.attempts[1].outcome == Outcome::succeeded);
  CHECK(run.outcome == Outcome::succeeded);
  CHECK(run.exit_code == 0);
  CHECK(run.errors.empty());

  // The failed attempt's files moved to attempt0/, and its records say so.
  for (int r = 0; r < 2; ++r) {
    const std::string rank_dir = f.layout.rank_dir("train", r);
    const WorkerRecord& kept = run.attempts[0].workers[static_cast<std::size_t>(r)];
    CHECK(kept.stdout_log == rank_dir + "/attempt0/stdout.log");
    CHECK(kept.stderr_log == rank_dir + "/attempt0/stderr.log");
    CHECK(kept.error_file == rank_dir + "/attempt0/error.json");
    CHECK(testing::read_file(kept.stdout_log) == "attempt 0 rank " + std::to_string(r) + "\n");
    CHECK(run.attempts[1].workers[static_cast<std::size_t>(r)].stdout_log == rank_dir + "/stdout.log");
    CHECK(testing::read_file(rank_dir + "/stdout.log") == "attempt 1 rank " + std::to_string(r) + "\n");
  }
  CHECK(f.out.text() ==
        "flowrun: step 'train' failed (rank 1 exited with code 3); restarting all 2 workers (restart 1 of "
        "2): every failure restarts\n");
}

TEST_CASE("a restart of a large step keeps every rank's files, each record pointing at its own",
          "[step_runner]") {
  // Enough ranks that the keep runs on several threads, each keeping its
  // own ranks and writing only their records.
  const int ranks = 1100;
  RunnerFixture f(ranks, 1);
  std::vector<int> codes(static_cast<std::size_t>(ranks), 0);
  codes[7] = 3;
  FakeWorkerGroup group(f.layout, "train",
                        {attempt_of(codes), attempt_of(std::vector<int>(codes.size(), 0))});
  const StepRun run = f.run(group);
  REQUIRE(run.attempts.size() == 2);
  CHECK(run.outcome == Outcome::succeeded);
  int kept = 0;
  for (int r = 0; r < ranks; ++r) {
    const std::string rank_dir = f.layout.rank_dir("train", r);
    const WorkerRecord& w = run.attempts[0].workers[static_cast<std::size_t>(r)];
    kept += w.rank == r && w.stdout_log == rank_dir + "/attempt0/stdout.log" &&
            w.error_file == rank_dir + "/attempt0/error.json" &&
            testing::read_file(w.stdout_log) == "attempt 0 rank " + std::to_string(r) + "\n";
  }
  CHECK(kept == ranks);
}

TEST_CASE("forensics nccl: each attempt's records name its dumps, kept with the attempt", "[step_runner]") {
  RunnerFixture f(2, 1);
  FakeWorkerGroup group(f.layout, "train", {attempt_of({0, 3}), attempt_of({1, 0})});
  group.dumps = {{0, 0}, {0, 1}, {1, 0}};
  SECTION("without forensics: nccl, nothing is looked for") {
    const StepRun run = f.run(group);
    for (const auto& a : run.attempts)
      for (const auto& w : a.workers) CHECK(w.nccl_trace.empty());
  }
  SECTION("with it") {
    f.step.forensics.nccl = true;
    const StepRun run = f.run(group);
    REQUIRE(run.attempts.size() == 2);
    const std::string rank0 = f.layout.rank_dir("train", 0);
    const std::string rank1 = f.layout.rank_dir("train", 1);
    CHECK(run.attempts[0].workers[0].nccl_trace == rank0 + "/attempt0/nccl_trace_rank_0");
    CHECK(run.attempts[0].workers[1].nccl_trace == rank1 + "/attempt0/nccl_trace_rank_1");
    CHECK(testing::read_file(rank1 + "/attempt0/nccl_trace_rank_1") == "dump");
    CHECK(run.attempts[1].workers[0].nccl_trace == rank0 + "/nccl_trace_attempt1_rank_0");
    CHECK(run.attempts[1].workers[1].nccl_trace.empty());
    CHECK_FALSE(fs::exists(rank0 + "/nccl_trace_rank_0"));
  }
}

TEST_CASE("restarts run out: the last failure decides the exit code", "[step_runner]") {
  RunnerFixture f(2, 1);
  FakeWorkerGroup group(f.layout, "train", {attempt_of({0, 3}), attempt_of({7, 0})});
  const StepRun run = f.run(group);

  CHECK(group.asked.size() == 2);
  REQUIRE(run.attempts.size() == 2);
  CHECK(run.outcome == Outcome::failed);
  CHECK(run.exit_code == 7);
  CHECK(run.attempts[0].workers[1].stdout_log == f.layout.rank_dir("train", 1) + "/attempt0/stdout.log");
  CHECK(f.out.text() ==
        "flowrun: step 'train' failed (rank 1 exited with code 3); restarting all 2 workers (restart 1 of "
        "1): every failure restarts\n");
}

TEST_CASE("no restart allowed: one attempt", "[step_runner]") {
  RunnerFixture f(2, 0);
  FakeWorkerGroup group(f.layout, "train", {attempt_of({0, 3})});
  const StepRun run = f.run(group);
  CHECK(group.asked.size() == 1);
  CHECK(run.exit_code == 3);
  CHECK(f.out.text().empty());
}

TEST_CASE("a restart whose ranks never start: the failed attempt decides", "[step_runner]") {
  RunnerFixture f(2, 2);
  AttemptResult never;
  never.started = false;
  never.record.outcome = Outcome::interrupted;
  never.errors.push_back("node node1 (node rank 1 of 2) lost: its agent's connection closed");
  FakeWorkerGroup group(f.layout, "train", {attempt_of({0, 3}), never});
  const StepRun run = f.run(group);
  CHECK(group.asked.size() == 2);
  REQUIRE(run.attempts.size() == 1);
  CHECK(run.outcome == Outcome::failed);
  CHECK(run.exit_code == 3);
  CHECK(run.errors == never.errors);
  // Nothing was kept: the files are where the attempt left them.
  CHECK(run.attempts[0].workers[1].stdout_log == f.layout.rank_dir("train", 1) + "/stdout.log");
  CHECK(testing::read_file(f.layout.rank_dir("train", 1) + "/stdout.log") == "attempt 0 rank 1\n");

  // A first attempt that never starts is the step's one attempt.
  RunnerFixture g(2, 2);
  FakeWorkerGroup group2(g.layout, "train", {never});
  const StepRun first = g.run(group2);
  REQUIRE(first.attempts.size() == 1);
  CHECK(first.attempts[0].workers.empty());
  CHECK(first.outcome == Outcome::interrupted);
}

TEST_CASE("a lost node gives up without restarting", "[step_runner]") {
  RunnerFixture f(2, 3);
  AttemptResult lost = attempt_of({0, 0});
  lost.record.workers[1].status = {ExitStatus::Kind::lost, 0, "its agent's connection closed"};
  lost.record.outcome = Outcome::failed;
  assign_roles(lost.record, {});
  lost.node_gone = true;
  lost.notes.push_back("node node1 (node rank 1 of 2) lost: its agent's connection closed");
  FakeWorkerGroup group(f.layout, "train", {lost, attempt_of({0, 0})});
  group.placement_ = "2 nodes";
  const StepRun run = f.run(group);

  CHECK(group.asked.size() == 1);
  REQUIRE(run.attempts.size() == 1);
  CHECK(run.outcome == Outcome::failed);
  CHECK(run.exit_code == 1);  // the lost rank's shell code: it never ended by itself
  CHECK(run.notes == lost.notes);
  CHECK(f.out.text().empty());
}

TEST_CASE("flowrun's own errors give up and fail the step", "[step_runner]") {
  RunnerFixture f(2, 3);
  AttemptResult failed = attempt_of({0, 3});
  failed.errors.push_back("node node1: cannot upload rank 1's error.json");
  FakeWorkerGroup group(f.layout, "train", {failed, attempt_of({0, 0})});
  StepRun run = f.run(group);
  CHECK(group.asked.size() == 1);
  CHECK(run.errors == failed.errors);
  CHECK(run.exit_code == 3);

  // Errors after ranks that all succeeded: the step fails with 1.
  RunnerFixture g(1, 3);
  AttemptResult done = attempt_of({0});
  done.errors.push_back("node node0: the upload ended unfinished");
  FakeWorkerGroup group2(g.layout, "train", {done});
  run = g.run(group2);
  CHECK(run.attempts.back().outcome == Outcome::failed);
  CHECK(run.outcome == Outcome::failed);
  CHECK(run.exit_code == 1);
}

TEST_CASE("an interrupt ends the attempts with 128+N", "[step_runner]") {
  RunnerFixture f(2, 3);
  SECTION("a failure as flowrun is interrupted is not restarted") {
    FakeWorkerGroup group(f.layout, "train", {attempt_of({0, 3}), attempt_of({0, 0})});
    group.interrupt_after = 1;
    const StepRun run = f.run(group);
    CHECK(group.asked.size() == 1);
    CHECK(run.exit_code == 3);
    CHECK(f.out.text().empty());
  }
  SECTION("an interrupted attempt") {
    FakeWorkerGroup group(f.layout, "train", {attempt_of({143, 143}, Outcome::interrupted)});
    group.interrupt_after = 1;
    const StepRun run = f.run(group);
    CHECK(group.asked.size() == 1);
    CHECK(run.outcome == Outcome::interrupted);
    CHECK(run.exit_code == 128 + SIGINT);
  }
}

TEST_CASE("a timeout, a stall or a write error is never restarted", "[step_runner]") {
  RunnerFixture f(2, 3);
  f.time_left = 12.5;
  SECTION("timeout") {
    FakeWorkerGroup group(f.layout, "train", {attempt_of({143, 143}, Outcome::timed_out)});
    const StepRun run = f.run(group);
    REQUIRE(group.asked.size() == 1);
    CHECK(group.asked[0].timeout_s == 12.5);
    CHECK(run.outcome == Outcome::timed_out);
    CHECK(run.exit_code == 124);
  }
  SECTION("stall") {
    FakeWorkerGroup group(f.layout, "train", {attempt_of({143, 143}, Outcome::stalled)});
    const StepRun run = f.run(group);
    CHECK(group.asked.size() == 1);
    CHECK(run.exit_code == 124);
  }
  SECTION("write error") {
    AttemptResult full = attempt_of({0, 0});
    full.record.outcome = Outcome::failed;
    full.record.write_error = "cannot write rank 0's stdout.log: No space left on device";
    FakeWorkerGroup group(f.layout, "train", {full, attempt_of({0, 0})});
    const StepRun run = f.run(group);
    CHECK(group.asked.size() == 1);
    CHECK(run.exit_code == 1);
  }
}

TEST_CASE("a refused preflight runs no attempt", "[step_runner]") {
  RunnerFixture f(2, 3);
  FakeWorkerGroup group(f.layout, "train", {attempt_of({0, 0})});
  group.preflight_ok = false;
  const StepRun run = f.run(group, /*preflight=*/true);
  CHECK(group.preflights == 1);
  CHECK(group.asked.empty());
  REQUIRE(run.attempts.size() == 1);
  CHECK(run.attempts[0].workers.empty());
  CHECK(run.outcome == Outcome::failed);
  CHECK(run.exit_code == 1);
  CHECK(run.errors == std::vector<std::string>{"the preflight check of its GPUs failed"});

  FakeWorkerGroup passing(f.layout, "train", {attempt_of({0, 0})});
  CHECK(f.run(passing, true).exit_code == 0);
  CHECK(passing.preflights == 1);
  FakeWorkerGroup without(f.layout, "train", {attempt_of({0, 0})});
  f.run(without, false);
  CHECK(without.preflights == 0);
}

// Rank 1 of 2 failed: `tail` is its stderr's last lines.
AttemptResult failed_with_tail(int code, const std::string& tail) {
  AttemptResult r = attempt_of({0, code});
  r.record.workers[1].stderr_tail = tail;
  return r;
}

constexpr const char* kBoom =
    "Traceback (most recent call last):\n  File \"/w/train.py\", line 3, in <module>\n    raise "
    "ValueError('boom')\nValueError: boom\n";

TEST_CASE("a policy's decisions reach the console, the records and the report", "[step_runner]") {
  SECTION("the same exception twice: no progress, no third attempt") {
    RunnerFixture f(2, 3);
    f.plan.restart.is_set = true;
    FakeWorkerGroup group(f.layout, "train", {failed_with_tail(1, kBoom), failed_with_tail(1, kBoom)});
    const StepRun run = f.run(group);
    REQUIRE(run.attempts.size() == 2);
    CHECK(run.attempts[0].cause == FailureCause::exception);
    CHECK(run.attempts[0].restarted);
    CHECK(run.attempts[0].restart_reason == "an exception restarts");
    CHECK_FALSE(run.attempts[1].restarted);
    CHECK(run.attempts[1].restart_reason ==
          "rank 1 on node1 raised ValueError: boom (train.py:3) again, as in attempt 0: no progress");
    CHECK(f.out.text() ==
          "flowrun: step 'train' failed (rank 1 exited with code 1); restarting all 2 workers (restart 1 of "
          "3): "
          "an exception restarts\n");
    StepRecord record;
    record.step = "train";
    record.parallel = true;
    record.outcome = run.outcome;
    record.attempts = run.attempts;
    CHECK_THAT(
        format_failure_report(record, ""),
        Catch::Contains("flowrun:   not restarting: rank 1 on node1 raised ValueError: boom (train.py:3) "
                        "again, as in attempt 0: no progress\n"));
    CHECK_THAT(
        format_results_json(record),
        Catch::Contains("\"cause\": \"exception\",\n      \"exception\": {\n        \"type\": "
                        "\"ValueError\",\n        \"message\": \"boom\",\n        \"file\": "
                        "\"/w/train.py\",\n        \"line\": 3\n      },\n      \"restarted\": false,"));
  }
  SECTION("the error file is read for the culprit") {
    RunnerFixture f(2, 1);
    f.plan.restart = RestartPolicy{};
    f.plan.restart.is_set = true;
    f.plan.restart.on_exception = false;
    FakeWorkerGroup group(f.layout, "train", {attempt_of({0, 1})});
    group.during = [&](int) {
      std::ofstream(f.layout.rank_dir("train", 1) + "/error.json")
          << R"({"message": {"message": "KeyError: 'lr'", "extraInfo": {"py_callstack": "", "timestamp": "1"}}})";
    };
    const StepRun run = f.run(group);
    REQUIRE(run.attempts.size() == 1);
    CHECK(run.attempts[0].cause == FailureCause::exception);
    CHECK(run.attempts[0].restart_reason ==
          "rank 1 on node1 raised KeyError: 'lr', and restart.causes leaves out exception");
  }
  SECTION("progress_file: a restart while the script writes it, none once it stops") {
    RunnerFixture f(2, 3);
    f.plan.restart.is_set = true;
    f.plan.restart.progress_file = f.tmp.path() + "/ckpt.pt";
    f.plan.restart.progress_file_text = "ckpt.pt";
    FakeWorkerGroup group(f.layout, "train",
                          {failed_with_tail(1, kBoom), failed_with_tail(1, kBoom), attempt_of({0, 0})});
    group.during = [&](int restart) {
      if (restart == 0) std::ofstream(f.tmp.path() + "/ckpt.pt") << "step 100";
    };
    const StepRun run = f.run(group);
    REQUIRE(run.attempts.size() == 2);  // the same exception, but the file changed: a restart
    CHECK(run.attempts[0].restart_reason == "an exception restarts");
    CHECK(run.attempts[1].restart_reason ==
          "progress_file ckpt.pt did not change during attempt 1: no progress");
    CHECK(run.exit_code == 1);
  }
}

TEST_CASE("a carried count: the first attempt continues it, max_restarts counts from there",
          "[step_runner]") {
  RunnerFixture f(2, 1);
  FakeWorkerGroup group(f.layout, "train", {attempt_of({0, 3}), attempt_of({5, 0})});
  const StepRun run = f.run(group, false, 2);

  REQUIRE(group.asked.size() == 2);
  CHECK(group.asked[0].restart == 2);
  CHECK(group.asked[0].first);
  CHECK(group.asked[1].restart == 3);
  CHECK_FALSE(group.asked[1].first);
  REQUIRE(run.attempts.size() == 2);
  CHECK(run.attempts[0].restart_count == 2);
  CHECK(run.attempts[1].restart_count == 3);
  CHECK(f.started == std::vector<int>{3, 4});
  // The first attempt here is kept under its own count.
  CHECK(run.attempts[0].workers[1].stdout_log == f.layout.rank_dir("train", 1) + "/attempt2/stdout.log");
  CHECK(run.exit_code == 5);
  CHECK(f.out.text() ==
        "flowrun: step 'train' failed (rank 1 exited with code 3); restarting all 2 workers (restart 3; 1 "
        "of 1 in this run): every failure restarts\n");
  CHECK(run.attempts[1].restart_reason == "its 1 restart (max_restarts) has run");
}

TEST_CASE("an attempt that never starts is noted as not started", "[step_runner]") {
  RunnerFixture f(2, 2);
  AttemptResult never;
  never.started = false;
  never.record.outcome = Outcome::failed;
  FakeWorkerGroup group(f.layout, "train", {attempt_of({0, 3}), never});
  f.run(group, false, 1);
  CHECK(f.started == std::vector<int>{2, 3, 2});
}

TEST_CASE("the restart message across nodes", "[step_runner]") {
  const AttemptResult failed = attempt_of({0, 3});
  CHECK(restart_message("train", failed.record, 4, "2 nodes", 1, 3, "an exit code restarts") ==
        "flowrun: step 'train' failed (rank 1 on node1 exited with code 3); restarting all 4 workers on 2 "
        "nodes (restart 1 of 3): an exit code restarts");
  AttemptRecord no_culprit;
  CHECK(restart_message("train", no_culprit, 1, "", 2, 2, "") ==
        "flowrun: step 'train' failed (a worker failed); restarting all 1 workers (restart 2 of 2)");
}

TEST_CASE("the join gathers every rank's output directory", "[step_runner]") {
  RunnerFixture f(3, 0);
  f.step.outputs = {"*.pt"};
  f.step.collect = Collect::all;
  const JoinRequest request = join_request(f.step, f.plan, f.layout, 42);
  CHECK(request.step == "train");
  CHECK(request.workdir == f.tmp.path());
  CHECK(request.outputs == std::vector<std::string>{"*.pt"});
  CHECK(request.collect == Collect::all);
  CHECK(request.world_size == 3);
  CHECK(request.ranks_on_node == 3);
  REQUIRE(request.rank_output_dirs.size() == 3);
  CHECK(request.rank_output_dirs[2] == f.layout.run_dir + "/train/rank2/out");
  CHECK(request.outputs_dir == f.layout.run_dir + "/train/outputs");
  CHECK(request.started == 42);
  CHECK(request.run_dir == f.layout.run_dir);
}
