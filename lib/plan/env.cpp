#include <algorithm>
#include <span>
#include <tuple>

#include "flowrun/worker_env.h"

namespace flowrun {

namespace {

bool has(const EnvList& env, std::string_view name) {
  return std::any_of(env.begin(), env.end(), [&](const auto& kv) { return kv.first == name; });
}

std::string tokens_of(const NodePlan& node, const std::vector<int>& positions) {
  std::vector<std::string> tokens;
  for (int g : positions) tokens.push_back(node.gpus[static_cast<std::size_t>(g)].select_token);
  return join(tokens, ",");
}

// Which rule a node's ranks' CUDA_VISIBLE_DEVICES follows. A node that uses
// every GPU a worker sees by default leaves the variable alone, except on
// this host when flowrun's environment sets it: its GPUs were selected from
// that value, which is then restated.
DeviceRule device_rule(const StepPlan& plan, const NodePlan& node) {
  if (plan.cpu || plan.visible_devices == Visibility::process) return DeviceRule::set;
  if (static_cast<int>(node.gpus.size()) != node.gpus_available) return DeviceRule::set;
  return node.is_local ? DeviceRule::if_inherited : DeviceRule::leave;
}

// The CUDA_VISIBLE_DEVICES a worker gets under the rule.
std::string devices_of(const StepPlan& plan, const NodePlan& node, const RankPlan& rank) {
  if (plan.cpu) return {};
  if (plan.visible_devices == Visibility::process) return tokens_of(node, rank.gpus);
  std::vector<int> all(node.gpus.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return tokens_of(node, all);
}

}  // namespace

std::string master_addr(const StepPlan& plan, const LaunchContext& ctx) {
  if (!ctx.node0_address.empty()) return ctx.node0_address;
  if (plan.nodes.size() <= 1) return "127.0.0.1";
  if (!plan.nodes.front().host.empty()) return plan.nodes.front().host;
  return "<node 0's address, known at launch>";
}

NodeWork node_work(const Spec& spec, const Step& step, const StepPlan& plan, int node,
                   const LaunchContext& ctx) {
  const NodePlan& n = plan.nodes.at(static_cast<std::size_t>(node));
  NodeWork work;
  work.step = plan.step;
  work.run_id = ctx.run_id;
  work.job_id = plan.job_id.empty() ? ctx.run_id : plan.job_id;
  work.role = plan.role;
  work.run_dir = ctx.layout.run_dir;
  work.env = spec.env;
  work.env.insert(work.env.end(), step.env.begin(), step.env.end());
  work.world_size = plan.world_size;
  work.nodes = static_cast<int>(plan.nodes.size());
  work.node_rank = node;
  work.max_restarts = plan.max_restarts;
  work.restart_count = ctx.restart_count;
  work.master_addr = master_addr(plan, ctx);
  work.master_port = ctx.master_port;
  work.devices = device_rule(plan, n);
  work.virtual_local_rank = ctx.virtual_local_rank;
  work.nccl_flight_recorder = step.forensics.nccl;
  // torchrun's virtual local rank: each worker sees only the GPU torchrun
  // gives it, cuda:LOCAL_RANK of the node's, as its cuda:0.
  if (ctx.virtual_local_rank && !plan.cpu) work.devices = DeviceRule::set;
  // The node's ranks are plan.ranks[first_rank, first_rank + procs) as the
  // planner lays them out; asked for every node (4096 of them), so this
  // looks at those alone when they are.
  std::span<const RankPlan> ranks(plan.ranks);
  if (n.first_rank >= 0 && n.procs >= 0 &&
      static_cast<std::size_t>(n.first_rank) + static_cast<std::size_t>(n.procs) <= plan.ranks.size()) {
    const auto mine =
        ranks.subspan(static_cast<std::size_t>(n.first_rank), static_cast<std::size_t>(n.procs));
    if (std::all_of(mine.begin(), mine.end(), [&](const RankPlan& r) { return r.node == node; }))
      ranks = mine;
  }
  for (const auto& rank : ranks) {
    if (rank.node != node) continue;
    std::string devices = work.devices == DeviceRule::leave ? std::string() : devices_of(plan, n, rank);
    if (work.virtual_local_rank && !plan.cpu && static_cast<std::size_t>(rank.local_rank) < n.gpus.size())
      devices = tokens_of(n, {rank.local_rank});
    work.ranks.push_back({rank.rank, rank.local_rank, std::move(devices)});
  }
  return work;
}

NodeSite this_host(const LaunchContext& ctx) { return NodeSite{ctx.parent_env, ctx.layout, {}, {}}; }

EnvList worker_env(const NodeWork& work, const RankWork& rank, const NodeSite& site) {
  EnvList env = work.env;
  const EnvList& user = work.env;
  auto set = [&](std::string name, std::string value) {
    env.emplace_back(std::move(name), std::move(value));
  };
  // A default the user (spec env) or the node's environment may override.
  auto set_default = [&](const std::string& name, const std::string& value) {
    if (has(user, name)) return;
    set(name, env_get(site.env, name).value_or(value));
  };

  const std::string world = std::to_string(work.world_size);
  const std::string local_world = std::to_string(work.ranks.size());
  set("LOCAL_RANK", work.virtual_local_rank ? "0" : std::to_string(rank.local_rank));
  set("RANK", std::to_string(rank.rank));
  set("GROUP_RANK", std::to_string(work.node_rank));
  set("ROLE_RANK", std::to_string(rank.rank));
  set("ROLE_NAME", work.role);
  set("LOCAL_WORLD_SIZE", local_world);
  set("WORLD_SIZE", world);
  set("GROUP_WORLD_SIZE", std::to_string(work.nodes));
  set("ROLE_WORLD_SIZE", world);
  set("MASTER_ADDR", work.master_addr);
  set("MASTER_PORT",
      work.master_port > 0 ? std::to_string(work.master_port) : "<free port chosen at launch>");
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(work.restart_count));
  set("TORCHELASTIC_MAX_RESTARTS", std::to_string(work.max_restarts));
  set("TORCHELASTIC_RUN_ID", work.job_id);
  set("TORCHELASTIC_USE_AGENT_STORE", "False");
  // torchrun's 1 aborts the communicators from the watchdog, which ends the
  // process before the flight recorder's dump is written; 3 does not.
  const std::string error_handling = work.nccl_flight_recorder ? "3" : "1";
  set_default("TORCH_NCCL_ASYNC_ERROR_HANDLING", error_handling);
  set_default("NCCL_ASYNC_ERROR_HANDLING", error_handling);
  // torchrun starts Python workers with -u; the variable reaches a Python
  // started through a shell or a script's #! line too.
  set_default("PYTHONUNBUFFERED", "1");
  set("TORCHELASTIC_ERROR_FILE", site.layout.error_file(work.step, rank.rank));
  // torchrun sets OMP_NUM_THREADS=1 when unset and several workers share a
  // node, so they do not each start one thread per core.
  if (!has(user, "OMP_NUM_THREADS")) {
    if (auto inherited = env_get(site.env, "OMP_NUM_THREADS"))
      set("OMP_NUM_THREADS", *inherited);
    else if (work.ranks.size() > 1)
      set("OMP_NUM_THREADS", "1");
  }
  if (work.devices == DeviceRule::set ||
      (work.devices == DeviceRule::if_inherited && site.env.count("CUDA_VISIBLE_DEVICES") > 0))
    set("CUDA_VISIBLE_DEVICES", rank.devices);
  set("FLOWRUN_RUN_ID", work.run_id);
  set("FLOWRUN_STEP", work.step);
  set("FLOWRUN_NODES", std::to_string(work.nodes));
  set("FLOWRUN_NODE_RANK", std::to_string(work.node_rank));
  set("FLOWRUN_RUN_DIR", work.run_dir);
  set("FLOWRUN_OUTPUT_DIR", site.layout.output_dir(work.step, rank.rank));
  // An agent's mark (its guardian's), and where its host name resolves to a
  // loopback address, the interface gloo is to listen on.
  if (!site.agent_id.empty()) set("FLOWRUN_AGENT_ID", site.agent_id);
  if (!site.gloo_ifname.empty() && !has(user, "GLOO_SOCKET_IFNAME") &&
      site.env.count("GLOO_SOCKET_IFNAME") == 0)
    set("GLOO_SOCKET_IFNAME", site.gloo_ifname);
  if (work.nccl_flight_recorder) {
    const std::string prefix =
        site.layout.rank_dir(work.step, rank.rank) + "/" + nccl_trace_prefix(work.restart_count);
    for (const auto& [name, alias, value] :
         {std::tuple{"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", std::string("2000")},
          std::tuple{"TORCH_NCCL_DUMP_ON_TIMEOUT", "", std::string("1")},
          std::tuple{"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE", prefix}}) {
      if (has(user, name) || (*alias != '\0' && has(user, alias))) continue;
      set(name, value);
      if (*alias != '\0' && site.env.count(alias) > 0) set(alias, value);
    }
  }
  return env;
}

EnvList step_env(const Spec& spec, const Step& step, const LaunchContext& ctx) {
  EnvList env = spec.env;
  env.insert(env.end(), step.env.begin(), step.env.end());
  if (!has(env, "PYTHONUNBUFFERED"))
    env.emplace_back("PYTHONUNBUFFERED", env_get(ctx.parent_env, "PYTHONUNBUFFERED").value_or("1"));
  env.emplace_back("FLOWRUN_RUN_ID", ctx.run_id);
  env.emplace_back("FLOWRUN_STEP", step.name);
  env.emplace_back("FLOWRUN_RUN_DIR", ctx.layout.run_dir);
  if (!step.join.empty()) env.emplace_back("FLOWRUN_INPUTS", ctx.layout.inputs_dir(step.join));
  return env;
}

}  // namespace flowrun
