// Tests of what `flowrun resume` decides and reads: which steps are reused
// (decide_resume, changed_parts, from parsed specs), run.json written and read
// back, a step taken into a new run directory (reuse_step, on real files under
// /tmp), finding a run by id or path, and the run lock.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flowrun/flow.h"

#include "testing.h"

using namespace flowrun;

namespace {

namespace fs = std::filesystem;

using testing::write_text;

Spec spec(const std::string& text) {
  SpecParse parsed = parse_spec(text, "flow.yaml", "/work/proj");
  INFO((parsed.diagnostics.empty() ? std::string() : parsed.diagnostics.front().to_string()));
  REQUIRE(parsed.spec.has_value());
  return std::move(*parsed.spec);
}

const char* kFlow = R"(steps:
  - name: prepare
    run: python3 prepare.py
  - name: train
    run: python3 train.py ${args}
    parallel: {gpus: 2}
    outputs: [model.pt]
  - name: evaluate
    join: train
    run: python3 evaluate.py ${steps.train.outputs}/model.pt
  - name: report
    needs: [prepare]
    run: echo done
)";

PriorStep succeeded() { return {"succeeded", "2026-11-29T17:10:53.123Z", "old", true, "succeeded"}; }

struct Asked {
  Spec now;
  Spec before;
  std::map<std::string, PriorStep> prior;
  std::optional<std::string> from;
  std::vector<std::string> args_now, args_before;

  Asked(const std::string& text_now, const std::string& text_before)
      : now(spec(text_now)), before(spec(text_before)) {
    for (const auto& step : before.steps) prior[step.name] = succeeded();
  }

  // "step: reused" or "step: why".
  std::vector<std::string> decide() const {
    ResumeQuestion q;
    q.now = &now;
    q.before = &before;
    q.run_id = "old";
    q.run_dir = "/runs/old";
    q.prior = prior;
    q.from = from;
    q.args_now = args_now;
    q.args_before = args_before;
    std::vector<std::string> out;
    for (const auto& d : decide_resume(q)) out.push_back(d.step + ": " + (d.reuse ? "reused" : d.why));
    return out;
  }
};

using Lines = std::vector<std::string>;

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("resume reuses the steps that succeeded and runs the rest", "[resume]") {
  Asked a(kFlow, kFlow);
  CHECK(a.decide() == Lines{"prepare: reused", "train: reused", "evaluate: reused", "report: reused"});

  a.prior["evaluate"] = {"failed", "", "old", false, ""};
  a.prior["report"] = {"", "", "", false, ""};
  CHECK(a.decide() == Lines{"prepare: reused", "train: reused", "evaluate: it failed in run old",
                            "report: it did not run in run old"});

  a.prior["train"] = {"timed_out", "", "old", false, ""};
  CHECK(a.decide() == Lines{"prepare: reused", "train: it timed out in run old",
                            "evaluate: it failed in run old", "report: it did not run in run old"});
  a.prior["evaluate"] = succeeded();
  a.prior["train"] = {"interrupted", "", "old", false, ""};
  CHECK(a.decide() == Lines{"prepare: reused", "train: it was interrupted in run old",
                            "evaluate: it needs 'train', which runs", "report: it did not run in run old"});
  a.prior["train"] = {"stalled", "", "old", false, ""};
  CHECK(a.decide()[1] == "train: it stalled in run old");
  a.prior["train"] = {"unreadable", "", "", true, ""};
  CHECK(a.decide()[1] == "train: its results.json in run old is unreadable");
  // flowrun was killed as it ran (SIGKILL): no results.json, "running" in run.json.
  a.prior["train"] = {"", "", "", false, "running"};
  CHECK(a.decide()[1] == "train: it did not finish in run old");
}

TEST_CASE("resume --from runs the step and every step that needs it", "[resume]") {
  Asked a(kFlow, kFlow);
  a.from = "prepare";
  // report needs prepare; train comes after prepare by default (needs the previous step).
  CHECK(a.decide() == Lines{"prepare: --from prepare", "train: it needs 'prepare', which runs",
                            "evaluate: it needs 'train', which runs",
                            "report: it needs 'prepare', which runs"});
  a.from = "train";
  CHECK(a.decide() == Lines{"prepare: reused", "train: --from train",
                            "evaluate: it needs 'train', which runs", "report: reused"});
}

TEST_CASE("resume runs a parallel step whose gathered outputs are gone", "[resume]") {
  Asked a(kFlow, kFlow);
  a.prior["train"].outputs = false;
  CHECK(a.decide() == Lines{"prepare: reused",
                            "train: its gathered outputs are gone from /runs/old/train/outputs",
                            "evaluate: it needs 'train', which runs", "report: reused"});
}

TEST_CASE("resume runs new steps and ignores removed ones", "[resume]") {
  const std::string now = std::string(kFlow) + "  - name: publish\n    run: echo publish\n";
  Asked a(now, kFlow);
  CHECK(a.decide().back() == "publish: it is new since run old");
  Asked b(kFlow, now);
  CHECK(b.decide() == Lines{"prepare: reused", "train: reused", "evaluate: reused", "report: reused"});
}

TEST_CASE("resume runs a step whose definition changed, and the steps that need it", "[resume]") {
  struct Edit {
    std::string from, to, part;
  };
  const std::vector<Edit> edits = {
      {"python3 train.py ${args}", "python3 train.py --lr 1 ${args}", "run"},
      {"    parallel: {gpus: 2}\n", "    parallel: {gpus: 2}\n    env: {SEED: '1'}\n", "env"},
      {"steps:\n", "env: {SEED: '1'}\nsteps:\n", "top-level env"},
      {"    parallel: {gpus: 2}\n", "    parallel: {gpus: 2}\n    workdir: sub\n", "workdir"},
      {"    parallel: {gpus: 2}\n", "    parallel: {gpus: 2}\n    needs: []\n", "needs"},
      {"{gpus: 2}", "{gpus: 3}", "parallel"},
      {"{gpus: 2}", "{gpus: [0, 1]}", "parallel"},
      {"{gpus: 2}", "{gpus: 2, procs_per_node: 1}", "parallel"},
      {"{gpus: 2}", "{gpus: 2, visible_devices: process}", "parallel"},
      {"[model.pt]", "[model.pt, log.txt]", "outputs"},
      {"[model.pt]\n", "[model.pt]\n    collect: all\n", "collect"},
  };
  for (const auto& edit : edits) {
    INFO(edit.to);
    Asked a(replace(kFlow, edit.from, edit.to), kFlow);
    const auto decided = a.decide();
    if (edit.part == "top-level env") {
      CHECK(decided[0] == "prepare: its top-level env changed since run old");
      continue;
    }
    CHECK(decided[0] == "prepare: reused");
    CHECK(decided[1] == "train: its " + edit.part + " changed since run old");
    CHECK(decided[2] == "evaluate: it needs 'train', which runs");
  }
  // Two parts at once.
  Asked two(replace(replace(kFlow, "{gpus: 2}", "{gpus: 4}"), "[model.pt]", "[m.pt]"), kFlow);
  CHECK(two.decide()[1] == "train: its parallel and outputs changed since run old");
}

TEST_CASE("resume does not count what cannot change a step's results as a change", "[resume]") {
  const std::vector<std::pair<std::string, std::string>> edits = {
      {"steps:\n", "# a comment\n\nsteps:\n"},                                      // lines moved
      {"{gpus: 2}", "{gpus: 2, max_restarts: 3}"},                                  // restarts
      {"{gpus: 2}", "{gpus: 2, max_restarts: 3, restart: {causes: signal}}"},       // the restart policy
      {"    parallel: {gpus: 2}\n", "    parallel: {gpus: 2}\n    timeout: 1h\n"},  // timeout
      {"    parallel: {gpus: 2}\n", "    parallel: {gpus: 2}\n    stall_timeout: 10m\n"},
      {"    parallel: {gpus: 2}\n", "    parallel: {gpus: 2}\n    logs: {console: [0]}\n"},
      {"steps:\n", "cluster: {engine: ssh, hosts: [a, b]}\nsteps:\n"},
      {"run: python3 prepare.py", "run: [python3, prepare.py]"},  // the same argv, written as a list
  };
  for (const auto& [from, to] : edits) {
    INFO(to);
    Asked a(replace(kFlow, from, to), kFlow);
    CHECK(a.decide() == Lines{"prepare: reused", "train: reused", "evaluate: reused", "report: reused"});
  }
}

TEST_CASE("resume compares ${args} only for the steps that use them", "[resume]") {
  Asked a(kFlow, kFlow);
  a.args_before = {"--lr", "0.1"};
  a.args_now = {"--lr", "0.1"};
  CHECK(a.decide()[1] == "train: reused");
  a.args_now = {"--lr", "0.2"};
  CHECK(a.decide() == Lines{"prepare: reused", "train: its ${args} changed since run old",
                            "evaluate: it needs 'train', which runs", "report: reused"});
  // In a shell script too.
  const std::string shell = replace(kFlow, "run: echo done", "shell: true\n    run: echo ${args} > x");
  Asked b(shell, shell);
  b.args_now = {"x"};
  CHECK(b.decide()[3] == "report: its ${args} changed since run old");
}

TEST_CASE("run.json is written in a fixed shape and read back", "[resume]") {
  RunRecord r;
  r.run_id = "flow-20261129-171053-3fa2c1";
  r.run_dir = "/w/.flowrun/runs/flow-20261129-171053-3fa2c1";
  r.flow = "flow";
  r.spec_file = "/w/flow.yaml";
  r.spec_dir = "/w";
  r.args = {"--lr", "0.1"};
  r.cpus = 2;
  r.host = "host-a";
  r.pid = 4242;
  r.start_unix_ns = 1795972253123000000;
  r.steps = {{"prepare", "succeeded"}, {"train", "running"}};
  CHECK(format_run_json(r) == R"({
  "format": 1,
  "run_id": "flow-20261129-171053-3fa2c1",
  "run_dir": "/w/.flowrun/runs/flow-20261129-171053-3fa2c1",
  "flow": "flow",
  "spec": "/w/flow.yaml",
  "spec_dir": "/w",
  "args": [
    "--lr",
    "0.1"
  ],
  "cpus": 2,
  "fake_gpus": null,
  "python": null,
  "host": "host-a",
  "pid": 4242,
  "state": "running",
  "exit_code": null,
  "start": "2026-11-29T17:10:53.123Z",
  "end": null,
  "steps": {
    "prepare": "succeeded",
    "train": "running"
  },
  "resumed_from": null,
  "error": null,
  "slurm": null,
  "gang": null,
  "attempts_started": {}
}
)");
  r.finished = true;
  r.exit_code = 3;
  r.end_unix_ns = 1795972263456000000;
  r.fake_gpus = 0;
  r.python = "/usr/bin/python3";
  r.spec_file.clear();
  r.resumed_from_id = "flow-x";
  r.resumed_from_dir = "/w/.flowrun/runs/flow-x";
  r.resumed_by = "requeue";
  r.slurm_job_id = "4242";
  r.slurm_restart_count = 1;
  r.attempts_started = {{"train", 3}};
  const std::string text = format_run_json(r);
  CHECK(text.find(R"(  "resumed_from": {
    "run_id": "flow-x",
    "run_dir": "/w/.flowrun/runs/flow-x",
    "by": "requeue"
  },
  "error": null,
  "slurm": {
    "job_id": "4242",
    "restart_count": 1
  },
  "gang": null,
  "attempts_started": {
    "train": 3
  }
})") != std::string::npos);
  CHECK(text.find("  \"spec\": null,\n") != std::string::npos);
  CHECK(text.find("  \"python\": \"/usr/bin/python3\",\n") != std::string::npos);
  const RunRecord back = parse_run_json(text, "run.json");
  CHECK(format_run_json(back) == text);
  r.error = "cannot create a pipe: Too many open files";
  const std::string failed = format_run_json(r);
  CHECK(failed.find("  \"error\": \"cannot create a pipe: Too many open files\",\n") != std::string::npos);
  CHECK(parse_run_json(failed, "run.json").error == r.error);
}

TEST_CASE("run.json of another format or shape is refused, naming the file", "[resume]") {
  auto refusal = [](const std::string& text) {
    try {
      parse_run_json(text, "/r/run.json");
    } catch (const Error& e) {
      CHECK(e.exit_code() == kExitUsage);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refusal(R"({"format": 2, "run_id": "x", "run_dir": "/r"})") ==
        "/r/run.json: written by a newer flowrun (run format 2; this flowrun reads format 1); resume it with "
        "the "
        "flowrun that ran it");
  CHECK(refusal(R"({"format": 0, "run_id": "x", "run_dir": "/r"})") ==
        "/r/run.json: written by an older flowrun (run format 0; this flowrun reads format 1); it cannot be "
        "resumed (run the spec again instead)");
  CHECK(
      refusal("{\"format\": 1,") ==
      "/r/run.json: not a run record (not a JSON object); it cannot be resumed (run the spec again instead)");
  CHECK(refusal(R"({"run_id": "x"})") ==
        "/r/run.json: not a run record (no \"format\"); it cannot be resumed (run the spec again instead)");
  CHECK(refusal(R"({"format": 1, "run_dir": "/r"})") ==
        "/r/run.json: not a run record (no \"run_id\" or \"run_dir\"); it cannot be resumed (run the spec "
        "again "
        "instead)");
  CHECK(refusal(R"({"format": 1, "run_id": "x", "run_dir": "/r", "args": [1]})") ==
        "/r/run.json: \"args\" holds something other than strings; it cannot be resumed (run the spec again "
        "instead)");
  CHECK(refusal(R"({"format": 1, "run_id": "x", "run_dir": "/r"})") == "accepted");
}

TEST_CASE("reuse_step copies results.json with a mark and hard-links the outputs", "[resume]") {
  testing::ScopedTempDir tmp{"resume"};
  const std::string old_dir = tmp.path() + "/runs/old";
  const std::string results =
      "{\n  \"format\": 1,\n  \"step\": \"train\",\n  \"end\": \"2026-11-29T17:10:53.123Z\"\n}\n";
  write_text(old_dir + "/train/results.json", results);
  write_text(old_dir + "/train/outputs/model.pt", "weights");
  write_text(old_dir + "/train/outputs/rank1/metrics.json", "{}");
  Spec s = spec(kFlow);
  ResumeFrom from{"old", old_dir, {"train"}, {}, false, {}};
  RunLayout layout{tmp.path() + "/runs/new"};

  CHECK(reuse_step(*s.find_step("train"), from, layout) ==
        "flowrun: step 'train' reused from run old (succeeded at 2026-11-29T17:10:53.123Z; 2 output files)");
  CHECK(testing::read_file(layout.run_dir + "/train/results.json") ==
        "{\n  \"format\": 1,\n  \"step\": \"train\",\n  \"end\": \"2026-11-29T17:10:53.123Z\",\n"
        "  \"reused_from\": {\n    \"run_id\": \"old\",\n    \"run_dir\": \"" +
            old_dir + "\"\n  }\n}\n");
  CHECK(testing::read_file(old_dir + "/train/results.json") == results);
  struct stat a {
  }, b{};
  REQUIRE(stat((old_dir + "/train/outputs/rank1/metrics.json").c_str(), &a) == 0);
  REQUIRE(stat((layout.run_dir + "/train/outputs/rank1/metrics.json").c_str(), &b) == 0);
  CHECK(a.st_ino == b.st_ino);
  CHECK(testing::read_file(layout.run_dir + "/train/outputs/model.pt") == "weights");

  // Taken again from the new run: the mark still names the run that ran it.
  ResumeFrom again{"new", layout.run_dir, {"train"}, {}, false, {}};
  RunLayout third{tmp.path() + "/runs/third"};
  CHECK(
      reuse_step(*s.find_step("train"), again, third) ==
      "flowrun: step 'train' reused from run new (succeeded at 2026-11-29T17:10:53.123Z in run old; 2 output "
      "files)");
  CHECK(testing::read_file(third.run_dir + "/train/results.json") ==
        testing::read_file(layout.run_dir + "/train/results.json"));

  // A plain step: results.json only.
  write_text(old_dir + "/prepare/results.json", "{\"end\": \"2026-11-29T17:10:50.000Z\"}");
  CHECK(reuse_step(*s.find_step("prepare"), from, layout) ==
        "flowrun: step 'prepare' reused from run old (succeeded at 2026-11-29T17:10:50.000Z)");
  CHECK(testing::read_file(layout.run_dir + "/prepare/results.json") ==
        "{\n  \"end\": \"2026-11-29T17:10:50.000Z\",\n  \"reused_from\": {\n    \"run_id\": \"old\",\n"
        "    \"run_dir\": \"" +
            old_dir + "\"\n  }\n}\n");
  CHECK_FALSE(fs::exists(layout.run_dir + "/prepare/outputs"));

  write_text(old_dir + "/report/results.json", "[]");
  CHECK_THROWS_WITH(reuse_step(*s.find_step("report"), from, layout),
                    old_dir + "/report/results.json: not a step's results (not a JSON object)");
}

TEST_CASE("read_prior_steps reads how each step ended", "[resume]") {
  testing::ScopedTempDir tmp{"resume"};
  RunRecord r;
  r.run_id = "old";
  r.run_dir = tmp.path();
  write_text(tmp.path() + "/a/results.json", R"({"outcome": "succeeded", "end": "E"})");
  write_text(tmp.path() + "/b/results.json", R"({"outcome": "failed"})");
  write_text(tmp.path() + "/c/results.json",
             R"({"outcome": "succeeded", "end": "F", "reused_from": {"run_id": "older"}})");
  fs::create_directories(tmp.path() + "/c/outputs");
  write_text(tmp.path() + "/d/results.json", "{\"outcome\": ");
  const auto prior = read_prior_steps(r, {"a", "b", "c", "d", "e"});
  auto show = [&](const std::string& name) {
    const PriorStep& p = prior.at(name);
    return p.outcome + "|" + p.end + "|" + p.ran_in + "|" + (p.outputs ? "outputs" : "-");
  };
  CHECK(show("a") == "succeeded|E|old|-");
  CHECK(show("b") == "failed||old|-");
  CHECK(show("c") == "succeeded|F|older|outputs");
  CHECK(show("d") == "unreadable|||-");
  CHECK(show("e") == "|||-");
  // A step flowrun was killed while it ran: no results.json, "running" in run.json.
  r.steps = {{"e", "running"}};
  CHECK(read_prior_steps(r, {"e"}).at("e").state == "running");
}

TEST_CASE("find_run_dir takes a path or looks a run id up here and above", "[resume]") {
  testing::ScopedTempDir tmp{"resume"};
  const std::string run = tmp.path() + "/proj/.flowrun/runs/flow-20261129-171053-3fa2c1";
  fs::create_directories(run);
  fs::create_directories(tmp.path() + "/proj/sub/deeper");
  CHECK(find_run_dir("flow-20261129-171053-3fa2c1", tmp.path() + "/proj") == run);
  CHECK(find_run_dir("flow-20261129-171053-3fa2c1", tmp.path() + "/proj/sub/deeper") == run);
  CHECK(find_run_dir(".flowrun/runs/flow-20261129-171053-3fa2c1/", tmp.path() + "/proj") == run);
  CHECK(find_run_dir(run, "/") == run);
  CHECK(find_run_dir("flow-20261129-171053-3fa2c1", tmp.path() + "/proj/.flowrun/runs") == run);
  CHECK_THROWS_WITH(
      find_run_dir("flow-20261129-171053-3fa2c2", tmp.path() + "/proj/sub"),
      "no run 'flow-20261129-171053-3fa2c2' in " + tmp.path() +
          "/proj/sub/.flowrun/runs nor in .flowrun/runs of a directory above it; did you mean "
          "'flow-20261129-171053-3fa2c1' (in " +
          tmp.path() +
          "/proj/.flowrun/runs)?\nGive the run directory instead (flowrun printed it: 'logs and "
          "results in DIR'): flowrun resume DIR");
  CHECK_THROWS_WITH(find_run_dir("x/y", tmp.path()), "no run directory " + tmp.path() + "/x/y");
}

TEST_CASE("a run is in progress while its lock is held", "[resume]") {
  testing::ScopedTempDir tmp{"resume"};
  const std::string dir = tmp.path() + "/runs/r1";
  CHECK_FALSE(run_in_progress(dir));
  {
    const RunLock lock = RunLock::create(dir, "r1", "host-a");
    CHECK(run_in_progress(dir));
  }
  CHECK(fs::exists(dir + "/run.lock"));
  CHECK_FALSE(run_in_progress(dir));
}

TEST_CASE("a run directory is created for one run, and its lock names the holder", "[resume]") {
  testing::ScopedTempDir tmp{"resume"};
  const std::string dir = tmp.path() + "/r1";
  const std::string host = "host-a";
  const std::string pid = std::to_string(getpid());
  {
    const RunLock lock = RunLock::create(dir, "r1", host);
    std::ifstream in(dir + "/run.lock");
    std::string line;
    std::getline(in, line);
    CHECK(line == pid + " " + host + " run r1");
    CHECK(fs::directory_iterator(dir)->path().filename() == "run.lock");  // no temporary file is left
    CHECK_THROWS_WITH(RunLock::create(dir, "r2", host),
                      "the run directory " + dir + " is in use (flowrun pid " + pid + " on " + host +
                          ", running run r1); choose another --run-id or --run-dir");
    CHECK_THROWS_WITH(RunLock::resume(dir, "r1", host), "run r1 is still in progress (flowrun pid " + pid +
                                                            " on " + host + "); resume it once it has ended");
  }
  // Ended, it is still another run's directory; an empty one made beforehand is taken.
  CHECK_THROWS_WITH(RunLock::create(dir, "r2", host),
                    "the run directory " + dir +
                        " already holds files (of another run?); choose a new --run-dir "
                        "or remove it");
  fs::create_directory(tmp.path() + "/empty");
  CHECK_NOTHROW(RunLock::create(tmp.path() + "/empty", "r3", host));
  write_text(tmp.path() + "/file", "x");
  CHECK_THROWS_WITH(RunLock::create(tmp.path() + "/file", "r4", host),
                    "the run directory " + tmp.path() +
                        "/file exists and is not a directory; choose another "
                        "--run-dir");
  {
    const RunLock resuming = RunLock::resume(dir, "r1", host);
    CHECK_THROWS_WITH(RunLock::resume(dir, "r1", host),
                      "run r1 is being resumed already (flowrun pid " + pid + " on " + host +
                          "); wait for that resume to end, then resume the run it made");
    CHECK_THROWS_WITH(RunLock::create(dir, "r5", host),
                      "the run directory " + dir + " is in use (flowrun pid " + pid + " on " + host +
                          ", resuming the run); choose another --run-id or --run-dir");
  }
  CHECK_NOTHROW(RunLock::resume(dir, "r1", host));
}

TEST_CASE("read_run_record says why a directory cannot be resumed", "[resume]") {
  testing::ScopedTempDir tmp{"resume"};
  auto refusal = [](const std::string& dir) {
    try {
      read_run_record(dir);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("read");
  };
  CHECK(refusal(tmp.path() + "/nope") == "no run directory " + tmp.path() + "/nope");
  CHECK(refusal(tmp.path()) == tmp.path() + " is not a flowrun run directory: it has no run.json");
  write_text(tmp.path() + "/spec.yaml", "steps: []\n");
  CHECK(refusal(tmp.path()) ==
        tmp.path() +
            " was written by an older flowrun, which did not record run.json; it cannot be "
            "resumed (run the spec again instead)");
  write_text(tmp.path() + "/run.json", R"({"format": 1, "run_id": "x", "run_dir": "/elsewhere"})");
  CHECK(refusal(tmp.path()) == "read");
  CHECK(read_run_record(tmp.path()).run_dir == tmp.path());
}
