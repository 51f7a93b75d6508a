// How the head brings up the agents: the commands that start one agent per
// node. Internal to lib/head.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "flowrun/plan.h"
#include "flowrun/slurm.h"
#include "flowrun/spec.h"

namespace flowrun::cluster {

// One process the head starts to bring up agents.
struct EngineLaunch {
  std::vector<std::string> argv;
  std::string label;  // console tag: "srun", "node2 ssh"
  int node = -1;      // the node it serves (ssh), -1 for all (srun)
  std::string what;   // in messages: "srun", "ssh to node2", "node 0's agent"
};

struct AgentCommand {
  std::string flowrun;   // absolute path of the flowrun binary
  std::string endpoint;  // HOST:PORT, or several comma-separated (tried in turn)
  int fake_gpus = -1;
  // The head's FLOWRUN_PY_SPY ("": not set). ssh hands it to each agent, as
  // srun does with the whole environment, so that every node finds the same
  // py-spy on the shared file system.
  std::string py_spy;
};

// The agent's argv for node `node` (-1: the agent finds its rank itself).
std::vector<std::string> agent_argv(const AgentCommand& agent, int node);

// The engine processes for a step: one srun for all nodes, one ssh per node,
// none for manual. `ssh_default` is FLOWRUN_SSH (or "ssh"), used when the spec
// has no ssh_command.
std::vector<EngineLaunch> engine_launches(const ClusterSpec& cluster, const StepPlan& plan,
                                          const std::optional<SlurmJob>& job, const AgentCommand& agent,
                                          const std::vector<std::string>& ssh_default);

}  // namespace flowrun::cluster
