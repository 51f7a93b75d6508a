// The planner's decision table (docs/plan.md), one test per row, and every
// refusal with its exact message, one row each of a table. No spec parsing here: steps are built by
// hand, so these tests pin the planner alone.
#include "flowrun/plan.h"

#include <algorithm>
#include <catch2/catch.hpp>

#include "flowrun/worker_env.h"

using namespace flowrun;

namespace {

constexpr Location kParallel{10, 5}, kGpus{11, 11}, kNodes{12, 12}, kProcs{13, 21}, kCpus{14, 11};

Step make_step(const std::string& name = "train") {
  Step step;
  step.name = name;
  step.argv = {"python3", "train.py"};
  ParallelSpec p;
  p.loc = kParallel;
  p.gpus.loc = kParallel;
  p.nodes.loc = kParallel;
  p.procs_per_node.loc = kParallel;
  p.cpus_loc = kParallel;
  step.parallel = p;
  return step;
}

Step with_gpus(Step step, int count) {
  step.parallel->gpus = GpuRequest{GpuRequest::Kind::count, count, {}, true, kGpus};
  return step;
}

Step with_ids(Step step, std::vector<std::string> ids) {
  step.parallel->gpus = GpuRequest{GpuRequest::Kind::ids, 0, std::move(ids), true, kGpus};
  return step;
}

Step with_nodes(Step step, int nodes) {
  step.parallel->nodes = AutoCount{nodes, kNodes};
  return step;
}

Step with_procs(Step step, int procs) {
  step.parallel->procs_per_node = AutoCount{procs, kProcs};
  return step;
}

Step with_cpus(Step step, int cpus) {
  step.parallel->cpus = cpus;
  step.parallel->cpus_loc = kCpus;
  return step;
}

HostFacts host_with(int gpus, const EnvMap& env = {}) {
  return HostFacts{"host-a", select_gpus(fake_system_gpus(gpus), env), {}, {}, {}};
}

HostFacts gpu_less_host() {
  SystemGpus none;
  none.source = "none";
  none.unavailable_reason = "libnvidia-ml.so.1 not found: no NVIDIA driver on this host";
  return HostFacts{"host-a", select_gpus(none, {}), {}, {}, {}};
}

ClusterSpec ssh_cluster(std::vector<std::string> hosts, std::optional<int> gpus_per_node = std::nullopt) {
  ClusterSpec cluster;
  cluster.engine = Engine::ssh;
  cluster.hosts = std::move(hosts);
  cluster.gpus_per_node = gpus_per_node;
  cluster.loc = {30, 1};
  cluster.hosts_loc = {32, 10};
  return cluster;
}

ClusterSpec slurm_cluster(std::optional<int> gpus_per_node = std::nullopt) {
  ClusterSpec cluster;
  cluster.engine = Engine::slurm;
  cluster.gpus_per_node = gpus_per_node;
  cluster.loc = {30, 1};
  return cluster;
}

StepPlan must_plan(const Step& step, const HostFacts& host,
                   const std::optional<ClusterSpec>& cluster = std::nullopt, PlanOptions options = {}) {
  PlanResult result = plan_step(step, cluster, host, options);
  if (auto* refusal = std::get_if<Refusal>(&result)) FAIL("refused: " << refusal->message);
  return std::get<StepPlan>(result);
}

Refusal must_refuse(const Step& step, const HostFacts& host,
                    const std::optional<ClusterSpec>& cluster = std::nullopt, PlanOptions options = {}) {
  PlanResult result = plan_step(step, cluster, host, options);
  if (std::holds_alternative<StepPlan>(result)) FAIL("planned, but a refusal was expected");
  return std::get<Refusal>(result);
}

// "rank:node:local_rank:gpus" for every rank, to compare whole layouts at once.
std::vector<std::string> layout(const StepPlan& plan) {
  std::vector<std::string> out;
  for (const auto& rank : plan.ranks) {
    std::string gpus;
    for (int g : rank.gpus) {
      if (!gpus.empty()) gpus += ",";
      gpus += std::to_string(
          plan.nodes[static_cast<std::size_t>(rank.node)].gpus[static_cast<std::size_t>(g)].index);
    }
    out.push_back(std::to_string(rank.rank) + ":" + std::to_string(rank.node) + ":" +
                  std::to_string(rank.local_rank) + ":" + gpus);
  }
  return out;
}

std::string env_value(const EnvList& env, const std::string& name) {
  for (const auto& [key, value] : env)
    if (key == name) return value;
  return "<unset>";
}

// `rank`'s variables as made on this host: its node's work, this host's site.
EnvList worker_env(const Spec& spec, const Step& step, const StepPlan& plan, const RankPlan& rank,
                   const LaunchContext& ctx) {
  const NodeWork work = node_work(spec, step, plan, rank.node, ctx);
  return worker_env(work, work.ranks.at(static_cast<std::size_t>(rank.local_rank)), this_host(ctx));
}

LaunchContext context(EnvMap parent = {}) {
  LaunchContext ctx;
  ctx.run_id = "train-20261129-120000-abcdef";
  ctx.master_port = 29400;
  ctx.layout.run_dir = "/work/.flowrun/runs/train-20261129-120000-abcdef";
  ctx.parent_env = std::move(parent);
  return ctx;
}

}  // namespace

// ---- decision table rows ---------------------------------------------------

TEST_CASE("row 1: gpus all on a host with GPUs -> one node, one worker per GPU", "[plan]") {
  StepPlan plan = must_plan(make_step(), host_with(8));
  CHECK(plan.mode == PlanMode::single_node);
  CHECK_FALSE(plan.cpu);
  CHECK(plan.world_size == 8);
  CHECK(plan.gpus_per_proc == 1);
  REQUIRE(plan.nodes.size() == 1);
  CHECK(plan.nodes[0].host == "host-a");
  CHECK(plan.nodes[0].is_local);
  CHECK(plan.nodes[0].procs == 8);
  CHECK(layout(plan) == std::vector<std::string>{"0:0:0:0", "1:0:1:1", "2:0:2:2", "3:0:3:3", "4:0:4:4",
                                                 "5:0:5:5", "6:0:6:6", "7:0:7:7"});
  CHECK(plan.why == std::vector<std::string>{
                        "8 GPUs found on host-a (NVIDIA H200 x8).",
                        "Step train asks for all of them (gpus: all, the default): one node.",
                        "One node (host-a), 8 workers, WORLD_SIZE=8.",
                    });
}

TEST_CASE("row 1: a cluster section does not make a job that fits fan out", "[plan]") {
  StepPlan plan = must_plan(make_step(), host_with(4), ssh_cluster({"a", "b"}));
  CHECK(plan.mode == PlanMode::single_node);
  CHECK(plan.world_size == 4);
  CHECK_FALSE(plan.engine.has_value());
}

TEST_CASE("row 2: gpus N within this host -> one node, the first N GPUs", "[plan]") {
  StepPlan plan = must_plan(with_gpus(make_step(), 4), host_with(8), slurm_cluster());
  CHECK(plan.mode == PlanMode::single_node);
  CHECK(layout(plan) == std::vector<std::string>{"0:0:0:0", "1:0:1:1", "2:0:2:2", "3:0:3:3"});
  CHECK(plan.why[1] == "Step train asks for 4 GPUs (gpus: 4): one node, GPUs 0-3.");
}

TEST_CASE("row 3: gpus [ids] -> one node, those GPUs, by ordinal or UUID", "[plan]") {
  // Real UUIDs differ early, so a short prefix names one GPU.
  SystemGpus system = fake_system_gpus(8);
  for (std::size_t i = 0; i < system.devices.size(); ++i)
    system.devices[i].uuid = "GPU-" + std::to_string(i) + "c3e61d2-59a0-6f2b-1d44-0a9b3c7e1f20";
  HostFacts host{"host-a", select_gpus(system, {}), {}, {}, {}};
  StepPlan plan = must_plan(with_ids(make_step(), {"5", "GPU-2c3e"}), host);
  CHECK(plan.world_size == 2);
  CHECK(layout(plan) == std::vector<std::string>{"0:0:0:5", "1:0:1:2"});
  CHECK(plan.why[1] == "Step train asks for 2 GPUs 5, 2 (gpus: [5, GPU-2c3e]): one node.");
}

TEST_CASE("row 4: procs_per_node K -> K workers per node, the node's GPUs split among them", "[plan]") {
  StepPlan plan = must_plan(with_procs(make_step(), 2), host_with(8));
  CHECK(plan.world_size == 2);
  CHECK(plan.gpus_per_proc == 4);
  CHECK(layout(plan) == std::vector<std::string>{"0:0:0:0,1,2,3", "1:0:1:4,5,6,7"});
  CHECK(plan.why[2] == "procs_per_node: 2 gives each worker 4 GPUs (model-parallel within a worker).");
  CHECK(plan.why[3] == "One node (host-a), 2 workers, WORLD_SIZE=2.");
}

TEST_CASE("row 5: gpus N beyond this host with a cluster -> the fewest nodes, split evenly", "[plan]") {
  SECTION("16 over nodes of 8: 2 nodes x 8") {
    StepPlan plan =
        must_plan(with_gpus(make_step(), 16), host_with(8), ssh_cluster({"gpu-a", "gpu-b", "gpu-c"}));
    CHECK(plan.mode == PlanMode::multi_node);
    CHECK(plan.engine == Engine::ssh);
    CHECK(plan.world_size == 16);
    REQUIRE(plan.nodes.size() == 2);
    CHECK(plan.nodes[0].host == "gpu-a");
    CHECK(plan.nodes[1].host == "gpu-b");
    CHECK(plan.nodes[1].first_rank == 8);
    CHECK(layout(plan)[9] == "9:1:1:1");
    CHECK(plan.why[1] ==
          "Step train asks for 16 GPUs (gpus: 16), more than one node has: it fans out over the cluster "
          "(engine: ssh); each node is taken to have as many GPUs as host-a (8; set cluster.gpus_per_node if "
          "they differ).");
    CHECK(plan.why[2] == "2 nodes x 8 workers, 16 workers, WORLD_SIZE=16.");
  }
  SECTION("12 over nodes of 8: 2 nodes x 6") {
    StepPlan plan = must_plan(with_gpus(make_step(), 12), host_with(8), slurm_cluster());
    CHECK(plan.nodes.size() == 2);
    CHECK(plan.nodes[0].procs == 6);
    CHECK(plan.nodes[0].host.empty());
    CHECK(plan.nodes[0].gpus_available == 8);
  }
  SECTION("cluster.gpus_per_node wins over this host's count") {
    StepPlan plan = must_plan(with_gpus(make_step(), 8), host_with(2), slurm_cluster(4));
    CHECK(plan.nodes.size() == 2);
    CHECK(plan.nodes[0].procs == 4);
  }
}

TEST_CASE("row 6: nodes M with gpus all -> M nodes with every GPU of each", "[plan]") {
  StepPlan plan = must_plan(with_nodes(make_step(), 2), host_with(4), slurm_cluster());
  CHECK(plan.mode == PlanMode::multi_node);
  CHECK(plan.engine == Engine::slurm);
  CHECK(plan.world_size == 8);
  CHECK(
      plan.why[1] ==
      "Step train asks for all GPUs of 2 nodes (nodes: 2); each node is taken to have as many GPUs as host-a "
      "(4; set cluster.gpus_per_node if they differ).");
}

TEST_CASE("row 7: nodes M with gpus N -> N/M GPUs on each of M nodes", "[plan]") {
  StepPlan plan = must_plan(with_nodes(with_gpus(make_step(), 4), 2), host_with(8), slurm_cluster());
  CHECK(plan.nodes.size() == 2);
  CHECK(plan.nodes[0].procs == 2);
  CHECK(layout(plan) == std::vector<std::string>{"0:0:0:0", "1:0:1:1", "2:1:0:0", "3:1:1:1"});
}

TEST_CASE("row 8: nodes 1 keeps the step on this host even with a cluster", "[plan]") {
  StepPlan plan = must_plan(with_nodes(with_gpus(make_step(), 2), 1), host_with(8), slurm_cluster());
  CHECK(plan.mode == PlanMode::single_node);
  CHECK(plan.world_size == 2);
}

TEST_CASE("row 9: a head without GPUs fans out with cluster.gpus_per_node", "[plan]") {
  SECTION("gpus all over every ssh host") {
    StepPlan plan = must_plan(make_step(), gpu_less_host(), ssh_cluster({"gpu-a", "gpu-b"}, 4));
    CHECK(plan.mode == PlanMode::multi_node);
    CHECK(plan.world_size == 8);
    CHECK(plan.why[1] ==
          "Step train asks for all GPUs and host-a has none: it uses every host of cluster.hosts (2 nodes); "
          "cluster.gpus_per_node says each node has 4 GPUs.");
  }
  SECTION("gpus N") {
    StepPlan plan = must_plan(with_gpus(make_step(), 16), gpu_less_host(), slurm_cluster(8));
    CHECK(plan.nodes.size() == 2);
    CHECK(plan.world_size == 16);
  }
}

TEST_CASE("row 10: cpus N -> one node, N CPU workers, no GPU", "[plan]") {
  SECTION("from the spec, on a GPU-less host") {
    StepPlan plan = must_plan(with_cpus(make_step(), 4), gpu_less_host());
    CHECK(plan.cpu);
    CHECK(plan.mode == PlanMode::single_node);
    CHECK(plan.world_size == 4);
    CHECK(plan.gpus_per_proc == 0);
    CHECK(layout(plan) == std::vector<std::string>{"0:0:0:", "1:0:1:", "2:0:2:", "3:0:3:"});
    CHECK(plan.why ==
          std::vector<std::string>{
              "Step train asks for 4 workers on CPUs (cpus: 4), so no GPU is used and every worker sees "
              "none (CUDA_VISIBLE_DEVICES is empty).",
              "One node (host-a), 4 workers, WORLD_SIZE=4.",
          });
  }
  SECTION("--cpus overrides the spec's GPUs, even on a GPU host") {
    PlanOptions options;
    options.cpus = 2;
    StepPlan plan = must_plan(with_gpus(make_step(), 8), host_with(8), std::nullopt, options);
    CHECK(plan.cpu);
    CHECK(plan.world_size == 2);
    CHECK(plan.why[0].find("(--cpus 2)") != std::string::npos);
  }
}

TEST_CASE("row 11: cpus N with nodes M -> N/M CPU workers on each node", "[plan]") {
  StepPlan plan =
      must_plan(with_nodes(with_cpus(make_step(), 4), 2), gpu_less_host(), ssh_cluster({"a", "b"}));
  CHECK(plan.cpu);
  CHECK(plan.mode == PlanMode::multi_node);
  CHECK(layout(plan) == std::vector<std::string>{"0:0:0:", "1:0:1:", "2:1:0:", "3:1:1:"});
  CHECK(plan.why[1] == "2 nodes (nodes: 2, engine: ssh), 2 workers each, WORLD_SIZE=4.");
}

// A host that is node 0 of a gang of `nodes` (a Kubernetes Indexed Job).
HostFacts gang_host(int gpus, int nodes) {
  HostFacts host = host_with(gpus);
  GangRead gang;
  gang.platform = GangPlatform::indexed_job;
  gang.num_nodes = nodes;
  gang.head_host = "train-0.train";
  host.gang = gang;
  return host;
}

ClusterSpec gang_cluster() {
  ClusterSpec cluster;
  cluster.engine = Engine::gang;
  cluster.loc = {30, 1};
  return cluster;
}

TEST_CASE("row 12: a step that does not say nodes spans the gang, its spares apart", "[plan][gang]") {
  StepPlan plan = must_plan(make_step(), gang_host(4, 3), gang_cluster());
  CHECK(plan.mode == PlanMode::multi_node);
  CHECK(plan.engine == Engine::gang);
  CHECK(plan.world_size == 12);
  REQUIRE(plan.nodes.size() == 3);
  CHECK(plan.nodes[0].is_local);
  CHECK(plan.nodes[0].host == "host-a");
  CHECK(plan.nodes[1].host.empty());  // the gang's pod of index 1, whatever its address
  CHECK(plan.why[1] ==
        "Step train asks for all GPUs of 3 nodes (every node of the Kubernetes Indexed Job but its spares); "
        "each "
        "node is taken to have as many GPUs as host-a (4; set cluster.gpus_per_node if they differ).");
  Step spared = make_step();
  spared.parallel->spare_nodes = 1;
  StepPlan with_spare = must_plan(spared, gang_host(4, 3), gang_cluster());
  CHECK(with_spare.nodes.size() == 2);
  CHECK(with_spare.spares.size() == 1);
  Step cpus = with_cpus(make_step(), 6);
  CHECK(layout(must_plan(cpus, gang_host(0, 3), gang_cluster())) ==
        std::vector<std::string>{"0:0:0:", "1:0:1:", "2:1:0:", "3:1:1:", "4:2:0:", "5:2:1:"});
}

TEST_CASE("row 13: a step of fewer nodes than the gang leaves the other pods as spares", "[plan][gang]") {
  StepPlan plan = must_plan(with_nodes(make_step(), 2), gang_host(4, 4), gang_cluster());
  REQUIRE(plan.nodes.size() == 2);
  REQUIRE(plan.spares.size() == 2);
  CHECK(plan.spares[0].node_rank == 2);
  CHECK(plan.spares[1].node_rank == 3);
  CHECK(plan.why.back() ==
        "2 spare nodes (gang node 2, gang node 3) join and wait with no rank: when a node is lost, a spare "
        "takes "
        "its node rank and every rank restarts from the script's checkpoint (the Kubernetes Indexed Job's "
        "nodes "
        "beyond the step's 2 nodes).");
  // nodes: 1 stays on the head, as anywhere.
  CHECK(must_plan(with_nodes(make_step(), 1), gang_host(4, 4), gang_cluster()).mode == PlanMode::single_node);
}

TEST_CASE("R16: a step that needs more nodes than the gang has is refused with the count", "[plan][gang]") {
  const Refusal r = must_refuse(with_nodes(make_step(), 3), gang_host(4, 2), gang_cluster());
  CHECK(r.path == "steps.train.parallel.nodes");
  CHECK(r.message ==
        "step train needs 3 nodes but this Kubernetes Indexed Job has 2 nodes; start it with 3 (flowrun "
        "manifest "
        "sizes it from the spec) or ask for fewer nodes");
}

TEST_CASE("spare_nodes K: K more hosts of the list, after the nodes, with no rank", "[plan]") {
  Step step = with_nodes(with_cpus(make_step(), 4), 2);
  step.parallel->spare_nodes = 1;
  StepPlan plan = must_plan(step, gpu_less_host(), ssh_cluster({"a", "b", "c", "d"}));
  REQUIRE(plan.nodes.size() == 2);
  REQUIRE(plan.spares.size() == 1);
  CHECK(plan.spares[0].host == "c");
  CHECK(plan.spares[0].node_rank == 2);
  CHECK(plan.spares[0].procs == 0);
  CHECK(plan.world_size == 4);
  CHECK(plan.why.back() ==
        "1 spare node (c) joins and waits with no rank: when a node is lost, a spare takes its node rank and "
        "every rank restarts from the script's checkpoint (spare_nodes: 1).");

  step.parallel->spare_nodes = 3;
  Refusal short_list = must_refuse(step, gpu_less_host(), ssh_cluster({"a", "b", "c", "d"}));
  CHECK(short_list.path == "cluster.hosts");
  CHECK(short_list.message ==
        "step train needs 2 nodes and 3 spares (spare_nodes) but cluster.hosts lists 4 (a, b, c, d); add "
        "hosts, or ask for fewer spares or GPUs");

  // One node on this host has no node to lose to a spare.
  Step local = with_cpus(make_step(), 2);
  local.parallel->spare_nodes = 1;
  local.parallel->spare_nodes_loc = {12, 20};
  Refusal alone = must_refuse(local, gpu_less_host());
  CHECK(alone.loc.line == 12);
  CHECK(alone.path == "steps.train.parallel.spare_nodes");
}

TEST_CASE("nodes MIN:MAX: planned for MAX nodes, said elastic; an attempt on fewer renumbers the ranks",
          "[plan]") {
  Step step = with_nodes(with_cpus(make_step(), 6), 3);
  step.parallel->min_nodes = 1;
  StepPlan plan = must_plan(step, gpu_less_host(), ssh_cluster({"a", "b", "c"}));
  CHECK(plan.min_nodes == 1);
  CHECK(plan.nodes.size() == 3);
  CHECK(plan.world_size == 6);
  CHECK(
      plan.why.back().rfind("nodes: \"1:3\" is elastic: the step starts on as many nodes as join (at most 3, "
                            "at least 1, within cluster.join_timeout), WORLD_SIZE = nodes x 2",
                            0) == 0);
  const StepPlan two = plan_for_nodes(plan, 2);
  CHECK(two.nodes.size() == 2);
  CHECK(two.world_size == 4);
  CHECK(layout(two) == std::vector<std::string>{"0:0:0:", "1:0:1:", "2:1:0:", "3:1:1:"});
  CHECK(two.min_nodes == 1);
  const StepPlan one = plan_for_nodes(plan, 1);
  CHECK(one.world_size == 2);
  CHECK(one.nodes.front().procs == 2);
  // A fixed count says nothing of a range.
  Step fixed = with_nodes(with_cpus(make_step(), 6), 3);
  CHECK(must_plan(fixed, gpu_less_host(), ssh_cluster({"a", "b", "c"})).min_nodes == 0);
}

// ---- refusals --------------------------------------------------------------

namespace {

// One refusal: what provokes it, and what it says where. An empty `path` or
// `message`, or no `loc`, is not checked in that row.
struct RefusalRow {
  const char* rule;
  Step step;
  HostFacts host;
  std::optional<ClusterSpec> cluster;
  std::optional<Location> loc;
  std::string path;
  std::string message;
};

}  // namespace

TEST_CASE("refusals: each of docs/plan.md's refusals says what to change, where", "[plan]") {
  const std::string uuid1 = host_with(4).inventory.gpus[1].uuid;
  const RefusalRow row = GENERATE_COPY(values<RefusalRow>({
      {"R1: no GPU, no cpus, no cluster says how to run on CPU workers", make_step(), gpu_less_host(),
       std::nullopt, kParallel, "steps.train.parallel",
       "step train needs GPUs but host-a has none (libnvidia-ml.so.1 not found: no NVIDIA driver on this "
       "host); to run on CPU workers add 'cpus: N' under steps.train.parallel or pass --cpus N; to use GPU "
       "nodes add a cluster: section with gpus_per_node"},
      {"R1: GPUs hidden by CUDA_VISIBLE_DEVICES are named as the cause", with_gpus(make_step(), 2),
       host_with(8, {{"CUDA_VISIBLE_DEVICES", ""}}), std::nullopt, std::nullopt, "steps.train.parallel.gpus",
       "step train needs GPUs but host-a has none (CUDA_VISIBLE_DEVICES hides all 8); to run on CPU workers "
       "add 'cpus: N' under steps.train.parallel or pass --cpus N; to use GPU nodes add a cluster: section "
       "with gpus_per_node"},
      {"R2: more GPUs than this host has and no cluster", with_gpus(make_step(), 16), host_with(8),
       std::nullopt, kGpus, "steps.train.parallel.gpus",
       "gpus: 16 asks for more GPUs than host-a has (8 GPUs: NVIDIA H200 x8) and the spec has no cluster: "
       "section to fan out to; ask for at most 8, or add a cluster: section (docs/spec.md#cluster)"},
      {"R3: a count that does not split evenly over the nodes it needs", with_gpus(make_step(), 9),
       host_with(8), slurm_cluster(), std::nullopt, "",
       "gpus: 9 needs 2 nodes of at most 8 GPUs but does not split evenly over them (every node runs the "
       "same "
       "number of workers); ask for 8 or 10, or set nodes: explicitly"},
      {"R4: nodes M with a count that M does not divide", with_nodes(with_gpus(make_step(), 6), 4),
       host_with(8), slurm_cluster(), kGpus, "",
       "gpus: 6 does not split evenly over 4 nodes (nodes: 4); ask for a multiple of 4"},
      {"R5: nodes M with more GPUs per node than a node has", with_nodes(with_gpus(make_step(), 32), 2),
       host_with(8), slurm_cluster(), std::nullopt, "",
       "gpus: 32 over 2 nodes is 16 GPUs per node, but each node is taken to have as many GPUs as host-a (8; "
       "set cluster.gpus_per_node if they differ); ask for at most 16 or more nodes"},
      {"R6: nodes M > 1 without a cluster", with_nodes(make_step(), 2), host_with(8), std::nullopt, kNodes,
       "steps.train.parallel.nodes",
       "asks for 2 nodes but the spec has no cluster: section to fan out to; remove nodes: to run on host-a "
       "alone, or add a cluster: section (docs/spec.md#cluster)"},
      {"R7: a GPU id this host does not have", with_ids(make_step(), {"0", "9"}), host_with(8), std::nullopt,
       kGpus, "",
       "GPU '9' names no GPU on host-a, which has 8 GPUs: 0-7 (NVIDIA H200 x8); use ids from 'flowrun gpus'"},
      {"R7: a GPU UUID this host does not have", with_ids(make_step(), {"GPU-0000"}), host_with(2),
       std::nullopt, std::nullopt, "",
       "GPU 'GPU-0000' names no GPU on host-a, which has 2 GPUs: 0, 1 (NVIDIA H200 x2); use ids from "
       "'flowrun gpus'"},
      {"R7: a MIG instance is not a GPU flowrun can place workers on",
       with_ids(make_step(), {"MIG-5c1a0000-0000-4000-8000-000000000000"}), host_with(2), std::nullopt,
       std::nullopt, "",
       "GPU 'MIG-5c1a0000-0000-4000-8000-000000000000' is a MIG instance; flowrun places workers on whole "
       "GPUs, so list GPU ordinals or GPU-... UUIDs from 'flowrun gpus'"},
      {"R7: an id prefix that matches several GPUs", with_ids(make_step(), {"GPU-fa4e"}), host_with(2),
       std::nullopt, std::nullopt, "",
       "GPU 'GPU-fa4e' matches more than one GPU on host-a, which has 2 GPUs: 0, 1 (NVIDIA H200 x2); use ids "
       "from 'flowrun gpus'"},
      {"R8: the same GPU twice, by ordinal and by UUID", with_ids(make_step(), {"1", uuid1}), host_with(4),
       std::nullopt, std::nullopt, "",
       "GPU '" + uuid1 + "' is listed twice (it is GPU 1); list each GPU once"},
      {"R9: GPU ids with several nodes", with_nodes(with_ids(make_step(), {"0", "1"}), 2), host_with(8),
       slurm_cluster(), std::nullopt, "",
       "a list of GPU ids selects GPUs of this host, but nodes: 2 asks for several nodes; give a count "
       "(gpus: "
       "N, the total over all nodes) instead"},
      {"R10: procs_per_node that does not divide the node's GPUs", with_procs(make_step(), 3), host_with(8),
       std::nullopt, kProcs, "steps.train.parallel.procs_per_node",
       "procs_per_node: 3 does not divide the 8 GPUs each node gets; use one of 1, 2, 4, 8 (each worker then "
       "gets the same number of GPUs)"},
      {"R10: procs_per_node above the node's GPUs", with_procs(make_step(), 16), host_with(8), std::nullopt,
       std::nullopt, "",
       "procs_per_node: 16 does not divide the 8 GPUs each node gets; use one of 1, 2, 4, 8 (each worker "
       "then "
       "gets the same number of GPUs)"},
      {"R11: too few hosts in cluster.hosts", with_gpus(make_step(), 24), host_with(8),
       ssh_cluster({"gpu-a", "gpu-b"}), Location{32, 10}, "cluster.hosts",
       "step train needs 3 nodes but cluster.hosts lists 2 (gpu-a, gpu-b); add hosts or ask for fewer GPUs"},
      {"R12: nodes 1 with more GPUs than this host has", with_nodes(with_gpus(make_step(), 16), 1),
       host_with(8), slurm_cluster(), std::nullopt, "",
       "gpus: 16 on one node (nodes: 1), but host-a has 8 GPUs (NVIDIA H200 x8); ask for at most 8, or "
       "remove "
       "nodes: 1 to fan out over the cluster"},
      {"R13: a head without GPUs and a cluster without gpus_per_node, for a count", with_gpus(make_step(), 8),
       gpu_less_host(), slurm_cluster(), std::nullopt, "",
       "host-a has no GPUs and cluster.gpus_per_node is not set, so flowrun cannot tell how many nodes 8 "
       "GPUs "
       "need; set cluster.gpus_per_node or parallel.nodes"},
      {"R13: a head without GPUs and a cluster without gpus_per_node, for nodes", with_nodes(make_step(), 2),
       gpu_less_host(), slurm_cluster(), std::nullopt, "",
       "host-a has no GPUs and cluster.gpus_per_node is not set, so flowrun cannot tell how many GPUs each "
       "of "
       "the 2 nodes has; set cluster.gpus_per_node"},
      {"R14: CPU workers that do not split over the nodes", with_nodes(with_cpus(make_step(), 3), 2),
       gpu_less_host(), slurm_cluster(), kCpus, "",
       "cpus: 3 CPU workers do not split evenly over 2 nodes; ask for a multiple of 2"},
      {"R14: CPU workers that contradict procs_per_node", with_procs(with_cpus(make_step(), 4), 2),
       gpu_less_host(), std::nullopt, kProcs, "",
       "procs_per_node: 2 contradicts cpus: 4 over 1 node (4 per node); for CPU workers set only cpus (the "
       "total)"},
      {"R14: CPU workers on several nodes without a cluster", with_nodes(with_cpus(make_step(), 4), 2),
       gpu_less_host(), std::nullopt, std::nullopt, "steps.train.parallel.nodes", ""},
      {"R15: gpus all on a GPU-less head when all cannot be counted", make_step(), gpu_less_host(),
       slurm_cluster(8), std::nullopt, "",
       "host-a has no GPUs, so 'all' cannot be counted here; say how many the step needs with gpus: N (the "
       "total) or nodes: N, and set cluster.gpus_per_node"},
  }));
  INFO("refusal " << row.rule);
  const Refusal r = must_refuse(row.step, row.host, row.cluster);
  if (row.loc) CHECK(r.loc == *row.loc);
  if (!row.path.empty()) CHECK(r.path == row.path);
  if (!row.message.empty()) CHECK(r.message == row.message);
}

// ---- the environment's GPU selection feeds the plan ---------------------------

TEST_CASE("CUDA_VISIBLE_DEVICES by index limits the plan and is passed on", "[plan][env]") {
  HostFacts host = host_with(8, {{"CUDA_VISIBLE_DEVICES", "2,3"}});
  StepPlan plan = must_plan(make_step(), host);
  CHECK(plan.world_size == 2);
  CHECK(layout(plan) == std::vector<std::string>{"0:0:0:0", "1:0:1:1"});
  LaunchContext ctx = context({{"CUDA_VISIBLE_DEVICES", "2,3"}});
  EnvList env = worker_env(Spec{}, make_step(), plan, plan.ranks[1], ctx);
  CHECK(env_value(env, "CUDA_VISIBLE_DEVICES") == "2,3");
  CHECK(env_value(env, "LOCAL_RANK") == "1");
}

TEST_CASE("CUDA_VISIBLE_DEVICES by UUID is kept as UUIDs for the workers", "[plan][env]") {
  SystemGpus system = fake_system_gpus(4);
  std::string value = system.devices[3].uuid + "," + system.devices[0].uuid;
  HostFacts host{"host-a", select_gpus(system, {{"CUDA_VISIBLE_DEVICES", value}}), {}, {}, {}};
  StepPlan plan = must_plan(with_gpus(make_step(), 1), host);
  LaunchContext ctx = context({{"CUDA_VISIBLE_DEVICES", value}});
  EnvList env = worker_env(Spec{}, make_step(), plan, plan.ranks[0], ctx);
  CHECK(env_value(env, "CUDA_VISIBLE_DEVICES") == system.devices[3].uuid);
}

TEST_CASE("Slurm's SLURM_STEP_GPUS selects the GPUs when CUDA_VISIBLE_DEVICES is unset", "[plan][env]") {
  HostFacts host = host_with(8, {{"SLURM_STEP_GPUS", "4,5,6,7"}, {"SLURM_GPUS_ON_NODE", "4"}});
  StepPlan plan = must_plan(make_step(), host);
  CHECK(plan.world_size == 4);
  EnvList env = worker_env(Spec{}, make_step(), plan, plan.ranks[0], context());
  CHECK(env_value(env, "CUDA_VISIBLE_DEVICES") == "4,5,6,7");
}

TEST_CASE("Slurm's SLURM_GPUS_ON_NODE alone limits the count", "[plan][env]") {
  StepPlan plan = must_plan(make_step(), host_with(8, {{"SLURM_GPUS_ON_NODE", "2"}}));
  CHECK(plan.world_size == 2);
  CHECK(plan.why[1].find("SLURM_GPUS_ON_NODE=2") != std::string::npos);
}

// ---- the worker environment --------------------------------------------------

TEST_CASE("worker_env sets torchrun's contract for every rank", "[env]") {
  StepPlan plan = must_plan(with_gpus(make_step(), 16), host_with(8), ssh_cluster({"gpu-a", "gpu-b"}));
  Spec spec;
  spec.env = {{"DATA", "/data"}};
  Step step = with_gpus(make_step(), 16);
  step.env = {{"LR", "0.1"}};
  LaunchContext ctx = context();
  EnvList env = worker_env(spec, step, plan, plan.ranks[11], ctx);
  const EnvList expected = {
      {"DATA", "/data"},
      {"LR", "0.1"},
      {"LOCAL_RANK", "3"},
      {"RANK", "11"},
      {"GROUP_RANK", "1"},
      {"ROLE_RANK", "11"},
      {"ROLE_NAME", "default"},
      {"LOCAL_WORLD_SIZE", "8"},
      {"WORLD_SIZE", "16"},
      {"GROUP_WORLD_SIZE", "2"},
      {"ROLE_WORLD_SIZE", "16"},
      {"MASTER_ADDR", "gpu-a"},
      {"MASTER_PORT", "29400"},
      {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"TORCHELASTIC_MAX_RESTARTS", "0"},
      {"TORCHELASTIC_RUN_ID", "train-20261129-120000-abcdef"},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"PYTHONUNBUFFERED", "1"},
      {"TORCHELASTIC_ERROR_FILE", "/work/.flowrun/runs/train-20261129-120000-abcdef/train/rank11/error.json"},
      {"OMP_NUM_THREADS", "1"},
      {"FLOWRUN_RUN_ID", "train-20261129-120000-abcdef"},
      {"FLOWRUN_STEP", "train"},
      {"FLOWRUN_NODES", "2"},
      {"FLOWRUN_NODE_RANK", "1"},
      {"FLOWRUN_RUN_DIR", "/work/.flowrun/runs/train-20261129-120000-abcdef"},
      {"FLOWRUN_OUTPUT_DIR", "/work/.flowrun/runs/train-20261129-120000-abcdef/train/rank11/out"},
  };
  CHECK(env == expected);
}

TEST_CASE("worker_env: parallel.role is ROLE_NAME, parallel.job_id TORCHELASTIC_RUN_ID", "[env]") {
  Step step = make_step();
  step.parallel->role = "trainer";
  step.parallel->job_id = "exp-42";
  StepPlan plan = must_plan(step, host_with(2));
  EnvList env = worker_env(Spec{}, step, plan, plan.ranks[1], context());
  CHECK(env_value(env, "ROLE_NAME") == "trainer");
  CHECK(env_value(env, "TORCHELASTIC_RUN_ID") == "exp-42");
  CHECK(env_value(env, "FLOWRUN_RUN_ID") == "train-20261129-120000-abcdef");
}

TEST_CASE("worker_env keeps the user's and the parent's overridable values", "[env]") {
  StepPlan plan = must_plan(make_step(), host_with(2));
  Step step = make_step();
  step.env = {{"OMP_NUM_THREADS", "8"}};
  EnvList env = worker_env(Spec{}, step, plan, plan.ranks[0],
                           context({{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}, {"OMP_NUM_THREADS", "4"}}));
  CHECK(env_value(env, "OMP_NUM_THREADS") == "8");
  CHECK(std::count_if(env.begin(), env.end(), [](const auto& kv) { return kv.first == "OMP_NUM_THREADS"; }) ==
        1);
  CHECK(env_value(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING") == "3");
  CHECK(env_value(env, "NCCL_ASYNC_ERROR_HANDLING") == "1");
}

TEST_CASE("worker_env and step_env: PYTHONUNBUFFERED=1 unless env: or flowrun's environment sets it",
          "[env]") {
  auto count = [](const EnvList& env) {
    return std::count_if(env.begin(), env.end(),
                         [](const auto& kv) { return kv.first == "PYTHONUNBUFFERED"; });
  };
  StepPlan plan = must_plan(make_step(), host_with(2));
  SECTION("nothing sets it: 1, for a worker and for a plain step") {
    EnvList env = worker_env(Spec{}, make_step(), plan, plan.ranks[1], context());
    CHECK(env_value(env, "PYTHONUNBUFFERED") == "1");
    CHECK(count(env) == 1);
    EnvList plain = step_env(Spec{}, make_step("prepare"), context());
    CHECK(env_value(plain, "PYTHONUNBUFFERED") == "1");
    CHECK(count(plain) == 1);
  }
  SECTION("flowrun's environment sets it: its value is kept") {
    LaunchContext ctx = context({{"PYTHONUNBUFFERED", "x"}});
    CHECK(env_value(worker_env(Spec{}, make_step(), plan, plan.ranks[0], ctx), "PYTHONUNBUFFERED") == "x");
    CHECK(env_value(step_env(Spec{}, make_step("prepare"), ctx), "PYTHONUNBUFFERED") == "x");
  }
  SECTION("the spec's or the step's env: wins, an empty value (buffered output) too") {
    Spec spec;
    spec.env = {{"PYTHONUNBUFFERED", ""}};
    LaunchContext ctx = context({{"PYTHONUNBUFFERED", "1"}});
    EnvList env = worker_env(spec, make_step(), plan, plan.ranks[0], ctx);
    CHECK(env_value(env, "PYTHONUNBUFFERED").empty());
    CHECK(count(env) == 1);
    Step step = make_step("prepare");
    step.env = {{"PYTHONUNBUFFERED", ""}};
    EnvList plain = step_env(Spec{}, step, ctx);
    CHECK(env_value(plain, "PYTHONUNBUFFERED").empty());
    CHECK(count(plain) == 1);
  }
}

TEST_CASE("worker_env: OMP_NUM_THREADS only when several workers share a node", "[env]") {
  StepPlan one = must_plan(with_gpus(make_step(), 1), host_with(8));
  CHECK(env_value(worker_env(Spec{}, make_step(), one, one.ranks[0], context()), "OMP_NUM_THREADS") ==
        "<unset>");
  StepPlan two = must_plan(with_gpus(make_step(), 2), host_with(8));
  CHECK(env_value(worker_env(Spec{}, make_step(), two, two.ranks[0], context()), "OMP_NUM_THREADS") == "1");
}

TEST_CASE("worker_env: CUDA_VISIBLE_DEVICES is the node's selection, narrowed only on request", "[env]") {
  SECTION("all GPUs, nothing set: left alone") {
    StepPlan plan = must_plan(make_step(), host_with(8));
    CHECK(env_value(worker_env(Spec{}, make_step(), plan, plan.ranks[3], context()),
                    "CUDA_VISIBLE_DEVICES") == "<unset>");
  }
  SECTION("a subset: the node's selection for every worker") {
    StepPlan plan = must_plan(with_ids(make_step(), {"1", "6"}), host_with(8));
    CHECK(env_value(worker_env(Spec{}, make_step(), plan, plan.ranks[1], context()),
                    "CUDA_VISIBLE_DEVICES") == "1,6");
  }
  SECTION("visible_devices: process narrows to the worker's own GPUs") {
    Step step = with_procs(make_step(), 2);
    step.parallel->visible_devices = Visibility::process;
    StepPlan plan = must_plan(step, host_with(8));
    CHECK(env_value(worker_env(Spec{}, step, plan, plan.ranks[1], context()), "CUDA_VISIBLE_DEVICES") ==
          "4,5,6,7");
  }
  SECTION("a remote node that uses part of its GPUs") {
    StepPlan plan = must_plan(with_gpus(make_step(), 12), host_with(8), slurm_cluster());
    CHECK(env_value(worker_env(Spec{}, make_step(), plan, plan.ranks[7], context()),
                    "CUDA_VISIBLE_DEVICES") == "0,1,2,3,4,5");
  }
  SECTION("CPU workers see no GPU") {
    StepPlan plan = must_plan(with_cpus(make_step(), 2), host_with(8));
    CHECK(env_value(worker_env(Spec{}, make_step(), plan, plan.ranks[0], context()),
                    "CUDA_VISIBLE_DEVICES") == "");
  }
}

TEST_CASE("worker_env on a remote node: the node's own files, agent and environment, the same contract",
          "[env]") {
  // The head's host is neither node: both are remote.
  StepPlan plan = must_plan(with_gpus(make_step(), 16), host_with(8), ssh_cluster({"gpu-a", "gpu-b"}));
  Spec spec;
  spec.env = {{"DATA", "/data"}};
  Step step = with_gpus(make_step(), 16);
  step.env = {{"LR", "0.1"}};
  const LaunchContext head = context({{"HEAD_ONLY", "x"}});
  LaunchContext launch = head;
  launch.node0_address = "10.0.0.1";
  launch.restart_count = 2;
  const NodeWork work = node_work(spec, step, plan, 1, launch);
  REQUIRE(work.ranks.size() == 8);
  CHECK(work.ranks[3].rank == 11);
  CHECK(work.ranks[3].local_rank == 3);
  CHECK(work.devices == DeviceRule::leave);  // the node uses every GPU it has

  // The node's site: the agent's environment, its scratch directory, its mark and gloo interface.
  const NodeSite node{
      {{"CUDA_VISIBLE_DEVICES", "4,5"}}, RunLayout{"/tmp/flowrun-r-node1-Ab12Cd"}, "gpu-b-77-f00d", "eth0"};
  const EnvList remote = worker_env(work, work.ranks[3], node);
  CHECK(env_value(remote, "FLOWRUN_OUTPUT_DIR") == "/tmp/flowrun-r-node1-Ab12Cd/train/rank11/out");
  CHECK(env_value(remote, "TORCHELASTIC_ERROR_FILE") ==
        "/tmp/flowrun-r-node1-Ab12Cd/train/rank11/error.json");
  CHECK(env_value(remote, "FLOWRUN_AGENT_ID") == "gpu-b-77-f00d");
  CHECK(env_value(remote, "GLOO_SOCKET_IFNAME") == "eth0");
  CHECK(env_value(remote, "MASTER_ADDR") == "10.0.0.1");
  CHECK(env_value(remote, "TORCHELASTIC_RESTART_COUNT") == "2");
  CHECK(env_value(remote, "FLOWRUN_RUN_DIR") == head.layout.run_dir);  // the run's, on the head
  // The node's CUDA_VISIBLE_DEVICES is its own selection: never replaced by the plan's ordinals.
  CHECK(env_value(remote, "CUDA_VISIBLE_DEVICES") == "<unset>");

  // Every other variable is what the same plan gives the same rank on this host.
  const EnvList local = worker_env(spec, step, plan, plan.ranks[11], launch);
  const std::vector<std::string> node_local{"FLOWRUN_OUTPUT_DIR", "TORCHELASTIC_ERROR_FILE",
                                            "FLOWRUN_AGENT_ID", "GLOO_SOCKET_IFNAME"};
  auto without_node_local = [&](const EnvList& env) {
    EnvList kept;
    for (const auto& kv : env)
      if (std::find(node_local.begin(), node_local.end(), kv.first) == node_local.end()) kept.push_back(kv);
    return kept;
  };
  CHECK(without_node_local(remote) == without_node_local(local));
  CHECK(env_value(local, "FLOWRUN_AGENT_ID") == "<unset>");
  CHECK(env_value(local, "GLOO_SOCKET_IFNAME") == "<unset>");
  CHECK(env_value(local, "RANK") == "11");
  CHECK(env_value(local, "GROUP_RANK") == "1");
  CHECK(env_value(local, "LOCAL_WORLD_SIZE") == "8");
}

TEST_CASE("worker_env: forensics nccl sets the flight recorder's variables, its dump in the rank's directory",
          "[env]") {
  Step step = make_step();
  step.forensics.nccl = true;
  StepPlan plan = must_plan(step, host_with(2));
  const std::string rank1 = "/work/.flowrun/runs/train-20261129-120000-abcdef/train/rank1";
  auto added = [](const EnvList& with, const EnvList& without) {
    EnvList out;
    for (const auto& kv : with)
      if (std::find(without.begin(), without.end(), kv) == without.end()) out.push_back(kv);
    return out;
  };
  const EnvList off = worker_env(Spec{}, make_step(), plan, plan.ranks[1], context());
  const EnvList on = worker_env(Spec{}, step, plan, plan.ranks[1], context());
  CHECK(added(on, off) == EnvList{
                              {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"},
                              {"NCCL_ASYNC_ERROR_HANDLING", "3"},
                              {"TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"},
                              {"TORCH_NCCL_DUMP_ON_TIMEOUT", "1"},
                              {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", rank1 + "/nccl_trace_rank_"},
                          });
  CHECK(on.size() == off.size() + 3);

  SECTION("a restart's dumps have a name of their own") {
    LaunchContext ctx = context();
    ctx.restart_count = 2;
    CHECK(env_value(worker_env(Spec{}, step, plan, plan.ranks[1], ctx), "TORCH_NCCL_DEBUG_INFO_TEMP_FILE") ==
          rank1 + "/nccl_trace_attempt2_rank_");
    CHECK(RunLayout{"/r"}.nccl_trace("train", 1, 2) == "/r/train/rank1/nccl_trace_attempt2_rank_1");
    CHECK(is_nccl_trace_name("nccl_trace_attempt2_rank_1", 1));
    CHECK(is_nccl_trace_name("nccl_trace_rank_1", 1));
    CHECK_FALSE(is_nccl_trace_name("nccl_trace_rank_1", 11));
    CHECK_FALSE(is_nccl_trace_name("nccl_trace_attempt_rank_1", 1));
    CHECK_FALSE(is_nccl_trace_name("nccl_trace_attempt02_rank_1", 1));
    CHECK_FALSE(is_nccl_trace_name("nccl_trace_attemptx_rank_1", 1));
  }
  SECTION("env: wins, under torch's name or the TORCH_FR_ one; the inherited environment does not") {
    Spec spec;
    spec.env = {{"TORCH_FR_BUFFER_SIZE", "100"}};
    step.env = {{"TORCH_NCCL_DUMP_ON_TIMEOUT", "0"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}};
    const EnvList env = worker_env(spec, step, plan, plan.ranks[1],
                                   context({{"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/tmp/x_"},
                                            {"TORCH_FR_DUMP_TEMP_FILE", "/tmp/y_"},
                                            {"NCCL_ASYNC_ERROR_HANDLING", "2"}}));
    CHECK(env_value(env, "TORCH_FR_BUFFER_SIZE") == "100");
    CHECK(env_value(env, "TORCH_NCCL_TRACE_BUFFER_SIZE") == "<unset>");
    CHECK(env_value(env, "TORCH_NCCL_DUMP_ON_TIMEOUT") == "0");
    CHECK(env_value(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");
    CHECK(env_value(env, "NCCL_ASYNC_ERROR_HANDLING") == "2");
    // flowrun's prefix, under both names, since recent torch prefers the TORCH_FR_ one.
    CHECK(env_value(env, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE") == rank1 + "/nccl_trace_rank_");
    CHECK(env_value(env, "TORCH_FR_DUMP_TEMP_FILE") == rank1 + "/nccl_trace_rank_");
  }
  SECTION("on another node, the agent's scratch directory") {
    const NodeWork work = node_work(Spec{}, step, plan, 0, context());
    CHECK(work.nccl_flight_recorder);
    const NodeSite node{{}, RunLayout{"/tmp/flowrun-r-node1-Ab12Cd"}, "agent", ""};
    CHECK(env_value(worker_env(work, work.ranks[1], node), "TORCH_NCCL_DEBUG_INFO_TEMP_FILE") ==
          "/tmp/flowrun-r-node1-Ab12Cd/train/rank1/nccl_trace_rank_");
  }
}

TEST_CASE("worker_env on a remote node: the defaults read the node's environment, not the head's", "[env]") {
  StepPlan plan = must_plan(with_gpus(make_step(), 16), host_with(8), ssh_cluster({"gpu-a", "gpu-b"}));
  const NodeWork work = node_work(Spec{}, make_step(), plan, 1, context({{"OMP_NUM_THREADS", "9"}}));
  NodeSite node{
      {{"OMP_NUM_THREADS", "4"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}, {"PYTHONUNBUFFERED", ""}},
      RunLayout{"/tmp/s"},
      "gpu-b-1-ab",
      "eth0"};
  EnvList env = worker_env(work, work.ranks[0], node);
  CHECK(env_value(env, "OMP_NUM_THREADS") == "4");
  CHECK(env_value(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING") == "0");
  CHECK(env_value(env, "NCCL_ASYNC_ERROR_HANDLING") == "1");
  CHECK(env_value(env, "PYTHONUNBUFFERED").empty());
  // Nothing on the node sets them: flowrun's defaults, whatever the head has.
  node.env = {};
  env = worker_env(work, work.ranks[0], node);
  CHECK(env_value(env, "OMP_NUM_THREADS") == "1");
  CHECK(env_value(env, "PYTHONUNBUFFERED") == "1");
  // GLOO_SOCKET_IFNAME only where neither env: nor the node's environment sets it.
  node.env = {{"GLOO_SOCKET_IFNAME", "ib0"}};
  CHECK(env_value(worker_env(work, work.ranks[0], node), "GLOO_SOCKET_IFNAME") == "<unset>");
  NodeWork user = work;
  user.env = {{"GLOO_SOCKET_IFNAME", "eth1"}, {"FLOWRUN_AGENT_ID", "mine"}};
  node.env = {};
  env = worker_env(user, user.ranks[0], node);
  CHECK(env_value(env, "GLOO_SOCKET_IFNAME") == "eth1");
  // The agent's mark comes last: it wins over an env: entry of the same name.
  CHECK(env.back() == std::pair<std::string, std::string>{"FLOWRUN_AGENT_ID", "gpu-b-1-ab"});
}

TEST_CASE("worker_env: CUDA_VISIBLE_DEVICES restated from this host's environment only", "[env]") {
  HostFacts host = host_with(8, {{"CUDA_VISIBLE_DEVICES", "2,3"}});
  StepPlan plan = must_plan(make_step(), host);
  const NodeWork work = node_work(Spec{}, make_step(), plan, 0, context());
  CHECK(work.devices == DeviceRule::if_inherited);
  CHECK(work.ranks[0].devices == "2,3");
  NodeSite site = this_host(context());
  CHECK(env_value(worker_env(work, work.ranks[0], site), "CUDA_VISIBLE_DEVICES") == "<unset>");
  site.env = {{"CUDA_VISIBLE_DEVICES", "2,3"}};
  CHECK(env_value(worker_env(work, work.ranks[0], site), "CUDA_VISIBLE_DEVICES") == "2,3");
}

TEST_CASE("master_addr: node 0's address once known, else what the plan can say", "[env]") {
  LaunchContext ctx = context();
  CHECK(master_addr(must_plan(make_step(), host_with(2)), ctx) == "127.0.0.1");
  StepPlan ssh = must_plan(with_gpus(make_step(), 16), host_with(8), ssh_cluster({"gpu-a", "gpu-b"}));
  CHECK(master_addr(ssh, ctx) == "gpu-a");
  StepPlan slurm = must_plan(with_gpus(make_step(), 16), host_with(8), slurm_cluster());
  CHECK(master_addr(slurm, ctx) == "<node 0's address, known at launch>");
  ctx.node0_address = "10.1.2.3";
  CHECK(master_addr(ssh, ctx) == "10.1.2.3");
  CHECK(master_addr(slurm, ctx) == "10.1.2.3");
  CHECK(node_work(Spec{}, make_step(), slurm, 1, ctx).master_addr == "10.1.2.3");
}

TEST_CASE("every variable worker_env computes is in the contract list", "[env]") {
  StepPlan plan = must_plan(with_gpus(make_step(), 2), host_with(8));
  for (const auto& [key, value] : worker_env(Spec{}, make_step(), plan, plan.ranks[0], context()))
    CHECK(find_contract_variable(key) != nullptr);
}

TEST_CASE("plan_flow reports every refusal at once, located in the spec", "[plan]") {
  Spec spec;
  spec.file = "train.yaml";
  spec.steps = {with_gpus(make_step("a"), 16), with_procs(make_step("b"), 3)};
  spec.order = {0, 1};
  try {
    plan_flow(spec, host_with(8), {});
    FAIL("expected refusals");
  } catch (const DiagnosticError& e) {
    REQUIRE(e.diagnostics().size() == 2);
    CHECK(e.diagnostics()[0].to_string().rfind("train.yaml:11:11: steps.a.parallel.gpus: gpus: 16 asks", 0) ==
          0);
    CHECK(e.diagnostics()[1].to_string().rfind("train.yaml:13:21: steps.b.parallel.procs_per_node: ", 0) ==
          0);
  }
}

TEST_CASE("make_run_id is the flow's name, a time stamp and a random suffix", "[plan]") {
  std::string id = make_run_id("My Flow!");
  REQUIRE(id.size() == std::string("my-flow-20261129-120000-abcdef").size());
  CHECK(id.rfind("my-flow-", 0) == 0);
  CHECK(make_run_id("My Flow!") != id);
}

// ---- templates ------------------------------------------------------------

TEST_CASE("expand_command fills ${steps.NAME.outputs} and ${args} without a shell", "[command]") {
  RunLayout layout{"/w/.flowrun/runs/r1"};
  Step step;
  step.argv = {"python3", "eval.py",      "--model", "${steps.train.outputs}/model.pt",
               "${args}", "--tag=${args}"};
  CHECK(expand_command(step, layout, {"--lr", "0.1 x"}) ==
        std::vector<std::string>{"python3", "eval.py", "--model",
                                 "/w/.flowrun/runs/r1/train/outputs/model.pt", "--lr", "0.1 x",
                                 "--tag=--lr 0.1 x"});
  CHECK(expand_command(step, layout, {}) ==
        std::vector<std::string>{"python3", "eval.py", "--model",
                                 "/w/.flowrun/runs/r1/train/outputs/model.pt", "--tag="});
}

TEST_CASE("expand_command quotes every substituted value under shell: true", "[command]") {
  RunLayout layout{"/w/my runs/r1"};
  Step step;
  step.shell = true;
  step.script = "ls ${steps.train.outputs} ${HOME} > out.txt; echo ${args}";
  CHECK(
      expand_command(step, layout, {"a b", "$(rm -rf /)", "it's"}) ==
      std::vector<std::string>{"/bin/sh", "-c",
                               "ls '/w/my runs/r1/train/outputs' ${HOME} > out.txt; echo 'a b' '$(rm -rf /)' "
                               "'it'\\''s'"});
}

TEST_CASE("inside a Slurm allocation the nodes are the job's, in Slurm's order", "[plan]") {
  HostFacts host = host_with(8);
  host.allocation = {"gpu07", "gpu08", "gpu09"};
  StepPlan plan = must_plan(with_gpus(make_step(), 16), host, slurm_cluster());
  REQUIRE(plan.nodes.size() == 2);
  CHECK(plan.nodes[0].host == "gpu07");
  CHECK(plan.nodes[1].host == "gpu08");

  host.allocation = {"gpu07"};
  Refusal refusal = must_refuse(with_gpus(make_step(), 16), host, slurm_cluster());
  CHECK(refusal.path == "cluster");
  CHECK(refusal.message ==
        "step train needs 2 nodes but this Slurm job has 1 node (gpu07); ask Slurm for more (sbatch --nodes "
        "2) or "
        "for fewer GPUs in the step");
  // ssh hosts are the spec's, whatever the allocation.
  StepPlan ssh = must_plan(with_nodes(make_step(), 2), host, ssh_cluster({"a", "b"}, 8));
  CHECK(ssh.nodes[1].host == "b");
}
