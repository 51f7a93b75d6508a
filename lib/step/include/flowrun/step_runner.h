// The step runner: the policy of one parallel step over a WorkerGroup
// (worker_group.h), on one host or across nodes. It runs the preflight, then
// attempts until one ends without a failure that may be restarted, keeps
// what every failed attempt left, records every attempt, and decides the
// step's outcome and exit code; the flow runner then gathers the outputs for
// the join (join_request) and writes results.json.
//
// The restart rule, the one rule for every parallel step, is the plan's
// restart policy (restart_policy.h's decide_restart): after each attempt
// the runner classifies its root cause (classify_failure, with the
// culprit's error file), notes whether the policy's progress_file changed
// during it (stat before and after), and asks. The attempt's record keeps
// the cause, the exception and the decision with its reason. Whatever the
// policy: a timeout, a stall or an interrupt never restarts, nor an attempt
// after flowrun's own errors or with a node gone (AttemptResult::node_gone,
// never set by a group on one host), nor once max_restarts restarts ran.
//
// A restart starts every rank afresh: before it, what the failed attempt
// left in each rank's directory (logs, traceback, outputs) moves to
// <rank dir>/attemptN/ (keep_attempt), and the failed attempt's records name
// the files there. With forensics: nccl, each attempt's records name the
// flight-recorder dumps its ranks left (note_nccl_traces).
//
// A step may continue the count of an earlier run's attempts (a run resumed
// after its Slurm job was requeued, continue_count): its first attempt gets
// TORCHELASTIC_RESTART_COUNT N instead of 0, and the N attempts before it do
// not count to max_restarts, which bounds the restarts of each run.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "flowrun/join.h"
#include "flowrun/plan.h"
#include "flowrun/result.h"
#include "flowrun/supervisor.h"
#include "flowrun/worker_group.h"

namespace flowrun {

// How a parallel step's attempts ended.
struct StepRun {
  std::vector<AttemptRecord> attempts;  // never empty; the last decided the outcome
  std::vector<std::string> notes;       // for results.json
  // flowrun's own reasons the step failed besides its ranks: a refused
  // preflight, a node's errors. They make a step that succeeded fail.
  std::vector<std::string> errors;
  Outcome outcome = Outcome::succeeded;
  int exit_code = 0;  // step_exit_code of the last attempt; 1 for errors alone
};

// Sets run.outcome and run.exit_code from its last attempt, flowrun's stop
// signal `interrupt` (0: none) and its errors; errors fail a last attempt
// that succeeded.
void settle_step_run(StepRun& run, int interrupt);

class StepRunner {
 public:
  // `preflight`: the step asks for one (parallel.preflight on GPUs).
  // `time_left`: the step's time left, asked before each attempt.
  StepRunner(const Step& step, const StepPlan& plan, const RunLayout& layout, const Console& console,
             bool preflight, std::function<std::optional<double>()> time_left);

  // The step's attempts continue the count of `restart_count` attempts of an
  // earlier run: the first gets TORCHELASTIC_RESTART_COUNT `restart_count`.
  void continue_count(int restart_count) { first_restart_ = restart_count; }

  // `note` is called with the step's attempts started so far, the carried
  // ones included, as each attempt is about to start (its restart count + 1),
  // and again with one less when no rank of it started: what a requeue that
  // comes while the attempt runs continues from (run.json).
  void on_attempts(std::function<void(int started)> note) { on_attempts_ = std::move(note); }

  StepRun run(WorkerGroup& group);

 private:
  // Before a restart: keep_failed_attempt for every rank of the step.
  void keep_ranks(AttemptRecord& failed, int attempt) const;

  const Step& step_;
  const StepPlan& plan_;
  const RunLayout& layout_;
  Console console_;
  bool preflight_;
  std::function<std::optional<double>()> time_left_;
  int first_restart_ = 0;
  std::function<void(int)> on_attempts_;
};

// The console line for a restart: "flowrun: step 'S' failed (rank 1 exited
// with code 3); restarting all 4 workers (restart 1 of 2): REASON", with "on
// NODE" after the rank and "on 2 nodes" after the workers when `placement`
// is "2 nodes". `restart`: the restart about to run (1 for the first);
// `reason`: the policy's (decide_restart), ": REASON" left off when empty.
// `on_spare`: a spare took a lost node's place, a restart that max_restarts
// does not count ("restart 1, not counted to max_restarts"). `carried`: the
// count the step's first attempt continued (StepRunner::continue_count);
// above 0, the restart is also counted in this run ("restart 3; 1 of 2 in
// this run").
std::string restart_message(const std::string& step, const AttemptRecord& failed, int world_size,
                            const std::string& placement, int restart, int max_restarts,
                            const std::string& reason, bool on_spare = false, int carried = 0);

// Before restart `attempt` + 1: moves what attempt `attempt` left in rank
// `rank`'s directory (its flight-recorder dump among it) to
// <rank_dir>/attempt<attempt>/ and points that rank's records in `failed` at
// the files kept there.
void keep_failed_attempt(AttemptRecord& failed, const std::string& rank_dir, int rank, int attempt);

// forensics: nccl: notes in each rank's record of `attempt` (the one that ran
// with TORCHELASTIC_RESTART_COUNT `restart`) the flight-recorder dump torch
// wrote in its directory (layout.nccl_trace), when it is a regular file: on
// this host the rank wrote it there, across nodes its agent uploaded it.
void note_nccl_traces(AttemptRecord& attempt, const RunLayout& layout, const std::string& step, int restart);

// The exit code of a step whose last attempt was `attempt`: 0 when it
// succeeded; 124 for a timeout or stall; 128+N for flowrun's stop signal
// `interrupt` (SIGINT's when none is known); the culprit's shell code; 1 for
// flowrun's own write error; else the code of a rank that failed on its own,
// or 1.
int step_exit_code(const AttemptRecord& attempt, int interrupt);

// What the join of a parallel step that succeeded gathers: every rank's
// FLOWRUN_OUTPUT_DIR into the step's outputs directory, files newer than
// `started`. The caller sets `stop`.
// `ran`: the step's attempts; an elastic step's (nodes: "MIN:MAX") join
// gets the ranks of its last attempt, which ran on the nodes there.
JoinRequest join_request(const Step& step, const StepPlan& plan, const RunLayout& layout, FileTime started,
                         const std::vector<AttemptRecord>& ran = {});

}  // namespace flowrun
