// The flow runner: the policy above the supervisor. It runs a planned flow's
// steps in dependency order, each parallel step as a group of workers (with
// restarts), each plain step as one process; after a parallel step it gathers
// the outputs for the join; it writes the run directory (the spec as run,
// plan.json, per-rank logs, each step's results.json) and decides flowrun's
// exit code (docs/cli.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "flowrun/plan.h"

namespace flowrun {

struct RunOptions {
  std::vector<std::string> args;                  // after `--`, for ${args}
  std::string run_id;                             // empty: a new one
  std::string run_dir;                            // empty: <workdir>/.flowrun/runs/<run-id>
  std::optional<std::vector<int>> console_ranks;  // --ranks: ranks shown on the console
  double grace_s = 10;                            // --grace: SIGTERM .. SIGKILL
  enum class Color { automatic, always, never } color = Color::automatic;
  int fake_gpus = -1;  // --fake-gpus (or FLOWRUN_FAKE_GPUS): every node's agent simulates as many
};

// Runs the flow and returns flowrun's exit code: 0 when every step
// succeeded; the culprit's code (128+N for a signal) for the first step that
// failed; 124 for a timeout; 128+N when flowrun got signal N; 1 when a parallel
// step's declared outputs are missing. Throws Error for flowrun's own failures
// (a run directory that cannot be written).
int run_flow(const Spec& spec, const HostFacts& host, const std::vector<StepPlan>& plans, const EnvMap& env,
             const RunOptions& options);

// Parses --ranks: "0", "0,2", "0-3,6", "all" (nullopt). Throws Error with a
// message for anything else.
std::optional<std::vector<int>> parse_rank_list(const std::string& text);

}  // namespace flowrun
