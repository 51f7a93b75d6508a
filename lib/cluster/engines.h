// How the head reaches the nodes: the address it listens on, and the
// commands that start one agent per node. Internal to lib/cluster.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "flowrun/plan.h"
#include "flowrun/slurm.h"
#include "flowrun/spec.h"

namespace flowrun::cluster {

struct HeadAddress {
  std::string address;
  std::string why;  // "cluster.address", "the address this host uses to reach node1", ...
};

// The address agents dial: cluster.address; else the local address this host
// uses to reach the first node (ssh hosts, the Slurm allocation's nodes); else
// this host's name when it resolves to an address that is not loopback; else
// the first up interface's IPv4 address that is not loopback (a Debian host
// name maps to 127.0.1.1). A node name this host cannot resolve is looked up
// as ssh would (`ssh -G`, with `ssh`, the ssh command) or as Slurm does
// (`scontrol show node`). Throws Error when there is none.
HeadAddress choose_head_address(const ClusterSpec& cluster, const std::optional<SlurmJob>& job,
                                const std::string& hostname, const std::vector<std::string>& ssh = {});

// The local IPv4 address this host would use to reach `host`, or nullopt
// (unresolvable, or no route). Sends nothing.
std::optional<std::string> route_source(const std::string& host);

bool is_loopback(const std::string& address);

// The IPv4 address `host` resolves to on this host, or nullopt.
std::optional<std::string> resolve_ipv4(const std::string& host);

// The name of the interface that holds the local IPv4 `address` ("eth0"), or nullopt.
std::optional<std::string> interface_of(const std::string& address);

// One process the head starts to bring up agents.
struct EngineLaunch {
  std::vector<std::string> argv;
  std::string label;  // console tag: "srun", "node2 ssh"
  int node = -1;      // the node it serves (ssh), -1 for all (srun)
  std::string what;   // in messages: "srun", "ssh to node2", "node 0's agent"
};

struct AgentCommand {
  std::string flowrun;   // absolute path of the flowrun binary
  std::string endpoint;  // HOST:PORT
  int fake_gpus = -1;
};

// The agent's argv for node `node` (-1: the agent finds its rank itself).
std::vector<std::string> agent_argv(const AgentCommand& agent, int node);

// The engine processes for a step: one srun for all nodes, one ssh per node,
// none for manual. `ssh_default` is FLOWRUN_SSH (or "ssh"), used when the spec
// has no ssh_command.
std::vector<EngineLaunch> engine_launches(const ClusterSpec& cluster, const StepPlan& plan,
                                          const std::optional<SlurmJob>& job, const AgentCommand& agent,
                                          const std::vector<std::string>& ssh_default);

// The node rank the head gives an agent that asks for none: the lowest one
// not yet joined (`joined[i]`) and not kept for an agent that an engine starts
// with --node-rank (`started`, the launches' EngineLaunch::node: ssh's every
// node, flowrun run's rendezvous node 0); -1 when none is left.
int free_node_rank(const std::vector<bool>& joined, const std::vector<int>& started);

}  // namespace flowrun::cluster
