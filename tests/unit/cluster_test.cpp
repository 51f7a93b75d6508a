// How the head reaches the nodes: each engine's processes and what it tells
// the user (lib/head/engines.cpp: the srun and ssh command lines, the agent's
// argv, shell quoting for the remote shell, the command run by hand), the
// engine the spec picks, and the address agents dial (head_addresses.cpp).
// Command lines are compared whole: they are what Slurm and ssh receive.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <string>
#include <unistd.h>
#include <vector>

#include "flowrun/error.h"
#include "flowrun/start_wire.h"

#include "engines.h"
#include "head_addresses.h"
#include "node_table.h"

using namespace flowrun;
using namespace flowrun::cluster;

namespace {

using Words = std::vector<std::string>;

const std::string kFlowrun = "/opt/flowrun/bin/flowrun";
const std::string kEndpoint = "10.0.0.1:4000";

// A multi-node plan of `hosts.size()` nodes with `gpus` GPUs each (0: CPU workers).
StepPlan node_plan(const Words& hosts, int gpus) {
  StepPlan plan;
  plan.step = "train";
  plan.mode = PlanMode::multi_node;
  plan.cpu = gpus == 0;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    NodePlan node;
    node.node_rank = static_cast<int>(i);
    node.host = hosts[i];
    node.gpus_available = gpus;
    node.procs = gpus == 0 ? 2 : gpus;
    node.first_rank = static_cast<int>(i) * node.procs;
    plan.nodes.push_back(node);
  }
  plan.world_size = static_cast<int>(hosts.size()) * plan.nodes.front().procs;
  return plan;
}

ClusterSpec cluster_of(Engine engine) {
  ClusterSpec cluster;
  cluster.engine = engine;
  return cluster;
}

AgentCommand agent_of(const std::string& flowrun = kFlowrun, int fake_gpus = -1) {
  return AgentCommand{flowrun, kEndpoint, fake_gpus, ""};
}

SlurmJob job_of(const Words& nodes, std::vector<int> cpus) {
  SlurmJob job;
  job.job_id = "4242";
  job.nodes = nodes;
  job.cpus_per_node = std::move(cpus);
  job.num_nodes = static_cast<int>(nodes.size());
  return job;
}

const Words kSshDefault = {"ssh"};

// What the head asks an engine for: an agent for each node and spare of
// `plan`, running `agent`.
AgentsWanted wanted_of(const StepPlan& plan, const AgentCommand& agent = agent_of()) {
  return AgentsWanted{&plan, plan.nodes.size(), agent, "/runs/r-1/train"};
}

// Whether the spec's `cluster` picks an engine of class `Kind`.
template <class Kind>
bool picks(const ClusterSpec& cluster) {
  return dynamic_cast<const Kind*>(make_engine(cluster, std::nullopt, kSshDefault).get()) != nullptr;
}

// The processes of the engine the spec's `cluster` picks.
std::vector<EngineLaunch> launches_of(const ClusterSpec& cluster, const StepPlan& plan,
                                      const std::optional<SlurmJob>& job, const AgentCommand& agent,
                                      const Words& ssh_default) {
  return make_engine(cluster, job, ssh_default)->launches(wanted_of(plan, agent));
}

// The words a POSIX shell passes on for the command line `words`.
Words shell_words(const std::string& words) {
  FILE* pipe = popen(("printf '%s\\n' " + words).c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buf[512];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  pclose(pipe);
  Words lines;
  std::size_t pos = 0;
  while (pos < out.size()) {
    const std::size_t end = out.find('\n', pos);
    lines.push_back(out.substr(pos, end - pos));
    pos = end + 1;
  }
  return lines;
}

// Whether an up interface has an IPv4 address that is not loopback: what the
// last rule of choose_head_address needs.
bool has_routable_interface() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) != 0 &&
        (i->ifa_flags & IFF_LOOPBACK) == 0)
      found = true;
  }
  freeifaddrs(list);
  return found;
}

}  // namespace

// ---- slurm -------------------------------------------------------------------

TEST_CASE("slurm inside an allocation: one srun with the node's CPUs and GPUs", "[cluster]") {
  const auto job = job_of({"gpu-a01", "gpu-a02"}, {64, 64});
  const auto launches = SlurmEngine(job, {}).launches(wanted_of(node_plan({"", ""}, 4)));
  REQUIRE(launches.size() == 1);
  CHECK(launches[0].label == "srun");
  CHECK(launches[0].node == -1);
  CHECK(launches[0].log == "srun");
  CHECK(launches[0].argv == Words{"srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                                  "--kill-on-bad-exit=1", "--input=all", "--cpus-per-task=64",
                                  "--gpus-per-node=4", kFlowrun, "agent", "--rdzv-endpoint", kEndpoint});
}

TEST_CASE("slurm inside an allocation that does not say its CPUs: no --cpus-per-task", "[cluster]") {
  const auto job = job_of({"n1", "n2", "n3"}, {});
  const auto launches = SlurmEngine(job, {}).launches(wanted_of(node_plan({"", "", ""}, 0)));
  REQUIRE(launches.size() == 1);
  CHECK(launches[0].argv == Words{"srun", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1",
                                  "--kill-on-bad-exit=1", "--input=all", kFlowrun, "agent", "--rdzv-endpoint",
                                  kEndpoint});
}

TEST_CASE("slurm outside an allocation: srun makes one, named after the step", "[cluster]") {
  const auto launches = SlurmEngine(std::nullopt, {}).launches(wanted_of(node_plan({"", ""}, 8)));
  REQUIRE(launches.size() == 1);
  CHECK(launches[0].argv == Words{"srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                                  "--kill-on-bad-exit=1", "--input=all", "--job-name=flowrun-train",
                                  "--gpus-per-node=8", kFlowrun, "agent", "--rdzv-endpoint", kEndpoint});
}

TEST_CASE("slurm: srun_args go after flowrun's options, --fake-gpus to the agent", "[cluster]") {
  auto cluster = cluster_of(Engine::slurm);
  cluster.srun_args = {"--partition=debug", "--time=00:10:00"};
  const auto launches =
      launches_of(cluster, node_plan({"", ""}, 2), std::nullopt, agent_of(kFlowrun, 2), kSshDefault);
  REQUIRE(launches.size() == 1);
  CHECK(launches[0].argv == Words{"srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                                  "--kill-on-bad-exit=1", "--input=all", "--job-name=flowrun-train",
                                  "--gpus-per-node=2", "--partition=debug", "--time=00:10:00", kFlowrun,
                                  "agent", "--rdzv-endpoint", kEndpoint, "--fake-gpus", "2"});
}

TEST_CASE("slurm: CPU workers ask for no GPUs", "[cluster]") {
  const auto launches = SlurmEngine(std::nullopt, {}).launches(wanted_of(node_plan({"", ""}, 0)));
  REQUIRE(launches.size() == 1);
  CHECK(launches[0].argv == Words{"srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                                  "--kill-on-bad-exit=1", "--input=all", "--job-name=flowrun-train", kFlowrun,
                                  "agent", "--rdzv-endpoint", kEndpoint});
}

TEST_CASE("slurm outside an allocation: a new node is one more srun of one node, excluding the step's hosts",
          "[cluster]") {
  const SlurmEngine engine(std::nullopt, {"--partition=debug"});
  const auto srun = engine.replacement(wanted_of(node_plan({"", ""}, 4)), 3, {"n1", "n2", "n3"});
  REQUIRE(srun.has_value());
  CHECK(srun->node == 3);  // its agent claims that seat
  CHECK(srun->log == "srun-seat3");
  CHECK(srun->argv == Words{"srun", "--nodes=1", "--ntasks=1", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
                            "--input=all", "--job-name=flowrun-train", "--exclude=n[1-3]",
                            "--gpus-per-node=4", "--partition=debug", kFlowrun, "agent", "--rdzv-endpoint",
                            kEndpoint, "--node-rank", "3"});
}

TEST_CASE("a new node is asked of Slurm only for flowrun's own allocation, and of no other engine",
          "[cluster]") {
  const StepPlan plan = node_plan({"", ""}, 0);  // wanted points at it
  const auto wanted = wanted_of(plan);
  CHECK_FALSE(SlurmEngine(job_of({"n1", "n2"}, {}), {}).replacement(wanted, 2, {"n2"}).has_value());
  CHECK_FALSE(SshEngine({"ssh"}).replacement(wanted, 2, {"n2"}).has_value());
  CHECK_FALSE(ManualEngine().replacement(wanted, 2, {"n2"}).has_value());
  // CPU workers: no GPUs asked.
  const auto cpu = SlurmEngine(std::nullopt, {}).replacement(wanted, 2, {"n2"});
  REQUIRE(cpu.has_value());
  CHECK(std::find(cpu->argv.begin(), cpu->argv.end(), "--gpus-per-node=0") == cpu->argv.end());
  CHECK(std::find(cpu->argv.begin(), cpu->argv.end(), "--exclude=n2") != cpu->argv.end());
}

// ---- ssh ---------------------------------------------------------------------

TEST_CASE("ssh: one ssh per node, the agent's words as one remote command with its node rank", "[cluster]") {
  auto cluster = cluster_of(Engine::ssh);
  cluster.ssh_command = {"ssh", "-F", "cluster.cfg"};
  cluster.hosts = {"node1", "alice@node2"};
  const auto launches =
      launches_of(cluster, node_plan(cluster.hosts, 2), std::nullopt, agent_of(), {"never-used"});
  REQUIRE(launches.size() == 2);
  CHECK(launches[0].label == "node1 ssh");
  CHECK(launches[0].node == 0);
  CHECK(launches[0].log == "ssh-node0");
  CHECK(launches[0].argv ==
        Words{"ssh", "-F", "cluster.cfg", "node1",
              "exec /opt/flowrun/bin/flowrun agent --rdzv-endpoint 10.0.0.1:4000 --node-rank 0"});
  // user@host: ssh gets it as written, the console label is the host.
  CHECK(launches[1].label == "node2 ssh");
  CHECK(launches[1].node == 1);
  CHECK(launches[1].log == "ssh-node1");
  CHECK(launches[1].argv ==
        Words{"ssh", "-F", "cluster.cfg", "alice@node2",
              "exec /opt/flowrun/bin/flowrun agent --rdzv-endpoint 10.0.0.1:4000 --node-rank 1"});
}

TEST_CASE("an elastic step: srun lets a node's agent fail alone, the others go on", "[cluster]") {
  StepPlan plan = node_plan({"", ""}, 4);
  plan.min_nodes = 1;
  const auto srun = SlurmEngine(job_of({"n1", "n2"}, {}), {}).launches(wanted_of(plan));
  REQUIRE(srun.size() == 1);
  CHECK(srun[0].argv == Words{"srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                              "--kill-on-bad-exit=0", "--no-kill", "--input=all", "--gpus-per-node=4",
                              kFlowrun, "agent", "--rdzv-endpoint", kEndpoint});
}

TEST_CASE("spares: srun starts their agents too and lets one fail alone; ssh reaches each spare's host",
          "[cluster]") {
  StepPlan plan = node_plan({"", ""}, 4);
  NodePlan spare;
  spare.node_rank = 2;
  plan.spares.push_back(spare);
  const auto srun = SlurmEngine(job_of({"n1", "n2", "n3"}, {}), {}).launches(wanted_of(plan));
  REQUIRE(srun.size() == 1);
  CHECK(srun[0].argv == Words{"srun", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1",
                              "--kill-on-bad-exit=0", "--no-kill", "--input=all", "--gpus-per-node=4",
                              kFlowrun, "agent", "--rdzv-endpoint", kEndpoint});

  StepPlan over_ssh = node_plan({"a", "b"}, 0);
  spare.host = "c";
  over_ssh.spares.push_back(spare);
  const auto ssh = SshEngine({"ssh"}).launches(wanted_of(over_ssh));
  REQUIRE(ssh.size() == 3);
  CHECK(ssh[2].node == 2);
  CHECK(ssh[2].argv == Words{"ssh", "c",
                             "exec /opt/flowrun/bin/flowrun agent --rdzv-endpoint 10.0.0.1:4000 "
                             "--node-rank 2"});
}

TEST_CASE("ssh: without ssh_command the default (FLOWRUN_SSH or ssh) is used", "[cluster]") {
  auto cluster = cluster_of(Engine::ssh);
  const auto launches = launches_of(cluster, node_plan({"n1", "n2"}, 0), std::nullopt, agent_of(kFlowrun, 0),
                                    {"ssh", "-o", "BatchMode=yes"});
  REQUIRE(launches.size() == 2);
  CHECK(
      launches[1].argv ==
      Words{"ssh", "-o", "BatchMode=yes", "n2",
            "exec /opt/flowrun/bin/flowrun agent --rdzv-endpoint 10.0.0.1:4000 --node-rank 1 --fake-gpus 0"});
}

TEST_CASE("ssh: a flowrun path with a space reaches the remote shell as one word", "[cluster]") {
  const std::string flowrun = "/opt/my tools/it's/flowrun";
  const auto launches =
      SshEngine(kSshDefault).launches(wanted_of(node_plan({"n1", "n2"}, 0), agent_of(flowrun)));
  REQUIRE(launches.size() == 2);
  const std::string remote = launches[0].argv.back();
  CHECK(remote == "exec '/opt/my tools/it'\\''s/flowrun' agent --rdzv-endpoint 10.0.0.1:4000 --node-rank 0");
  // What a POSIX shell makes of it after `exec`: the agent's argv, word for word.
  REQUIRE(remote.rfind("exec ", 0) == 0);
  CHECK(shell_words(remote.substr(5)) ==
        Words{flowrun, "agent", "--rdzv-endpoint", "10.0.0.1:4000", "--node-rank", "0"});
}

TEST_CASE("ssh: the head's FLOWRUN_PY_SPY reaches each agent through env(1), as srun's environment would",
          "[cluster]") {
  const SshEngine ssh(kSshDefault);
  const StepPlan plan = node_plan({"n1", "n2"}, 0);
  AgentCommand agent = agent_of();
  agent.py_spy = "/shared/venv/bin/py-spy";
  auto launches = ssh.launches(wanted_of(plan, agent));
  REQUIRE(launches.size() == 2);
  CHECK(launches[1].argv.back() ==
        "exec env FLOWRUN_PY_SPY=/shared/venv/bin/py-spy /opt/flowrun/bin/flowrun agent --rdzv-endpoint "
        "10.0.0.1:4000 --node-rank 1");
  // A path the shell would split is one word of env's.
  agent.py_spy = "/opt/my tools/py-spy";
  launches = ssh.launches(wanted_of(plan, agent));
  const std::string remote = launches[0].argv.back();
  REQUIRE(remote.rfind("exec ", 0) == 0);
  CHECK(shell_words(remote.substr(5)) == Words{"env", "FLOWRUN_PY_SPY=/opt/my tools/py-spy", kFlowrun,
                                               "agent", "--rdzv-endpoint", kEndpoint, "--node-rank", "0"});
  // srun passes on the head's environment itself; the manual engine's agents
  // are started by hand, with the node's own.
  const auto srun = SlurmEngine(std::nullopt, {}).launches(wanted_of(plan, agent));
  REQUIRE(srun.size() == 1);
  CHECK(std::find(srun[0].argv.begin(), srun[0].argv.end(), "env") == srun[0].argv.end());
  CHECK(agent_argv(agent, -1) == Words{kFlowrun, "agent", "--rdzv-endpoint", kEndpoint});
}

// ---- manual ------------------------------------------------------------------

TEST_CASE("manual: the head starts nothing and says the command to run on each node, with its token file",
          "[cluster]") {
  const ManualEngine manual;
  const StepPlan plan = node_plan({"", ""}, 2);
  CHECK(manual.launches(wanted_of(plan)).empty());
  const JoinByHand hand = manual.by_hand(wanted_of(plan, agent_of(kFlowrun, 2)));
  CHECK(hand.token_file == "/runs/r-1/train/agent.token");
  CHECK(hand.message ==
        "flowrun: waiting for 2 agents; on each node run (add --node-rank N to choose its rank):\n"
        "flowrun:   /opt/flowrun/bin/flowrun agent --rdzv-endpoint 10.0.0.1:4000 --fake-gpus 2 "
        "--token-file /runs/r-1/train/agent.token");
}

TEST_CASE("manual: with spares, the agents and spares counted, and the spares' node ranks", "[cluster]") {
  StepPlan plan = node_plan({"", "", ""}, 2);
  NodePlan spare;
  spare.node_rank = 3;
  plan.spares = {spare, spare};
  AgentsWanted wanted = wanted_of(plan);
  wanted.step_dir = "/runs/my run/train";
  const JoinByHand hand = ManualEngine().by_hand(wanted);
  CHECK(
      hand.message ==
      "flowrun: waiting for 3 agents and 2 spares; on each node run (add --node-rank N to choose its rank, 3 "
      "and up for a spare):\n"
      "flowrun:   /opt/flowrun/bin/flowrun agent --rdzv-endpoint 10.0.0.1:4000 --token-file "
      "'/runs/my run/train/agent.token'");
}

TEST_CASE("flowrun run's rendezvous: the head starts node 0's agent, and keeps node 0 for it", "[cluster]") {
  auto cluster = cluster_of(Engine::manual);
  cluster.rendezvous = "127.0.0.1:29500";
  const auto launches = launches_of(cluster, node_plan({"", ""}, 2), std::nullopt, agent_of(), kSshDefault);
  REQUIRE(launches.size() == 1);
  CHECK(launches[0].node == 0);
  CHECK(launches[0].argv.back() == "0");
  CHECK(launches[0].label == "node0 agent");
  CHECK(launches[0].what == "node 0's agent");
  CHECK(launches[0].log == "agent-node0");
  // Another node's agent that dials in before node 0's own, asking for no
  // rank, gets node rank 1: taking 0 would refuse node 0's own agent.
  CHECK(free_node_rank({false, false}, {launches[0].node}) == 1);
  CHECK(free_node_rank({false, true}, {launches[0].node}) == -1);
}

TEST_CASE(
    "flowrun run's rendezvous: the user runs the same command on the other nodes; no token file of its own",
    "[cluster]") {
  const RendezvousEngine rendezvous("10.0.0.1:29500");
  const StepPlan two = node_plan({"", ""}, 2);
  JoinByHand hand = rendezvous.by_hand(wanted_of(two));
  CHECK(hand.token_file.empty());
  CHECK(
      hand.message ==
      "flowrun: this host is node 0; waiting for 1 node more: run the same `flowrun run` command on it "
      "(--node-rank 1, or none: ranks in the order they join), from this directory on the shared filesystem");
  const StepPlan four = node_plan({"", "", "", ""}, 2);
  hand = rendezvous.by_hand(wanted_of(four));
  CHECK(hand.message ==
        "flowrun: this host is node 0; waiting for 3 nodes more: run the same `flowrun run` command on each "
        "(--node-rank 1 to 3, or none: ranks in the order they join), from this directory on the shared "
        "filesystem");
}

TEST_CASE("make_engine: the spec's engine, and flowrun run's rendezvous for manual with one", "[cluster]") {
  CHECK(picks<SlurmEngine>(cluster_of(Engine::slurm)));
  CHECK(picks<SshEngine>(cluster_of(Engine::ssh)));
  CHECK(picks<ManualEngine>(cluster_of(Engine::manual)));
  auto meeting = cluster_of(Engine::manual);
  meeting.rendezvous = "127.0.0.1:29500";
  CHECK(picks<RendezvousEngine>(meeting));
  CHECK_FALSE(picks<ManualEngine>(meeting));
  // Slurm and ssh start their agents; their users are told nothing.
  const StepPlan plan = node_plan({"n1", "n2"}, 2);
  CHECK(make_engine(cluster_of(Engine::slurm), std::nullopt, kSshDefault)
            ->by_hand(wanted_of(plan))
            .message.empty());
  const JoinByHand ssh =
      make_engine(cluster_of(Engine::ssh), std::nullopt, kSshDefault)->by_hand(wanted_of(plan));
  CHECK(ssh.message.empty());
  CHECK(ssh.token_file.empty());
}

TEST_CASE("free_node_rank: the lowest rank not joined and not kept for an engine's agent", "[cluster]") {
  CHECK(free_node_rank({false, false, false}, {}) == 0);  // manual: every rank is free
  CHECK(free_node_rank({true, false, false}, {}) == 1);
  CHECK(free_node_rank({true, false, false}, {-1}) == 1);         // srun: its agents ask for no rank
  CHECK(free_node_rank({false, false, false}, {0, 1, 2}) == -1);  // ssh: every node's agent is started
  CHECK(free_node_rank({true, true}, {}) == -1);
  CHECK(free_node_rank({}, {}) == -1);
}

// ---- the agent's argv --------------------------------------------------------

TEST_CASE("agent_argv: endpoint, then the node rank and fake GPUs when given", "[cluster]") {
  CHECK(agent_argv(agent_of(), -1) == Words{kFlowrun, "agent", "--rdzv-endpoint", kEndpoint});
  CHECK(agent_argv(agent_of(), 3) ==
        Words{kFlowrun, "agent", "--rdzv-endpoint", kEndpoint, "--node-rank", "3"});
  CHECK(agent_argv(agent_of(kFlowrun, 8), 0) ==
        Words{kFlowrun, "agent", "--rdzv-endpoint", kEndpoint, "--node-rank", "0", "--fake-gpus", "8"});
  CHECK(agent_argv(agent_of(kFlowrun, 0), -1) ==
        Words{kFlowrun, "agent", "--rdzv-endpoint", kEndpoint, "--fake-gpus", "0"});
}

// ---- shell_quote -------------------------------------------------------------

TEST_CASE("shell_quote: safe words as they are, anything else in single quotes", "[cluster]") {
  CHECK(flowrun::shell_quote("agent") == "agent");
  CHECK(flowrun::shell_quote("/opt/flowrun-1.0/bin/flow_run") == "/opt/flowrun-1.0/bin/flow_run");
  CHECK(flowrun::shell_quote("alice@node1:4000,x=y+1%") == "alice@node1:4000,x=y+1%");
  CHECK(flowrun::shell_quote("") == "''");
  CHECK(flowrun::shell_quote("a b") == "'a b'");
  CHECK(flowrun::shell_quote("$HOME") == "'$HOME'");
  CHECK(flowrun::shell_quote("it's") == "'it'\\''s'");
  CHECK(flowrun::shell_quote("'") == "''\\'''");
  CHECK(flowrun::shell_quote("a\"b") == "'a\"b'");
  CHECK(flowrun::shell_quote("~") == "'~'");
  CHECK(flowrun::shell_quote("*") == "'*'");
  CHECK(flowrun::shell_quote("x;rm -rf /") == "'x;rm -rf /'");
  CHECK(flowrun::shell_quote("`id`") == "'`id`'");
  CHECK(flowrun::shell_quote("line\nbreak") == "'line\nbreak'");
}

TEST_CASE("shell_quote: a shell gives back every word unchanged", "[cluster]") {
  const Words words = {"", "a b", "$HOME", "it's", "'", "\"", "\\", "`id`", "*", "~", "tab\there", "ok"};
  std::string line;
  for (const auto& w : words) line += " " + flowrun::shell_quote(w);
  CHECK(shell_words(line) == words);
}

// ---- addresses ---------------------------------------------------------------

TEST_CASE("is_loopback: 127/8, ::1 and localhost", "[cluster]") {
  CHECK(is_loopback("127.0.0.1"));
  CHECK(is_loopback("127.0.1.1"));
  CHECK(is_loopback("127.255.255.254"));
  CHECK(is_loopback("::1"));
  CHECK(is_loopback("localhost"));
  CHECK_FALSE(is_loopback("10.0.0.1"));
  CHECK_FALSE(is_loopback("192.0.2.127"));
  CHECK_FALSE(is_loopback("1127.0.0.1"));
  CHECK_FALSE(is_loopback("node127"));
  CHECK_FALSE(is_loopback(""));
}

TEST_CASE("choose_head_addresses: cluster.address alone, as written", "[cluster]") {
  auto cluster = cluster_of(Engine::ssh);
  cluster.address = "10.200.0.1";
  cluster.hosts = {"127.0.0.1"};
  const auto chosen = choose_head_addresses(cluster, std::nullopt, "localhost");
  REQUIRE(chosen.size() == 1);
  CHECK(chosen[0].address == "10.200.0.1");
  CHECK(chosen[0].why == "cluster.address");
  // Even a loopback address: the user asked for it (one-host tests do).
  cluster.address = "127.0.0.1";
  const auto loop = choose_head_addresses(cluster, job_of({"127.0.0.1"}, {}), "localhost");
  REQUIRE(loop.size() == 1);
  CHECK(loop[0].address == "127.0.0.1");
  CHECK(loop[0].why == "cluster.address");
}

TEST_CASE("choose_head_addresses: loopback routes and a loopback host name are skipped", "[cluster]") {
  auto cluster = cluster_of(Engine::ssh);
  cluster.hosts = {"127.0.0.1"};
  // "localhost" resolves to loopback and the route to 127.0.0.1 is loopback:
  // this machine's interfaces decide.
  if (has_routable_interface()) {
    const auto chosen = choose_head_addresses(cluster, std::nullopt, "localhost");
    REQUIRE_FALSE(chosen.empty());
    for (const auto& c : chosen) {
      INFO(c.address << " (" << c.why << ")");
      CHECK_FALSE(is_loopback(c.address));
      CHECK(c.why.rfind("interface ", 0) == 0);
    }
  } else {
    CHECK_THROWS_WITH(choose_head_addresses(cluster, std::nullopt, "localhost"),
                      "cannot find an address for the other nodes to reach this host: set cluster.address");
  }
}

namespace {

// A login node as Debian sets one up: its name maps to 127.0.1.1, the
// interface it reaches the cluster by is not the first.
const std::vector<LocalAddress> kLoginNode = {
    {"lo", "127.0.0.1", true, true},
    {"dummy0", "198.51.100.1", true, false},  // first, and no node reaches it
    {"eth0", "192.0.2.2", true, false},
    {"down0", "203.0.113.9", false, false},  // down: never a candidate
    {"frc-br", "10.200.0.1", true, false},
};

Words addresses_of(const std::vector<HeadAddress>& list) {
  Words words;
  for (const auto& a : list) words.push_back(a.address + " (" + a.why + ")");
  return words;
}

}  // namespace

TEST_CASE("order_head_addresses: routes first, then the host name's address, then every interface",
          "[cluster]") {
  SECTION("the route to slurmctld decides on a Debian login node, the interfaces follow in order") {
    const auto chosen = order_head_addresses({{"slurmctld at head (10.200.0.1)", "10.200.0.1"}}, "login1",
                                             std::string("127.0.1.1"), kLoginNode);
    CHECK(addresses_of(chosen) == Words{"10.200.0.1 (the address this host uses to reach slurmctld at head "
                                        "(10.200.0.1))",
                                        "198.51.100.1 (interface dummy0)", "192.0.2.2 (interface eth0)"});
  }
  SECTION("a node's route before slurmctld's; the same address is listed once") {
    const auto chosen = order_head_addresses(
        {{"node1", "192.0.2.2"}, {"slurmctld at ctl (10.200.0.5)", "10.200.0.1"}, {"node2", "192.0.2.2"}},
        "login1", std::nullopt, kLoginNode);
    CHECK(addresses_of(chosen) == Words{"192.0.2.2 (the address this host uses to reach node1)",
                                        "10.200.0.1 (the address this host uses to reach slurmctld at ctl "
                                        "(10.200.0.5))",
                                        "198.51.100.1 (interface dummy0)"});
  }
  SECTION("a hint without a route, or with a loopback one, adds nothing") {
    const auto chosen =
        order_head_addresses({{"node1", ""}, {"node2", "127.0.0.1"}}, "login1", std::nullopt, kLoginNode);
    CHECK(addresses_of(chosen) == Words{"198.51.100.1 (interface dummy0)", "192.0.2.2 (interface eth0)",
                                        "10.200.0.1 (interface frc-br)"});
  }
  SECTION("the host name's address comes before the interfaces only when it is this host's") {
    CHECK(addresses_of(order_head_addresses({}, "head", std::string("10.200.0.1"), kLoginNode)) ==
          Words{"10.200.0.1 (the address of this host's name, head)", "198.51.100.1 (interface dummy0)",
                "192.0.2.2 (interface eth0)"});
    // A stale DNS entry would send the agents to another machine.
    CHECK(addresses_of(order_head_addresses({}, "head", std::string("192.0.2.77"), kLoginNode)) ==
          Words{"198.51.100.1 (interface dummy0)", "192.0.2.2 (interface eth0)",
                "10.200.0.1 (interface frc-br)"});
  }
  SECTION("loopback only: no candidate") {
    CHECK(order_head_addresses({{"slurmctld at localhost (127.0.0.1)", "127.0.0.1"}}, "login1",
                               std::string("127.0.1.1"), {{"lo", "127.0.0.1", true, true}})
              .empty());
  }
}

TEST_CASE("describe_head_addresses: the first with its reason and interface, then the others", "[cluster]") {
  const auto chosen = order_head_addresses({{"slurmctld at head (10.200.0.1)", "10.200.0.1"}}, "login1",
                                           std::string("127.0.1.1"), kLoginNode);
  auto interface = [](const std::string& address) {
    for (const auto& i : kLoginNode)
      if (i.address == address) return i.interface;
    return std::string();
  };
  CHECK(describe_head_addresses(chosen, 4000, interface) ==
        "10.200.0.1:4000 (the address this host uses to reach slurmctld at head (10.200.0.1), on frc-br; "
        "agents "
        "that cannot reach it try 198.51.100.1 (dummy0), then 192.0.2.2 (eth0))");
  CHECK(describe_head_addresses({{"10.200.0.1", "cluster.address"}}, 4000, interface) ==
        "10.200.0.1:4000 (cluster.address)");
  CHECK(describe_head_addresses({{"10.0.0.9", "cluster.address"}}, 80, interface) ==
        "10.0.0.9:80 (cluster.address)");
  CHECK(describe_head_addresses({{"::1", "cluster.address"}}, 80, interface) == "[::1]:80 (cluster.address)");
}

TEST_CASE("slurmctld_hosts: SlurmctldAddr first, then each SlurmctldHost", "[cluster]") {
  const std::string config =
      "Configuration data as of 2026-12-01T20:00:00\n"
      "AccountingStorageBackupHost = (null)\n"
      "SlurmctldAddr           = (null)\n"
      "SlurmctldHost[0]        = head(10.200.0.1)\n"
      "SlurmctldHost[1]        = backup\n"
      "SlurmctldPort           = 6817\n";
  using Hosts = std::vector<std::pair<std::string, std::string>>;
  CHECK(slurmctld_hosts(config) == Hosts{{"head", "10.200.0.1"}, {"backup", "backup"}});
  CHECK(slurmctld_hosts("SlurmctldHost[0] = ctl1(ctl1-ib)\nSlurmctldAddr = 10.9.0.1\n") ==
        Hosts{{"10.9.0.1", "10.9.0.1"}, {"ctl1", "ctl1-ib"}});
  // scontrol failed (no output), or a value that is no host name.
  CHECK(slurmctld_hosts("").empty());
  CHECK(slurmctld_hosts("SlurmctldHost[0] = $(reboot)\nSlurmctldHost[1] = a b\n").empty());
}

TEST_CASE("parse_endpoints: a comma-separated list of HOST:PORT", "[cluster]") {
  std::string error;
  const auto list = parse_endpoints("10.200.0.1:4000,192.0.2.2:4000,[::1]:4000,node1:80", &error);
  REQUIRE(list);
  REQUIRE(list->size() == 4);
  CHECK((*list)[0].host == "10.200.0.1");
  CHECK((*list)[0].port == "4000");
  CHECK((*list)[1].text == "192.0.2.2:4000");
  CHECK((*list)[2].host == "::1");
  CHECK((*list)[3].host == "node1");
  for (const std::string bad : {"10.200.0.1", "10.200.0.1:", ":4000", "a:1,", "a:1,,b:2", "a:x"}) {
    INFO(bad);
    CHECK_FALSE(parse_endpoints(bad, &error));
  }
  parse_endpoints("a:1,b", &error);
  CHECK(error == "'b': expected HOST:PORT");
}

TEST_CASE("route_source: the local address used to reach a host, user@ ignored", "[cluster]") {
  CHECK(route_source("127.0.0.1") == std::optional<std::string>("127.0.0.1"));
  CHECK(route_source("alice@127.0.0.1") == std::optional<std::string>("127.0.0.1"));
}

TEST_CASE("a node's work reaches it in its Start as it was made", "[cluster][env]") {
  NodeWork work;
  work.step = "train";
  work.run_id = "train-20261201-120000-ab12cd";
  work.run_dir = "/shared/.flowrun/runs/train-20261201-120000-ab12cd";
  work.env = {{"DATA", "/data"}, {"EMPTY", ""}, {"EQ", "a=b"}};
  work.world_size = 8;
  work.nodes = 4;
  work.node_rank = 3;
  work.max_restarts = 2;
  work.restart_count = 1;
  work.master_addr = "10.0.0.1";
  work.master_port = 29500;
  for (DeviceRule rule : {DeviceRule::leave, DeviceRule::set, DeviceRule::if_inherited}) {
    work.devices = rule;
    work.nccl_flight_recorder = rule == DeviceRule::set;
    work.ranks = {{6, 0, rule == DeviceRule::leave ? "" : "0"}, {7, 1, rule == DeviceRule::leave ? "" : "1"}};
    Start start = start_of(work);
    start.workdir = "/shared";
    start.argv = {"python3", "train.py"};
    start.ranks[0].upload = true;
    std::string why;
    const auto decoded = decode_message(encode(start), &why);
    REQUIRE(decoded);
    CHECK(why.empty());
    const Start& back = std::get<Start>(*decoded);
    CHECK(back == start);
    CHECK(node_work_of(back) == work);
  }
}
