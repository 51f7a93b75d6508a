#include "flowrun/agent.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <malloc.h>
#include <unistd.h>

#include "flowrun/clock.h"
#include "flowrun/connection.h"
#include "flowrun/dialer.h"
#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/gpu.h"
#include "flowrun/host.h"
#include "flowrun/messages.h"
#include "flowrun/net_addresses.h"
#include "flowrun/process.h"
#include "flowrun/protocol.h"
#include "flowrun/reach.h"
#include "flowrun/slurm.h"
#include "flowrun/start_wire.h"
#include "flowrun/worker_group.h"

#include "node_check.h"
#include "node_ranks.h"
#include "preflight_check.h"
#include "share_sender.h"
#include "ship_receiver.h"
#include "upload_sender.h"

namespace flowrun {

namespace asio = boost::asio;
using cluster::Connection;
using cluster::kQueueHighWater;
using cluster::kQueueLowWater;
using cluster::NodeRanks;

namespace {

using Clock = std::chrono::steady_clock;

struct LocalRank {
  int rank = 0;
  int local_rank = 0;
  bool upload = false;
  std::string dir;         // node-local: out/ and error.json
  std::string nccl_trace;  // its flight-recorder dump's name in `dir` (forensics: nccl); empty: none
};

// A rank's exit as the head hears of it; `stopped`: its end was the agent's
// stop (Supervisor::ended_by_stop) or came after a stop signal to the agent,
// which Slurm sends to the ranks as well.
Exited exited_message(int rank, const WorkerRecord& rec, bool stopped) {
  Exited m;
  m.rank = rank;
  m.kind = rec.status.kind == ExitStatus::Kind::signaled       ? Exited::Kind::signaled
           : rec.status.kind == ExitStatus::Kind::spawn_failed ? Exited::Kind::spawn_failed
                                                               : Exited::Kind::exited;
  m.code = rec.status.code;
  m.spawn_error = rec.status.spawn_error;
  m.pid = rec.pid;
  m.start_ns = rec.start_unix_ns;
  m.end_ns = rec.end_unix_ns;
  m.error_file_ns = rec.error_file_unix_ns;
  m.rss_kib = rec.peak_rss_kib;
  m.stopped = stopped;
  if (rec.silent_s) m.silent_ms = std::llround(*rec.silent_s * 1000);
  m.suspended = rec.suspended;
  m.stalled = rec.stalled;
  m.command = rec.command;
  m.program = rec.program;
  m.path_python = rec.path_python;
  return m;
}

// The node rank the agent asks for: --node-rank, else SLURM_NODEID under
// srun, else none (-1: the head decides).
int node_rank_claim(const AgentOptions& options, const EnvMap& env) {
  int claim = options.node_rank.value_or(-1);
  if (!options.node_rank) {
    if (auto id = env_get(env, "SLURM_NODEID"); id && !id->empty() && id->size() < 6) {
      try {
        claim = std::stoi(*id);
      } catch (...) {
      }
    }
  }
  return claim;
}

// gloo listens on the address the host name resolves to; where that is a
// loopback address (Debian maps the name to 127.0.1.1) no other node could
// reach it: the interface this node reaches the head by (`socket`), for
// GLOO_SOCKET_IFNAME; empty where the name's address serves.
std::string gloo_interface(const Connection& conn) {
  if (auto own = cluster::resolve_ipv4(kernel_host_name()); !own || cluster::is_loopback(*own)) {
    const std::string local = conn.local_address();
    if (!local.empty() && !cluster::is_loopback(local)) {
      if (auto name = cluster::interface_of(local)) return *name;
    }
  }
  return {};
}

// What the head hears when the agent received stop signal `sig`.
Stop interrupted_stop(int sig, const EnvMap& env) {
  const char* hint = sig == SIGTERM && env_get(env, "SLURM_JOB_ID")
                         ? " from Slurm (scancel, preemption or the job's time limit)"
                         : "";
  return Stop{fmt::format("its agent received {}{}", signal_name(sig), hint)};
}

// Every rank of `start` as a command that could not start, with `why`,
// then done for `attempt`.
void send_refusal(Connection& conn, const Start& start, int attempt, const std::string& why) {
  const std::int64_t now = unix_now_ns();
  for (const StartRank& planned : start.ranks) {
    Exited m;
    m.rank = planned.rank;
    m.kind = Exited::Kind::spawn_failed;
    m.code = 1;
    m.spawn_error = why;
    m.start_ns = now;
    m.end_ns = now;
    conn.send(m);
  }
  conn.send(Done{attempt, {why}});
}

// The ranks' scratch directory for the run's node `node_rank`: node-local,
// private, new (mkdtemp's: never a directory someone made beforehand at a
// name they guessed), mode 0700. The agent removes it when it ends however
// it ends (its guardian, should the agent be killed). Throws Error.
std::string new_scratch_dir(const std::string& run_id, int node_rank) {
  try {
    return make_private_dir(scratch_parent(std::getenv("TMPDIR")),
                            fmt::format("flowrun-{}-node{}", run_id, node_rank));
  } catch (const Error& e) {
    throw Error(std::string("cannot make the ranks' scratch directory: ") + e.what());
  }
}

// The start's ranks, each with the environment worker_env makes from the
// start's part of the plan and what only this node has (`site`): the
// agent's own environment (the defaults a user may override read it), its
// private scratch directory for FLOWRUN_OUTPUT_DIR and
// TORCHELASTIC_ERROR_FILE, its mark and its gloo interface. Makes each
// rank's directory anew (throws Error when what was there cannot all be
// removed); `ranks` gets each rank as the agent keeps it.
std::vector<WorkerLaunch> launches_for_start(const Start& start, const NodeSite& site,
                                             std::vector<LocalRank>& ranks) {
  const NodeWork work = cluster::node_work_of(start);
  const EnvMap base = strip_step_variables(site.env);
  ranks.clear();
  std::vector<WorkerLaunch> launches;
  for (std::size_t i = 0; i < work.ranks.size(); ++i) {
    const RankWork& rank = work.ranks[i];
    LocalRank r;
    r.rank = rank.rank;
    r.local_rank = rank.local_rank;
    r.upload = start.ranks[i].upload;
    r.dir = site.layout.rank_dir(start.step, r.rank);
    if (work.nccl_flight_recorder)
      r.nccl_trace = nccl_trace_prefix(work.restart_count) + std::to_string(r.rank);
    // An earlier attempt's files left in out/ would be taken for this one's.
    if (const std::string left = remove_tree(r.dir); !left.empty())
      throw Error("cannot start rank " + std::to_string(r.rank) + " afresh: " + left);
    make_dirs(r.dir + "/out", 0700);
    WorkerLaunch launch;
    launch.rank = r.rank;
    launch.local_rank = r.local_rank;
    launch.argv = start.argv;
    launch.env = full_env(base, worker_env(work, rank, site));
    launch.workdir = start.workdir;
    launch.error_file = site.layout.error_file(start.step, r.rank);
    launch.console = ConsoleShows::none();
    launches.push_back(std::move(launch));
    ranks.push_back(std::move(r));
  }
  return launches;
}

// The head's Stalled message of the ranks `stalled`.
Stalled stalled_message(const std::vector<WorkerRecord>& stalled) {
  Stalled m;
  for (const auto& w : stalled)
    m.ranks.push_back({w.rank, std::llround(w.silent_s.value_or(0) * 1000), w.suspended});
  return m;
}

// The head's Stacks message of `found`, from `source`.
Stacks stacks_message(int request, const std::vector<RankStack>& found, const std::string& source) {
  Stacks m{request, source, {}};
  for (const RankStack& r : found) m.ranks.push_back({r.rank, r.dump, r.kernel, r.missing});
  return m;
}

// Whether the assign's marker reads the same here (the workdir is the
// head's): Ready's workdir_ok and workdir_error.
void check_marker(const Assign& a, Ready& ready) {
  int err = 0;
  const auto marker = try_read_file(a.marker_path, 64 << 10, &err);
  ready.workdir_ok = marker && *marker == a.marker_text;
  if (!marker)
    ready.workdir_error = a.marker_path + ": " + file_error_text(err);
  else if (!ready.workdir_ok)
    ready.workdir_error = a.marker_path + ": its content differs from the head's";
}

// The answer to `a` but for the node's checks: whether this node shares the
// workdir, its `address` and `gpus`, and for node 0 a port held in `held`
// (whatever `held` held before is let go).
Ready ready_for(const Assign& a, const std::string& address, int gpus, HeldPort& held) {
  Ready ready;
  check_marker(a, ready);
  ready.address = address;
  held.release();
  if (a.want_port) {
    held = hold_free_port(ready.address);
    ready.port = held.port;
  }
  ready.gpus = gpus;
  return ready;
}

// Removes the ranks' scratch directory `dir`, saying what could not be.
void remove_scratch(const Console& console, const std::string& node, const std::string& dir) {
  if (dir.empty()) return;
  if (const std::string left = remove_tree(dir); !left.empty())
    console.message(fmt::format("flowrun agent: {}: {}", node, left));
}

// Why an upload stops early, empty while it may go on: the head went away
// or said stop, or the agent received `sig`.
std::string upload_stop(bool lost_head, bool stop_from_head, int sig) {
  if (lost_head) return "the head is gone";
  if (stop_from_head) return "the head stopped the step";
  if (sig != 0) return "the agent received " + signal_name(sig);
  return {};
}

// What a gang's agent says when the head tells it the flow ended.
std::string flow_end_line(const std::string& node, int code) {
  return fmt::format("flowrun agent: {}: the flow ended{}", node,
                     code == 0 ? std::string(" successfully") : fmt::format(" with exit code {}", code));
}

// Why an assign cannot be acted on, if it cannot. Both its names name
// directories here (the scratch directory, a rank's in it): a head's spec
// checker and --run-id let no other names through.
std::optional<std::string> assign_problem(const Assign& a) {
  if (auto problem = run_id_problem(a.run_id)) return "it sent an assign with the run id " + *problem;
  if (check_name(a.step) != NameCheck::ok) return "it sent an assign with an invalid step name";
  return std::nullopt;
}

// The supervisor's options for an attempt of `step` (stall and forensics
// times, and the samples' time, 0: none).
GroupOptions attempt_group(const std::string& step, double grace_s, double stall_s, double forensics_s,
                           double sample_s, int attempt) {
  GroupOptions group;
  group.sample_s = sample_s;
  group.step = step;
  group.grace_s = grace_s;
  if (stall_s > 0) group.stall_timeout_s = stall_s;
  group.forensics_stacks = forensics_s > 0;
  group.forensics_timeout_s = forensics_s;
  group.restart_count = attempt;
  return group;
}

// What an agent says when its connection to the head ends with `why`; `sig`:
// the stop signal it left on (0: none, the head is gone).
std::string lost_head_line(const std::string& node, const std::string& head_at, const std::string& why,
                           int sig, bool in_group) {
  const char* stopping = in_group ? "; stopping this node's workers" : "";
  if (sig != 0)
    return fmt::format(
        "flowrun agent: {}: {} received: this node leaves the flow, the head takes it as lost{}", node,
        signal_name(sig), stopping);
  return fmt::format("flowrun agent: {}: lost the head at {} ({}){}", node, head_at, why, stopping);
}

class Agent : public GroupObserver {
 public:
  Agent(const AgentOptions& options, const EnvMap& env, NodeRanks& ranks)
      : options_(options), env_(env), sup_(&ranks) {}

  int run() {
    if (!options_.token_after_connect) token_ = cluster::read_token(options_);
    node_ = host_name(env_);
    node_rank_claim_ = node_rank_claim(options_, env_);
    auto probe = make_probe(env_, options_.fake_gpus);
    Inventory inventory = select_gpus(probe->probe(), env_);
    gpus_ = static_cast<int>(inventory.gpus.size());

    // The guardian's mark: this agent's own secret (the preflight's check
    // child inherits it, the ranks get it from spawn_process).
    agent_id_ = node_ + "-" + std::to_string(getpid()) + "-" + make_secret();
    sup_->begin(agent_id_);
    node_check_.emplace(sup_->io(), std::move(inventory), options_.fake_gpus, env_);
    if (!join()) {
      sup_->disarm();
      return 1;
    }
    serve();
    asio::io_context& io = sup_->io();
    check_->stop();  // ends a preflight check still running
    node_check_->stop();
    // Let the last messages go out.
    for (int i = 0; i < 1000 && conn_->is_open() && conn_->queued() > 0; ++i)
      io.run_one_for(std::chrono::milliseconds(10));
    conn_->close();
    heartbeat_timer_->cancel();
    io.poll();
    remove_scratch(console_, node_, scratch_);
    // The timer and the socket belong to the loop: they go before it does.
    heartbeat_timer_.reset();
    conn_.reset();
    sup_->disarm();
    return exit_code_;
  }

  // ---- GroupObserver ------------------------------------------------------

  void on_output(std::size_t index, bool is_err, std::string_view data) override {
    const LocalRank& r = ranks_[index];
    for (std::size_t pos = 0; pos < data.size(); pos += kMaxChunkBytes) {
      conn_->send(Output{r.rank, is_err, std::string(data.substr(pos, kMaxChunkBytes))});
    }
    if (!output_paused_ && conn_->queued() >= kQueueHighWater) {
      output_paused_ = true;
      sup_->pause_output();
    }
  }

  bool on_sample(const RankSample& sample) override {
    shares_.add(sample, monotonic_now_ns());
    return true;
  }

  bool on_exit(std::size_t index, const WorkerRecord& rec) override {
    shares_.flush(monotonic_now_ns());
    conn_->send(exited_message(ranks_[index].rank, rec,
                               sup_->ended_by_stop(index) || sup_->interrupt_received() != 0));
    if (!rec.status.ok()) local_failure_ = true;
    return !rec.status.ok();
  }

  // The step's stall_timeout, enforced here (the head says why in assign):
  // tell the head which ranks stalled before they are stopped.
  bool on_stall(const std::vector<std::size_t>&, const std::vector<WorkerRecord>& stalled) override {
    conn_->send(stalled_message(stalled));
    return true;
  }

  // This node's ranks' stacks, for the head (a SIGQUIT to the agent itself
  // is answered on its own console, by the supervisor).
  bool on_stacks(int request, const std::vector<RankStack>& found, const std::string& source) override {
    if (request != kStacksOnSignal && !lost_head_ && conn_->is_open())
      conn_->send(stacks_message(request, found, source));
    return request != kStacksOnSignal;
  }

  bool on_stop(Outcome why) override {
    if (why == Outcome::interrupted && !stop_from_head_ && !lost_head_ && sup_->interrupt_received() != 0) {
      const int sig = sup_->interrupt_received();
      told_interrupt_ = true;
      conn_->send(interrupted_stop(sig, env_));
    }
    return false;
  }

 private:
  // Reaches the head and joins (false: it refused this agent), then
  // serves the connection from the loop.
  bool join() {
    asio::io_context& io = sup_->io();
    reach_.emplace(io);
    auto link = cluster::join_head(io, console_, options_,
                                   {node_, node_rank_claim_, gpus_, options_.stays, reach_->port()}, token_,
                                   [this] { return sup_->interrupt_signal(); });
    if (!link) return false;
    token_ = link->token;
    head_at_ = link->head_at;
    node_rank_ = link->node_rank;
    interval_s_ = link->heartbeat_s;
    timeout_s_ = link->timeout_s;
    conn_ = cluster::sealed_connection(std::move(*link), node_);
    gloo_ifname_ = gloo_interface(*conn_);
    conn_->start([this](Frame& frame) { on_frame(frame); },
                 [this](const std::string& why) {
                   // Nothing more drains the queue (also after the head's bye).
                   if (output_paused_) resume_output();
                   lost_head(why);
                 });
    conn_->set_sent_handler([this] {
      if (output_paused_ && conn_->queued() <= kQueueLowWater) resume_output();
    });
    heartbeat_timer_.emplace(io);
    check_.emplace(io);
    tick();
    return true;
  }

  // The head's messages and the attempts they start, until bye, the loss of
  // the head, or a stop signal to the agent.
  void serve() {
    asio::io_context& io = sup_->io();
    while (!finished_) {
      if (start_pending_) {
        run_attempt();
        continue;
      }
      io.run_one();
      if (!finished_ && !in_group_ && sup_->interrupt_signal() != 0 && !told_interrupt_) {
        told_interrupt_ = true;
        const int sig = sup_->interrupt_signal();
        conn_->send(interrupted_stop(sig, env_));
        conn_->close_after_send();
        exit_code_ = 128 + sig;
        finished_ = true;
      }
    }
  }

  void tick() {
    heartbeat_timer_->expires_after(steady_seconds(interval_s_));
    heartbeat_timer_->async_wait([this](const boost::system::error_code& ec) {
      if (ec || finished_) return;
      const double silent = static_cast<double>(monotonic_now_ns() - conn_->last_heard_ns()) / 1e9;
      if (silent > timeout_s_) {
        lost_head(fmt::format("no heartbeat from it for {:.1f} s", silent));
        return;
      }
      if (conn_->queued() == 0) conn_->send(Heartbeat{});
      tick();
    });
  }

  void resume_output() {
    output_paused_ = false;
    sup_->resume_output();
  }

  void lost_head(const std::string& why) {
    if (lost_head_ || finished_) return;
    lost_head_ = true;
    conn_->close();
    if (output_paused_) resume_output();  // what the ranks still write goes nowhere now
    const int sig = options_.stays && told_interrupt_ ? sup_->interrupt_received() : 0;  // its pod is going
    console_.message(lost_head_line(node_, head_at_, why, sig, in_group_));
    exit_code_ = sig != 0 ? 128 + sig : 1;
    if (in_group_) {
      sup_->stop_group(Outcome::interrupted, false);
    } else {
      finished_ = true;
    }
  }

  // ---- messages -----------------------------------------------------------

  void on_frame(Frame& frame) {
    if (shipment_.take_chunk(frame)) return;  // bulk data: read in place, not copied into a message
    std::string error;
    auto message = decode_message(frame, &error);
    if (!message) {
      lost_head("it sent a malformed " + std::string(message_type_name(frame.type)) + ": " + error);
      return;
    }
    std::visit([this](auto& m) { on_message(m); }, *message);
  }

  // What the head sends that an agent does not act on (heartbeat: hearing
  // from it is enough).
  template <class M>
  void on_message(const M&) {}

  // The step's inputs, for a node that does not share the head's workdir.
  void on_message(const ShipBegin& m) { shipment_.take(m); }
  void on_message(const ShipChunk& m) { shipment_.take(m); }
  void on_message(const ShipEnd& m) { shipment_.take(m); }
  void on_message(const ShipDone& m) { conn_->send(shipment_.take(m)); }

  void on_message(const Stop& m) {
    stop_from_head_ = true;
    check_->cancel();
    if (in_group_) {
      sup_->stop_group(Outcome::interrupted, m.stacks);
      if (m.kill) sup_->kill_group();
    }
  }

  // flowrun stacks (or SIGQUIT) at the head: this node's ranks' stacks.
  void on_message(const TakeStacks& m) {
    if (m.request > 0) in_group_ ? sup_->take_stacks(m.request) : conn_->send(Stacks{m.request, "", {}});
  }

  // The head suspects a rank of some node (SampleRate): sample faster, or at 1 again.
  void on_message(const SampleRate& m) {
    if (!in_group_ || m.attempt != attempt_ || m.rate < 1 || m.rate > kSuspectRate) return;
    sup_->sample_faster(m.rate);
    shares_.hurry(m.rate);
  }

  // The head got SIGUSR1 or SIGUSR2: this node's ranks get it too.
  void on_message(const Signal& m) {
    const int sig = m.signal == "SIGUSR1" ? SIGUSR1 : m.signal == "SIGUSR2" ? SIGUSR2 : 0;
    if (sig != 0 && in_group_) sup_->signal_workers(sig);
  }

  void on_message(const Bye& m) {
    check_->cancel();
    if (m.keep && options_.stays) {
      // The step ended; the head keeps this agent for the flow's next one.
      if (in_group_) {
        step_over_ = true;
        sup_->stop_group(Outcome::interrupted, false);
      } else {
        end_step();
      }
      return;
    }
    finished_ = true;
    if (m.flow_exit >= 0 && options_.stays) {
      exit_code_ = m.flow_exit;
      console_.message(flow_end_line(node_, m.flow_exit));
    } else if (options_.exit_with_step && !m.succeeded) {
      exit_code_ = 1;
    }
    if (in_group_) sup_->stop_group(Outcome::interrupted, false);
  }

  // A gang's step is over: nothing of it stays (scratch, held port) for the next.
  void end_step() {
    start_pending_ = false;
    stop_from_head_ = false;
    held_port_.release();
    ranks_.clear();
    remove_scratch(console_, node_, std::exchange(scratch_, {}));
    run_id_.clear();
    step_.clear();
  }

  void on_message(const Assign& a) {
    if (auto problem = assign_problem(a)) {
      lost_head(*problem);
      return;
    }
    if (a.step != step_ || a.run_id != run_id_) shipment_.forget();
    run_id_ = a.run_id;
    step_ = a.step;
    attempt_ = a.attempt;
    node_rank_ = a.node_rank;
    grace_s_ = static_cast<double>(a.grace_ms) / 1000.0;
    stall_s_ = static_cast<double>(a.stall_ms.value_or(0)) / 1000;                         // 0: none
    forensics_s_ = static_cast<double>(std::max<std::int64_t>(a.forensics_ms, 0)) / 1000;  // 0: no stacks
    sample_s_ = static_cast<double>(std::max<std::int64_t>(a.sample_ms, 0)) / 1000;        // 0: no samples
    stop_from_head_ = false;
    local_failure_ = false;
    node_check_->answer(a, ready_for(a, conn_->local_address(), gpus_, held_port_), [this](const Ready& r) {
      if (!lost_head_ && conn_ && conn_->is_open()) conn_->send(r);
    });
  }

  // A multi-node step's preflight (PreflightCheck); node 0's id goes to the
  // head as soon as its check child made it.
  void on_message(const Preflight& p) {
    check_->start(
        p, options_.fake_gpus, env_, node_,
        [this](const std::string& id) {
          if (conn_ && conn_->is_open()) conn_->send(PreflightId{id});
        },
        [this](const std::string& facts) {
          if (!lost_head_ && conn_ && conn_->is_open()) conn_->send(PreflightDone{facts});
        });
  }

  void on_message(Start& start) {
    // Its ranks' directories are named by the assign's step (checked there).
    if (start.step != step_ || start.run_id != run_id_ || start.node_rank != node_rank_) {
      lost_head("it sent a start for another step or node than its assign");
      return;
    }
    start_ = std::move(start);
    start_pending_ = true;
  }

  // ---- one attempt ----------------------------------------------------------

  // The scratch directory, made once (new_scratch_dir); throws Error.
  const std::string& scratch() {
    if (scratch_.empty()) {
      scratch_ = new_scratch_dir(run_id_, node_rank_);
      sup_->remove_on_exit(scratch_);
    }
    return scratch_;
  }

  void run_attempt() {
    start_pending_ = false;
    std::vector<WorkerLaunch> launches;
    try {
      launches =
          launches_for_start(start_, NodeSite{env_, RunLayout{scratch()}, agent_id_, gloo_ifname_}, ranks_);
    } catch (const Error& e) {
      send_refusal(*conn_, start_, attempt_, e.what());  // no rank can start: each is refused
      held_port_.release();
      return;
    }
    // A node that got the step's inputs runs its ranks in its copy of them.
    if (const auto copy = shipment_.workdir()) {
      for (WorkerLaunch& launch : launches) {
        launch.workdir = *copy;
        launch.argv = shipment_.in_copy(std::move(launch.argv), start_.workdir);
      }
    }
    const GroupOptions group = attempt_group(step_, grace_s_, stall_s_, forensics_s_, sample_s_, attempt_);
    shares_.reset(attempt_);
    in_group_ = true;
    held_port_.release();  // node 0's MASTER_PORT, for rank 0 to bind (as on one host)
    const AttemptRecord attempt = sup_->run_group(launches, group, this);
    in_group_ = false;
    if (lost_head_) {
      finished_ = true;
      return;
    }
    if (step_over_) {
      // The head ended the step meanwhile: nothing to upload.
      step_over_ = false;
      end_step();
      return;
    }
    // A signal to the agent (Slurm's scancel) that came as the ranks ended:
    // the head hears of it before this node's done.
    if (const int sig = sup_->interrupt_signal(); sig != 0 && !told_interrupt_) {
      told_interrupt_ = true;
      conn_->send(interrupted_stop(sig, env_));
    }
    std::vector<std::string> errors;
    const bool all_ok = !local_failure_ && attempt.outcome == Outcome::succeeded && !stop_from_head_;
    cluster::UploadSender uploads(
        *conn_, sup_->io(), [this] { return lost_head_; },
        [this] { return upload_stop(lost_head_, stop_from_head_, sup_->interrupt_received()); });
    for (const auto& r : ranks_) {
      uploads.send_rank(r.rank, scratch_, r.dir, all_ok && r.upload, r.nccl_trace, errors);
      if (lost_head_) break;
    }
    if (lost_head_) {
      finished_ = true;
      return;
    }
    conn_->send(Done{attempt_, std::move(errors)});
  }

  const AgentOptions& options_;
  const EnvMap& env_;
  Console console_;
  NodeRanks* sup_;  // runs this node's ranks: a Supervisor (SupervisedRanks), or a test's fake
  std::shared_ptr<Connection> conn_;
  std::optional<asio::steady_timer> heartbeat_timer_;
  std::optional<cluster::PreflightCheck> check_;    // a preflight's check (Preflight)
  std::optional<cluster::NodeChecker> node_check_;  // the node's checks (Assign)
  std::string token_, node_, agent_id_, run_id_, step_, scratch_;
  std::string gloo_ifname_;  // set for the workers when the host name is a loopback address
  std::string head_at_;      // the --rdzv-endpoint entry it reached the head at
  int node_rank_claim_ = -1, node_rank_ = 0, gpus_ = 0, attempt_ = 0;
  double interval_s_ = 2.5, timeout_s_ = 10, grace_s_ = 10, stall_s_ = 0, forensics_s_ = 0, sample_s_ = 0;
  ShareSender shares_{[this](const Shares& m) {  // the head tallies every node's samples together
    if (!lost_head_ && conn_->is_open()) conn_->send(m);
  }};
  HeldPort held_port_;
  std::optional<cluster::ReachDoor> reach_;  // for the other nodes' reach_node0
  cluster::StepShipment shipment_{
      [this] { return scratch(); }};  // the step's inputs, where the workdir is not shared
  Start start_;
  std::vector<LocalRank> ranks_;
  bool finished_ = false, start_pending_ = false, in_group_ = false, lost_head_ = false;
  bool step_over_ = false;  // a gang's step ended (bye with keep) while its ranks ran
  bool stop_from_head_ = false, local_failure_ = false, told_interrupt_ = false;
  bool output_paused_ = false;  // the queue passed kQueueHighWater: the ranks' pipes are not read
  int exit_code_ = 0;
};

}  // namespace

namespace cluster {

void SupervisedRanks::begin(const std::string& agent_id) {
  guardian_.start("FLOWRUN_AGENT_ID", agent_id);
  become_subreaper();
  supervisor_.emplace(console_, guardian_.pid());
  supervisor_->set_repeat_signal_kills(false);
}

int run_agent_on(const AgentOptions& options, const EnvMap& env, NodeRanks& ranks) {
  Agent agent(options, env, ranks);
  return agent.run();
}

}  // namespace cluster

int run_agent(const AgentOptions& options, const EnvMap& env) {
  // Upload chunks are 256 KiB strings made and freed in a loop: keep them on
  // the heap instead of mapping and unmapping pages for each one.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  cluster::SupervisedRanks ranks;
  return cluster::run_agent_on(options, env, ranks);
}

}  // namespace flowrun
