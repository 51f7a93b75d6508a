// Tests of what `flowrun SPEC` in a requeued Slurm job decides: which earlier
// run of the job it resumes (pick_requeued_run, read_run_records), which
// restart counts it carries on and the console's line about it.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "flowrun/flow.h"

#include "testing.h"

using namespace flowrun;

namespace {

namespace fs = std::filesystem;

RunRecord run_of(const std::string& id, const std::string& job, int restart_count, std::int64_t start) {
  RunRecord r;
  r.run_id = id;
  r.run_dir = "/w/.flowrun/runs/" + id;
  r.spec_file = "/w/flow.yaml";
  r.slurm_job_id = job;
  r.slurm_restart_count = restart_count;
  r.start_unix_ns = start;
  return r;
}

RequeueQuestion asked(int restart_count = 1) {
  RequeueQuestion q;
  q.job_id = "4242";
  q.restart_count = restart_count;
  q.spec_file = "/w/flow.yaml";
  return q;
}

std::string picked(const RequeueQuestion& q, const std::vector<RunRecord>& runs) {
  const RunRecord* run = pick_requeued_run(q, runs);
  return run == nullptr ? "none" : run->run_id;
}

Spec requeued_spec(const std::string& text) {
  SpecParse parsed = parse_spec(text, "flow.yaml", "/w");
  REQUIRE(parsed.spec.has_value());
  return std::move(*parsed.spec);
}

const char* kRequeuedFlow = R"(steps:
  - name: prepare
    run: echo prepare
  - name: train
    run: python3 train.py
    parallel: {gpus: 2}
  - name: finetune
    run: python3 finetune.py
    parallel: {gpus: 2}
  - name: evaluate
    run: echo evaluate
)";

ResumeDecision reused(const std::string& step) { return {step, true, ""}; }
ResumeDecision runs(const std::string& step) { return {step, false, "why"}; }
PriorStep ended(const std::string& outcome, const std::string& state) {
  return {outcome, "", "a", false, state};
}

}  // namespace

TEST_CASE("pick_requeued_run: the same job, an earlier restart, the same spec and arguments", "[requeue]") {
  const RequeueQuestion q = asked();
  CHECK(picked(q, {}) == "none");
  CHECK(picked(q, {run_of("a", "4242", 0, 10)}) == "a");
  CHECK(picked(q, {run_of("a", "4243", 0, 10)}) == "none");  // another job
  CHECK(picked(q, {run_of("a", "4242", 1, 10)}) ==
        "none");                                         // this restart's own run (the script ran it before)
  CHECK(picked(q, {run_of("a", "", 0, 10)}) == "none");  // not in Slurm (or an older flowrun)
  RunRecord other_spec = run_of("a", "4242", 0, 10);
  other_spec.spec_file = "/w/eval.yaml";
  CHECK(picked(q, {other_spec}) == "none");
  RunRecord no_file = run_of("a", "4242", 0, 10);
  no_file.spec_file.clear();  // flowrun run: a spec of its own making
  CHECK(picked(q, {no_file}) == "none");
  RunRecord other_args = run_of("a", "4242", 0, 10);
  other_args.args = {"--lr", "0.2"};
  CHECK(picked(q, {other_args}) == "none");
  RequeueQuestion with_args = q;
  with_args.args = {"--lr", "0.2"};
  CHECK(picked(with_args, {run_of("a", "4242", 0, 10), other_args}) == "a");

  // Of several, the one that started last: the run of the last restart, or
  // the later of two runs of the spec in one restart.
  const std::vector<RunRecord> several = {run_of("first", "4242", 0, 10), run_of("second", "4242", 1, 20),
                                          run_of("third", "4242", 2, 30)};
  CHECK(picked(asked(3), several) == "third");
  CHECK(picked(asked(2), several) == "second");
  CHECK(picked(asked(1), {run_of("x", "4242", 0, 20), run_of("y", "4242", 0, 10)}) == "x");
}

TEST_CASE("read_run_records reads every run directory, passing over what is not one", "[requeue]") {
  testing::ScopedTempDir tmp("requeue");
  const std::string runs = tmp.path() + "/runs";
  RunRecord a = run_of("a", "4242", 0, 1795972253123000000);
  a.run_dir = runs + "/a";
  fs::create_directories(a.run_dir);
  std::ofstream(a.run_dir + "/run.json") << format_run_json(a);
  fs::create_directories(runs + "/damaged");
  std::ofstream(runs + "/damaged/run.json") << "{\"format\": ";
  fs::create_directories(runs + "/empty");
  fs::create_directories(runs + "/.hidden");
  std::ofstream(runs + "/.hidden/run.json") << format_run_json(a);
  fs::create_directory_symlink("a", runs + "/latest");
  const std::vector<RunRecord> records = read_run_records(runs);
  REQUIRE(records.size() == 1);
  CHECK(records[0].run_id == "a");
  CHECK(records[0].slurm_job_id == "4242");
  CHECK(read_run_records(tmp.path() + "/nowhere").empty());
}

TEST_CASE("carried_restart_counts: the steps that did not succeed go on counting", "[requeue]") {
  const Spec now = requeued_spec(kRequeuedFlow);
  RunRecord record = run_of("a", "4242", 0, 10);
  record.attempts_started = {{"train", 2}};
  const std::vector<ResumeDecision> decisions = {reused("prepare"), runs("train"), runs("finetune"),
                                                 runs("evaluate")};
  std::map<std::string, PriorStep> prior = {{"prepare", ended("succeeded", "succeeded")},
                                            {"train", ended("interrupted", "failed")},
                                            {"finetune", ended("", "pending")},
                                            {"evaluate", ended("", "pending")}};
  CHECK(carried_restart_counts(now, decisions, prior, record) == std::map<std::string, int>{{"train", 2}});

  // Killed (SIGKILL) as it ran: no results.json, the count from run.json.
  prior["train"] = ended("", "running");
  CHECK(carried_restart_counts(now, decisions, prior, record) == std::map<std::string, int>{{"train", 2}});
  // A step that succeeded and runs again for a change starts afresh.
  prior["train"] = ended("succeeded", "succeeded");
  CHECK(carried_restart_counts(now, decisions, prior, record).empty());
  // One that failed with its restarts used up is requeued with them counted.
  prior["train"] = ended("failed", "failed");
  CHECK(carried_restart_counts(now, decisions, prior, record) == std::map<std::string, int>{{"train", 2}});
  // A count a requeue carried to a step it never reached is carried again.
  record.attempts_started = {{"train", 2}, {"finetune", 1}};
  CHECK(carried_restart_counts(now, decisions, prior, record) ==
        std::map<std::string, int>{{"train", 2}, {"finetune", 1}});
  // A reused step carries nothing; nor a step without attempts.
  record.attempts_started = {{"prepare", 1}};
  CHECK(carried_restart_counts(now, decisions, prior, record).empty());
}

TEST_CASE("requeue_line: which run, why, what is kept and what restarts where", "[requeue]") {
  const RequeueQuestion q = asked();
  const RunRecord record = run_of("flow-a", "4242", 0, 10);
  std::map<std::string, PriorStep> prior = {{"prepare", ended("succeeded", "succeeded")},
                                            {"train", ended("interrupted", "failed")},
                                            {"finetune", ended("", "pending")},
                                            {"evaluate", ended("", "pending")}};
  const std::vector<ResumeDecision> decisions = {reused("prepare"), runs("train"), runs("finetune"),
                                                 runs("evaluate")};
  CHECK(requeue_line(q, record, decisions, prior, {{"train", 2}}) ==
        "flowrun: resuming run flow-a: Slurm job 4242 was requeued (SLURM_RESTART_COUNT=1); kept 'prepare'; "
        "'train' restarts at TORCHELASTIC_RESTART_COUNT=2");
  // Killed in a plain step; nothing kept.
  prior["prepare"] = ended("", "running");
  CHECK(requeue_line(asked(3), record, {runs("prepare"), runs("train"), runs("finetune"), runs("evaluate")},
                     prior, {{"train", 2}}) ==
        "flowrun: resuming run flow-a: Slurm job 4242 was requeued (SLURM_RESTART_COUNT=3); no step kept; "
        "'prepare' runs again; 'train' restarts at TORCHELASTIC_RESTART_COUNT=2");
  CHECK(requeue_line(
            q, record, {reused("prepare"), reused("train"), runs("finetune"), runs("evaluate")},
            {{"prepare", ended("succeeded", "succeeded")}, {"train", ended("succeeded", "succeeded")}}, {}) ==
        "flowrun: resuming run flow-a: Slurm job 4242 was requeued (SLURM_RESTART_COUNT=1); kept 'prepare', "
        "'train'");
}

TEST_CASE("pick_requeued_run: a gang's restarted head finds the run of the same gang", "[requeue]") {
  // Kubernetes numbers no attempts: any earlier run of the gang, the latest.
  RequeueQuestion q = asked();
  q.job_id = "uid-1";
  q.gang = true;
  RunRecord a = run_of("a", "", 0, 10);
  a.gang_id = "uid-1";
  RunRecord b = run_of("b", "", 0, 20);
  b.gang_id = "uid-1";
  RunRecord other = run_of("other", "", 0, 30);
  other.gang_id = "uid-2";
  RunRecord slurm = run_of("slurm", "uid-1", 0, 40);  // a Slurm job's id is no gang's
  CHECK(picked(q, {a, b, other, slurm}) == "b");
  CHECK(picked(q, {other, slurm}) == "none");
  RunRecord elsewhere = b;
  elsewhere.spec_file = "/w/other.yaml";
  CHECK(picked(q, {a, elsewhere}) == "a");

  // AWS Batch numbers them: an earlier attempt's run only, and where the
  // earlier run had none, it is taken.
  q.attempt = 2;
  a.gang_attempt = 1;
  b.gang_attempt = 2;
  CHECK(picked(q, {a, b}) == "a");
  b.gang_attempt.reset();
  CHECK(picked(q, {a, b}) == "b");

  // And a Slurm question finds no gang's run.
  RunRecord gang_run = run_of("g", "", 1, 50);
  gang_run.gang_id = "4242";
  CHECK(picked(asked(), {gang_run}) == "none");
}

TEST_CASE("run.json records the gang, and reads it back", "[requeue]") {
  RunRecord r = run_of("a", "", 0, 10);
  CHECK(parse_run_json(format_run_json(r), "run.json").gang_id.empty());
  r.gang_id = "uid-1";
  RunRecord back = parse_run_json(format_run_json(r), "run.json");
  CHECK(back.gang_id == "uid-1");
  CHECK(!back.gang_attempt);
  r.gang_attempt = 3;
  back = parse_run_json(format_run_json(r), "run.json");
  CHECK(back.gang_attempt == 3);
}

TEST_CASE("requeue_line: a gang's head names the variables it was found by", "[requeue]") {
  RequeueQuestion q = asked();
  q.gang = true;
  q.job_id = "uid-1";
  q.said = "FLOWRUN_GANG_ID=uid-1";
  const RunRecord record = run_of("a", "", 0, 10);
  const std::map<std::string, PriorStep> prior = {{"prepare", ended("succeeded", "succeeded")},
                                                  {"train", ended("failed", "failed")}};
  CHECK(requeue_line(q, record, {reused("prepare"), runs("train")}, prior, {{"train", 1}}) ==
        "flowrun: resuming run a: the gang's head started again (FLOWRUN_GANG_ID=uid-1); kept 'prepare'; "
        "'train' restarts at TORCHELASTIC_RESTART_COUNT=1");
}
