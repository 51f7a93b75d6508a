// How the head reaches the nodes (lib/cluster/engines.cpp): the srun and ssh
// command lines it starts, the agent's argv, shell quoting for the remote
// shell, and the address agents dial. Command lines are compared whole: they
// are what Slurm and ssh receive.
#include <catch2/catch.hpp>
#include <cstdio>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <string>
#include <unistd.h>
#include <vector>

#include "flowrun/error.h"

#include "engines.h"

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
  return AgentCommand{flowrun, kEndpoint, fake_gpus};
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

std::string this_hostname() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

const std::string kInterfaceRule =
    "this host's name does not resolve to a routable address; using interface ";

}  // namespace

// ---- slurm -------------------------------------------------------------------

TEST_CASE("slurm inside an allocation: one srun with the node's CPUs and GPUs", "[cluster]") {
  const auto job = job_of({"gpu-a01", "gpu-a02"}, {64, 64});
  const auto launches =
      engine_launches(cluster_of(Engine::slurm), node_plan({"", ""}, 4), job, agent_of(), kSshDefault);
  REQUIRE(launches.size() == 1);
  CHECK(launches[0].label == "srun");
  CHECK(launches[0].node == -1);
  CHECK(launches[0].argv == Words{"srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                                  "--kill-on-bad-exit=1", "--input=all", "--cpus-per-task=64",
                                  "--gpus-per-node=4", kFlowrun, "agent", "--rdzv-endpoint", kEndpoint});
}

TEST_CASE("slurm inside an allocation that does not say its CPUs: no --cpus-per-task", "[cluster]") {
  const auto job = job_of({"n1", "n2", "n3"}, {});
  const auto launches =
      engine_launches(cluster_of(Engine::slurm), node_plan({"", "", ""}, 0), job, agent_of(), kSshDefault);
  REQUIRE(launches.size() == 1);
  CHECK(launches[0].argv == Words{"srun", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1",
                                  "--kill-on-bad-exit=1", "--input=all", kFlowrun, "agent", "--rdzv-endpoint",
                                  kEndpoint});
}

TEST_CASE("slurm outside an allocation: srun makes one, named after the step", "[cluster]") {
  const auto launches = engine_launches(cluster_of(Engine::slurm), node_plan({"", ""}, 8), std::nullopt,
                                        agent_of(), kSshDefault);
  REQUIRE(launches.size() == 1);
  CHECK(launches[0].argv == Words{"srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                                  "--kill-on-bad-exit=1", "--input=all", "--job-name=flowrun-train",
                                  "--gpus-per-node=8", kFlowrun, "agent", "--rdzv-endpoint", kEndpoint});
}

TEST_CASE("slurm: srun_args go after flowrun's options, --fake-gpus to the agent", "[cluster]") {
  auto cluster = cluster_of(Engine::slurm);
  cluster.srun_args = {"--partition=debug", "--time=00:10:00"};
  const auto launches =
      engine_launches(cluster, node_plan({"", ""}, 2), std::nullopt, agent_of(kFlowrun, 2), kSshDefault);
  REQUIRE(launches.size() == 1);
  CHECK(launches[0].argv == Words{"srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                                  "--kill-on-bad-exit=1", "--input=all", "--job-name=flowrun-train",
                                  "--gpus-per-node=2", "--partition=debug", "--time=00:10:00", kFlowrun,
                                  "agent", "--rdzv-endpoint", kEndpoint, "--fake-gpus", "2"});
}

TEST_CASE("slurm: CPU workers ask for no GPUs", "[cluster]") {
  const auto launches = engine_launches(cluster_of(Engine::slurm), node_plan({"", ""}, 0), std::nullopt,
                                        agent_of(), kSshDefault);
  REQUIRE(launches.size() == 1);
  CHECK(launches[0].argv == Words{"srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                                  "--kill-on-bad-exit=1", "--input=all", "--job-name=flowrun-train", kFlowrun,
                                  "agent", "--rdzv-endpoint", kEndpoint});
}

// ---- ssh ---------------------------------------------------------------------

TEST_CASE("ssh: one ssh per node, the agent's words as one remote command with its node rank", "[cluster]") {
  auto cluster = cluster_of(Engine::ssh);
  cluster.ssh_command = {"ssh", "-F", "cluster.cfg"};
  cluster.hosts = {"node1", "alice@node2"};
  const auto launches =
      engine_launches(cluster, node_plan(cluster.hosts, 2), std::nullopt, agent_of(), {"never-used"});
  REQUIRE(launches.size() == 2);
  CHECK(launches[0].label == "node1 ssh");
  CHECK(launches[0].node == 0);
  CHECK(launches[0].argv ==
        Words{"ssh", "-F", "cluster.cfg", "node1",
              "exec /opt/flowrun/bin/flowrun agent --rdzv-endpoint 10.0.0.1:4000 --node-rank 0"});
  // user@host: ssh gets it as written, the console label is the host.
  CHECK(launches[1].label == "node2 ssh");
  CHECK(launches[1].node == 1);
  CHECK(launches[1].argv ==
        Words{"ssh", "-F", "cluster.cfg", "alice@node2",
              "exec /opt/flowrun/bin/flowrun agent --rdzv-endpoint 10.0.0.1:4000 --node-rank 1"});
}

TEST_CASE("ssh: without ssh_command the default (FLOWRUN_SSH or ssh) is used", "[cluster]") {
  auto cluster = cluster_of(Engine::ssh);
  const auto launches = engine_launches(cluster, node_plan({"n1", "n2"}, 0), std::nullopt,
                                        agent_of(kFlowrun, 0), {"ssh", "-o", "BatchMode=yes"});
  REQUIRE(launches.size() == 2);
  CHECK(
      launches[1].argv ==
      Words{"ssh", "-o", "BatchMode=yes", "n2",
            "exec /opt/flowrun/bin/flowrun agent --rdzv-endpoint 10.0.0.1:4000 --node-rank 1 --fake-gpus 0"});
}

TEST_CASE("ssh: a flowrun path with a space reaches the remote shell as one word", "[cluster]") {
  const std::string flowrun = "/opt/my tools/it's/flowrun";
  auto cluster = cluster_of(Engine::ssh);
  const auto launches =
      engine_launches(cluster, node_plan({"n1", "n2"}, 0), std::nullopt, agent_of(flowrun), kSshDefault);
  REQUIRE(launches.size() == 2);
  const std::string remote = launches[0].argv.back();
  CHECK(remote == "exec '/opt/my tools/it'\\''s/flowrun' agent --rdzv-endpoint 10.0.0.1:4000 --node-rank 0");
  // What a POSIX shell makes of it after `exec`: the agent's argv, word for word.
  REQUIRE(remote.rfind("exec ", 0) == 0);
  CHECK(shell_words(remote.substr(5)) ==
        Words{flowrun, "agent", "--rdzv-endpoint", "10.0.0.1:4000", "--node-rank", "0"});
}

// ---- manual ------------------------------------------------------------------

TEST_CASE("manual: the head starts nothing", "[cluster]") {
  CHECK(engine_launches(cluster_of(Engine::manual), node_plan({"", ""}, 2), std::nullopt, agent_of(),
                        kSshDefault)
            .empty());
}

TEST_CASE("flowrun run's rendezvous: the head starts node 0's agent, and keeps node 0 for it", "[cluster]") {
  auto cluster = cluster_of(Engine::manual);
  cluster.rendezvous = "127.0.0.1:29500";
  const auto launches =
      engine_launches(cluster, node_plan({"", ""}, 2), std::nullopt, agent_of(), kSshDefault);
  REQUIRE(launches.size() == 1);
  CHECK(launches[0].node == 0);
  CHECK(launches[0].argv.back() == "0");
  // Another node's agent that dials in before node 0's own, asking for no
  // rank, gets node rank 1: taking 0 would refuse node 0's own agent.
  CHECK(free_node_rank({false, false}, {launches[0].node}) == 1);
  CHECK(free_node_rank({false, true}, {launches[0].node}) == -1);
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

TEST_CASE("choose_head_address: cluster.address wins as written", "[cluster]") {
  auto cluster = cluster_of(Engine::ssh);
  cluster.address = "10.200.0.1";
  cluster.hosts = {"127.0.0.1"};
  const auto chosen = choose_head_address(cluster, std::nullopt, "localhost");
  CHECK(chosen.address == "10.200.0.1");
  CHECK(chosen.why == "cluster.address");
  // Even a loopback address: the user asked for it (one-host tests do).
  cluster.address = "127.0.0.1";
  const auto loop = choose_head_address(cluster, job_of({"127.0.0.1"}, {}), "localhost");
  CHECK(loop.address == "127.0.0.1");
  CHECK(loop.why == "cluster.address");
}

TEST_CASE("choose_head_address: a host name that is an address is used when it is not loopback",
          "[cluster]") {
  const auto chosen = choose_head_address(cluster_of(Engine::manual), std::nullopt, "192.0.2.77");
  CHECK(chosen.address == "192.0.2.77");
  CHECK(chosen.why == "the address of this host's name, 192.0.2.77");
}

TEST_CASE("choose_head_address: loopback routes and a loopback host name are skipped", "[cluster]") {
  auto cluster = cluster_of(Engine::ssh);
  cluster.hosts = {"127.0.0.1"};
  // "localhost" resolves to loopback, so the interface rule decides.
  if (has_routable_interface()) {
    const auto chosen = choose_head_address(cluster, std::nullopt, "localhost");
    INFO(chosen.address << " (" << chosen.why << ")");
    CHECK_FALSE(is_loopback(chosen.address));
    CHECK(chosen.why.rfind(kInterfaceRule, 0) == 0);
    // The same for a Slurm allocation whose node is this host.
    const auto slurm = choose_head_address(cluster_of(Engine::slurm), job_of({"127.0.0.1"}, {}), "localhost");
    CHECK(slurm.address == chosen.address);
    CHECK(slurm.why == chosen.why);
  } else {
    CHECK_THROWS_WITH(choose_head_address(cluster, std::nullopt, "localhost"),
                      "cannot find an address for the other nodes to reach this host: set cluster.address");
  }
  // With this machine's own name: the name rule or the interface rule, never
  // the loopback route; which one depends on how the machine maps its name.
  const std::string host = this_hostname();
  if (has_routable_interface()) {
    const auto chosen = choose_head_address(cluster, std::nullopt, host);
    INFO(chosen.address << " (" << chosen.why << ")");
    CHECK_FALSE(is_loopback(chosen.address));
    CHECK((chosen.why == "the address of this host's name, " + host ||
           chosen.why.rfind(kInterfaceRule, 0) == 0));
  }
}

TEST_CASE("route_source: the local address used to reach a host, user@ ignored", "[cluster]") {
  CHECK(route_source("127.0.0.1") == std::optional<std::string>("127.0.0.1"));
  CHECK(route_source("alice@127.0.0.1") == std::optional<std::string>("127.0.0.1"));
}
