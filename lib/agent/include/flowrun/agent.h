// `flowrun agent`: one node's side of a multi-node step. It dials the head
// (lib/control), proves the run's token, and then does what the head says:
// check the workdir, start the node's ranks with the environment the head's
// plan gives them, stream their output, upload their results, stop them
// (docs/multinode.md). The head and the agent never link each other; they
// share the wire (lib/protocol) and the control layer.
#pragma once

#include <optional>
#include <string>

#include "flowrun/dialer.h"
#include "flowrun/util.h"

namespace flowrun {

// `flowrun agent`.
// How it reaches the head (the endpoint, the token) is the control layer's
// DialOptions; the rest is the agent's own.
struct AgentOptions : DialOptions {
  std::optional<int> node_rank;  // --node-rank; else SLURM_NODEID under srun; else the head decides
  // Exit 1 when the step failed, not only when the agent did (flowrun run's
  // nodes other than 0, as torchrun's agents do).
  bool exit_with_step = false;
  // A gang's agent (a pod of an Indexed Job, ...): it serves every parallel
  // step of the flow, waiting at the head between them, and exits with the
  // flow's exit code when the head says the flow ended.
  bool stays = false;
  int fake_gpus = -1;  // --fake-gpus
};

// Runs the agent and returns its exit code: 0 after an orderly end (the
// head said bye), 1 when it was refused, lost the head, or failed itself.
int run_agent(const AgentOptions& options, const EnvMap& env);

}  // namespace flowrun
