#include <fmt/format.h>
#include <memory>

#include "flowrun/process.h"
#include "flowrun/slurm.h"
#include "flowrun/worker_env.h"
#include "flowrun/worker_group.h"

#include "files_ahead.h"

namespace flowrun {

std::string describe_devices(const StepPlan& plan) {
  if (plan.cpu) return "CPU";
  std::vector<std::string> ids;
  for (const auto& gpu : plan.nodes.front().gpus) ids.push_back(gpu.select_token);
  return fmt::format("GPU{} {}", ids.size() == 1 ? "" : "s", join(ids, ","));
}

std::vector<std::string> full_env(const EnvMap& parent, const EnvList& set) {
  EnvMap env = parent;
  for (const auto& [name, value] : set) env[name] = value;
  std::vector<std::string> entries;
  entries.reserve(env.size());
  for (const auto& [name, value] : env) entries.push_back(name + "=" + value);
  return entries;
}

LocalGroup::LocalGroup(Supervisor& supervisor, const Console& console, LocalStep step)
    : sup_(supervisor), console_(console), job_(std::move(step)) {}

std::optional<AttemptResult> LocalGroup::preflight() {
  AttemptResult refused;
  if (!job_.preflight || job_.preflight(refused.errors)) return std::nullopt;
  refused.started = false;
  refused.record.outcome = Outcome::failed;
  refused.record.start_unix_ns = refused.record.end_unix_ns = unix_now_ns();
  return refused;
}

AttemptResult LocalGroup::run_attempt(const Attempt& attempt) {
  const Step& step = *job_.step;
  const StepPlan& plan = *job_.plan;
  if (attempt.keep_previous) attempt.keep_previous();
  HeldPort port = hold_free_port(master_addr(plan, job_.ctx));
  LaunchContext ctx = job_.ctx;
  ctx.master_port = port.port;
  ctx.restart_count = attempt.restart;
  const NodeWork work = node_work(*job_.spec, step, plan, 0, ctx);
  const NodeSite site = this_host(ctx);
  GroupOptions group = job_.group;
  // Each rank's directory, and its logs opened: for several ranks on a
  // thread of their own that the ranks' starts wait for one by one
  // (files_ahead.h), for one rank here (or all of them, when the group's
  // logs open another way).
  std::vector<FilesAhead::Rank> files;
  files.reserve(work.ranks.size());
  for (const auto& rank : work.ranks) {
    const std::string rank_dir = ctx.layout.rank_dir(step.name, rank.rank);
    files.push_back({ctx.layout.output_dir(step.name, rank.rank), ctx.layout.error_file(step.name, rank.rank),
                     ctx.layout.end_file(step.name, rank.rank), rank_dir + "/stdout.log",
                     rank_dir + "/stderr.log"});
  }
  std::vector<WorkerLaunch> launches(work.ranks.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    WorkerLaunch& launch = launches[i];
    launch.stdout_log = files[i].stdout_log;
    launch.stderr_log = files[i].stderr_log;
    launch.error_file = files[i].error_file;
    launch.end_file = files[i].end_file;
  }
  std::shared_ptr<FilesAhead> made;
  if (work.ranks.size() > 1 && !group.open_log) {
    made = std::make_shared<FilesAhead>(std::move(files));
    group.open_log = [made](const std::string& path) { return made->open_log(path); };
    group.logs_held = [made] { return made->held(); };
  } else {
    for (const auto& f : files) FilesAhead::prepare(f);
  }
  for (std::size_t i = 0; i < work.ranks.size(); ++i) {
    const RankWork& rank = work.ranks[i];
    WorkerLaunch& launch = launches[i];
    launch.rank = rank.rank;
    launch.local_rank = rank.local_rank;
    launch.argv = job_.argv;
    // Started by srun (or in sbatch -n N), flowrun's own environment
    // carries the step's SLURM_NTASKS, SLURM_PROCID, ...: frameworks that
    // read Slurm's variables first (Lightning 1.x) would take their ranks
    // from those instead of the contract. The job's variables stay.
    launch.env = full_env(strip_step_variables(site.env), worker_env(work, rank, site));
    launch.workdir = step.workdir;
    if (job_.shows) launch.console = job_.shows(rank.rank, rank.local_rank);
    if (static_cast<std::size_t>(rank.local_rank) < ctx.cpus.size())
      launch.cpus = ctx.cpus[static_cast<std::size_t>(rank.local_rank)];
  }
  group.timeout_s = attempt.timeout_s;
  group.restart_count = attempt.restart;
  group.master_port = port.port;
  if (attempt.first) {
    console_.message(fmt::format("flowrun: step '{}': {} worker{} on this host ({}), MASTER_PORT {}",
                                 step.name, plan.world_size, plan.world_size == 1 ? "" : "s",
                                 describe_devices(plan), port.port));
  }
  // Held until now so that no bind(0) on this host takes it meanwhile;
  // released as the ranks start, for rank 0's store (or any socket a
  // rank binds there without SO_REUSEADDR, which a held port refuses).
  port.release();
  // The logs no start took are closed when the attempt ends, however it
  // ends: the run's record is written next (the supervisor keeps the
  // group's options, and with them the thread's object, until the next).
  struct Release {
    FilesAhead* files;
    ~Release() {
      if (files != nullptr) files->release();
    }
  } release{made.get()};
  AttemptResult result;
  result.record = sup_.run_group(launches, group);
  return result;
}

void LocalGroup::stop(Outcome why) { sup_.stop_group(why); }

void LocalGroup::kill() { sup_.kill_group(); }

int LocalGroup::interrupt_signal() { return sup_.interrupt_signal(); }

}  // namespace flowrun
