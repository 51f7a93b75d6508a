#include "flowrun/plan.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <unistd.h>

#include "flowrun/text.h"

namespace flowrun {

namespace {

std::string gpus_word(int n) { return plural(n, "GPU"); }
std::string workers_word(int n) { return plural(n, "worker"); }
std::string nodes_word(int n) { return plural(n, "node"); }

// "0-3" for consecutive ordinals, "0, 2, 5" otherwise.
std::string describe_indices(const std::vector<int>& indices) {
  if (indices.empty()) return "none";
  bool consecutive = true;
  for (std::size_t i = 1; i < indices.size(); ++i) consecutive &= indices[i] == indices[i - 1] + 1;
  if (consecutive && indices.size() > 2)
    return std::to_string(indices.front()) + "-" + std::to_string(indices.back());
  std::vector<std::string> parts;
  for (int i : indices) parts.push_back(std::to_string(i));
  return join(parts, ", ");
}

std::string describe_gpus(const std::vector<Gpu>& gpus) {
  std::vector<int> indices;
  for (const auto& gpu : gpus) indices.push_back(gpu.index);
  return describe_indices(indices);
}

// The divisors of n, for "use one of ..." advice.
std::string divisors_of(int n) {
  std::vector<std::string> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(std::to_string(d));
  return join(out, ", ");
}

// Everything plan_step needs while it decides, and the refusal it may make.
struct Planner {
  const Step& step;
  const ParallelSpec& p;
  const std::optional<ClusterSpec>& cluster;
  const HostFacts& host;
  const PlanOptions& options;
  std::string path;  // "steps.NAME.parallel"

  Refusal refuse(Location loc, const std::string& key, std::string message) const {
    return Refusal{loc.line > 0 ? loc : p.loc, key.empty() ? path : path + "." + key, std::move(message)};
  }

  std::string host_line() const {
    const auto& inv = host.inventory;
    if (inv.gpus.empty()) {
      std::string why = inv.unavailable_reason.empty() ? "" : " (" + inv.unavailable_reason + ")";
      if (inv.system_count > 0 && !inv.selected_by.empty())
        why = " (" + inv.selected_by + " hides all " + std::to_string(inv.system_count) + ")";
      return "No GPU found on " + host.hostname + why + ".";
    }
    std::string line = gpus_word(static_cast<int>(inv.gpus.size())) + " found on " + host.hostname + " (" +
                       inv.summary() + ")";
    if (!inv.selected_by.empty())
      line +=
          ", selected by " + inv.selected_by + " from the " + std::to_string(inv.system_count) + " it has";
    return line + ".";
  }

  // The GPUs each node has when fanning out: what the cluster section says,
  // else what this host has (nodes of one cluster are alike).
  int gpus_per_node_for_fanout() const {
    if (cluster && cluster->gpus_per_node) return *cluster->gpus_per_node;
    return static_cast<int>(host.inventory.gpus.size());
  }

  std::string per_node_source() const {
    if (cluster && cluster->gpus_per_node)
      return "cluster.gpus_per_node says each node has " + gpus_word(*cluster->gpus_per_node);
    return "each node is taken to have as many GPUs as " + host.hostname + " (" +
           std::to_string(host.inventory.gpus.size()) + "; set cluster.gpus_per_node if they differ)";
  }

  // In a gang, a step that does not say how many nodes spans the gang's,
  // its spares apart: the scheduler started them for the flow.
  std::optional<int> gang_default_nodes() const {
    if (!cluster || cluster->engine != Engine::gang || !host.gang || p.nodes.value) return std::nullopt;
    const int n = host.gang->num_nodes - p.spare_nodes;
    if (n <= 1) return std::nullopt;
    return n;
  }
  std::optional<int> nodes_value() const { return p.nodes.value ? p.nodes.value : gang_default_nodes(); }

  // "nodes: 4", or "nodes: \"2:4\"" for a range, as the spec says it.
  std::string nodes_written() const {
    if (auto n = gang_default_nodes())
      return "every node of the " + std::string(gang_platform_name(host.gang->platform)) + " but its spares";
    const std::string max = std::to_string(p.nodes.value.value_or(1));
    return p.min_nodes > 0 ? "nodes: \"" + std::to_string(p.min_nodes) + ":" + max + "\"" : "nodes: " + max;
  }

  PlanResult plan();
  PlanResult plan_cpu(int cpus, bool from_flag);
  PlanResult plan_gpu();
  PlanResult finish(StepPlan plan, int nodes, int gpus_per_node, std::vector<Gpu> local_gpus);
  std::optional<Refusal> place_nodes(StepPlan& plan, int nodes);
  void note_spares(StepPlan& plan) const;
  void note_range(StepPlan& plan) const;
};

PlanResult Planner::plan() {
  if (options.cpus) return plan_cpu(*options.cpus, true);
  if (p.cpus) return plan_cpu(*p.cpus, false);
  return plan_gpu();
}

// Gives the plan its nodes: this host alone, or the cluster's hosts.
std::optional<Refusal> Planner::place_nodes(StepPlan& plan, int nodes) {
  plan.nodes.clear();
  plan.spares.clear();
  const int spares = p.spare_nodes;
  if (spares > 0 && nodes == 1 && plan.mode != PlanMode::multi_node)
    return refuse(p.spare_nodes_loc, "spare_nodes",
                  "spare_nodes: " + std::to_string(spares) + " takes the place of a lost node, but step " +
                      step.name +
                      " runs on this host alone; spares need a step across nodes (nodes: 2 or more, with a "
                      "cluster: section)");
  if (nodes == 1 && plan.mode != PlanMode::multi_node) {
    NodePlan node;
    node.host = host.hostname;
    node.is_local = true;
    plan.nodes.push_back(std::move(node));
    return std::nullopt;
  }
  plan.engine = cluster->engine;
  // The nodes, then the spares: the same hosts list or allocation, in order.
  const int total = nodes + spares;
  const std::string needs =
      nodes_word(nodes) + (spares > 0 ? " and " + plural(spares, "spare", "spares") + " (spare_nodes)" : "");
  if (cluster->engine == Engine::ssh && static_cast<int>(cluster->hosts.size()) < total) {
    return Refusal{cluster->hosts_loc.line > 0 ? cluster->hosts_loc : cluster->loc, "cluster.hosts",
                   "step " + step.name + " needs " + needs + " but cluster.hosts lists " +
                       std::to_string(cluster->hosts.size()) + " (" + join(cluster->hosts, ", ") +
                       "); add hosts" +
                       (spares > 0 ? ", or ask for fewer spares or GPUs" : " or ask for fewer GPUs")};
  }
  if (cluster->engine == Engine::gang && host.gang) {
    const int gang = host.gang->num_nodes;
    const std::string platform(gang_platform_name(host.gang->platform));
    if (gang < total)
      return refuse(p.nodes.loc, "nodes",
                    "step " + step.name + " needs " + needs + " but this " + platform + " has " +
                        nodes_word(gang) + "; start it with " + std::to_string(total) +
                        " (flowrun manifest sizes it from the spec) or ask for fewer nodes");
    // The gang's other pods: spares, since they are there anyway.
    for (int i = 0; i < gang; ++i) {
      NodePlan node;
      node.node_rank = i;
      node.is_local = i == 0;  // node 0 is the head, this host
      if (node.is_local) node.host = host.hostname;
      (i < nodes ? plan.nodes : plan.spares).push_back(std::move(node));
    }
    return std::nullopt;
  }
  const bool in_allocation = cluster->engine == Engine::slurm && !host.allocation.empty();
  if (in_allocation && static_cast<int>(host.allocation.size()) < total) {
    return Refusal{cluster->loc, "cluster",
                   "step " + step.name + " needs " + needs + " but this Slurm job has " +
                       nodes_word(static_cast<int>(host.allocation.size())) + " (" +
                       join(host.allocation, ", ") + "); ask Slurm for more (sbatch --nodes " +
                       std::to_string(total) + ") or for fewer " + (spares > 0 ? "spares or " : "") +
                       "GPUs in the step"};
  }
  for (int i = 0; i < total; ++i) {
    NodePlan node;
    node.node_rank = i;
    if (cluster->engine == Engine::ssh) node.host = cluster->hosts[static_cast<std::size_t>(i)];
    if (in_allocation) node.host = host.allocation[static_cast<std::size_t>(i)];
    node.is_local = !node.host.empty() && node.host == host.hostname;
    (i < nodes ? plan.nodes : plan.spares).push_back(std::move(node));
  }
  return std::nullopt;
}

// The spares, once the nodes have their ranks: their GPUs (as every node's)
// and the plan's sentence about them.
void Planner::note_spares(StepPlan& plan) const {
  if (plan.spares.empty()) return;
  std::vector<std::string> hosts;
  const bool gang = cluster && cluster->engine == Engine::gang && host.gang;
  for (auto& spare : plan.spares) {
    spare.gpus_available = plan.nodes.front().gpus_available;
    hosts.push_back(!spare.host.empty() ? spare.host
                    : gang              ? "gang node " + std::to_string(spare.node_rank)
                                        : "chosen by the engine");
  }
  const int spares = static_cast<int>(plan.spares.size());
  const std::string source = gang ? "the " + std::string(gang_platform_name(host.gang->platform)) + "'s " +
                                        (spares == 1 ? "node" : "nodes") + " beyond the step's " +
                                        nodes_word(static_cast<int>(plan.nodes.size()))
                                  : "spare_nodes: " + std::to_string(spares);
  plan.why.push_back(plural(spares, "spare node", "spare nodes") + " (" + join(hosts, ", ") + ") " +
                     (spares == 1 ? "joins and waits" : "join and wait") +
                     " with no rank: when a node is lost, a spare takes its node rank and every rank "
                     "restarts from the script's checkpoint (" +
                     source + ").");
}

// nodes: "MIN:MAX": the plan's sentence about the range and a loss.
void Planner::note_range(StepPlan& plan) const {
  if (p.min_nodes == 0) return;
  plan.min_nodes = p.min_nodes;
  const int max = static_cast<int>(plan.nodes.size());
  const int per = plan.nodes.front().procs;
  plan.why.push_back(
      "nodes: \"" + std::to_string(p.min_nodes) + ":" + std::to_string(max) +
      "\" is elastic: the step starts on " + "as many nodes as join (at most " + std::to_string(max) +
      ", at least " + std::to_string(p.min_nodes) + ", within cluster.join_timeout), WORLD_SIZE = nodes x " +
      std::to_string(per) + " (the ranks below are for " + nodes_word(max) +
      "). When a node is lost, every rank restarts from the " +
      "script's checkpoint on the nodes left while at least " + std::to_string(p.min_nodes) +
      " remain (not counted to max_restarts); a node that joins later waits for the next restart.");
}

PlanResult Planner::plan_cpu(int cpus, bool from_flag) {
  const std::string asked = from_flag ? "--cpus " + std::to_string(cpus) : "cpus: " + std::to_string(cpus);
  StepPlan plan;
  plan.cpu = true;
  int nodes = nodes_value().value_or(1);
  if (nodes > 1) {
    if (!cluster)
      return refuse(p.nodes.loc, "nodes",
                    "asks for " + nodes_word(nodes) +
                        " but the spec has no cluster: section to fan out to; "
                        "remove nodes: or add a cluster: section (docs/spec.md#cluster)");
    plan.mode = PlanMode::multi_node;
    if (cpus % nodes != 0)
      return refuse(from_flag ? p.nodes.loc : p.cpus_loc, from_flag ? "nodes" : "cpus",
                    asked + " CPU workers do not split evenly over " + nodes_word(nodes) +
                        "; ask for a multiple of " + std::to_string(nodes));
  }
  const int per_node = cpus / nodes;
  if (p.procs_per_node.value && *p.procs_per_node.value != per_node)
    return refuse(p.procs_per_node.loc, "procs_per_node",
                  "procs_per_node: " + std::to_string(*p.procs_per_node.value) + " contradicts " + asked +
                      " over " + nodes_word(nodes) + " (" + std::to_string(per_node) +
                      " per node); for CPU workers set only cpus (the total)");
  if (auto refusal = place_nodes(plan, nodes)) return *refusal;
  for (auto& node : plan.nodes) {
    node.procs = per_node;
    node.first_rank = node.node_rank * per_node;
  }
  plan.why.push_back("Step " + step.name + " asks for " + workers_word(cpus) + " on CPUs (" + asked +
                     "), so no GPU is used and every worker sees none (CUDA_VISIBLE_DEVICES is empty).");
  if (nodes == 1)
    plan.why.push_back("One node (" + host.hostname + "), " + workers_word(cpus) +
                       ", WORLD_SIZE=" + std::to_string(cpus) + ".");
  else
    plan.why.push_back(nodes_word(nodes) + " (" + nodes_written() +
                       ", engine: " + std::string(engine_name(cluster->engine)) + "), " +
                       workers_word(per_node) + " each, WORLD_SIZE=" + std::to_string(cpus) + ".");
  return finish(std::move(plan), nodes, 0, {});
}

PlanResult Planner::plan_gpu() {
  const auto& inv = host.inventory;
  const int local = static_cast<int>(inv.gpus.size());
  const GpuRequest& want = p.gpus;
  // A list of GPU ids is this host's: no gang default for it.
  const std::optional<int> nodes_asked = want.kind == GpuRequest::Kind::ids ? p.nodes.value : nodes_value();
  StepPlan plan;
  plan.why.push_back(host_line());
  for (const auto& note : inv.notes) plan.why.push_back(note);

  auto no_gpu = [&]() {
    std::string message = "step " + step.name + " needs GPUs but " + host.hostname + " has none";
    if (!inv.unavailable_reason.empty()) message += " (" + inv.unavailable_reason + ")";
    if (inv.system_count > 0 && !inv.selected_by.empty())
      message += " (" + inv.selected_by + " hides all " + std::to_string(inv.system_count) + ")";
    message += "; to run on CPU workers add 'cpus: N' under " + path +
               " or pass --cpus N; to use GPU nodes add a cluster: section with gpus_per_node";
    return refuse(want.loc, want.is_set ? "gpus" : "", message);
  };

  // Explicit GPU ids name GPUs of this host: one node.
  if (want.kind == GpuRequest::Kind::ids) {
    if (nodes_asked && *nodes_asked > 1)
      return refuse(
          want.loc, "gpus",
          "a list of GPU ids selects GPUs of this host, but nodes: " + std::to_string(*nodes_asked) +
              " asks for several nodes; give a count (gpus: N, the total over all nodes) instead");
    if (local == 0) return no_gpu();
    std::vector<Gpu> chosen;
    for (const auto& id : want.ids) {
      if (id.rfind("MIG-", 0) == 0)
        return refuse(want.loc, "gpus",
                      "GPU '" + id +
                          "' is a MIG instance; flowrun places workers on whole GPUs, so list GPU "
                          "ordinals or GPU-... UUIDs from 'flowrun gpus'");
      const Gpu* found = nullptr;
      bool ambiguous = false;
      for (const auto& gpu : inv.gpus) {
        bool match = (!id.empty() && id.find_first_not_of("0123456789") == std::string::npos)
                         ? std::to_string(gpu.index) == id
                         : gpu.uuid.rfind(id, 0) == 0;
        if (match) {
          ambiguous = found != nullptr;
          found = &gpu;
        }
      }
      if (found == nullptr || ambiguous) {
        std::string what = ambiguous ? "matches more than one GPU" : "names no GPU";
        return refuse(want.loc, "gpus",
                      "GPU '" + id + "' " + what + " on " + host.hostname + ", which has " +
                          gpus_word(local) + ": " + describe_gpus(inv.gpus) + " (" + inv.summary() +
                          "); use ids from 'flowrun gpus'");
      }
      for (const auto& earlier : chosen) {
        if (earlier.uuid == found->uuid)
          return refuse(want.loc, "gpus",
                        "GPU '" + id + "' is listed twice (it is GPU " + std::to_string(found->index) +
                            "); list each GPU once");
      }
      chosen.push_back(*found);
    }
    plan.mode = PlanMode::single_node;
    const int n = static_cast<int>(chosen.size());
    std::vector<int> listed;
    for (const auto& gpu : chosen) listed.push_back(gpu.index);
    plan.why.push_back("Step " + step.name + " asks for " + gpus_word(n) + " " + describe_indices(listed) +
                       " (gpus: [" + join(want.ids, ", ") + "]): one node.");
    return finish(std::move(plan), 1, n, std::move(chosen));
  }

  // How many GPUs in total, and on how many nodes.
  const bool fan_out_possible = cluster.has_value();
  if (nodes_asked && *nodes_asked > 1) {
    const int nodes = *nodes_asked;
    if (!fan_out_possible)
      return refuse(p.nodes.loc, "nodes",
                    "asks for " + nodes_word(nodes) +
                        " but the spec has no cluster: section to fan out to; "
                        "remove nodes: to run on " +
                        host.hostname +
                        " alone, or add a cluster: section "
                        "(docs/spec.md#cluster)");
    const int per_node_max = gpus_per_node_for_fanout();
    if (per_node_max == 0)
      return refuse(p.nodes.loc, "nodes",
                    host.hostname +
                        " has no GPUs and cluster.gpus_per_node is not set, so flowrun cannot "
                        "tell how many GPUs each of the " +
                        nodes_word(nodes) + " has; set cluster.gpus_per_node");
    int per_node = per_node_max;
    if (want.kind == GpuRequest::Kind::count) {
      if (want.count % nodes != 0)
        return refuse(want.loc, "gpus",
                      "gpus: " + std::to_string(want.count) + " does not split evenly over " +
                          nodes_word(nodes) + " (" + nodes_written() + "); ask for a multiple of " +
                          std::to_string(nodes));
      per_node = want.count / nodes;
      if (per_node > per_node_max)
        return refuse(want.loc, "gpus",
                      "gpus: " + std::to_string(want.count) + " over " + nodes_word(nodes) + " is " +
                          gpus_word(per_node) + " per node, but " + per_node_source() + "; ask for at most " +
                          std::to_string(per_node_max * nodes) + " or more nodes");
    }
    plan.mode = PlanMode::multi_node;
    std::string asked = want.kind == GpuRequest::Kind::all ? "all GPUs of" : gpus_word(want.count) + " over";
    plan.why.push_back("Step " + step.name + " asks for " + asked + " " + nodes_word(nodes) + " (" +
                       nodes_written() + "); " + per_node_source() + ".");
    return finish(std::move(plan), nodes, per_node, {});
  }

  // One node was asked for, or nothing said: one node whenever this host can.
  if (want.kind == GpuRequest::Kind::all) {
    if (local > 0) {
      plan.mode = PlanMode::single_node;
      plan.why.push_back(
          "Step " + step.name + " asks for all of them" +
          (want.is_set ? std::string(" (gpus: all)") : std::string(" (gpus: all, the default)")) +
          ": one node.");
      return finish(std::move(plan), 1, local, inv.gpus);
    }
    if (nodes_asked || !fan_out_possible) return no_gpu();
    if (cluster->engine == Engine::ssh && cluster->gpus_per_node && !cluster->hosts.empty()) {
      const int nodes = static_cast<int>(cluster->hosts.size());
      plan.mode = PlanMode::multi_node;
      plan.why.push_back("Step " + step.name + " asks for all GPUs and " + host.hostname +
                         " has none: it uses every host of cluster.hosts (" + nodes_word(nodes) + "); " +
                         per_node_source() + ".");
      return finish(std::move(plan), nodes, *cluster->gpus_per_node, {});
    }
    return refuse(want.loc, want.is_set ? "gpus" : "",
                  host.hostname +
                      " has no GPUs, so 'all' cannot be counted here; say how many the step needs "
                      "with gpus: N (the total) or nodes: N, and set cluster.gpus_per_node");
  }

  // A count.
  const int n = want.count;
  if (n <= local) {
    plan.mode = PlanMode::single_node;
    std::vector<Gpu> chosen(inv.gpus.begin(), inv.gpus.begin() + n);
    plan.why.push_back("Step " + step.name + " asks for " + gpus_word(n) + " (gpus: " + std::to_string(n) +
                       "): one node, " + (n == local ? "all of them" : "GPUs " + describe_gpus(chosen)) +
                       ".");
    return finish(std::move(plan), 1, n, std::move(chosen));
  }
  if (nodes_asked) {  // nodes: 1
    return refuse(want.loc, "gpus",
                  "gpus: " + std::to_string(n) + " on one node (nodes: 1), but " + host.hostname + " has " +
                      gpus_word(local) + (local ? " (" + inv.summary() + ")" : "") + "; ask for at most " +
                      std::to_string(local) + ", or remove nodes: 1 to fan out over the cluster");
  }
  if (!fan_out_possible) {
    if (local == 0) return no_gpu();
    return refuse(want.loc, "gpus",
                  "gpus: " + std::to_string(n) + " asks for more GPUs than " + host.hostname + " has (" +
                      gpus_word(local) + ": " + inv.summary() +
                      ") and the spec has no cluster: section to fan "
                      "out to; ask for at most " +
                      std::to_string(local) +
                      ", or add a cluster: section "
                      "(docs/spec.md#cluster)");
  }
  const int per_node_max = gpus_per_node_for_fanout();
  if (per_node_max == 0)
    return refuse(want.loc, "gpus",
                  host.hostname +
                      " has no GPUs and cluster.gpus_per_node is not set, so flowrun cannot tell "
                      "how many nodes " +
                      gpus_word(n) + " need; set cluster.gpus_per_node or parallel.nodes");
  // The fewest nodes that hold the request, if it splits evenly over them.
  const int nodes = (n + per_node_max - 1) / per_node_max;
  if (n % nodes != 0) {
    auto splits = [&](int total) {
      int k = (total + per_node_max - 1) / per_node_max;
      return total % k == 0;
    };
    int lower = n - 1, upper = n + 1;
    while (lower > 1 && !splits(lower)) --lower;
    while (!splits(upper)) ++upper;
    return refuse(want.loc, "gpus",
                  "gpus: " + std::to_string(n) + " needs " + nodes_word(nodes) + " of at most " +
                      gpus_word(per_node_max) +
                      " but does not split evenly over them (every node runs the same "
                      "number of workers); ask for " +
                      std::to_string(lower) + " or " + std::to_string(upper) + ", or set nodes: explicitly");
  }
  plan.mode = PlanMode::multi_node;
  plan.why.push_back("Step " + step.name + " asks for " + gpus_word(n) + " (gpus: " + std::to_string(n) +
                     "), more than one node has: it fans out over the cluster (engine: " +
                     std::string(engine_name(cluster->engine)) + "); " + per_node_source() + ".");
  return finish(std::move(plan), nodes, n / nodes, {});
}

// Splits each node's GPUs among its workers and numbers the ranks.
PlanResult Planner::finish(StepPlan plan, int nodes, int gpus_per_node, std::vector<Gpu> local_gpus) {
  plan.step = step.name;
  plan.max_restarts = p.max_restarts;
  plan.restart = p.restart;
  plan.visible_devices = p.visible_devices;
  plan.role = p.role;
  plan.job_id = p.job_id;
  if (!plan.cpu) {
    int procs = gpus_per_node;
    if (p.procs_per_node.value) {
      procs = *p.procs_per_node.value;
      if (procs > gpus_per_node || gpus_per_node % procs != 0)
        return refuse(p.procs_per_node.loc, "procs_per_node",
                      "procs_per_node: " + std::to_string(procs) + " does not divide the " +
                          gpus_word(gpus_per_node) + " each node gets; use one of " +
                          divisors_of(gpus_per_node) + " (each worker then gets the same number of GPUs)");
    }
    plan.gpus_per_proc = gpus_per_node / procs;
    if (auto refusal = place_nodes(plan, nodes)) return *refusal;
    for (auto& node : plan.nodes) {
      node.procs = procs;
      node.first_rank = node.node_rank * procs;
      if (nodes == 1 && node.is_local && !local_gpus.empty()) {
        node.gpus = local_gpus;
        // Without CUDA_VISIBLE_DEVICES a child sees every GPU of the system,
        // including those a Slurm variable told us are not ours.
        const auto& inv = host.inventory;
        node.gpus_available =
            static_cast<int>(inv.cuda_visible_devices_set ? inv.gpus.size() : inv.system_count);
      } else {
        node.gpus_available = gpus_per_node_for_fanout();
        for (int i = 0; i < gpus_per_node; ++i) {
          Gpu gpu;
          gpu.index = i;
          gpu.select_token = std::to_string(i);
          node.gpus.push_back(std::move(gpu));
        }
      }
    }
    if (plan.gpus_per_proc > 1)
      plan.why.push_back("procs_per_node: " + std::to_string(procs) + " gives each worker " +
                         gpus_word(plan.gpus_per_proc) + " (model-parallel within a worker).");
  }
  for (const auto& node : plan.nodes) {
    for (int local = 0; local < node.procs; ++local) {
      RankPlan rank;
      rank.rank = node.first_rank + local;
      rank.node = node.node_rank;
      rank.local_rank = local;
      for (int g = 0; g < plan.gpus_per_proc; ++g) rank.gpus.push_back(local * plan.gpus_per_proc + g);
      plan.ranks.push_back(std::move(rank));
    }
  }
  plan.world_size = static_cast<int>(plan.ranks.size());
  note_range(plan);
  if (!plan.cpu) {
    const int per = plan.nodes.front().procs;
    std::string where = nodes == 1 ? "One node (" + plan.nodes.front().host + ")"
                                   : nodes_word(nodes) + " x " + workers_word(per);
    plan.why.push_back(where + ", " + workers_word(plan.world_size) +
                       ", WORLD_SIZE=" + std::to_string(plan.world_size) + ".");
  }
  note_spares(plan);
  return plan;
}

}  // namespace

StepPlan plan_for_nodes(const StepPlan& plan, int nodes) {
  StepPlan out = plan;
  const auto n = static_cast<std::size_t>(std::clamp(nodes, 1, static_cast<int>(plan.nodes.size())));
  out.nodes.resize(n);
  std::erase_if(out.ranks, [n](const RankPlan& r) { return static_cast<std::size_t>(r.node) >= n; });
  out.world_size = static_cast<int>(out.ranks.size());
  return out;
}

PlanResult plan_step(const Step& step, const std::optional<ClusterSpec>& cluster, const HostFacts& host,
                     const PlanOptions& options) {
  Planner planner{step, *step.parallel, cluster, host, options, "steps." + step.name + ".parallel"};
  return planner.plan();
}

std::vector<StepPlan> plan_flow(const Spec& spec, const HostFacts& host, const PlanOptions& options) {
  std::vector<StepPlan> plans;
  std::vector<Diagnostic> refusals;
  for (std::size_t index : spec.order) {
    const Step& step = spec.steps[index];
    if (!step.is_parallel()) continue;
    auto result = plan_step(step, spec.cluster, host, options);
    if (auto* refusal = std::get_if<Refusal>(&result))
      refusals.push_back(Diagnostic{spec.file, refusal->loc, refusal->path, refusal->message});
    else
      plans.push_back(std::get<StepPlan>(std::move(result)));
  }
  if (!refusals.empty()) {
    sort_diagnostics(refusals);
    throw DiagnosticError(std::move(refusals));
  }
  return plans;
}

std::string RunLayout::step_dir(const std::string& step) const { return run_dir + "/" + step; }
std::string RunLayout::rank_dir(const std::string& step, int rank) const {
  return step_dir(step) + "/rank" + std::to_string(rank);
}
std::string RunLayout::output_dir(const std::string& step, int rank) const {
  return rank_dir(step, rank) + "/out";
}
std::string RunLayout::error_file(const std::string& step, int rank) const {
  return rank_dir(step, rank) + "/error.json";
}

std::string RunLayout::end_file(const std::string& step, int rank) const {
  return rank_dir(step, rank) + "/end.json";
}
std::string RunLayout::inputs_dir(const std::string& step) const { return step_dir(step) + "/outputs"; }
std::string RunLayout::nccl_trace(const std::string& step, int rank, int restart) const {
  return rank_dir(step, rank) + "/" + nccl_trace_prefix(restart) + std::to_string(rank);
}

std::string nccl_trace_prefix(int restart) {
  return restart == 0 ? "nccl_trace_rank_" : "nccl_trace_attempt" + std::to_string(restart) + "_rank_";
}

bool is_nccl_trace_name(std::string_view name, int rank) {
  const std::string tail = "_rank_" + std::to_string(rank);
  if (name == "nccl_trace" + tail) return true;
  constexpr std::string_view kHead = "nccl_trace_attempt";
  if (name.size() <= kHead.size() + tail.size() || !name.starts_with(kHead) || !name.ends_with(tail))
    return false;
  const std::string_view n = name.substr(kHead.size(), name.size() - kHead.size() - tail.size());
  return n.size() <= 9 && n.front() != '0' &&
         std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string make_run_id(const std::string& flow_name) {
  std::string slug;
  for (char c : flow_name) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_')
      slug += c;
    else if (c >= 'A' && c <= 'Z')
      slug += static_cast<char>(c - 'A' + 'a');
    else if (!slug.empty() && slug.back() != '-')
      slug += '-';
    if (slug.size() >= 40) break;
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  if (slug.empty()) slug = "flow";
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  std::random_device random;
  char suffix[8];
  std::snprintf(suffix, sizeof suffix, "%06x", random() & 0xffffffU);
  return slug + "-" + stamp + "-" + suffix;
}

std::optional<std::string> run_id_problem(const std::string& id) {
  // `latest` is the link to the newest run beside the runs.
  if (id == "latest") return "'latest': names the link to the newest run; choose another run id";
  const NameCheck check = check_name(id);
  if (check == NameCheck::ok) return std::nullopt;
  const std::string shown = "'" + json_escape(id.substr(0, 40)) + (id.size() > 40 ? "...'" : "'");
  if (check == NameCheck::too_long)
    return shown + ": the run id is " + std::to_string(id.size()) + " characters long; expected at most " +
           std::to_string(kMaxNameLength);
  return shown + ": expected a run id of " + name_rule();
}

std::string run_dir_for(const Spec& spec, const std::string& run_id, const std::string& chosen) {
  if (auto problem = run_id_problem(run_id)) throw Error("--run-id: " + *problem, kExitUsage);
  if (chosen.empty()) return spec.workdir + "/.flowrun/runs/" + run_id;
  std::string dir = chosen;
  if (chosen.front() != '/') {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) == nullptr)
      throw Error(std::string("cannot read the current directory: ") + std::strerror(errno));
    dir = std::string(cwd) + "/" + chosen;
  }
  // DIR/, DIR//, DIR/. and DIR/x/.. are DIR: what is derived from its last
  // part (a requeue's DIR-requeueN) goes beside it, not into it.
  dir = std::filesystem::path(dir).lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

}  // namespace flowrun
