#include <algorithm>

#include "flowrun/plan.h"

namespace flowrun {

namespace {

bool has(const EnvList& env, std::string_view name) {
  return std::any_of(env.begin(), env.end(), [&](const auto& kv) { return kv.first == name; });
}

// The CUDA_VISIBLE_DEVICES a worker gets, or nullopt to leave the inherited
// value alone (the node uses every GPU this process may use).
std::optional<std::string> visible_devices(const StepPlan& plan, const NodePlan& node, const RankPlan& rank,
                                           bool parent_set) {
  if (plan.cpu) return std::string();
  std::vector<std::string> tokens;
  if (plan.visible_devices == Visibility::process) {
    for (int g : rank.gpus) tokens.push_back(node.gpus[static_cast<std::size_t>(g)].select_token);
    return join(tokens, ",");
  }
  if (static_cast<int>(node.gpus.size()) == node.gpus_available && !parent_set) return std::nullopt;
  for (const auto& gpu : node.gpus) tokens.push_back(gpu.select_token);
  return join(tokens, ",");
}

}  // namespace

EnvList worker_env(const Spec& spec, const Step& step, const StepPlan& plan, const RankPlan& rank,
                   const LaunchContext& ctx) {
  const NodePlan& node = plan.nodes.at(static_cast<std::size_t>(rank.node));
  EnvList env = spec.env;
  env.insert(env.end(), step.env.begin(), step.env.end());
  const EnvList user = env;
  auto set = [&](std::string name, std::string value) {
    env.emplace_back(std::move(name), std::move(value));
  };
  // A default the user (spec env) or the parent environment may override.
  auto set_default = [&](const std::string& name, const std::string& value) {
    if (has(user, name)) return;
    set(name, env_get(ctx.parent_env, name).value_or(value));
  };

  const std::string world = std::to_string(plan.world_size);
  set("LOCAL_RANK", std::to_string(rank.local_rank));
  set("RANK", std::to_string(rank.rank));
  set("GROUP_RANK", std::to_string(rank.node));
  set("ROLE_RANK", std::to_string(rank.rank));
  set("ROLE_NAME", "default");
  set("LOCAL_WORLD_SIZE", std::to_string(node.procs));
  set("WORLD_SIZE", world);
  set("GROUP_WORLD_SIZE", std::to_string(plan.nodes.size()));
  set("ROLE_WORLD_SIZE", world);
  set("MASTER_ADDR", ctx.master_addr);
  set("MASTER_PORT", ctx.master_port > 0 ? std::to_string(ctx.master_port) : "<free port chosen at launch>");
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(ctx.restart_count));
  set("TORCHELASTIC_MAX_RESTARTS", std::to_string(plan.max_restarts));
  set("TORCHELASTIC_RUN_ID", ctx.run_id);
  set("TORCHELASTIC_USE_AGENT_STORE", "False");
  set_default("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  set_default("NCCL_ASYNC_ERROR_HANDLING", "1");
  // torchrun starts Python workers with -u; the variable reaches a Python
  // started through a shell or a script's #! line too.
  set_default("PYTHONUNBUFFERED", "1");
  set("TORCHELASTIC_ERROR_FILE", ctx.layout.error_file(plan.step, rank.rank));
  // torchrun sets OMP_NUM_THREADS=1 when unset and several workers share a
  // node, so they do not each start one thread per core.
  if (!has(user, "OMP_NUM_THREADS")) {
    if (auto inherited = env_get(ctx.parent_env, "OMP_NUM_THREADS"))
      set("OMP_NUM_THREADS", *inherited);
    else if (node.procs > 1)
      set("OMP_NUM_THREADS", "1");
  }
  const bool parent_set = ctx.parent_env.count("CUDA_VISIBLE_DEVICES") > 0;
  if (auto devices = visible_devices(plan, node, rank, parent_set && node.is_local))
    set("CUDA_VISIBLE_DEVICES", *devices);
  set("FLOWRUN_RUN_ID", ctx.run_id);
  set("FLOWRUN_STEP", plan.step);
  set("FLOWRUN_NODES", std::to_string(plan.nodes.size()));
  set("FLOWRUN_NODE_RANK", std::to_string(rank.node));
  set("FLOWRUN_RUN_DIR", ctx.layout.run_dir);
  set("FLOWRUN_OUTPUT_DIR", ctx.layout.output_dir(plan.step, rank.rank));
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
