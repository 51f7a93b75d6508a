#include "flowrun/remote_group.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <future>
#include <malloc.h>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

#include "flowrun/beneath.h"
#include "flowrun/clock.h"
#include "flowrun/doctor.h"
#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/logmux.h"
#include "flowrun/messages.h"
#include "flowrun/process.h"
#include "flowrun/protocol.h"
#include "flowrun/rank_output.h"
#include "flowrun/slurm.h"
#include "flowrun/start_wire.h"
#include "flowrun/step_runner.h"
#include "flowrun/text.h"
#include "flowrun/util.h"

#include "attempt_news.h"
#include "engine_watch.h"
#include "engines.h"
#include "head_launch.h"
#include "node_gathering.h"
#include "node_inbox.h"
#include "node_orders.h"
#include "node_preflight.h"
#include "node_reach.h"
#include "node_seats.h"
#include "node_shares.h"
#include "node_stacks.h"
#include "node_table.h"
#include "rank_table.h"
#include "upload_receiver.h"

namespace flowrun {

namespace asio = boost::asio;
using cluster::Node;
using cluster::NodeLink;
using cluster::Phase;

namespace {

using Clock = std::chrono::steady_clock;

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

// Whether the agents take their ranks' stacks before a stop's signals: for
// a failure, a stall or a timeout (the ranks left are where the hang is),
// not for an interrupt.
bool stacks_before_stop(const GroupOptions& group, Outcome why) {
  return group.forensics_stacks && why != Outcome::interrupted;
}

// The head's own copy of the step, whose plan is the head's plan_: an
// elastic step's attempt runs on plan_for_nodes(full_plan_, its nodes), and
// every part of the head reads plan_ (through job_.plan) as the attempt's.
NodeStep with_plan(const NodeStep& job, const StepPlan& plan) {
  NodeStep copy = job;
  copy.plan = &plan;
  return copy;
}

}  // namespace

namespace cluster {

// RemoteGroup's implementation. Not in the anonymous namespace: RemoteGroup::Impl
// holds one, and where a unity build includes this file into another, GCC takes
// Impl for a header's class with a member of internal linkage (-Wsubobject-linkage).
class Head : public GroupObserver, public cluster::NodeInbox {
 public:
  Head(Supervisor& supervisor, const Console& console, const NodeStep& job, cluster::NodeReach reach)
      : sup_(supervisor),
        console_(console),
        full_plan_(*job.plan),
        plan_(*job.plan),
        job_(with_plan(job, plan_)),
        cluster_(*job.spec->cluster),
        io_(supervisor.io()),
        heartbeat_timer_(io_),
        timeout_s_(cluster_.heartbeat_timeout_s),
        interval_s_(cluster::heartbeat_interval_s(timeout_s_)),
        reach_(std::move(reach)),
        door_(reach_.door(plan_.step, token_, interval_s_, timeout_s_)),
        uploads_(plan_, job_.ctx.layout, write_error_, [this](int node, const std::string& what) {
          upload_error(nodes_[std::size_t(node)], what);
        }) {}

  // Listens, starts the engine's processes (srun, ssh) that bring up the
  // agents, and returns: the agents join while the loop runs (preflight,
  // run_attempt).
  void begin() {
    batch_.fold(plan_.step, job_.group.style);
    auto launch = reach_.launch(job_, token_, nodes_.size());
    token_file_ = std::move(launch.token_file);
    marker_path_ = std::move(launch.marker_path);
    marker_text_ = std::move(launch.marker_text);
    for (const auto& e : launch.engines) engines_.add(e);
    launches_ = std::move(launch.launches);
    rank_dirs_ = std::move(launch.rank_dirs);
    replacement_ = std::move(launch.replacement);

    door_->start([this](const cluster::Joiner& j) { return gathering_.admit(j); },
                 [this](int rank, const cluster::Joiner& j, const std::shared_ptr<NodeLink>& conn) {
                   gathering_.on_joined(rank, j, conn);
                 });
    if (job_.start_agents) job_.start_agents(door_->endpoint(), token_);
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
    // An error that leaves here still waits for the keep: it writes the
    // step runner's record of the attempt before.
    struct WaitKept {
      std::future<void>& kept;
      ~WaitKept() {
        if (kept.valid()) kept.wait();
      }
    } wait_kept{kept_};
    if (phase_ == Phase::between) {
      attempt_ = attempt.restart;
      // What the attempt before left in the ranks' directories moves to
      // their attemptN/ on other threads, while the nodes get ready for this
      // one: every rank's files, thousands of system calls on a large step.
      if (attempt.keep_previous) {
        kept_ = std::async(std::launch::async, [this, keep = attempt.keep_previous] {
          ranks_.settle();  // the end records and logs it moves are all written
          keep();
        });
      }
      if (!seats_.before_restart()) return not_started();
      gathering_.assign();
    }
    if (!wait_ready()) return not_started();
    attempt_ = attempt.restart;
    start_attempt();
    // The ranks write into their agent's scratch directory, not into the
    // head's rank directories, which only take what comes back (logs, end
    // records, uploads): the starts go out first, and the directories, made
    // while the nodes joined, before the head takes anything from a rank.
    if (rank_dirs_.valid()) {
      try {
        rank_dirs_.get();
      } catch (const Error& e) {
        log_failed({e.what(), e.err()});  // nothing a rank sends back could be kept: the ranks stop
      }
    }
    sup_.run_until([this] { return phase_ != Phase::running; });
    AttemptResult result;
    result.record = attempt_recorded_ ? std::move(last_) : record_attempt();
    const auto outlook = seats_.outlook();
    result.node_gone = outlook.node_gone;
    result.spare_ready = outlook.spare_ready;
    result.elastic_nodes = outlook.elastic_nodes;
    result.next_world_size = outlook.next_world_size;
    take_news(result);
    return result;
  }

  // Ends the step on the nodes (bye) and waits until the engine's processes
  // have ended; returns the notes and errors since the last attempt.
  AttemptResult end_step() {
    if (phase_ != Phase::finished) {
      finish();
      // srun or ssh of a lost node, or of one a spare replaced, may hang (its
      // link is down): stop them. A node left out for its check was told
      // bye, and its agent ended by itself: srun is not to be cut short for it.
      if (nodes_.any_hanging()) sup_.stop_group(Outcome::failed);
    }
    sup_.finish_group();
    nodes_.close_all();
    door_->close_acceptors();
    door_->close_pending();
    heartbeat_timer_.cancel();
    stacks_.cancel();
    gathering_.cancel_join_timer();
    ranks_.close_files();
    ranks_.settle();  // every rank's end record and logs exist when the step is reported
    batch_.flush();
    io_.poll();
    unlink(marker_path_.c_str());
    if (!token_file_.empty()) unlink(token_file_.c_str());
    AttemptResult rest;
    take_news(rest);
    return rest;
  }

  int interrupt_signal() const { return sup_.interrupt_received(); }
  // The nodes of the attempt that ran, or between attempts of an elastic
  // step, of the next one.
  std::string placement() const {
    const std::size_t nodes = phase_ == Phase::between && nodes_.elastic() ? nodes_.usable() : nodes_.size();
    return plural(nodes, "node", "nodes");
  }

  // ---- GroupObserver ------------------------------------------------------

  void on_output(std::size_t index, bool, std::string_view data) override {
    gathering_.on_engine_output(index, data);
  }

  bool on_exit(std::size_t index, const WorkerRecord& record) override {
    if (auto note = gathering_.on_engine_exit(index, record)) engine_note_ = std::move(*note);
    return false;
  }

  bool on_stop(Outcome why) override {
    if (phase_ == Phase::running) {
      if (!stopping_) {
        stopping_ = true;
        outcome_ = why;
        nodes_.tell(Stop{why == Outcome::timed_out ? "timeout" : "interrupted", false,
                         stacks_before_stop(job_.group, why)},
                    false);
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

  void on_kill() override { nodes_.tell(Stop{"killed", true, false}, false); }

  // SIGQUIT (flowrun stacks): every node's agent takes its ranks' stacks,
  // all at once; the head groups them when the last answers (node_stacks.h).
  bool on_stacks_request() override {
    if (phase_ != Phase::running || stopping_) return false;
    return stacks_.ask(nodes_,
                       job_.group.forensics_timeout_s + timeout_s_);  // an answer may be a heartbeat late
  }

  // SIGUSR1, SIGUSR2: every agent gives it to its ranks. srun and ssh, the
  // head's own processes, never get it (srun would pass it on a second time;
  // ssh would die of it).
  bool on_signal(int sig) override {
    if (phase_ != Phase::running) return true;  // no rank runs yet
    nodes_.tell(Signal{signal_name(sig)}, true);
    return true;
  }

 private:
  void start_attempt() {
    // The first attempt may have a restart count above 0 (a requeue carried it on).
    const bool first = !attempt_started_;
    move_to(Phase::running);
    stopping_ = false;
    outcome_ = Outcome::succeeded;
    attempt_started_ = true;
    attempt_recorded_ = false;
    LaunchContext ctx = job_.ctx;
    ctx.node0_address = nodes_[0].address;
    ctx.master_port = nodes_[0].port;
    ctx.restart_count = attempt_;
    master_port_ = ctx.master_port;
    attempt_start_ns_ = unix_now_ns();
    unended_ = 0;
    ranks_.reset();
    stacks_.reset_stop();
    shares_.reset(attempt_, job_.group.sample_s);
    // A restart: what the attempt before left (logs, traceback, uploads) is
    // in attemptN/ before this one's ranks write theirs.
    if (kept_.valid()) kept_.get();
    ranks_.start(ctx, nodes_, attempt_, attempt_start_ns_);
    if (first) console_.message(cluster::joined_message(plan_, nodes_.names(), ctx));
    // Every node's start message first, then the writes: the nodes start
    // together. Each carries its node's part of the plan; the node's agent
    // makes its ranks' environment from it.
    std::vector<std::string> frames = cluster::start_frames(job_, nodes_.size(), ctx);
    for (auto& n : nodes_) n.conn->send_frame(std::move(frames[static_cast<std::size_t>(n.rank)]));
  }

  // What node `seat`'s connection sends goes to the node in that seat.
  void bind(int seat) {
    nodes_[std::size_t(seat)].conn->set_handlers(
        [this, seat](Frame& frame) {
          cluster::take_node_frame(nodes_[std::size_t(seat)], frame, *this, gathering_, uploads_);
        },
        [this, seat](const std::string& why) { on_node_closed(nodes_[std::size_t(seat)], why); });
  }

  // A node that joined: what it sends comes here; the step fails before
  // its ranks start.
  cluster::NodeGathering::Links gathering_links() {
    return {
        [this](int seat, const std::shared_ptr<NodeLink>&) {
          bind(seat);
          if (nodes_.is_spare_seat(seat))
            console_.message(fmt::format(
                "flowrun: step '{}': {} node {} joined; it waits with no rank{}", plan_.step,
                nodes_.elastic() ? "another" : "spare", nodes_[std::size_t(seat)].name,
                nodes_.elastic() ? fmt::format(" until the next restart ({})", seats_.range_text()) : ""));
        },
        [this](const std::string& why) { fail_before_start(why); },
        [this](Node& n, const std::string& what) { protocol_error(n, what); },
        [this](const std::string& why) { seats_.start_fewer(why); },
        [this](Phase next) { move_to(next); },
        [this](int rank) { return seats_.take_spare(rank); },
        [this](int seat, const std::vector<std::string>& exclude) { return ask_for_node(seat, exclude); }};
  }

  // A new node's agent for spare seat `seat` (NodeGathering::Links::ask_for_node):
  // the engine's process, started in the engine's group beside the others.
  std::optional<std::string> ask_for_node(int seat, const std::vector<std::string>& exclude) {
    if (!replacement_) return std::nullopt;
    auto made = replacement_(seat, exclude);
    if (!made) return std::nullopt;
    const WorkerLaunch& process = added_launches_.emplace_back(std::move(made->process));
    engines_.add(made->engine);
    if (!sup_.add_worker(process)) return std::nullopt;
    std::vector<std::string> words(made->engine.argv.begin(), made->engine.argv.end());
    // The agent's own words (flowrun agent ...) are the same on every node.
    const auto agent = std::find(words.begin(), words.end(), job_.flowrun_path);
    words.erase(agent, words.end());
    return join(words, " ");
  }

  // The one place the head's phase changes.
  void move_to(Phase next) { phase_ = next; }

  // The one place the head's plan changes: an elastic step's attempt on
  // `nodes` of the plan's nodes, renumbered over them.
  void replan(int nodes) { plan_ = plan_for_nodes(full_plan_, nodes); }

  // ---- messages from a node (node_inbox.h) ----------------------------------

  void on_node_signalled(Node& n, const Stop& m) override {
    const std::string reason = printable(m.reason);
    if (n.stays) {
      // A gang's agent gets a stop signal when the platform takes its pod
      // (deleted, evicted, preempted, its node drained): that node is lost,
      // as if it had died, so a spare or an elastic range covers it. Only
      // the head's own signal interrupts the flow.
      node_lost(n, reason);
      return;
    }
    n.signalled = true;
    notes_.push_back(fmt::format("node {}: {}", n.name, reason));
    console_.message(fmt::format("flowrun: step '{}': node {}: {}", plan_.step, n.name, reason));
    if (phase_ == Phase::running && !stopping_)
      stop_nodes(Outcome::interrupted, "node " + n.name + ": " + reason);
  }

  void protocol_error(Node& n, const std::string& what) override {
    errors_.push_back(fmt::format("node {}: {}", n.name, what));
    n.conn->close();
    node_lost(n, what);
  }

  void on_rank_output(Node& n, const Output& m) override {
    if (ranks_.output(n, m, [this](const RankLog::WriteError& error) { log_failed(error); }))
      batch_.schedule();
  }

  void on_rank_exited(Node& n, const Exited& m) override {
    const WorkerRecord* rec = ranks_.exited(n, m);
    if (rec != nullptr && !rec->status.ok() && !m.stopped && !stopping_)
      stop_nodes(Outcome::failed, fmt::format("rank {} on {} {}", rec->rank, n.name, rec->status.describe()));
  }

  // Ranks of `n` wrote nothing for the step's stall_timeout; its agent is
  // stopping them.
  void on_node_stalled(Node& n, const Stalled& m) override {
    const std::vector<WorkerRecord> stalled = stalled_ranks(plan_, n, m);
    if (stalled.empty() || phase_ != Phase::running || !job_.group.stall_timeout_s) return;
    batch_.flush();  // the ranks' lines so far come before flowrun's
    console_.message(format_stall_message(plan_.step, stalled, *job_.group.stall_timeout_s));
    stop_nodes(Outcome::stalled, "stalled");
  }

  void on_node_stacks(Node& n, const Stacks& m) override {
    if (auto wrong = stacks_.take(n.rank, n.name, m)) protocol_error(n, *wrong);
  }

  void on_node_shares(Node& n, const Shares& m) override {
    if (auto wrong = shares_.take(n.rank, n.name, m)) protocol_error(n, *wrong);
  }

  void on_done(Node& n, const Done& m) override {
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
    nodes_.tell(Stop{reason, false, stacks_before_stop(job_.group, why)}, true);
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
    if (n.lost || n.retired || phase_ == Phase::finished) return;
    n.lost = true;
    if (n.conn) n.conn->close();
    if (nodes_.is_spare_seat(n.rank)) {  // it had no rank: the step goes on without it
      const std::string text = nodes_.lost_text(n, why);
      notes_.push_back(text);
      console_.message(fmt::format("flowrun: step '{}': {}", plan_.step, text));
      return;
    }
    // A file it was sending is cut short: never leave the part that came.
    uploads_.cut_short(n.rank);  // says nothing more than the loss below
    const std::string text = nodes_.lost_text(n, why);
    console_.message(fmt::format("flowrun: step '{}': {}", plan_.step, text));
    if (phase_ == Phase::between && seats_.outlook().covered()) {
      notes_.push_back(text);  // a restart, if one comes, takes a spare for it, or goes on without it
      return;
    }
    if (phase_ == Phase::joining && nodes_.elastic()) {
      notes_.push_back(text);  // the step starts without it, if MIN join
      return;
    }
    if (phase_ != Phase::running) {
      fail_before_start(text);
      return;
    }
    notes_.push_back(text);
    // A spare hears of its seat now, before the other nodes' stop: its
    // check runs while their ranks stop (their stacks, SIGTERM, the grace).
    // The restart, if one comes, takes it for this rank; a step that ends
    // instead tells it bye as every node.
    if (!nodes_.elastic() && !(stopping_ && outcome_ != Outcome::failed))
      gathering_.seat_early(n.rank, attempt_ + 1, seats_.spare_gpus());
    ranks_.lose(n, why, unix_now_ns());
    stacks_.forget(n.rank, "its node was lost");
    if (!stopping_) stop_nodes(Outcome::failed, text);
    n.done = true;
    maybe_attempt_done();
  }

  void maybe_attempt_done() {
    if (phase_ != Phase::running) return;
    // From the first node that had not ended: n nodes that end cost n looks, not n^2 / 2.
    while (unended_ < nodes_.size() && (nodes_[unended_].done || nodes_[unended_].lost)) ++unended_;
    if (unended_ < nodes_.size()) return;
    ranks_.close_files();
    batch_.flush();
    last_ = record_attempt();
    move_to(Phase::between);  // the step runner restarts (run_attempt) or ends the step (end_step)
  }

  // What stands for an attempt whose ranks never started.
  AttemptResult not_started() {
    // The attempt before's files were being kept for this one: the step
    // runner reads that attempt's record next.
    if (kept_.valid()) {
      try {
        kept_.get();
      } catch (const Error& e) {
        errors_.push_back(e.what());
      }
    }
    AttemptResult result = cluster::not_started(outcome_before_start_, unix_now_ns());
    seats_.record(result.record);
    result.record.node_checks = gathering_.take_verdicts();
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
    attempt.stacks = stacks_.stop_report();
    attempt.shares = shares_.record();
    seats_.record(attempt);
    attempt.node_checks = gathering_.take_verdicts();
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

  void finish() {
    if (phase_ == Phase::finished) return;
    move_to(Phase::finished);
    gathering_.cancel_join_timer();
    heartbeat_timer_.cancel();
    door_->close_acceptors();
    // How the step ended, for agents that report it (flowrun run's).
    nodes_.say_bye(outcome_ == Outcome::succeeded && errors_.empty() && attempt_started_,
                   door_->keeps_stayers());
    // A gang's agents go back to its lobby, to wait for the next step.
    if (door_->keeps_stayers()) nodes_.hand_back([this](const auto& link) { door_->take_back(link); });
    if (!engine_note_.empty()) notes_.push_back(engine_note_);
  }

  // ---- timers --------------------------------------------------------------

  void tick_heartbeats() {
    heartbeat_timer_.expires_after(steady_seconds(interval_s_));
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

  // A rank's log file cannot be written (a full disk): its output is lost
  // from here on, so the step cannot succeed. Said once; the console goes on
  // showing the ranks' lines while the nodes stop.
  void log_failed(const RankLog::WriteError& error) {
    if (!write_error_.empty()) return;
    write_error_ = error.text;
    batch_.flush();
    console_.message(
        log_failed_message(plan_.step, write_error_, stopping_, error.err, job_.ctx.layout.run_dir));
    if (phase_ == Phase::running && !stopping_) stop_nodes(Outcome::failed, write_error_);
  }

  Supervisor& sup_;
  const Console& console_;
  const StepPlan full_plan_;  // the step's plan; for an elastic step, on MAX nodes
  StepPlan plan_;             // the attempt's (node_seats.h)
  const NodeStep job_;        // the step, whose plan is plan_ (with_plan)
  const ClusterSpec& cluster_;
  asio::io_context& io_;
  asio::steady_timer heartbeat_timer_;
  std::string token_ = make_token();
  std::string token_file_;
  std::string marker_path_, marker_text_;
  double timeout_s_, interval_s_;
  Phase phase_ = Phase::joining;
  cluster::NodeTable nodes_{plan_.nodes.size(), plan_.spares.size(), plan_.min_nodes};
  cluster::EngineWatch engines_;  // srun, ssh
  std::string engine_note_;
  std::string write_error_;  // the first file of the run directory that could not be written, and why
  int attempt_ = 0;
  std::size_t unended_ = 0;  // no node below it is still running (maybe_attempt_done)
  int master_port_ = 0;
  std::int64_t attempt_start_ns_ = 0;
  bool stopping_ = false;
  bool attempt_started_ = false, attempt_recorded_ = false;
  Outcome outcome_ = Outcome::succeeded;
  ConsoleBatch batch_{io_, [this](std::string& out, std::string& err) { sup_.write_console(out, err); }};
  cluster::RankTable ranks_{job_, batch_};
  cluster::NodeStacks stacks_{
      io_, plan_, job_.ctx.layout,
      [this](const StackReport& report, std::int64_t asked) {
        batch_.flush();  // the ranks' lines so far come before flowrun's
        console_.message(publish_stacks(plan_.step, report, job_.group.stacks_file, asked));
      },
      [this](const std::string& line) {
        batch_.flush();
        console_.message(line);
      }};
  cluster::NodeShares shares_{plan_, job_.group.shares_file,
                              [this](const std::string& line) {
                                batch_.flush();
                                console_.message(line);
                              },
                              [this](int rate) {
                                nodes_.tell(SampleRate{attempt_, rate}, true);
                              }};
  cluster::News news_;  // the notes and errors, handed to the step runner each once
  std::vector<std::string>& notes_ = news_.notes;
  std::vector<std::string>& errors_ = news_.errors;
  // How the step ended when no rank started: failed (see errors_), timed_out or interrupted.
  Outcome outcome_before_start_ = Outcome::failed;
  std::vector<WorkerLaunch> launches_;       // the engine's, for the supervisor's group
  std::deque<WorkerLaunch> added_launches_;  // the engine's new nodes' (ask_for_node), added to it
  decltype(cluster::HeadLaunch::replacement) replacement_;
  std::future<void> rank_dirs_;  // every rank's directory, made while the nodes join
  std::future<void> kept_;       // the step runner's keep_previous, under way
  AttemptRecord last_;           // the attempt that ended
  cluster::NodeSeats seats_{
      nodes_,
      full_plan_,
      plan_,
      console_,
      notes_,
      {[this](int seat) { bind(seat); }, [this](const std::string& why) { fail_before_start(why); },
       [this](int nodes) { replan(nodes); }}};
  cluster::NodeReach reach_;
  std::unique_ptr<cluster::NodeDoor> door_;  // the agents' connections until they join
  cluster::UploadReceiver uploads_;          // the nodes' uploads into the ranks' directories
  cluster::NodeGathering gathering_{
      io_,    console_, job_,         nodes_,       *door_,           engines_,
      phase_, attempt_, marker_path_, marker_text_, gathering_links()};  // joining to ready
};

}  // namespace cluster

struct RemoteGroup::Impl {
  Impl(Supervisor& supervisor, const Console& console, const NodeStep& step, cluster::NodeReach reach)
      : head(supervisor, console, step, std::move(reach)) {}
  cluster::Head head;
};

RemoteGroup::RemoteGroup(Supervisor& supervisor, const Console& console, const NodeStep& step)
    : RemoteGroup(supervisor, console, step, cluster::listener_reach(supervisor.io(), console)) {}

RemoteGroup::RemoteGroup(Supervisor& supervisor, const Console& console, const NodeStep& step,
                         cluster::NodeReach reach) {
  // Ship chunks go out as 256 KiB strings made and freed in a loop: keep them
  // on the heap instead of mapping and unmapping pages for each one.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  impl_ = std::make_unique<Impl>(supervisor, console, step, std::move(reach));
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
