#include "flowrun/report.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "flowrun/json.h"
#include "flowrun/text.h"
#include "flowrun/worker_env.h"

namespace flowrun {

namespace {

// "0-7" for a run of three or more consecutive numbers, else "0,2".
std::string compact(const std::vector<int>& numbers) {
  if (numbers.empty()) return "-";
  bool consecutive = true;
  for (std::size_t i = 1; i < numbers.size(); ++i) consecutive &= numbers[i] == numbers[i - 1] + 1;
  if (consecutive && numbers.size() > 2) return fmt::format("{}-{}", numbers.front(), numbers.back());
  std::vector<std::string> parts;
  for (int n : numbers) parts.push_back(std::to_string(n));
  return join(parts, ",");
}

std::vector<int> gpu_labels(const NodePlan& node, const std::vector<int>& positions) {
  std::vector<int> labels;
  for (int g : positions) labels.push_back(node.gpus[static_cast<std::size_t>(g)].index);
  return labels;
}

std::vector<int> all_positions(const NodePlan& node) {
  std::vector<int> positions;
  for (std::size_t i = 0; i < node.gpus.size(); ++i) positions.push_back(static_cast<int>(i));
  return positions;
}

std::string host_label(const StepPlan& plan, const NodePlan& node) {
  if (!node.host.empty()) return node.host;
  if (plan.engine == Engine::manual) return "(joins by hand)";
  if (plan.engine == Engine::gang) return "(gang node " + std::to_string(node.node_rank) + ")";
  return "(assigned by " + std::string(engine_name(plan.engine.value_or(Engine::slurm))) + ")";
}

// `path` relative to `base` when inside it, for shorter text.
std::string relative_to(const std::string& path, const std::string& base) {
  if (path.size() > base.size() && path.compare(0, base.size(), base) == 0 && path[base.size()] == '/')
    return path.substr(base.size() + 1);
  return path;
}

// The command as it will run, as one line a shell would read back the same;
// run-directory paths are shown relative to the workdir the step runs in.
std::string command_text(const Step& step, const LaunchContext& ctx) {
  std::string run_dir = ctx.layout.run_dir;
  std::string shown = relative_to(run_dir, step.workdir);
  std::vector<std::string> words;
  for (auto word : expand_command(step, ctx.layout, {})) {
    for (std::size_t at = word.find(run_dir); at != std::string::npos;
         at = word.find(run_dir, at + shown.size()))
      word.replace(at, run_dir.size(), shown);
    words.push_back(shell_quote(word));
  }
  return join(words, " ");
}

const StepPlan* plan_of(const std::vector<StepPlan>& plans, const std::string& name) {
  for (const auto& plan : plans)
    if (plan.step == name) return &plan;
  return nullptr;
}

// Every rank's variables, indexed by rank, as worker_env makes them with
// this host's environment and run layout.
std::vector<EnvList> rank_envs(const Spec& spec, const Step& step, const StepPlan& plan,
                               const LaunchContext& ctx) {
  std::vector<EnvList> envs(plan.ranks.size());
  const NodeSite site = this_host(ctx);
  for (const auto& node : plan.nodes) {
    const NodeWork work = node_work(spec, step, plan, node.node_rank, ctx);
    for (const auto& rank : work.ranks)
      envs.at(static_cast<std::size_t>(rank.rank)) = worker_env(work, rank, site);
  }
  return envs;
}

std::string value_of(const EnvList& env, const std::string& name) {
  for (const auto& [key, value] : env)
    if (key == name) return value;
  return "";
}

bool has_key(const EnvList& env, const std::string& name) {
  return std::any_of(env.begin(), env.end(), [&](const auto& kv) { return kv.first == name; });
}

// A step's forensics: when they are not the default, what flowrun gathers
// before it stops the ranks and what NCCL's flight recorder leaves.
std::string forensics_text(const Forensics& f) {
  std::vector<std::string> parts;
  if (!f.stacks)
    parts.push_back("no Python stacks before flowrun stops the ranks");
  else if (f.timeout_s != Forensics{}.timeout_s)
    parts.push_back(
        fmt::format("the live ranks' Python stacks before flowrun stops them, within {:g} s", f.timeout_s));
  if (f.sample_s == 0)
    parts.push_back("no samples of the ranks' stacks (the slow rank is not named)");
  else if (f.sample_s != kDefaultSampleS)
    parts.push_back(
        fmt::format("a sample of each rank's stack every {:g} s, to name the slow rank", f.sample_s));
  if (f.nccl)
    parts.push_back("NCCL's flight recorder in every rank, dumped on a collective's timeout into rank<R>/" +
                    nccl_trace_prefix(0) + "<R>");
  return "   Forensics: " + join(parts, "; ") + ".\n";
}

// "a, b or c".
std::string or_list(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += i + 1 == items.size() ? " or " : ", ";
    out += items[i];
  }
  return out;
}

// The step's restart policy in one sentence; empty without restarts.
std::string restart_text(const StepPlan& plan) {
  if (plan.max_restarts == 0) return "";
  const RestartPolicy& p = plan.restart;
  std::string out = fmt::format("Restarts: up to {} (max_restarts), ", plan.max_restarts);
  if (!p.is_set) return out + "after any failure, as torchrun's --max-restarts does.";
  std::vector<std::string> causes, stops;
  if (p.on_exception) causes.push_back("an exception");
  if (!p.exit_codes.empty()) {
    std::vector<std::string> codes;
    for (int c : p.exit_codes) codes.push_back(std::to_string(c));
    causes.push_back("exit code " + or_list(codes));
  } else if (p.on_exit_code) {
    causes.push_back("a non-zero exit code");
  }
  if (p.on_signal) causes.push_back("a signal");
  if (!p.progress_file.empty()) stops.push_back("progress_file " + p.progress_file_text + " did not change");
  if (p.min_attempt_s)
    stops.push_back("it ran less than min_attempt (" + format_duration(*p.min_attempt_s) +
                    ") and failed as the one before");
  if (stops.empty() && p.on_exception) stops.push_back("it raised the same exception as the one before");
  out += "after " + or_list(causes);
  if (!stops.empty()) out += "; not after an attempt that made no progress: " + or_list(stops);
  return out + ".";
}

Json restart_json(const StepPlan& plan) {
  const RestartPolicy& p = plan.restart;
  Json causes = Json::array();
  if (p.on_exception) causes.push_back("exception");
  if (p.on_exit_code || !p.exit_codes.empty()) causes.push_back("exit_code");
  if (p.on_signal) causes.push_back("signal");
  return {
      {"max_restarts", plan.max_restarts},
      {"policy", p.is_set},
      {"causes", std::move(causes)},
      {"exit_codes", p.exit_codes},
      {"min_attempt_ms",
       p.min_attempt_s ? Json(static_cast<std::int64_t>(*p.min_attempt_s * 1000 + 0.5)) : Json()},
      {"progress_file", p.progress_file.empty() ? Json() : Json(p.progress_file)},
      {"same_exception_stops", p.is_set && p.on_exception && !p.min_attempt_s && p.progress_file.empty()}};
}

void describe_parallel(std::string& out, const PlanView& view, const Step& step, const StepPlan& plan) {
  for (const auto& line : plan.why) out += "   " + line + "\n";
  out += "\n";
  if (plan.nodes.size() > 1) {
    TextTable rows("   ");
    rows.add_row({"node", "host", "GPUs", "ranks"});
    for (const auto& node : plan.nodes) {
      std::vector<int> ranks;
      for (int r = 0; r < node.procs; ++r) ranks.push_back(node.first_rank + r);
      rows.add_row({std::to_string(node.node_rank),
                    host_label(plan, node) + (node.is_local ? " (this host)" : ""),
                    plan.cpu ? "-" : compact(gpu_labels(node, all_positions(node))), compact(ranks)});
    }
    for (const auto& spare : plan.spares)
      rows.add_row(
          {"spare", host_label(plan, spare) + (spare.is_local ? " (this host)" : ""),
           plan.cpu ? "-" : compact(gpu_labels(plan.nodes.front(), all_positions(plan.nodes.front()))),
           "none: waits"});
    out += rows.render() + "\n";
    if (plan.min_nodes > 0)
      out += "   The table is for all " + std::to_string(plan.nodes.size()) + " nodes (nodes: \"" +
             std::to_string(plan.min_nodes) + ":" + std::to_string(plan.nodes.size()) +
             "\"); with fewer, the nodes there take node ranks 0 and up in the order they join, and the "
             "ranks renumber over them.\n\n";
  }
  // Across nodes the node table above names the hosts; one node names it here.
  const bool one_node = plan.nodes.size() == 1;
  TextTable rows("   ");
  if (one_node)
    rows.add_row({"rank", "node", "host", "local_rank", "GPUs"});
  else
    rows.add_row({"rank", "node", "local_rank", "GPUs"});
  for (const auto& rank : plan.ranks) {
    const auto& node = plan.nodes[static_cast<std::size_t>(rank.node)];
    std::vector<std::string> row{std::to_string(rank.rank), std::to_string(rank.node)};
    if (one_node) row.push_back(host_label(plan, node));
    row.push_back(std::to_string(rank.local_rank));
    row.push_back(plan.cpu ? "-" : compact(gpu_labels(node, rank.gpus)));
    rows.add_row(std::move(row));
  }
  out += rows.render() + "\n";

  const LaunchContext& ctx = view.ctx;
  if (view.show_env) {
    const std::vector<EnvList> envs = rank_envs(view.spec, step, plan, ctx);
    for (const auto& rank : plan.ranks) {
      out += fmt::format("   rank {} environment:\n", rank.rank);
      for (const auto& [key, value] : envs.at(static_cast<std::size_t>(rank.rank)))
        out += "     " + key + "=" + value + "\n";
    }
    out += "\n";
  } else {
    const NodeWork node0 = node_work(view.spec, step, plan, 0, ctx);
    const EnvList env0 = worker_env(node0, node0.ranks.front(), this_host(ctx));
    std::string devices;
    if (plan.cpu)
      devices = "CUDA_VISIBLE_DEVICES is empty, so workers see no GPU";
    else if (ctx.virtual_local_rank)
      devices =
          "each worker's CUDA_VISIBLE_DEVICES names its own GPU alone, its cuda:0, and LOCAL_RANK=0 "
          "(--virtual-local-rank)";
    else if (plan.visible_devices == Visibility::process)
      devices = "CUDA_VISIBLE_DEVICES narrowed to each worker's own GPUs (visible_devices: process)";
    else if (!has_key(env0, "CUDA_VISIBLE_DEVICES"))
      devices = "CUDA_VISIBLE_DEVICES left as it is (the node's GPUs); each worker uses cuda:LOCAL_RANK";
    else
      devices = "CUDA_VISIBLE_DEVICES=" + value_of(env0, "CUDA_VISIBLE_DEVICES") +
                " on node 0, so workers see them as cuda:0-" +
                std::to_string(plan.nodes.front().gpus.size() - 1);
    out += "   Workers get MASTER_ADDR=" + node0.master_addr + ", " +
           (ctx.master_port > 0 ? "MASTER_PORT=" + std::to_string(ctx.master_port)
                                : "a free MASTER_PORT picked at launch") +
           " and TORCHELASTIC_RUN_ID=" + node0.job_id + ";\n   " + devices +
           ".\n   'flowrun plan --env' lists every variable.\n";
  }
  if (!step.outputs.empty() || step.collect == Collect::all) {
    out +=
        "   Outputs: " +
        (step.outputs.empty() ? std::string("FLOWRUN_OUTPUT_DIR only") : join(step.outputs, ", ")) +
        (step.collect == Collect::all ? " from every rank (collect: all)" : " from rank 0 (collect: rank0)") +
        ".\n";
  }
  if (!step.forensics.is_default()) out += forensics_text(step.forensics);
  if (const std::string restarts = restart_text(plan); !restarts.empty()) out += "   " + restarts + "\n";
}

// The gang this host is a node of, and the variables that said so.
std::string gang_text(const HostFacts& host) {
  if (!host.gang_ignored.empty()) return "Gang: " + host.gang_ignored + "\n";
  if (!host.gang) return {};
  const GangRead& g = *host.gang;
  std::vector<std::string> read;
  for (const auto& [name, value] : g.variables) read.push_back(name + "=" + printable(value));
  return fmt::format("Gang: node {} of {} of a {} (read from {}); {}\n", g.index, g.num_nodes,
                     gang_platform_name(g.platform), join(read, ", "),
                     g.is_head() ? "this node is the head: it runs the flow, and every other node's flowrun "
                                   "joins it as its agent for the parallel steps"
                                 : "this node joins the head as its agent for the parallel steps");
}

}  // namespace

std::string format_plan_text(const PlanView& view) {
  const Spec& spec = view.spec;
  std::string out = fmt::format("Flow {} ({}), run id {}\n", spec.name, spec.file, view.ctx.run_id);
  const auto& inv = view.host.inventory;
  out +=
      fmt::format("This host: {}, {}\n", view.host.hostname,
                  inv.gpus.empty() ? "no GPUs" : fmt::format("{} GPUs ({})", inv.gpus.size(), inv.summary()));
  out += gang_text(view.host);
  int number = 0;
  for (std::size_t index : spec.order) {
    const Step& step = spec.steps[index];
    out += fmt::format("\n{}. {}", ++number, step.name);
    if (!step.needs.empty()) out += " (after " + join(step.needs, ", ") + ")";
    const std::string run = "   run: " + command_text(step, view.ctx) + "\n";
    if (const StepPlan* plan = plan_of(view.plans, step.name)) {
      out +=
          fmt::format(": parallel, {} {}\n", plan->world_size, plan->world_size == 1 ? "worker" : "workers");
      out += run;
      describe_parallel(out, view, step, *plan);
    } else if (!step.join.empty()) {
      out += fmt::format(": joins {}; runs once on {}\n", step.join, view.host.hostname);
      out += run;
      const Step* joined = spec.find_step(step.join);
      const std::string inputs = relative_to(view.ctx.layout.inputs_dir(step.join), spec.workdir);
      out += "   ${steps." + step.join + ".outputs} and FLOWRUN_INPUTS = " + inputs + " (" +
             (joined && joined->collect == Collect::all ? "a folder per rank: rank0/, rank1/, ...)"
                                                        : "rank 0's files)") +
             "\n";
    } else {
      out += fmt::format(": runs once on {}\n", view.host.hostname);
      out += run;
    }
  }
  return out;
}

std::string format_plan_json(const PlanView& view) {
  const Spec& spec = view.spec;
  Json json;
  json["format"] = "flowrun.plan/1";
  json["spec"] = spec.file;
  json["name"] = spec.name;
  json["run_id"] = view.ctx.run_id;
  json["run_dir"] = view.ctx.layout.run_dir;
  const Inventory& inventory = view.host.inventory;
  const bool looked = inventory.source != kGpusNotProbed;  // not by a run whose steps all run on CPUs
  json["host"] = {{"hostname", view.host.hostname},
                  {"gpus", looked ? Json(static_cast<int>(inventory.gpus.size())) : Json()},
                  {"summary", looked ? inventory.summary() : "not looked for: every step runs on CPUs"}};
  if (const auto& gang = view.host.gang) {
    Json variables = Json::object();
    for (const auto& [name, value] : gang->variables) variables[name] = printable(value);
    json["gang"] = {{"platform", std::string(gang_platform_name(gang->platform))},
                    {"index", gang->index},
                    {"nodes", gang->num_nodes},
                    {"head_index", gang->head_index},
                    {"head", printable(gang->head_host)},
                    {"variables", variables}};
  }
  Json& steps = json["steps"] = Json::array();
  for (std::size_t index : spec.order) {
    const Step& step = spec.steps[index];
    const StepPlan* plan = plan_of(view.plans, step.name);
    Json s;
    s["name"] = step.name;
    s["kind"] = plan ? "parallel" : !step.join.empty() ? "join" : "single";
    s["needs"] = step.needs;
    if (step.shell)
      s["script"] = step.script;
    else
      s["argv"] = step.argv;
    s["workdir"] = step.workdir;
    if (!plan) {
      s["runs_on"] = view.host.hostname;
      if (!step.join.empty()) {
        s["join"] = step.join;
        s["inputs"] = view.ctx.layout.inputs_dir(step.join);
      }
      steps.push_back(std::move(s));
      continue;
    }
    s["mode"] = plan->mode == PlanMode::single_node ? "single_node" : "multi_node";
    s["cpu"] = plan->cpu;
    s["world_size"] = plan->world_size;
    s["gpus_per_proc"] = plan->gpus_per_proc;
    s["engine"] = plan->engine ? Json(engine_name(*plan->engine)) : Json();
    s["why"] = plan->why;
    s["outputs"] = step.outputs;
    s["collect"] = step.collect == Collect::all ? "all" : "rank0";
    if (!step.forensics.is_default())
      s["forensics"] = {{"stacks", step.forensics.stacks},
                        {"timeout_ms", std::llround(step.forensics.timeout_s * 1000)},
                        {"nccl", step.forensics.nccl}};
    s["restart"] = restart_json(*plan);
    Json& nodes = s["nodes"] = Json::array();
    for (const auto& node : plan->nodes) {
      nodes.push_back({{"node_rank", node.node_rank},
                       {"host", node.host.empty() ? Json() : Json(node.host)},
                       {"local", node.is_local},
                       {"gpus", gpu_labels(node, all_positions(node))},
                       {"procs", node.procs},
                       {"first_rank", node.first_rank}});
    }
    s["min_nodes"] = plan->min_nodes > 0 ? Json(plan->min_nodes) : Json();
    Json& spares = s["spares"] = Json::array();
    for (const auto& spare : plan->spares)
      spares.push_back({{"node_rank", spare.node_rank},
                        {"host", spare.host.empty() ? Json() : Json(spare.host)},
                        {"local", spare.is_local}});
    const std::vector<EnvList> envs = rank_envs(spec, step, *plan, view.ctx);
    Json& ranks = s["ranks"] = Json::array();
    for (const auto& rank : plan->ranks) {
      const auto& node = plan->nodes[static_cast<std::size_t>(rank.node)];
      Json env = Json::object();
      for (const auto& [key, value] : envs.at(static_cast<std::size_t>(rank.rank))) env[key] = value;
      ranks.push_back({{"rank", rank.rank},
                       {"node", rank.node},
                       {"local_rank", rank.local_rank},
                       {"gpus", gpu_labels(node, rank.gpus)},
                       {"env", std::move(env)}});
    }
    steps.push_back(std::move(s));
  }
  return to_document(json);
}

std::string format_gpus_text(const Inventory& inventory, const std::string& hostname) {
  std::string out;
  std::string source = inventory.source == "fake" ? ", simulated (--fake-gpus or FLOWRUN_FAKE_GPUS)" : "";
  if (inventory.gpus.empty()) {
    out += hostname + ": no GPUs" + (inventory.unavailable_reason.empty() ? source : "");
    if (!inventory.unavailable_reason.empty()) out += " (" + inventory.unavailable_reason + ")";
    out += "\n";
  } else {
    out += fmt::format("{}: {} GPUs ({}){}\n", hostname, inventory.gpus.size(), inventory.summary(), source);
    if (!inventory.driver_version.empty())
      out += fmt::format("driver {}, CUDA {}\n", inventory.driver_version,
                         inventory.cuda_driver_version.empty() ? "unknown" : inventory.cuda_driver_version);
    TextTable rows("  ");
    rows.add_row({"index", "name", "memory", "uuid", "pci bus id"});
    for (const auto& gpu : inventory.gpus)
      rows.add_row(
          {std::to_string(gpu.index), gpu.name, format_bytes(gpu.memory_bytes), gpu.uuid, gpu.pci_bus_id});
    out += rows.render();
  }
  if (!inventory.selected_by.empty())
    out += fmt::format("selected by {}: {} of the system's {} GPUs\n", inventory.selected_by,
                       inventory.gpus.size(), inventory.system_count);
  for (const auto& note : inventory.notes) out += "note: " + note + "\n";
  return out;
}

std::string format_gpus_json(const Inventory& inventory, const std::string& hostname) {
  Json json;
  json["format"] = "flowrun.gpus/1";
  json["hostname"] = hostname;
  json["source"] = inventory.source;
  json["count"] = static_cast<int>(inventory.gpus.size());
  json["system_count"] = static_cast<std::uint64_t>(inventory.system_count);
  json["driver_version"] = inventory.driver_version;
  json["cuda_driver_version"] = inventory.cuda_driver_version;
  json["selected_by"] = inventory.selected_by;
  json["unavailable_reason"] = inventory.unavailable_reason;
  json["notes"] = inventory.notes;
  Json& gpus = json["gpus"] = Json::array();
  for (const auto& gpu : inventory.gpus) {
    Json g = gpu_identity(gpu);
    g["select_token"] = gpu.select_token;
    gpus.push_back(std::move(g));
  }
  return to_document(json);
}

std::string format_validate_ok(const Spec& spec) {
  std::vector<std::string> names;
  for (std::size_t index : spec.order) {
    const Step& step = spec.steps[index];
    if (step.is_parallel())
      names.push_back(step.name + " (parallel)");
    else if (!step.join.empty())
      names.push_back(step.name + " (join of " + step.join + ")");
    else
      names.push_back(step.name);
  }
  return fmt::format("{}: ok: {} {}: {}\n", spec.file, spec.steps.size(),
                     spec.steps.size() == 1 ? "step" : "steps", join(names, ", "));
}

}  // namespace flowrun
