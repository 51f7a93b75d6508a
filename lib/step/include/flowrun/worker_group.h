// A worker group: the mechanism that runs one attempt of a parallel step's
// ranks (torch elastic's WorkerGroup under its agent). The policy above it,
// the attempts and restarts, is the step runner's (step_runner.h); a group
// never decides whether another attempt starts.
//
// LocalGroup runs the ranks on this host through the supervisor.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "flowrun/plan.h"
#include "flowrun/result.h"
#include "flowrun/supervisor.h"

namespace flowrun {

// One attempt to run.
struct Attempt {
  // TORCHELASTIC_RESTART_COUNT: 0 for the first attempt, unless the step
  // continues the count of an earlier run's attempts (a requeued Slurm job).
  int restart = 0;
  std::optional<double> timeout_s;  // the step's time left; nullopt: none
  // Keeps what the attempt before left (a restart): the group calls it
  // once, just before this attempt's ranks start, and only if they do.
  std::function<void()> keep_previous;
  bool first = true;  // the step's first attempt in this run (whatever `restart` is)
};

// How an attempt ended: its record (every rank's WorkerRecord, with roles
// and the culprit assigned) and what the group found beyond its ranks.
struct AttemptResult {
  AttemptRecord record;
  // No rank started (the nodes were lost, refused or stopped before): the
  // record has no workers, only the outcome (failed, timed_out or
  // interrupted); a restart's earlier attempt then decides the step.
  bool started = true;
  // A node can take no further attempt: it was lost, its connection closed
  // after it said done, or its agent was told to stop by a signal (Slurm's
  // scancel, a preemption). Never set by a group on one host.
  bool node_gone = false;
  // Every node that is gone has a spare waiting to take its place
  // (parallel.spare_nodes): a restart takes them (the next run_attempt).
  bool spare_ready = false;
  // An elastic step (parallel.nodes: "MIN:MAX") goes on without the nodes
  // that are gone: the nodes the next attempt gets (at least MIN).
  std::optional<int> elastic_nodes;
  // An elastic step: the workers a restart would start now (0: the plan's).
  int next_world_size = 0;
  // flowrun's own reasons the step failed besides its ranks (a node's
  // workdir, an upload refused), each a sentence; they fail the step.
  std::vector<std::string> errors;
  std::vector<std::string> notes;  // for results.json
};

class WorkerGroup {
 public:
  virtual ~WorkerGroup() = default;

  // Once, before the first attempt, for a step with preflight: true on GPUs.
  // Returns nullopt when it passed; else what stands for the step's attempt
  // (started false; its errors say why, the report itself went to the
  // console).
  virtual std::optional<AttemptResult> preflight() = 0;

  // Starts every rank of the step and returns once each has ended.
  virtual AttemptResult run_attempt(const Attempt& attempt) = 0;

  // For code that runs while an attempt runs: stop it as a failure, timeout
  // or interrupt would (one grace, then SIGKILL); kill it at once.
  virtual void stop(Outcome why) = 0;
  virtual void kill() = 0;

  // The first stop signal flowrun received (0 if none).
  virtual int interrupt_signal() = 0;

  // Where the ranks run, for the console: "" on this host; "2 nodes" for a
  // group across nodes, whose restart message then says "on 2 nodes" and
  // names the culprit's node.
  virtual std::string placement() const { return {}; }
};

// What a LocalGroup runs: one step's ranks on this host.
struct LocalStep {
  const Spec* spec = nullptr;
  const Step* step = nullptr;
  const StepPlan* plan = nullptr;
  LaunchContext ctx;              // run id, layout, flowrun's environment
  std::vector<std::string> argv;  // the step's command, templates filled in
  GroupOptions group;             // step name, grace, stall timeout, style
  // Which streams of a rank (by rank and local rank) the console shows; empty: both of every rank's.
  std::function<ConsoleShows(int rank, int local_rank)> shows;
  // The preflight (flowrun doctor's NCCL check on the plan's GPUs); empty:
  // the step has none.
  std::function<bool(std::vector<std::string>& errors)> preflight;
};

// A WorkerGroup over the supervisor: each attempt holds a free MASTER_PORT,
// builds every rank's launch (worker_env over flowrun's environment without
// Slurm's step variables) and runs them as one supervised group.
class LocalGroup : public WorkerGroup {
 public:
  LocalGroup(Supervisor& supervisor, const Console& console, LocalStep step);

  std::optional<AttemptResult> preflight() override;
  AttemptResult run_attempt(const Attempt& attempt) override;
  void stop(Outcome why) override;
  void kill() override;
  int interrupt_signal() override;

 private:
  Supervisor& sup_;
  Console console_;
  LocalStep job_;
};

// The whole environment of a process: flowrun's own with `set` on top, as
// "NAME=VALUE" entries.
std::vector<std::string> full_env(const EnvMap& parent, const EnvList& set);

// The devices of the plan's first node, for the console: "CPU", "GPU 0",
// "GPUs 0,1".
std::string describe_devices(const StepPlan& plan);

}  // namespace flowrun
