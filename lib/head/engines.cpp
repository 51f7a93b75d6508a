#include "engines.h"

#include <algorithm>

#include "flowrun/net_addresses.h"
#include "flowrun/util.h"

#include "head_addresses.h"

namespace flowrun::cluster {

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

std::vector<EngineLaunch> engine_launches(const ClusterSpec& cluster, const StepPlan& plan,
                                          const std::optional<SlurmJob>& job, const AgentCommand& agent,
                                          const std::vector<std::string>& ssh_default) {
  // Every node's agent and every spare's (node ranks nodes.size() and up).
  const int nodes = static_cast<int>(plan.nodes.size() + plan.spares.size());
  auto host_of = [&plan](int i) -> const std::string& {
    const auto at = static_cast<std::size_t>(i);
    return at < plan.nodes.size() ? plan.nodes[at].host : plan.spares[at - plan.nodes.size()].host;
  };
  std::vector<EngineLaunch> launches;
  switch (cluster.engine) {
    case Engine::manual:
      if (!cluster.rendezvous.empty()) {
        // flowrun run's rendezvous: node 0 is this host; its agent dials the
        // endpoint the other nodes dial, so its address is one they reach.
        EngineLaunch local;
        local.node = 0;
        local.label = "node0 agent";
        local.what = "node 0's agent";
        AgentCommand own = agent;
        own.endpoint = cluster.rendezvous;
        // Where the endpoint's name means loopback here (Debian maps the
        // host name to 127.0.1.1), node 0's address would be one no other
        // node reaches: dial this host's first interface instead.
        const auto colon = cluster.rendezvous.rfind(':');
        const std::string host = cluster.rendezvous.substr(0, colon);
        if (auto ip = resolve_ipv4(host); !ip || is_loopback(*ip)) {
          const auto candidates = order_head_addresses({}, "", std::nullopt, local_addresses());
          if (!candidates.empty())
            own.endpoint = candidates.front().address + cluster.rendezvous.substr(colon);
        }
        local.argv = agent_argv(own, 0);
        launches.push_back(std::move(local));
      }
      break;
    case Engine::slurm: {
      EngineLaunch srun;
      srun.label = "srun";
      srun.what = "srun";
      srun.argv = {"srun", "--nodes=" + std::to_string(nodes), "--ntasks=" + std::to_string(nodes),
                   "--ntasks-per-node=1"};
      if (plan.spares.empty() && plan.min_nodes == 0) {
        srun.argv.emplace_back("--kill-on-bad-exit=1");
      } else {
        // A lost node's agent must not take the others with it, nor its
        // node the job: a spare takes its place, or an elastic step goes
        // on without it.
        srun.argv.emplace_back("--kill-on-bad-exit=0");
        srun.argv.emplace_back("--no-kill");
      }
      srun.argv.emplace_back("--input=all");
      if (job) {
        // Inside an allocation: the agent gets the node's CPUs to hand to its
        // workers (srun gives a task one CPU unless told).
        // In a mixed allocation the smallest node decides: srun refuses a
        // task more CPUs than its node has.
        if (!job->cpus_per_node.empty())
          srun.argv.push_back(
              "--cpus-per-task=" +
              std::to_string(*std::min_element(job->cpus_per_node.begin(), job->cpus_per_node.end())));
      } else {
        srun.argv.push_back("--job-name=flowrun-" + plan.step);
      }
      if (!plan.cpu && !plan.nodes.empty() && plan.nodes.front().gpus_available > 0)
        srun.argv.push_back("--gpus-per-node=" + std::to_string(plan.nodes.front().gpus_available));
      for (const auto& arg : cluster.srun_args) srun.argv.push_back(arg);
      for (const auto& arg : agent_argv(agent, -1)) srun.argv.push_back(arg);
      launches.push_back(std::move(srun));
      break;
    }
    case Engine::ssh: {
      const auto& ssh = cluster.ssh_command.empty() ? ssh_default : cluster.ssh_command;
      for (int i = 0; i < nodes; ++i) {
        const std::string& host = host_of(i);
        EngineLaunch launch;
        launch.node = i;
        launch.label = destination_host(host) + " ssh";
        launch.what = "ssh to " + host;
        launch.argv = ssh;
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
      break;
    }
  }
  return launches;
}

}  // namespace flowrun::cluster