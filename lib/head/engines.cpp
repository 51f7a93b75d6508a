#include "engines.h"

#include <algorithm>
#include <fmt/format.h>

#include "flowrun/net_addresses.h"
#include "flowrun/text.h"
#include "flowrun/util.h"

#include "head_addresses.h"

namespace flowrun::cluster {

namespace {

// Every node's agent and every spare's (node ranks nodes.size() and up).
int agents_of(const StepPlan& plan) { return static_cast<int>(plan.nodes.size() + plan.spares.size()); }

const std::string& host_of(const StepPlan& plan, int i) {
  const auto at = static_cast<std::size_t>(i);
  return at < plan.nodes.size() ? plan.nodes[at].host : plan.spares[at - plan.nodes.size()].host;
}

// What ends every srun of the step's agents: the node's GPUs (a plan of GPU
// workers), the spec's srun_args after flowrun's own options, then the
// agent's words (`node`: its node rank, -1 to find it itself).
void end_srun(std::vector<std::string>& argv, const StepPlan& plan, const std::vector<std::string>& srun_args,
              const AgentCommand& agent, int node);

}  // namespace

std::vector<std::string> agent_argv(const AgentCommand& agent, int node) {
  std::vector<std::string> argv{agent.flowrun, "agent", "--rdzv-endpoint", agent.endpoint};
  if (node >= 0) {
    argv.emplace_back("--node-rank");
    argv.push_back(std::to_string(node));
  }
  if (agent.fake_gpus >= 0) {
    argv.emplace_back("--fake-gpus");
    argv.push_back(std::to_string(agent.fake_gpus));
  }
  return argv;
}

JoinByHand AgentEngine::by_hand(const AgentsWanted&) const { return {}; }

std::optional<EngineLaunch> AgentEngine::replacement(const AgentsWanted&, int,
                                                     const std::vector<std::string>&) const {
  return std::nullopt;
}

// ---- slurm -------------------------------------------------------------------

SlurmEngine::SlurmEngine(std::optional<SlurmJob> job, std::vector<std::string> srun_args)
    : job_(std::move(job)), srun_args_(std::move(srun_args)) {}

std::vector<EngineLaunch> SlurmEngine::launches(const AgentsWanted& wanted) const {
  const StepPlan& plan = *wanted.plan;
  const int nodes = agents_of(plan);
  EngineLaunch srun;
  srun.label = "srun";
  srun.what = "srun";
  srun.log = "srun";
  srun.argv = {"srun", "--nodes=" + std::to_string(nodes), "--ntasks=" + std::to_string(nodes),
               "--ntasks-per-node=1"};
  if (plan.spares.empty() && plan.min_nodes == 0) {
    srun.argv.emplace_back("--kill-on-bad-exit=1");
  } else {
    // A lost node's agent must not take the others with it, nor its node
    // the job: a spare takes its place, or an elastic step goes on without
    // it.
    srun.argv.emplace_back("--kill-on-bad-exit=0");
    srun.argv.emplace_back("--no-kill");
  }
  srun.argv.emplace_back("--input=all");
  if (job_) {
    // Inside an allocation: the agent gets the node's CPUs to hand to its
    // workers (srun gives a task one CPU unless told).
    // In a mixed allocation the smallest node decides: srun refuses a task
    // more CPUs than its node has.
    if (!job_->cpus_per_node.empty())
      srun.argv.push_back("--cpus-per-task=" + std::to_string(*std::min_element(job_->cpus_per_node.begin(),
                                                                                job_->cpus_per_node.end())));
  } else {
    srun.argv.push_back("--job-name=flowrun-" + plan.step);
  }
  end_srun(srun.argv, plan, srun_args_, wanted.agent, -1);
  return {std::move(srun)};
}

std::optional<EngineLaunch> SlurmEngine::replacement(const AgentsWanted& wanted, int seat,
                                                     const std::vector<std::string>& exclude) const {
  if (job_) return std::nullopt;
  const StepPlan& plan = *wanted.plan;
  EngineLaunch srun;
  srun.node = seat;
  srun.label = fmt::format("srun seat {}", seat);
  srun.what = fmt::format("srun for a node in place of one left out (seat {})", seat);
  srun.log = fmt::format("srun-seat{}", seat);
  // A job of one node, as the first srun's: it ends with its agent.
  srun.argv = {"srun",
               "--nodes=1",
               "--ntasks=1",
               "--ntasks-per-node=1",
               "--kill-on-bad-exit=1",
               "--input=all",
               "--job-name=flowrun-" + plan.step};
  if (!exclude.empty()) srun.argv.push_back("--exclude=" + compress_hostlist(exclude));
  end_srun(srun.argv, plan, srun_args_, wanted.agent, seat);
  return srun;
}

namespace {

void end_srun(std::vector<std::string>& argv, const StepPlan& plan, const std::vector<std::string>& srun_args,
              const AgentCommand& agent, int node) {
  if (!plan.cpu && !plan.nodes.empty() && plan.nodes.front().gpus_available > 0)
    argv.push_back("--gpus-per-node=" + std::to_string(plan.nodes.front().gpus_available));
  for (const auto& arg : srun_args) argv.push_back(arg);
  for (const auto& arg : agent_argv(agent, node)) argv.push_back(arg);
}

}  // namespace

// ---- ssh ---------------------------------------------------------------------

SshEngine::SshEngine(std::vector<std::string> ssh) : ssh_(std::move(ssh)) {}

std::vector<EngineLaunch> SshEngine::launches(const AgentsWanted& wanted) const {
  const StepPlan& plan = *wanted.plan;
  const AgentCommand& agent = wanted.agent;
  std::vector<EngineLaunch> launches;
  for (int i = 0; i < agents_of(plan); ++i) {
    const std::string& host = host_of(plan, i);
    EngineLaunch launch;
    launch.node = i;
    launch.label = destination_host(host) + " ssh";
    launch.what = "ssh to " + host;
    launch.log = fmt::format("ssh-node{}", i);
    launch.argv = ssh_;
    launch.argv.push_back(host);
    // ssh hands the remote shell one string: every word is quoted for it.
    // Only the login's environment reaches the agent, so what it needs of
    // the head's goes on the command line, through env(1).
    std::string remote = "exec";
    if (!agent.py_spy.empty()) remote += " env " + shell_quote("FLOWRUN_PY_SPY=" + agent.py_spy);
    for (const auto& word : agent_argv(agent, i)) remote += " " + shell_quote(word);
    launch.argv.push_back(remote);
    launches.push_back(std::move(launch));
  }
  return launches;
}

// ---- manual ------------------------------------------------------------------

std::vector<EngineLaunch> ManualEngine::launches(const AgentsWanted&) const { return {}; }

JoinByHand ManualEngine::by_hand(const AgentsWanted& wanted) const {
  JoinByHand hand;
  hand.token_file = wanted.step_dir + "/agent.token";
  std::string command;
  for (const auto& word : agent_argv(wanted.agent, -1))
    command += (command.empty() ? "" : " ") + shell_quote(word);
  command += " --token-file " + shell_quote(hand.token_file);
  const std::size_t nodes = wanted.nodes;
  const std::size_t spares = wanted.plan->spares.size();
  hand.message = fmt::format(
      "flowrun: waiting for {}{}; on each node run (add --node-rank N to choose its rank{}):\n"
      "flowrun:   {}",
      plural(nodes, "agent", "agents"),
      spares ? fmt::format(" and {}", plural(spares, "spare", "spares")) : std::string(),
      spares ? fmt::format(", {} and up for a spare", nodes) : std::string(), command);
  return hand;
}

// ---- flowrun run's rendezvous ------------------------------------------------

RendezvousEngine::RendezvousEngine(std::string endpoint) : endpoint_(std::move(endpoint)) {}

std::vector<EngineLaunch> RendezvousEngine::launches(const AgentsWanted& wanted) const {
  // Node 0 is this host; its agent dials the endpoint the other nodes dial,
  // so its address is one they reach.
  EngineLaunch local;
  local.node = 0;
  local.label = "node0 agent";
  local.what = "node 0's agent";
  local.log = "agent-node0";
  AgentCommand own = wanted.agent;
  own.endpoint = endpoint_;
  // Where the endpoint's name means loopback here (Debian maps the host
  // name to 127.0.1.1), node 0's address would be one no other node
  // reaches: dial this host's first interface instead.
  const auto colon = endpoint_.rfind(':');
  const std::string host = endpoint_.substr(0, colon);
  if (auto ip = resolve_ipv4(host); !ip || is_loopback(*ip)) {
    const auto candidates = order_head_addresses({}, "", std::nullopt, local_addresses());
    if (!candidates.empty()) own.endpoint = candidates.front().address + endpoint_.substr(colon);
  }
  local.argv = agent_argv(own, 0);
  return {std::move(local)};
}

JoinByHand RendezvousEngine::by_hand(const AgentsWanted& wanted) const {
  const std::size_t nodes = wanted.nodes;
  JoinByHand hand;
  hand.message = fmt::format(
      "flowrun: this host is node 0; waiting for {} more: run the same `flowrun run` command on {} "
      "({}, or none: ranks in the order they join), from this directory on the shared filesystem",
      plural(nodes - 1, "node", "nodes"), nodes == 2 ? "it" : "each",
      nodes == 2 ? std::string("--node-rank 1") : fmt::format("--node-rank 1 to {}", nodes - 1));
  return hand;
}

// ---- a gang's node 0 ------------------------------------------------------------

GangEngine::GangEngine(std::string endpoint, std::string platform)
    : RendezvousEngine(std::move(endpoint)), platform_(std::move(platform)) {}

JoinByHand GangEngine::by_hand(const AgentsWanted& wanted) const {
  JoinByHand hand;
  if (const std::size_t others = wanted.nodes - 1 + wanted.plan->spares.size(); others > 0)
    hand.message = fmt::format(
        "flowrun: this host is node 0 of the {}; {} by {}", platform_,
        others == 1 ? std::string("the other node joins") : fmt::format("the other {} nodes join", others),
        others == 1 ? "itself" : "themselves");
  return hand;
}

// ---- the choice ----------------------------------------------------------------

std::unique_ptr<AgentEngine> make_engine(const ClusterSpec& cluster, const std::optional<SlurmJob>& job,
                                         const std::vector<std::string>& ssh_default) {
  switch (cluster.engine) {
    case Engine::slurm: return std::make_unique<SlurmEngine>(job, cluster.srun_args);
    case Engine::ssh:
      return std::make_unique<SshEngine>(cluster.ssh_command.empty() ? ssh_default : cluster.ssh_command);
    case Engine::manual: break;
    case Engine::gang: return std::make_unique<GangEngine>(cluster.rendezvous, "gang");
  }
  // flowrun run's one-step spec says engine: manual; its head has the rendezvous.
  if (!cluster.rendezvous.empty()) return std::make_unique<RendezvousEngine>(cluster.rendezvous);
  return std::make_unique<ManualEngine>();
}

}  // namespace flowrun::cluster
