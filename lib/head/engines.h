// The engines that bring up a multi-node step's agents, one per node and
// spare: srun for all of them, ssh to each, the user by hand, or flowrun
// run's other nodes. An engine only says what to start and what to tell the
// user; the head starts its processes through the supervisor and watches
// them (engine_watch.h). The spec's cluster picks one, in make_engine alone.
// Internal to lib/head.
#pragma once

#include <cstddef>
#include <memory>
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
  // The node it serves, which its agent claims with --node-rank and no
  // joiner asking for any rank is given (ssh's every node, flowrun run's
  // node 0); -1 for all, whose agents find their ranks themselves (srun).
  int node = -1;
  std::string what;  // in messages: "srun", "ssh to node2", "node 0's agent"
  std::string log;   // its output's files in the step's directory: LOG.stdout.log, LOG.stderr.log
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

// The agents of one step that an engine is asked for.
struct AgentsWanted {
  const StepPlan* plan = nullptr;  // one agent per node (node ranks 0 and up), then per spare
  std::size_t nodes = 0;           // the nodes the step waits for
  AgentCommand agent;              // what each agent runs, and the head's endpoint it dials
  std::string step_dir;            // the step's directory (a token file for agents started by hand)
};

// What the user is told to do for the agents to join.
struct JoinByHand {
  std::string message;     // the console's lines, without the newline; "" to say nothing
  std::string token_file;  // the run's token, written there before the message is said; "": none
};

class AgentEngine {
 public:
  virtual ~AgentEngine() = default;
  // The processes that bring up the agents of `wanted` (none: the user
  // does). Pure, but for what the rendezvous asks of this host's names.
  virtual std::vector<EngineLaunch> launches(const AgentsWanted& wanted) const = 0;
  // What the console says for the agents the engine does not start; nothing
  // by default. Pure.
  virtual JoinByHand by_hand(const AgentsWanted& wanted) const;
  // A process that brings up one new node's agent for spare seat `seat`, on
  // no host `exclude` names (Slurm's short names: the step's hosts, those
  // left out among them), for a node left out with no spare to take its
  // place; nullopt when the engine cannot get a node of its own (the
  // default). Pure.
  virtual std::optional<EngineLaunch> replacement(const AgentsWanted& wanted, int seat,
                                                  const std::vector<std::string>& exclude) const;
};

// srun, once for every node's and spare's agent, each of which finds its
// node rank itself; inside the allocation `job` when there is one.
class SlurmEngine final : public AgentEngine {
 public:
  SlurmEngine(std::optional<SlurmJob> job, std::vector<std::string> srun_args);
  std::vector<EngineLaunch> launches(const AgentsWanted& wanted) const override;
  // Outside an allocation, where srun makes flowrun's own: an srun of one
  // node that excludes `exclude`, a job of its own. Inside one: nullopt
  // (the allocation has no node to spare).
  std::optional<EngineLaunch> replacement(const AgentsWanted& wanted, int seat,
                                          const std::vector<std::string>& exclude) const override;

 private:
  std::optional<SlurmJob> job_;
  std::vector<std::string> srun_args_;  // cluster.srun_args, after flowrun's own options
};

// `ssh` (the command's words) to each node's and spare's host, one agent
// there with its node rank.
class SshEngine final : public AgentEngine {
 public:
  explicit SshEngine(std::vector<std::string> ssh);
  std::vector<EngineLaunch> launches(const AgentsWanted& wanted) const override;

 private:
  std::vector<std::string> ssh_;
};

// The user starts each agent by hand, with a token file the head writes:
// the head starts nothing and says the command.
class ManualEngine final : public AgentEngine {
 public:
  std::vector<EngineLaunch> launches(const AgentsWanted& wanted) const override;
  JoinByHand by_hand(const AgentsWanted& wanted) const override;
};

// flowrun run's rendezvous at `endpoint` (HOST:PORT): this host is node 0,
// whose agent the head starts; the user runs the same flowrun run on the
// other nodes, which read the token flowrun run's listener wrote.
class RendezvousEngine : public AgentEngine {
 public:
  explicit RendezvousEngine(std::string endpoint);
  std::vector<EngineLaunch> launches(const AgentsWanted& wanted) const override;
  JoinByHand by_hand(const AgentsWanted& wanted) const override;

 private:
  std::string endpoint_;
};

// A gang's node 0 (gang_lobby.h): like flowrun run's, the head starts this
// host's agent, dialing `endpoint`; the other nodes' agents are already
// there, or join by themselves as their pods come up.
class GangEngine final : public RendezvousEngine {
 public:
  GangEngine(std::string endpoint, std::string platform);
  JoinByHand by_hand(const AgentsWanted& wanted) const override;

 private:
  std::string platform_;
};

// The engine of `cluster`, the one place that asks which: cluster.engine,
// and for manual with a rendezvous (flowrun run's), RendezvousEngine. `job` is the Slurm job this
// runs in, if any; `ssh_default` is FLOWRUN_SSH (or "ssh"), used when the
// spec has no ssh_command.
std::unique_ptr<AgentEngine> make_engine(const ClusterSpec& cluster, const std::optional<SlurmJob>& job,
                                         const std::vector<std::string>& ssh_default);

}  // namespace flowrun::cluster
