#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flowrun/beneath.h"
#include "flowrun/cluster.h"
#include "flowrun/doctor.h"
#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/logmux.h"
#include "flowrun/messages.h"
#include "flowrun/process.h"
#include "flowrun/protocol.h"
#include "flowrun/rank_output.h"
#include "flowrun/slurm.h"
#include "flowrun/step_runner.h"
#include "flowrun/util.h"

#include "attempt_news.h"
#include "connection.h"
#include "engine_watch.h"
#include "engines.h"
#include "head_launch.h"
#include "listener.h"
#include "node_orders.h"
#include "node_gathering.h"
#include "node_preflight.h"
#include "node_start.h"
#include "node_table.h"
#include "rank_table.h"
#include "upload_receiver.h"

namespace flowrun {

namespace asio = boost::asio;
using cluster::Connection;
using cluster::Node;
using cluster::Phase;

namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds_of(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// A rank's end, as its agent reported it.
void record_exit(WorkerRecord& rec, const Exited& m) {
  rec.status.kind = m.kind == Exited::Kind::signaled       ? ExitStatus::Kind::signaled
                    : m.kind == Exited::Kind::spawn_failed ? ExitStatus::Kind::spawn_failed
                                                           : ExitStatus::Kind::exited;
  rec.status.code = m.code;
  rec.status.spawn_error = m.spawn_error;
  rec.pid = m.pid;
  rec.start_unix_ns = m.start_ns;
  rec.end_unix_ns = m.end_ns;
  rec.peak_rss_kib = m.rss_kib;
  if (m.silent_ms) rec.silent_s = static_cast<double>(*m.silent_ms) / 1000;
  rec.suspended = m.suspended;
  rec.stalled = m.stalled;
  rec.command = m.command;
  rec.program = m.program;
  rec.path_python = m.path_python;
}

// The ranks of node `n` that its agent reported stalled (and runs).
std::vector<WorkerRecord> stalled_ranks(const StepPlan& plan, const Node& n, const Stalled& m) {
  std::vector<WorkerRecord> stalled;
  for (const Stalled::Rank& s : m.ranks) {
    if (s.rank < 0 || s.rank >= plan.world_size ||
        plan.ranks[static_cast<std::size_t>(s.rank)].node != n.rank)
      continue;
    WorkerRecord w;
    w.rank = s.rank;
    w.node = n.name;
    w.silent_s = static_cast<double>(s.silent_ms) / 1000;
    w.suspended = s.suspended;
    w.stalled = true;
    stalled.push_back(std::move(w));
  }
  return stalled;
}

class Head : public GroupObserver {
 public:
  Head(Supervisor& supervisor, const Console& console, const NodeStep& job)
      : sup_(supervisor),
        console_(console),
        job_(job),
        plan_(*job.plan),
        cluster_(*job.spec->cluster),
        io_(supervisor.io()),
        heartbeat_timer_(io_),
        flush_timer_(io_),
        timeout_s_(cluster_.heartbeat_timeout_s),
        interval_s_(std::clamp(timeout_s_ / 4, 0.05, 5.0)),
        listener_(io_, console_, plan_.step, token_, interval_s_, timeout_s_),
        uploads_(
            plan_, job_.ctx.layout, write_error_,
            [this](int node, const std::string& what) { upload_error(nodes_[std::size_t(node)], what); }) {}

  // Listens, starts the engine's processes (srun, ssh) that bring up the
  // agents, and returns: the agents join while the loop runs (preflight,
  // run_attempt).
  void begin() {
    auto launch = cluster::prepare_launch(console_, job_, listener_, token_, nodes_.size());
    token_file_ = std::move(launch.token_file);
    marker_path_ = std::move(launch.marker_path);
    marker_text_ = std::move(launch.marker_text);
    for (const auto& e : launch.engines) engines_.add(e);
    launches_ = std::move(launch.launches);

    listener_.start([this](const cluster::Joiner& j) { return gathering_.admit(j); },
                    [this](int rank, const cluster::Joiner& j, const std::shared_ptr<Connection>& conn) {
                      gathering_.on_joined(rank, j, conn);
                    });
    if (job_.start_agents) job_.start_agents(listener_.endpoint(), token_);
    gathering_.start_join_timer(cluster_.join_timeout_s);
    tick_heartbeats();

    sup_.start_group(launches_, cluster::engine_group(job_, timeout_s_), this);
  }

  // Every node joined and is ready (then true), or the step ended first.
  bool wait_ready() {
    sup_.run_until([this] { return phase_ == Phase::ready || phase_ == Phase::finished; });
    return phase_ == Phase::ready;
  }

  // preflight: true: once every node is ready, the NCCL check across them.
  std::optional<AttemptResult> preflight() {
    if (wait_ready()) {
      gathering_.start_preflight();
      if (wait_ready()) return std::nullopt;
    }
    return not_started();
  }

  // One attempt: the first once every node is ready; a restart assigns
  // every node again first. Returns when every node said done or was lost.
  AttemptResult run_attempt(const Attempt& attempt) {
    if (phase_ == Phase::between) {
      attempt_ = attempt.restart;
      gathering_.assign();
    }
    if (!wait_ready()) return not_started();
    attempt_ = attempt.restart;
    keep_previous_ = attempt.keep_previous;
    start_attempt();
    sup_.run_until([this] { return phase_ != Phase::running; });
    AttemptResult result;
    result.record = attempt_recorded_ ? std::move(last_) : record_attempt();
    result.node_gone = node_gone();
    take_news(result);
    return result;
  }

  // Ends the step on the nodes (bye) and waits until the engine's processes
  // have ended; returns the notes and errors since the last attempt.
  AttemptResult end_step() {
    if (phase_ != Phase::finished) {
      finish();
      if (node_gone()) sup_.stop_group(Outcome::failed);  // srun or ssh of a lost node may hang: stop them
    }
    sup_.finish_group();
    for (auto& n : nodes_) {
      if (n.conn) n.conn->close();
    }
    close_acceptors();
    listener_.close_pending();
    heartbeat_timer_.cancel();
    gathering_.cancel_join_timer();
    flush_timer_.cancel();
    ranks_.close_files();
    flush_console();
    io_.poll();
    unlink(marker_path_.c_str());
    if (!token_file_.empty()) unlink(token_file_.c_str());
    AttemptResult rest;
    take_news(rest);
    return rest;
  }

  int interrupt_signal() const { return sup_.interrupt_received(); }
  std::string placement() const { return cluster::plural(nodes_.size(), "node", "nodes"); }

  // ---- GroupObserver ------------------------------------------------------

  void on_output(std::size_t index, bool is_err, std::string_view data) override {
    (void)is_err;
    // srun waiting for resources: the join timeout counts from the grant.
    const auto grant = engines_.feed(index, data);
    if (grant == cluster::EngineWatch::Grant::queued) gathering_.cancel_join_timer();
    if (grant == cluster::EngineWatch::Grant::granted && phase_ == Phase::joining)
      gathering_.start_join_timer(cluster_.join_timeout_s);
  }

  bool on_exit(std::size_t index, const WorkerRecord& record) override {
    if (phase_ == Phase::finished) return false;
    const int node = engines_.node(index);
    if (phase_ == Phase::joining && (node < 0 || !nodes_[static_cast<std::size_t>(node)].joined)) {
      fail_before_start(engines_.ended_before_join(index, record));
      return false;
    }
    if (phase_ == Phase::running || phase_ == Phase::assigning || phase_ == Phase::checking)
      engine_note_ = engines_.ended_note(index, record);
    return false;
  }

  bool on_stop(Outcome why) override {
    if (phase_ == Phase::running) {
      if (!stopping_) {
        stopping_ = true;
        outcome_ = why;
        for (auto& n : nodes_) {
          if (n.conn && n.conn->is_open())
            n.conn->send(Stop{why == Outcome::timed_out ? "timeout" : "interrupted"});
        }
      }
      return true;
    }
    // Nothing runs on the nodes yet: end the agents, and let the supervisor
    // stop srun or ssh.
    if (phase_ != Phase::finished) {
      outcome_ = why;
      outcome_before_start_ = why;
      if (why == Outcome::timed_out)
        errors_.push_back(fmt::format("the step's timeout ran out before {} joined",
                                      phase_ == Phase::joining ? "every node" : "the ranks started"));
      finish();
    }
    return false;
  }

  void on_kill() override {
    for (auto& n : nodes_) {
      if (n.conn && n.conn->is_open()) n.conn->send(Stop{"killed", true});
    }
  }

  // SIGUSR1, SIGUSR2: every agent gives it to its ranks. srun and ssh, the
  // head's own processes, never get it (srun would pass it on a second time;
  // ssh would die of it).
  bool on_signal(int sig) override {
    if (phase_ != Phase::running) return true;  // no rank runs yet
    for (auto& n : nodes_) {
      if (n.conn && n.conn->is_open() && !n.lost) n.conn->send(Signal{signal_name(sig)});
    }
    return true;
  }

 private:
  void start_attempt() {
    phase_ = Phase::running;
    stopping_ = false;
    outcome_ = Outcome::succeeded;
    attempt_started_ = true;
    attempt_recorded_ = false;
    done_ = 0;
    LaunchContext ctx = job_.ctx;
    ctx.node0_address = nodes_[0].address;
    ctx.master_port = nodes_[0].port;
    ctx.restart_count = attempt_;
    master_port_ = ctx.master_port;
    attempt_start_ns_ = unix_now_ns();
    ranks_.reset();
    // A restart: the step runner keeps what the attempt before left (logs,
    // traceback, uploads) in attemptN/, now that every node is ready.
    if (keep_previous_) keep_previous_();
    keep_previous_ = nullptr;
    ranks_.start(ctx, nodes_, attempt_, attempt_start_ns_);
    if (attempt_ == 0) {
      std::vector<std::string> names;
      for (const auto& n : nodes_) names.push_back(n.name);
      console_.message(fmt::format("flowrun: step '{}': {} joined ({}); MASTER_ADDR {}, MASTER_PORT {}",
                                   plan_.step, cluster::plural(nodes_.size(), "node", "nodes"), fmt::join(names, ", "),
                                   master_addr(plan_, ctx), ctx.master_port));
    }
    // Every node's start message first, then the writes: the nodes start
    // together. Each carries its node's part of the plan; the node's agent
    // makes its ranks' environment from it.
    std::vector<std::string> frames = cluster::start_frames(job_, nodes_.size(), ctx);
    for (auto& n : nodes_) n.conn->send_frame(std::move(frames[static_cast<std::size_t>(n.rank)]));
  }

  // ---- messages from a node ------------------------------------------------

  void on_node_frame(Node& n, Frame& frame) {
    if (frame.type == MessageType::upload_chunk) {
      // Bulk data: read in place, not copied into a message.
      if (auto data = upload_chunk_data(frame.payload)) {
        uploads_.data(n.rank, *data);
        return;
      }
    }
    std::string error;
    auto message = decode_message(frame, &error);
    if (!message) {
      protocol_error(n, fmt::format("malformed {}: {}", message_type_name(frame.type), error));
      return;
    }
    std::visit([this, &n](const auto& m) { on_node_message(n, m); }, *message);
  }

  // What a node sends, by message; anything else is a protocol error.
  template <class M>
  void on_node_message(Node& n, const M&) {
    protocol_error(n, fmt::format("unexpected {}", message_type_name(M::kType)));
  }
  void on_node_message(Node&, const Heartbeat&) {}
  void on_node_message(Node&, const Bye&) {}
  void on_node_message(Node& n, const Ready& m) { gathering_.on_ready(n, m); }
  void on_node_message(Node& n, const Output& m) { on_rank_output(n, m); }
  void on_node_message(Node& n, const Exited& m) { on_rank_exited(n, m); }
  void on_node_message(Node& n, const UploadBegin& m) { uploads_.begin(n.rank, m); }
  void on_node_message(Node& n, const UploadChunk& m) { uploads_.data(n.rank, m.data); }
  void on_node_message(Node& n, const UploadEnd& m) { uploads_.end(n.rank, m); }
  void on_node_message(Node& n, const Done& m) { on_done(n, m); }
  void on_node_message(Node& n, const PreflightId& m) { gathering_.on_preflight_id(n, m); }
  void on_node_message(Node& n, const PreflightDone& m) { gathering_.on_preflight_done(n, m); }
  void on_node_message(Node& n, const Stalled& m) { on_node_stalled(n, m); }

  // Its agent got a signal.
  void on_node_message(Node& n, const Stop& m) {
    const std::string reason = printable(m.reason);
    n.signalled = true;
    notes_.push_back(fmt::format("node {}: {}", n.name, reason));
    console_.message(fmt::format("flowrun: step '{}': node {}: {}", plan_.step, n.name, reason));
    if (phase_ == Phase::running && !stopping_)
      stop_nodes(Outcome::interrupted, "node " + n.name + ": " + reason);
  }

  void protocol_error(Node& n, const std::string& what) {
    errors_.push_back(fmt::format("node {}: {}", n.name, what));
    n.conn->close();
    node_lost(n, what);
  }

  void on_rank_output(Node& n, const Output& m) {
    cluster::RankState* r = ranks_.of(n, m.rank);
    if (r == nullptr || !r->log) return;
    if (auto error = r->log->keep(m.is_stderr, m.data)) log_failed(*error);
    r->log->show(m.is_stderr, m.data, monotonic_now_ns());
    schedule_flush();
  }

  void on_rank_exited(Node& n, const Exited& m) {
    cluster::RankState* r = ranks_.of(n, m.rank);
    if (r == nullptr || r->exited) return;
    r->exited = true;
    auto& rec = r->record;
    record_exit(rec, m);
    r->stopped = m.stopped;
    if (!rec.status.ok() && !r->stopped && !stopping_) {
      stop_nodes(Outcome::failed, fmt::format("rank {} on {} {}", rec.rank, n.name, rec.status.describe()));
    }
  }

  // Ranks of `n` wrote nothing for the step's stall_timeout; its agent is
  // stopping them.
  void on_node_stalled(Node& n, const Stalled& m) {
    const std::vector<WorkerRecord> stalled = stalled_ranks(plan_, n, m);
    if (stalled.empty() || phase_ != Phase::running || !job_.group.stall_timeout_s) return;
    flush_console();  // the ranks' lines so far come before flowrun's
    console_.message(format_stall_message(plan_.step, stalled, *job_.group.stall_timeout_s));
    stop_nodes(Outcome::stalled, "stalled");
  }

  void on_done(Node& n, const Done& m) {
    if (n.done) return;
    n.done = true;
    for (const auto& e : m.errors) {
      if (!e.empty()) errors_.push_back(fmt::format("node {}: {}", n.name, printable(e)));
    }
    uploads_.abort(n.rank, "the upload ended unfinished");
    maybe_attempt_done();
  }

  // ---- uploads (upload_receiver.h) ------------------------------------------

  void upload_error(Node& n, const std::string& what) {
    errors_.push_back(fmt::format("node {}: {}", n.name, what));
    if (phase_ == Phase::running && !stopping_) stop_nodes(Outcome::failed, "node " + n.name + ": " + what);
  }

  // ---- stopping, losing nodes, finishing -----------------------------------

  void stop_nodes(Outcome why, const std::string& reason) {
    if (stopping_) return;
    stopping_ = true;
    if (outcome_ == Outcome::succeeded) outcome_ = why;
    for (auto& n : nodes_) {
      if (n.conn && n.conn->is_open() && !n.lost) n.conn->send(Stop{reason});
    }
  }

  void on_node_closed(Node& n, const std::string& why) {
    if (phase_ == Phase::finished || n.lost) return;
    if (n.done) {
      n.closed = true;  // it said all it had to say; it cannot take a restart
      return;
    }
    node_lost(n, cluster::connection_lost(n.conn && n.conn->failed_authentication(), why));
  }

  void node_lost(Node& n, const std::string& why) {
    if (n.lost || phase_ == Phase::finished) return;
    n.lost = true;
    if (n.conn) n.conn->close();
    // A file it was sending is cut short: never leave the part that came.
    uploads_.cut_short(n.rank);  // says nothing more than the loss below
    const std::string text = nodes_.lost_text(n, why);
    console_.message(fmt::format("flowrun: step '{}': {}", plan_.step, text));
    if (phase_ != Phase::running) {
      fail_before_start(text);
      return;
    }
    notes_.push_back(text);
    const std::int64_t now = unix_now_ns();
    ranks_.lose(n, why, now);
    if (!stopping_) stop_nodes(Outcome::failed, text);
    n.done = true;
    maybe_attempt_done();
  }

  void maybe_attempt_done() {
    if (phase_ != Phase::running) return;
    for (const auto& n : nodes_) {
      if (!n.done && !n.lost) return;
    }
    ranks_.close_files();
    flush_console();
    last_ = record_attempt();
    phase_ = Phase::between;  // the step runner restarts (run_attempt) or ends the step (end_step)
  }

  // A node can take no further attempt.
  bool node_gone() const { return nodes_.any_gone(); }

  // What stands for an attempt whose ranks never started.
  AttemptResult not_started() {
    AttemptResult result = cluster::not_started(outcome_before_start_, unix_now_ns());
    take_news(result);
    return result;
  }

  // The notes and errors that came since the last call.
  void take_news(AttemptResult& result) { news_.take(result); }

  AttemptRecord record_attempt() {
    attempt_recorded_ = true;
    AttemptRecord attempt;
    attempt.restart_count = attempt_;
    attempt.master_port = master_port_;
    attempt.start_unix_ns = attempt_start_ns_;
    attempt.end_unix_ns = unix_now_ns();
    const auto ranks = ranks_.record(nodes_, attempt);
    if (ranks.signalled && outcome_ != Outcome::timed_out) outcome_ = Outcome::interrupted;
    attempt.outcome =
        cluster::attempt_outcome(outcome_, ranks.failed, !errors_.empty(), !write_error_.empty());
    attempt.write_error = write_error_;
    assign_roles(attempt, ranks.stopped);
    return attempt;
  }

  void fail_before_start(const std::string& why) {
    errors_.push_back(why);
    finish();
    // srun or ssh of a node that never joined may wait forever: stop them
    // (the agents that joined have their bye and end by themselves).
    asio::post(io_, [this] { sup_.stop_group(Outcome::failed); });
  }

  void close_acceptors() { listener_.close_acceptors(); }

  void finish() {
    if (phase_ == Phase::finished) return;
    phase_ = Phase::finished;
    gathering_.cancel_join_timer();
    heartbeat_timer_.cancel();
    close_acceptors();
    for (auto& n : nodes_) {
      if (n.conn && n.conn->is_open()) {
        // How the step ended, for agents that report it (flowrun run's).
        const bool ok = outcome_ == Outcome::succeeded && errors_.empty() && attempt_started_;
        n.conn->send(Bye{ok});
        n.conn->close_after_send();
      }
    }
    if (!engine_note_.empty()) notes_.push_back(engine_note_);
  }

  // ---- timers --------------------------------------------------------------

  void tick_heartbeats() {
    heartbeat_timer_.expires_after(seconds_of(interval_s_));
    heartbeat_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || phase_ == Phase::finished) return;
      const bool on =
          nodes_.heartbeat(monotonic_now_ns(), timeout_s_, [this](Node& n, const std::string& why) {
            node_lost(n, why);
            return phase_ != Phase::finished;
          });
      if (on) tick_heartbeats();
    });
  }

  // ---- console -------------------------------------------------------------

  void schedule_flush() { batch_.schedule(); }

  void flush_console() { batch_.flush(); }

  // A rank's log file cannot be written (a full disk): its output is lost
  // from here on, so the step cannot succeed. Said once; the console goes on
  // showing the ranks' lines while the nodes stop.
  void log_failed(const RankLog::WriteError& error) {
    if (!write_error_.empty()) return;
    write_error_ = error.text;
    flush_console();
    console_.message(
        log_failed_message(plan_.step, write_error_, stopping_, error.err, job_.ctx.layout.run_dir));
    if (phase_ == Phase::running && !stopping_) stop_nodes(Outcome::failed, write_error_);
  }

  Supervisor& sup_;
  const Console& console_;
  const NodeStep& job_;
  const StepPlan& plan_;
  const ClusterSpec& cluster_;
  asio::io_context& io_;
  asio::steady_timer heartbeat_timer_;
  asio::steady_timer flush_timer_;
  std::string token_ = make_token();
  std::string token_file_;
  std::string marker_path_, marker_text_;
  double timeout_s_, interval_s_;
  Phase phase_ = Phase::joining;
  cluster::NodeTable nodes_{plan_.nodes.size()};
  cluster::EngineWatch engines_;  // srun, ssh
  std::string engine_note_;
  std::string write_error_;  // the first file of the run directory that could not be written, and why
  int done_ = 0;
  int attempt_ = 0;
  int master_port_ = 0;
  std::int64_t attempt_start_ns_ = 0;
  bool stopping_ = false;
  bool attempt_started_ = false, attempt_recorded_ = false;
  Outcome outcome_ = Outcome::succeeded;
  ConsoleBatch batch_{io_, [this](std::string& out, std::string& err) { sup_.write_console(out, err); }};
  cluster::RankTable ranks_{job_, batch_};
  cluster::News news_;  // the notes and errors, handed to the step runner each once
  std::vector<std::string>& notes_ = news_.notes;
  std::vector<std::string>& errors_ = news_.errors;
  // How the step ended when no rank started: failed (see errors_), timed_out or interrupted.
  Outcome outcome_before_start_ = Outcome::failed;
  std::vector<WorkerLaunch> launches_;   // the engine's, for the supervisor's group
  std::function<void()> keep_previous_;  // the step runner's, for the attempt about to start
  AttemptRecord last_;                   // the attempt that ended
  cluster::Listener listener_;           // the agents' connections until they join
  cluster::UploadReceiver uploads_;      // the nodes' uploads into the ranks' directories
  cluster::NodeGathering gathering_{
      io_,
      console_,
      job_,
      nodes_,
      listener_,
      engines_,
      phase_,
      attempt_,
      marker_path_,
      marker_text_,
      {[this](int rank, const std::shared_ptr<Connection>& conn) {
         conn->set_handlers(
             [this, rank](Frame& frame) { on_node_frame(nodes_[static_cast<std::size_t>(rank)], frame); },
             [this, rank](const std::string& why) { on_node_closed(nodes_[static_cast<std::size_t>(rank)], why); });
       },
       [this](const std::string& why) { fail_before_start(why); },
       [this](Node& n, const std::string& what) { protocol_error(n, what); }}};  // joining to ready
};

}  // namespace

struct RemoteGroup::Impl {
  Impl(Supervisor& supervisor, const Console& console, const NodeStep& step)
      : head(supervisor, console, step) {}
  Head head;
};

RemoteGroup::RemoteGroup(Supervisor& supervisor, const Console& console, const NodeStep& step) {
  // Upload chunks arrive as 1 MiB strings made and freed in a loop: keep them
  // on the heap instead of mapping and unmapping pages for each one.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  impl_ = std::make_unique<Impl>(supervisor, console, step);
  sup_ = &supervisor;
  impl_->head.begin();
}

RemoteGroup::~RemoteGroup() = default;

std::optional<AttemptResult> RemoteGroup::preflight() { return impl_->head.preflight(); }

AttemptResult RemoteGroup::run_attempt(const Attempt& attempt) { return impl_->head.run_attempt(attempt); }

void RemoteGroup::stop(Outcome why) { sup_->stop_group(why); }

void RemoteGroup::kill() { sup_->kill_group(); }

int RemoteGroup::interrupt_signal() { return impl_->head.interrupt_signal(); }

std::string RemoteGroup::placement() const { return impl_->head.placement(); }

AttemptResult RemoteGroup::close() { return impl_->head.end_step(); }

}  // namespace flowrun
