// flowrun run: torchrun's command line, so that `torchrun ARGS` becomes
// `flowrun run ARGS`; and flowrun init, which writes the same thing as a spec.
//
// Both read torchrun's options up to the script (every option in both
// spellings, --nproc-per-node and --nproc_per_node; --opt VALUE or
// --opt=VALUE), then turn them into a one-step flow: a spec text that goes
// through the same parser, planner and runner as a spec the user wrote. What
// `flowrun run` does is therefore exactly what `flowrun init` writes, and
// `--dry-run` shows its plan.
//
// Several nodes meet the way torchrun's do: inside a Slurm allocation this
// flowrun starts the other nodes itself (srun); with --rdzv-endpoint or
// --master-addr every node runs the same command, node 0's flowrun is the head
// (--node-rank 0, or the first on the endpoint's host to bind its port) and
// the others join it as agents (docs/migrating.md).
//
// This file is the two commands themselves: the run's options, --dry-run,
// the run, and the spec init writes. Reading the command line, the option
// table, the spec's shape and the nodes' meeting have files of their own
// (run_detail.h lists them).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <iostream>
#include <optional>
#include <sched.h>
#include <set>
#include <tuple>
#include <unistd.h>

#include "flowrun/error.h"
#include "flowrun/fd.h"
#include "flowrun/flow.h"
#include "flowrun/gpu.h"
#include "flowrun/net_addresses.h"
#include "flowrun/report.h"
#include "flowrun/supervisor.h"

#include "commands.h"
#include "gang_setup.h"
#include "run_detail.h"
#include "summary.h"

namespace flowrun::run_detail {

namespace {

// How many CPU cores this process may use.
int cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

// What build_spec knows of this host: the probe's GPUs, this process's
// cores, the programs PATH has, and whether an endpoint names this host.
RunHost this_host(const HostFacts& facts, const EnvMap& env) {
  RunHost host;
  host.facts = facts;
  host.cpus = cpu_count();
  host.env = env;
  const std::string path = env_get(env, "PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  host.on_path = [path](const std::string& name) {
    std::size_t start = 0;
    while (start <= path.size()) {
      std::size_t end = path.find(':', start);
      if (end == std::string::npos) end = path.size();
      std::string dir = path.substr(start, end - start);
      if (dir.empty()) dir = ".";
      if (access((dir + "/" + name).c_str(), X_OK) == 0) return true;
      start = end + 1;
    }
    return false;
  };
  host.in_workdir = [](const std::string& name) { return access(name.c_str(), X_OK) == 0; };
  host.is_this_host = [name = facts.hostname](const std::string& node0) {
    return cluster::is_this_host(node0, name);
  };
  return host;
}

void note(const Request& r) {
  for (const auto& n : r.notes) std::cerr << "flowrun run: " << n << "\n";
}

// The spec's diagnostics point into text the user never wrote: say them
// against the options instead.
[[noreturn]] void rethrow_for_options(const DiagnosticError& e, const std::string& spec_text) {
  std::string message;
  for (const auto& d : e.diagnostics()) {
    std::string option = "the command line";
    if (d.path.find("parallel") != std::string::npos) option = "--nproc-per-node / --nnodes / --cpus";
    if (d.path.find("cluster") != std::string::npos) option = "--nnodes / --rdzv-endpoint";
    if (d.path.ends_with("stall_timeout"))
      option = "--stall-timeout";
    else if (d.path.ends_with("timeout") && d.path.find("cluster") == std::string::npos)
      option = "--timeout";
    message += (message.empty() ? "" : "\nflowrun: error: ") + option + ": " + d.message;
  }
  message += "\nflowrun run builds this one-step spec (flowrun init writes it to a file):\n" + spec_text;
  throw Error(message, kExitUsage);
}

// --redirects, --tee and --local-ranks-filter as torchrun reads them;
// nullopt when none is given (every stream of every rank is shown).
std::optional<ConsoleStreams> console_streams(const Request& r) {
  if (r.redirects.empty() && r.tee.empty() && r.local_ranks_filter.empty()) return std::nullopt;
  ConsoleStreams streams;
  std::string error;
  for (auto [option, text, map] : {std::tuple{"--redirects", &r.redirects, &streams.redirects},
                                   std::tuple{"--tee", &r.tee, &streams.tee}}) {
    if (text->empty()) continue;
    auto parsed = parse_std_map(*text, &error);
    if (!parsed) usage_error("run", std::string(option) + " " + *text + ": " + error);
    *map = std::move(*parsed);
  }
  if (r.local_ranks_filter == "none") {
    streams.local_ranks = std::set<int>{};
  } else if (!r.local_ranks_filter.empty()) {
    try {
      if (auto ranks = parse_rank_list(r.local_ranks_filter))
        streams.local_ranks.emplace(ranks->begin(), ranks->end());
    } catch (const Error&) {
      usage_error("run", "--local-ranks-filter " + r.local_ranks_filter +
                             ": expected local ranks such as 0, 0,2 or 0-3 (or all, none)");
    }
  }
  return streams;
}

// --numa-binding node: each local rank's CPUs, those of the NUMA node of the
// GPU torchrun gives it (cuda:LOCAL_RANK of this host's), that flowrun may
// itself run on; `why` gets a line per worker for the console.
std::vector<std::vector<int>> numa_cpus(const std::string& policy, const StepPlan& plan,
                                        const HostFacts& host, const EnvMap& env,
                                        std::vector<std::string>& why) {
  const std::string option = "--numa-binding " + policy;
  if (plan.cpu)
    usage_error("run", option + " binds GPU workers to CPUs near their GPU; these are CPU workers");
  const NumaPolicy mode = policy == "socket"      ? NumaPolicy::socket
                          : policy == "exclusive" ? NumaPolicy::exclusive
                                                  : NumaPolicy::node;
  // The GPUs as torch numbers them in the launcher, which binds local rank
  // R to cuda:R's node.
  std::vector<std::string> gpus;
  for (const Gpu& gpu : host.inventory.gpus) gpus.push_back(gpu.pci_bus_id);
  const std::string sysfs = sysfs_root(env);
  const std::vector<int> allowed = allowed_cpus();
  std::vector<std::vector<int>> cpus;
  for (const RankPlan& rank : plan.ranks) {
    if (rank.node != 0) continue;
    const auto local = static_cast<std::size_t>(rank.local_rank);
    if (local >= gpus.size())
      usage_error("run",
                  fmt::format("{}: local rank {} has no GPU of its own (cuda:{})", option, local, local));
    const Gpu& gpu = host.inventory.gpus[local];
    int node = 0;
    std::vector<int> mine;
    try {
      mine = numa_binding_cpus(mode, gpus, local, allowed, sysfs, &node);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: GPU {} ({}): {}", option, gpu.select_token, gpu.pci_bus_id, e.what()),
                  kExitUsage);
    }
    if (mine.empty())
      usage_error("run", fmt::format("{}: NUMA node {} of GPU {} has no CPU that flowrun may run on (its "
                                     "affinity: {})",
                                     option, node, gpu.select_token, cpu_list_text(allowed)));
    if (local >= cpus.size()) cpus.resize(local + 1);
    why.push_back(fmt::format("local rank {}: GPU {} on NUMA node {}: CPUs {}", local, gpu.select_token, node,
                              cpu_list_text(mine)));
    cpus[local] = std::move(mine);
  }
  return cpus;
}

// The run's options from the command line.
RunOptions run_options(const Request& r, const Spec& spec, const std::string& cwd, int fake,
                       const std::vector<std::string>& args, const std::string& spec_text) {
  RunOptions run;
  run.args = args;
  run.run_id = r.run_id;
  if (run.run_id.empty() && !r.rdzv_id.empty()) run.run_id = make_run_id(slug(spec.name + "-" + r.rdzv_id));
  run.run_dir = r.run_dir;
  if (run.run_dir.empty() && !r.log_dir.empty()) {
    if (run.run_id.empty()) run.run_id = make_run_id(spec.name);
    run.run_dir = (r.log_dir.front() == '/' ? r.log_dir : cwd + "/" + r.log_dir) + "/" + run.run_id;
  }
  if (r.ranks == "none") {
    run.console_ranks = std::vector<int>{};
  } else if (!r.ranks.empty()) {
    run.console_ranks = parse_rank_list(r.ranks);
  }
  run.console_streams = console_streams(r);
  run.virtual_local_rank = r.virtual_local_rank;
  if (r.grace_s) run.grace_s = *r.grace_s;
  if (r.console_wait_s) run.console_wait_s = *r.console_wait_s;
  run.fold = !r.no_fold;
  run.stop_signals = r.stop_signals;
  run.color = color_choice(r.color);
  run.fake_gpus = fake;
  // Recorded in the run directory for `flowrun resume`: the spec flowrun run
  // built (there is no file), or a spec file's --cpus and --python.
  run.spec_text = spec_text;
  if (!r.spec_path.empty() && r.cpus > 0) run.cpus = r.cpus;
  if (!r.spec_path.empty() && !r.python.empty()) run.python = python_path(r.python, cwd);
  return run;
}

// --dry-run: the one-step spec flowrun run built, if it built one, and the plan.
int show_dry_run(const Spec& spec, const HostFacts& host, const std::vector<StepPlan>& plans,
                 const EnvMap& env, const RunOptions& run, const std::string& spec_text) {
  LaunchContext ctx;
  ctx.run_id = run.run_id.empty() ? make_run_id(spec.name) : run.run_id;
  ctx.layout.run_dir = run_dir_for(spec, ctx.run_id, run.run_dir);
  ctx.parent_env = env;
  ctx.virtual_local_rank = run.virtual_local_rank;
  PlanView view{spec, host, plans, ctx, false};
  if (!spec_text.empty())
    std::cout << "flowrun run runs this one-step spec (flowrun init writes it to a file):\n\n"
              << spec_text << "\n";
  std::cout << format_plan_text(view);
  return kExitOk;
}

int run_request(Request& r, SummaryTarget& target) {
  const EnvMap env = read_environ();
  const int fake = fake_gpus_from_env(r.fake_gpus, env);
  HostFacts host = probe_host(fake, env);
  console_streams(r);  // its usage errors before anything runs

  const std::string cwd = current_directory();
  Spec spec;
  std::string spec_text;
  std::vector<std::string> args;
  Built built;
  std::optional<GangRead> gang;
  if (!r.spec_path.empty()) {
    spec = load_or_throw(r.spec_path);
    args = r.spec_args;
    note(r);
  } else {
    // A gang's node (a TrainJob's pod running `flowrun run train.py` where it
    // ran `torchrun train.py`): the gang says how many nodes, this node's rank
    // and where node 0 is, and the step runs on it (gang_setup.h).
    if ((gang = read_gang_or_throw(env))) as_gang_node(r, *gang);
    built = build_spec(r, this_host(host, env), "run", false);
    r.notes.insert(r.notes.end(), built.notes.begin(), built.notes.end());
    if (built.meeting.claim) claim_rendezvous(built.meeting, r);
    spec_text = built.text;
    if ((!r.numa_binding.empty() || r.virtual_local_rank) && built.shape.nodes > 1)
      usage_error("run", std::string(r.virtual_local_rank ? "--virtual-local-rank" : "--numa-binding") +
                             " is not supported with --nnodes above 1 yet: flowrun applies it to one node's "
                             "workers");
    note(r);
    SpecParse parsed = parse_spec(spec_text, "flowrun run", cwd);
    if (!parsed.diagnostics.empty())
      rethrow_for_options(DiagnosticError(std::move(parsed.diagnostics)), spec_text);
    spec = std::move(*parsed.spec);
    if (gang && built.shape.nodes > 1) {
      spec.cluster->engine = Engine::gang;
      use_gang(spec, host, gang);
      if (built.meeting.kind == Meeting::Kind::agent)
        return run_agent(gang_agent(*gang, *spec.cluster, env, fake), env);
    } else if (built.meeting.kind == Meeting::Kind::agent) {
      return join_node0(r, built, *spec.cluster, cwd, fake, env);
    } else if (built.meeting.kind == Meeting::Kind::head) {
      ClusterSpec& cluster = *spec.cluster;
      cluster.rendezvous = built.meeting.endpoint;
      cluster.rendezvous_token_file = token_path(cwd, built.meeting.endpoint);
      cluster.rendezvous_fd = built.meeting.listen_fd;
    }
  }
  if (!r.python.empty() && !r.spec_path.empty()) use_python(spec, python_path(r.python, cwd));

  PlanOptions plan_options;
  if (r.cpus > 0 && !r.spec_path.empty()) plan_options.cpus = r.cpus;
  std::vector<StepPlan> plans;
  try {
    plans = plan_flow(spec, host, plan_options);
  } catch (const DiagnosticError& e) {
    if (spec_text.empty()) throw;
    rethrow_for_options(e, spec_text);
  }

  RunOptions run = run_options(r, spec, cwd, fake, args, spec_text);
  if (host.gang && !r.dry_run) run.gang = gang_head(*host.gang, *spec.cluster, env);
  std::vector<std::string> numa_lines;
  if (!r.numa_binding.empty())
    run.worker_cpus = numa_cpus(r.numa_binding, plans.front(), host, env, numa_lines);
  for (const auto& line : numa_lines)
    (r.dry_run ? std::cout : std::cerr)
        << "flowrun run: --numa-binding " << r.numa_binding << ": " << line << "\n";
  if (r.dry_run) return show_dry_run(spec, host, plans, env, run, spec_text);
  // Made here rather than by the runner, so that the summary finds the run.
  if (run.run_id.empty()) run.run_id = make_run_id(spec.name);
  target.run_dir = run_dir_for(spec, run.run_id, run.run_dir);
  return run_flow(spec, host, plans, env, run);
}

int init_request(Request& r) {
  const EnvMap env = read_environ();
  const HostFacts host = probe_host(fake_gpus_from_env(r.fake_gpus, env), env);
  Built built = build_spec(r, this_host(host, env), "init", true);
  r.notes.insert(r.notes.end(), built.notes.begin(), built.notes.end());
  for (auto [given, option] :
       {std::pair{!r.redirects.empty(), "--redirects"}, std::pair{!r.tee.empty(), "--tee"},
        std::pair{!r.local_ranks_filter.empty(), "--local-ranks-filter"},
        std::pair{!r.numa_binding.empty(), "--numa-binding"},
        std::pair{r.virtual_local_rank, "--virtual-local-rank"}}) {
    if (given)
      r.notes.push_back(std::string(option) +
                        " is not written to the spec (a spec has no key for it); give it to flowrun run");
  }
  note(r);
  const std::string name = step_name(r);
  std::string text = built.text;
  text.erase(0, text.find('\n') + 1);  // the "# flowrun run:" line
  std::string out = "# Written by `flowrun init`. Check it with `flowrun plan " +
                    (r.output.empty() ? name + ".yaml" : r.output) + "`; the format is in docs/spec.md.\n" +
                    text;
  out +=
      "    # Files the workers write that later steps need (a glob, or a list of them); each rank also\n"
      "    # has its own FLOWRUN_OUTPUT_DIR. rank 0's are collected unless collect: all.\n"
      "    # outputs: [model.pt]\n"
      "  # A step that runs once, after every worker has finished, with their files:\n"
      "  # - name: evaluate\n"
      "  #   join: " +
      name +
      "\n"
      "  #   run: python3 evaluate.py ${steps." +
      name + ".outputs}\n";
  const std::string path = r.output.empty() ? name + ".yaml" : r.output;
  SpecParse check = parse_spec(out, path, current_directory());
  if (!check.diagnostics.empty()) {
    std::string message = "the spec flowrun init made does not validate (a bug; please report it):";
    for (const auto& d : check.diagnostics) message += "\n  " + d.to_string();
    throw Error(message);
  }
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (r.force ? O_TRUNC : O_EXCL), 0644);
  if (fd < 0) {
    if (errno == EEXIST)
      throw Error(path + " already exists; choose another name with -o FILE, or --force to overwrite it",
                  kExitUsage);
    throw Error("cannot write " + path + ": " + std::strerror(errno));
  }
  const bool ok = write_all(fd, out.data(), out.size());
  close(fd);
  if (!ok) throw Error("cannot write " + path + ": " + std::strerror(errno));
  std::cout << "Wrote " << path << ": one parallel step, " << name << " (" << built.shape.why << ").\n"
            << "Next: flowrun plan " << path << "   (where every rank runs), then flowrun " << path << "\n";
  return kExitOk;
}

}  // namespace

}  // namespace flowrun::run_detail

namespace flowrun {

int cmd_torchrun(int argc, char** argv) {
  return report_with_summary(run_detail::summary_request(argc, argv), [&](SummaryTarget& target) -> int {
    auto request = run_detail::parse_request(argc, argv, "run");
    return request ? run_detail::run_request(*request, target) : kExitOk;
  });
}

int cmd_init(int argc, char** argv) {
  return report_errors([&]() -> int {
    auto request = run_detail::parse_request(argc, argv, "init");
    return request ? run_detail::init_request(*request) : kExitOk;
  });
}

}  // namespace flowrun
