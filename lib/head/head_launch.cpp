#include "head_launch.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/host.h"
#include "flowrun/process.h"
#include "flowrun/slurm.h"
#include "flowrun/text.h"
#include "flowrun/util.h"

#include "head_addresses.h"
#include "node_reach.h"

namespace flowrun::cluster {

namespace {

// A file only this user can read (the run's token), replacing any old one.
void write_private_file(const std::string& path, const std::string& text) {
  const auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    make_dirs(path.substr(0, slash));
    chmod(path.substr(0, slash).c_str(), 0700);
  }
  unlink(path.c_str());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw Error("cannot write " + path + ": " + std::strerror(errno));
  const bool ok = write_all(fd, text.data(), text.size());
  close(fd);
  if (!ok) throw Error("cannot write " + path + ": " + std::strerror(errno));
}

// The command that reaches the nodes: cluster.ssh_command, else FLOWRUN_SSH, else ssh.
std::vector<std::string> ssh_command(const ClusterSpec& cluster, const EnvMap& env) {
  std::vector<std::string> ssh{"ssh"};
  if (auto value = env_get(env, "FLOWRUN_SSH"); value && !value->empty()) {
    std::string error;
    auto words = split_shell_words(*value, &error);
    if (!words || words->empty())
      throw Error("FLOWRUN_SSH='" + *value + "': " + (error.empty() ? "no command" : error), kExitUsage);
    ssh = std::move(*words);
  }
  if (!cluster.ssh_command.empty()) ssh = cluster.ssh_command;
  return ssh;
}

std::uint16_t rendezvous_port(const std::string& rendezvous) {
  const auto colon = rendezvous.rfind(':');
  return static_cast<std::uint16_t>(std::stoi(rendezvous.substr(colon + 1)));
}

// Listens where the agents dial; returns the console's "ADDRESS:PORT
// (why)". flowrun run's rendezvous: the token goes where the other nodes'
// flowrun run looks for it (`token_file`), before any connection is
// accepted (the socket flowrun run bound may listen already: the agents'
// connections wait in its queue).
std::string listen(Listener& listener, const ClusterSpec& cluster, const std::optional<SlurmJob>& slurm_job,
                   const std::vector<std::string>& ssh, const std::string& token, std::string& token_file) {
  if (cluster.rendezvous.empty()) {
    listener.listen_on_candidates(choose_head_addresses(cluster, slurm_job, kernel_host_name(), ssh));
    return describe_head_addresses(listener.candidates(), listener.port(), [](const std::string& address) {
      return interface_of(address).value_or("");
    });
  }
  write_private_file(cluster.rendezvous_token_file, token + "\n");
  token_file = cluster.rendezvous_token_file;
  const HeadAddress address{
      cluster.address.value_or("0.0.0.0"),
      cluster.address ? "--local-addr" : "every address of this host, as torchrun's store"};
  if (cluster.rendezvous_fd >= 0)
    listener.adopt(cluster.rendezvous_fd);
  else
    listener.listen(address.address, rendezvous_port(cluster.rendezvous));
  listener.set_endpoint(cluster.rendezvous);
  return cluster.rendezvous + " (" + address.why + ")";
}

// The process of one of the engine's launches: flowrun's environment, the
// token on its stdin, its output in the step's directory.
WorkerLaunch engine_worker(const EngineLaunch& e, const NodeStep& job, const std::string& token) {
  WorkerLaunch launch;
  launch.argv = e.argv;
  EnvMap env = job.ctx.parent_env;
  env["FLOWRUN_RUN_ID"] = job.ctx.run_id;  // spawn_process adds the guardian's mark
  for (const auto& [k, v] : env) launch.env.push_back(k + "=" + v);
  launch.workdir = job.step->workdir;
  launch.label = e.label;
  launch.stdin_text = token + "\n";
  const std::string base = job.ctx.layout.step_dir(job.plan->step) + "/" + e.log;
  launch.stdout_log = base + ".stdout.log";
  launch.stderr_log = base + ".stderr.log";
  return launch;
}

// The marker every agent must read at the same path (docs/multinode.md):
// its path and text.
std::pair<std::string, std::string> write_marker(const NodeStep& job) {
  const std::string path =
      job.step->workdir + "/.flowrun/node-check-" + job.ctx.run_id + "-" + job.plan->step;
  const std::string text = make_nonce();
  make_dirs(job.step->workdir + "/.flowrun");
  // A new file renamed into place: never written through a link or FIFO.
  if (const int err = try_write_file(path, text); err != 0)
    throw Error("cannot write " + path + ": " + file_error_text(err));
  return {path, text};
}

// The agents of `job` that dial `endpoint`, `nodes` of them and the spares.
AgentsWanted agents_wanted(const NodeStep& job, const std::string& endpoint, std::size_t nodes) {
  return {job.plan, nodes,
          AgentCommand{job.flowrun_path, endpoint, job.fake_gpus,
                       env_get(job.ctx.parent_env, "FLOWRUN_PY_SPY").value_or("")},
          job.ctx.layout.step_dir(job.plan->step)};
}

}  // namespace

HeadLaunch prepare_launch(const Console& console, const NodeStep& job, Listener& listener,
                          const std::string& token, std::size_t nodes) {
  const ClusterSpec& cluster = *job.spec->cluster;
  listener.expect(nodes);
  HeadLaunch launch;
  std::string slurm_error;
  const auto slurm_job =
      cluster.engine == Engine::slurm ? read_slurm_job(job.ctx.parent_env, &slurm_error) : std::nullopt;
  if (!slurm_error.empty()) throw Error(slurm_error);
  const auto ssh = ssh_command(cluster, job.ctx.parent_env);
  const std::string listening = listen(listener, cluster, slurm_job, ssh, token, launch.token_file);
  std::shared_ptr<const AgentEngine> engine = make_engine(cluster, slurm_job, ssh);
  launch_after_listen(console, job, *engine, listener.endpoint(), listening, token, nodes, launch);
  if (!job.start_agents) {
    launch.replacement =
        [engine, &job, wanted = agents_wanted(job, listener.endpoint(), nodes), token](
            int seat, const std::vector<std::string>& exclude) -> std::optional<HeadLaunch::Replacement> {
      auto e = engine->replacement(wanted, seat, exclude);
      if (!e) return std::nullopt;
      WorkerLaunch process = engine_worker(*e, job, token);
      return HeadLaunch::Replacement{std::move(*e), std::move(process)};
    };
  }
  return launch;
}

void launch_after_listen(const Console& console, const NodeStep& job, const AgentEngine& engine,
                         const std::string& endpoint, const std::string& listening, const std::string& token,
                         std::size_t nodes, HeadLaunch& launch) {
  const ClusterSpec& cluster = *job.spec->cluster;
  const StepPlan& plan = *job.plan;
  std::tie(launch.marker_path, launch.marker_text) = write_marker(job);
  const AgentsWanted wanted = agents_wanted(job, endpoint, nodes);
  console.message(fmt::format(
      "flowrun: step '{}': {} workers on {}{}{} (engine: {}); the head listens on {}", plan.step,
      plan.world_size, plural(nodes, "node", "nodes"),
      plan.spares.empty() ? std::string()
                          : fmt::format(", {} waiting", plural(plan.spares.size(), "spare", "spares")),
      plan.min_nodes > 0
          ? fmt::format(", or on as few as {} (nodes: \"{}:{}\")", plan.min_nodes, plan.min_nodes, nodes)
          : std::string(),
      engine_name(cluster.engine), listening));
  launch_agents(console, job, engine, wanted, token, launch);

  // Every rank's directory now, while the engine brings the agents up, on a
  // thread of its own: on the loop's, 16,384 of them held off the agents
  // dialling at once for a quarter of a second, and the kernel's listen
  // queue overflowed (each agent it dropped retried a second later). At the
  // lowest priority (nice 19, this thread alone): the ranks do not need
  // them to start (RemoteGroup waits for them after the starts), and on a
  // disk where a new inode is dear (ext4 without a journal, soon after many
  // files were deleted: 30 to 120 us each here) they took the CPU the head
  // and the joining agents needed.
  std::vector<std::string> dirs;
  dirs.reserve(plan.ranks.size());
  for (const auto& rp : plan.ranks) dirs.push_back(job.ctx.layout.output_dir(plan.step, rp.rank));
  launch.rank_dirs = std::async(std::launch::async, [dirs = std::move(dirs)] {
    (void)setpriority(PRIO_PROCESS, 0, 19);  // Linux: 0 is the calling thread
    for (const auto& dir : dirs) make_dirs(dir);
  });
}

void launch_agents(const Console& console, const NodeStep& job, const AgentEngine& engine,
                   const AgentsWanted& wanted, const std::string& token, HeadLaunch& launch) {
  if (!job.start_agents) {
    for (auto& e : engine.launches(wanted)) launch.engines.push_back(std::move(e));
  }
  const JoinByHand hand = engine.by_hand(wanted);
  if (!hand.token_file.empty()) {
    write_private_file(hand.token_file, token + "\n");
    launch.token_file = hand.token_file;
  }
  if (!hand.message.empty()) console.message(hand.message);
  for (std::size_t i = launch.launches.size(); i < launch.engines.size(); ++i)
    launch.launches.push_back(engine_worker(launch.engines[i], job, token));
}

GroupOptions engine_group(const NodeStep& job, double heartbeat_timeout_s) {
  GroupOptions group = job.group;
  group.master_port = 0;
  group.note_leftovers = false;   // srun's own helper process outlives it for a moment
  group.stall_timeout_s.reset();  // the ranks' silence counts (on their nodes), not srun's or ssh's
  // A stop: the agents stop their ranks with the grace and report, and may
  // be a heartbeat late; srun and ssh are killed only after that.
  group.observer_margin_s = 5 + heartbeat_timeout_s;
  // ... after their ranks' stacks, which come before the grace.
  if (group.forensics_stacks) group.observer_margin_s += group.forensics_timeout_s;
  return group;
}

NodeReach listener_reach(boost::asio::io_context& io, const Console& console) {
  auto listener = std::make_shared<Listener*>(nullptr);  // door()'s, which launch() listens on
  return {[&io, &console, listener](const std::string& step, const std::string& token, double interval_s,
                                    double timeout_s) -> std::unique_ptr<NodeDoor> {
            auto door = std::make_unique<Listener>(io, console, step, token, interval_s, timeout_s);
            *listener = door.get();
            return door;
          },
          [&console, listener](const NodeStep& job, const std::string& token, std::size_t nodes) {
            return prepare_launch(console, job, **listener, token, nodes);
          }};
}

}  // namespace flowrun::cluster
