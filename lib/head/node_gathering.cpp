#include "node_gathering.h"

#include <algorithm>
#include <chrono>
#include <fmt/format.h>

#include "flowrun/clock.h"
#include "flowrun/files.h"
#include "flowrun/host.h"
#include "flowrun/slurm.h"
#include "flowrun/text.h"
#include "flowrun/util.h"

#include "head_launch.h"
#include "node_orders.h"

namespace flowrun::cluster {

namespace {

// A node that does not see the step's workdir as this host does.
std::string workdir_not_shared(const std::string& node, const std::string& workdir,
                               const std::string& error) {
  return fmt::format(
      "node {} does not see the step's workdir {} as this host does ({}); ranks on every node run in the "
      "same workdir, so it must be a directory every node shares (NFS, Lustre, ...) at the same path, or "
      "set cluster.shared_workdir: false and list the files the ranks read in the step's inputs: (the head "
      "then ships them to each node)",
      node, workdir, printable(error));
}

// The checks that failed, as "gpu_health: ...; scratch_space: ...".
std::string failed_checks(const std::vector<NodeVerdict::Check>& checks) {
  std::string text;
  for (const auto& c : checks)
    if (!c.ok) text += fmt::format("{}{}: {}", text.empty() ? "" : "; ", c.name, c.detail);
  return text;
}

// What to do about a node that failed its check, the step's last words.
constexpr std::string_view kWhatToDo =
    "fix what the check names, or leave the node out (sbatch --exclude with the run directory's "
    "excluded_nodes file), add parallel.spare_nodes, or set parallel.node_checks: false to start on it "
    "anyway";

// A node's name as Slurm names it: the short one (an agent reports its
// kernel's host name, which may be the full one, gpu-b.cluster.example).
std::string slurm_name(const std::string& name) {
  const bool address = name.find_first_not_of("0123456789.") == std::string::npos;
  return address ? name : name.substr(0, name.find('.'));
}

}  // namespace

NodeGathering::NodeGathering(boost::asio::io_context& io, const Console& console, const NodeStep& job,
                             NodeTable& nodes, NodeDoor& door, EngineWatch& engines, const Phase& phase,
                             const int& attempt, const std::string& marker_path,
                             const std::string& marker_text, Links links)
    : console_(console),
      job_(job),
      plan_(*job.plan),
      nodes_(nodes),
      door_(door),
      engines_(engines),
      phase_(phase),
      attempt_(attempt),
      marker_path_(marker_path),
      marker_text_(marker_text),
      links_(std::move(links)),
      join_timer_(io),
      last_call_timer_(io),
      preflight_(console, plan_, job_.ctx.layout.step_dir(plan_.step) + "/preflight.txt", preflight_links()),
      spare_timer_(io),
      check_timer_(io) {}

NodePreflight::Links NodeGathering::preflight_links() {
  return {[this](int node, const Preflight& m) { nodes_[std::size_t(node)].conn->send(m); },
          [this](int node, const std::string& reason) {
            const auto& conn = nodes_[std::size_t(node)].conn;
            if (conn && conn->is_open()) conn->send(Stop{reason});
          },
          [this](int node) { return nodes_[std::size_t(node)].lost; }};
}

Admission NodeGathering::admit(const Joiner& j) {
  // A spare may join until the step ends; a node only while they join.
  const bool spares = nodes_.seats() > nodes_.size() && phase_ != Phase::finished;
  if (phase_ != Phase::joining && !spares)
    return {-1,
            fmt::format("all {} have joined step '{}'", plural(nodes_.size(), "node", "nodes"), plan_.step)};
  return nodes_.admit(j, engines_.nodes(), phase_ != Phase::joining);
}

void NodeGathering::on_joined(int rank, const Joiner& j, const std::shared_ptr<NodeLink>& conn) {
  const bool all = nodes_.join(rank, j, conn);
  links_.joined(rank, conn);
  if (nodes_.is_spare_seat(rank) && !awaiting_spare_.empty() && phase_ == Phase::assigning) {
    seat_spare(awaiting_spare_.front().first);
    return;
  }
  if (all && !(nodes_.elastic() && nodes_.usable() < nodes_.size())) {
    all_joined();
    return;
  }
  if (all) {  // an elastic step's node that joined was lost before the start: it starts without it
    start_fewer(fmt::format("{}, {} of them lost since", joined_of(), nodes_.size() - nodes_.usable()));
    return;
  }
  maybe_start_fewer();
}

std::string NodeGathering::joined_of() const {
  return fmt::format("{} of {} nodes joined", nodes_.joined(), nodes_.size());
}

void NodeGathering::maybe_start_fewer() {
  if (!nodes_.elastic() || phase_ != Phase::joining) return;
  const auto min = static_cast<std::size_t>(nodes_.min_nodes());
  if (nodes_.usable() < min) return;
  const double last_call = job_.spec->cluster->last_call_timeout_s;
  if (nodes_.joined() + not_coming_ >= nodes_.size()) {
    start_fewer(fmt::format("{}; the others' agents will not come", joined_of()));
  } else if (!last_call_) {
    last_call_ = true;
    last_call_timer_.expires_after(steady_seconds(last_call));
    last_call_timer_.async_wait([this, last_call](const boost::system::error_code& ec) {
      if (ec || phase_ != Phase::joining) return;
      if (nodes_.usable() < static_cast<std::size_t>(nodes_.min_nodes())) {
        last_call_ = false;  // one was lost meanwhile: the next to join calls again
        return;
      }
      start_fewer(
          fmt::format("{}, and no more within cluster.last_call_timeout ({:g} s)", joined_of(), last_call));
    });
  }
}

void NodeGathering::start_fewer(const std::string& why) {
  cancel_join_timer();
  if (const auto there = nodes_.usable(); there < static_cast<std::size_t>(nodes_.min_nodes())) {
    links_.fail(fmt::format("{}: {} there, fewer than the {} that nodes: \"{}:{}\" needs", why, there,
                            nodes_.min_nodes(), nodes_.min_nodes(), nodes_.size()));
    return;
  }
  links_.start_fewer(why);
  all_joined();
}

void NodeGathering::start_join_timer(double seconds) {
  join_timer_.expires_after(steady_seconds(seconds));
  join_timer_.async_wait([this, seconds](const boost::system::error_code& ec) {
    if (ec || phase_ != Phase::joining) return;
    if (nodes_.elastic() && nodes_.usable() >= static_cast<std::size_t>(nodes_.min_nodes())) {
      start_fewer(fmt::format("{} within cluster.join_timeout ({:g} s)", joined_of(), seconds));
      return;
    }
    links_.fail(nodes_.join_timeout(plan_, seconds, door_.endpoint()) + door_.strangers_note());
  });
}

void NodeGathering::on_engine_output(std::size_t index, std::string_view data) {
  const auto grant = engines_.feed(index, data);
  if (grant == EngineWatch::Grant::queued) join_timer_.cancel();
  if (grant == EngineWatch::Grant::granted && phase_ == Phase::joining)
    start_join_timer(job_.spec->cluster->join_timeout_s);
  // A node asked for in a left-out one's place: its wait for Slurm's
  // resources does not count against cluster.join_timeout either.
  if (const int seat = engines_.node(index); seat >= 0 && asked_seats_.count(seat) > 0) {
    if (grant == EngineWatch::Grant::queued) spare_timer_.cancel();
    if (grant == EngineWatch::Grant::granted && !awaiting_spare_.empty()) arm_spare_timer();
  }
}

std::optional<std::string> NodeGathering::on_engine_exit(std::size_t index, const WorkerRecord& record) {
  if (phase_ == Phase::finished) return std::nullopt;
  const int node = engines_.node(index);
  // The engine's process for a new node ended before its agent joined: none comes.
  if (node >= 0 && asked_seats_.count(node) > 0 && !nodes_[std::size_t(node)].joined &&
      !awaiting_spare_.empty() && phase_ == Phase::assigning) {
    links_.fail(
        fmt::format("node {} (node rank {} of {}) failed its check, and no node came in its place, so no "
                    "rank starts; {}; {}",
                    printable(awaiting_spare_.front().second), awaiting_spare_.front().first, nodes_.size(),
                    kWhatToDo, engines_.ended_before_join(index, record)));
    return std::nullopt;
  }
  // A spare's ssh that ends costs the step nothing but the spare (the loss
  // of one that joined is the head's to tell).
  if (node >= 0 && nodes_.is_spare_seat(node)) return engines_.ended_note(index, record);
  if (phase_ == Phase::joining && (node < 0 || !nodes_[static_cast<std::size_t>(node)].joined)) {
    // An elastic step goes on without the nodes that cannot come while MIN can.
    const std::size_t gone = node < 0 ? nodes_.size() - nodes_.joined() : 1;
    if (nodes_.elastic() && nodes_.size() - std::min(nodes_.size(), not_coming_ + gone) >=
                                static_cast<std::size_t>(nodes_.min_nodes())) {
      not_coming_ += gone;
      const std::string note = engines_.ended_note(index, record);
      maybe_start_fewer();
      return note;
    }
    links_.fail(engines_.ended_before_join(index, record));
    return std::nullopt;
  }
  if (phase_ == Phase::running || phase_ == Phase::assigning || phase_ == Phase::checking)
    return engines_.ended_note(index, record);
  return std::nullopt;
}

void NodeGathering::all_joined() {
  join_timer_.cancel();
  door_.say_fallback_addresses(nodes_.via_names());
  // Nodes that do not have the GPUs the plan gave them are refused (with
  // node checks, the check's gpu_count leaves them out instead).
  if (const std::string wrong = plan_.cpu || node_checks_on(job_) ? "" : nodes_.gpu_mismatches(plan_);
      !wrong.empty()) {
    links_.fail(wrong +
                " (cluster.gpus_per_node, or this host's count); nodes with different GPU counts are "
                "not supported");
    return;
  }
  assign();
}

void NodeGathering::assign() {
  links_.move_to(Phase::assigning);
  ready_ = 0;
  unshipped_ = 0;
  own_host_seat_.reset();
  // A node new to the step first (a spare in a lost node's seat, a node an
  // elastic step takes in): it has the most to do before it is ready (its
  // check, the step's inputs), and on thousands of nodes the last assign
  // leaves a good while after the first.
  std::vector<Node*> order;
  for (auto& n : nodes_) order.push_back(&n);
  std::stable_partition(order.begin(), order.end(), [](const Node* n) { return !n->assigned; });
  // A spare told early has this assign (unless node 0 changed since), and
  // may have answered it: the answer counts once every node has its assign.
  std::vector<std::pair<Node*, Ready>> answered;
  for (Node* n : order) {
    n->ready = false;
    n->done = false;
    n->assigned = true;
    Assign m = assign_for(n->rank);
    if (const auto e = early_.find(n->conn.get()); e != early_.end() && e->second.rank == n->rank) {
      if (e->second.assign == m) {
        if (e->second.ready) answered.emplace_back(n, std::move(*e->second.ready));
        continue;
      }
      // Node 0 was lost since: its check reached for the node 0 before
      // (its answer to this assign repeats that check, once a step).
      if (e->second.assign.node0_address != m.node0_address || e->second.assign.node0_port != m.node0_port)
        old_node0_.insert(n->conn.get());
    }
    n->conn->send(m);
  }
  early_.clear();
  for (std::size_t seat = nodes_.size(); seat < nodes_.seats(); ++seat) nodes_[seat].promised = -1;
  arm_check_timer();
  for (auto& [n, ready] : answered) {
    if (phase_ != Phase::assigning) break;  // an answer before failed the step, or all are ready
    on_ready(*n, ready);
  }
}

void NodeGathering::seat_early(int rank, int next, int gpus) {
  // Its check would reach for a node 0 that is gone: it hears at the restart.
  if (rank != 0 && nodes_[0].lost) return;
  const int seat = nodes_.unpromised_spare(gpus);
  if (seat < 0) return;
  Node& spare = nodes_[std::size_t(seat)];
  spare.promised = rank;
  spare.assigned = true;
  Early& e = early_[spare.conn.get()];
  e.rank = rank;
  e.assign = assign_for(rank, next);
  e.ready.reset();
  spare.conn->send(e.assign);
}

Assign NodeGathering::assign_for(int rank, int attempt) const {
  Assign m = assign_of(job_, attempt, rank, static_cast<int>(nodes_.size()), marker_path_, marker_text_);
  // The other nodes check that they reach node 0, where its ranks' store
  // will listen (MASTER_ADDR is the same address).
  const Node& node0 = nodes_[0];
  if (m.node_checks && rank != 0 && node0.reach_port > 0 && !node0.reach_address.empty()) {
    m.node0_name = node0.name;
    m.node0_address = node0.reach_address;
    m.node0_port = node0.reach_port;
  }
  return m;
}

void NodeGathering::arm_check_timer() {
  if (!node_checks_on(job_)) return;
  const double seconds = job_.spec->cluster->join_timeout_s;
  check_timer_.expires_after(steady_seconds(seconds));
  check_timer_.async_wait([this, seconds](const boost::system::error_code& ec) {
    if (!ec) check_overdue(seconds);
  });
}

void NodeGathering::check_overdue(double seconds) {
  if (phase_ != Phase::assigning) return;
  std::vector<int> silent;
  for (const auto& n : nodes_)
    if (!n.ready) silent.push_back(n.rank);
  // The last one's answer may reseat the nodes: each is found by its rank,
  // and none moves before it.
  for (int rank : silent) {
    Ready none;
    none.workdir_ok = true;
    none.checks = {NodeCheck{
        "node_check", false,
        fmt::format(
            "no verdict within cluster.join_timeout ({:g} s): something on the node hangs (an NVML call "
            "on a GPU that fell off the bus, a filesystem that does not answer); look there (nvidia-smi, "
            "df), or leave it out",
            seconds)}};
    on_ready(nodes_[std::size_t(rank)], none);
    if (phase_ != Phase::assigning) return;
  }
}

void NodeGathering::on_ready(Node& n, const Ready& m) {
  // A spare told early of its seat answers before the restart's assign():
  // kept for it.
  if (const auto e = early_.find(n.conn.get()); e != early_.end() && !n.lost) {
    e->second.ready = m;
    return;
  }
  if (phase_ != Phase::assigning || n.ready || nodes_.is_spare_seat(n.rank)) return;
  n.ready = true;
  const Workdir workdir = workdir_for(n, m.workdir_ok);
  if (workdir == Workdir::refuse) {
    workdir_errors_.push_back(workdir_not_shared(n.name, job_.step->workdir, m.workdir_error));
  } else if (workdir == Workdir::ship && !n.shipped && !n.shipping) {
    ship_to(n);
  }
  if (n.rank == 0) {
    n.address = m.address;
    n.port = m.port;
  }
  if (node_checks_on(job_)) keep_verdict(n, m);
  if (++ready_ < static_cast<int>(nodes_.size())) return;
  if (!workdir_errors_.empty()) {
    for (const auto& e : workdir_errors_) links_.fail(e);
    return;
  }
  if (leave_out_failed()) return;
  maybe_ready();
}

void NodeGathering::keep_verdict(Node& n, const Ready& m) {
  // An agent checks its node once a step; a restart's answer repeats it.
  if (!judged_.insert(n.conn.get()).second) return;
  NodeVerdict v;
  v.node = n.name;
  v.node_rank = n.rank;
  v.check_s = static_cast<double>(m.check_ms) / 1000;
  const bool old_node0 = old_node0_.count(n.conn.get()) > 0;
  for (const auto& c : m.checks) {
    // A spare told its seat early checked the node 0 of then, lost since:
    // not held against it (the others check the node 0 of their first assign).
    if (old_node0 && c.name == "reach_node0" && !c.ok) {
      v.checks.push_back(
          {c.name, true, "not judged: node 0 was lost after this node's check (" + c.detail + ")"});
      continue;
    }
    v.checks.push_back({c.name, c.ok, c.detail});
    torch_imports_ = torch_imports_ || (c.name == "torch_import" && c.ok);
  }
  round_.emplace_back(n.rank, verdicts_.size());
  verdicts_.push_back(std::move(v));
}

void NodeGathering::judge_round() {
  for (const auto& [rank, index] : round_) {
    NodeVerdict& v = verdicts_[index];
    for (auto& c : v.checks) {
      // Where no node's Python imports torch, the step is taken for one
      // that does not use it: a node is left out for lacking what another has.
      if (c.name == "torch_import" && !c.ok && !torch_imports_) {
        c.ok = true;
        c.detail = "not held against the node, as no node's Python imports torch: " + c.detail;
      }
      v.ok = v.ok && c.ok;
    }
    Node& n = nodes_[std::size_t(rank)];
    n.check_failed = !v.ok;
    if (v.ok) continue;
    excluded_.push_back(n.name);
    console_.message(fmt::format(
        "flowrun: step '{}': node {} (node rank {} of {}) failed its check, so it is "
        "left out: {}",
        plan_.step, printable(n.name), n.rank, nodes_.size(), printable(failed_checks(v.checks))));
  }
  round_.clear();
}

bool NodeGathering::leave_out_failed() {
  judge_round();
  std::vector<int> failed;
  for (auto& n : nodes_) {
    if (!n.check_failed) continue;
    failed.push_back(n.rank);
    n.check_failed = false;
    // Gone for the step: its agent ends at this bye, and its connection's
    // close is no loss to report.
    n.lost = true;
    n.left_out = true;
    n.conn->send(Bye{false, false, -1});
  }
  if (failed.empty()) return false;
  write_excluded();
  if (nodes_.elastic()) {
    const std::string why = fmt::format("{} failed {} check", plural(failed.size(), "node", "nodes"),
                                        failed.size() == 1 ? "its" : "their");
    if (nodes_.usable() < static_cast<std::size_t>(nodes_.min_nodes())) {
      links_.fail(fmt::format("{}: {} left, fewer than the {} that nodes: \"{}:{}\" needs; {}", why,
                              nodes_.usable(), nodes_.min_nodes(), nodes_.min_nodes(), nodes_.size(),
                              kWhatToDo));
      return true;
    }
    links_.start_fewer(why);
    assign();
    return true;
  }
  for (int rank : failed) {
    --ready_;
    const std::string name = nodes_[std::size_t(rank)].name;
    await_spare(rank, name);
    if (phase_ == Phase::finished) return true;
  }
  return true;
}

void NodeGathering::await_spare(int rank, const std::string& failed) {
  if (links_.take_spare(rank)) {
    seat_spare(rank);
    return;
  }
  bool may_come = false;
  for (std::size_t seat = nodes_.size(); seat < nodes_.seats(); ++seat)
    may_come = may_come || !nodes_[seat].joined;
  if (!may_come && ask_for_node(rank, failed)) may_come = true;
  if (!may_come) {
    links_.fail(
        fmt::format("node {} (node rank {} of {}) failed its check, and no spare node waits to take its "
                    "place (parallel.spare_nodes), so no rank starts; {}",
                    printable(failed), rank, nodes_.size(), kWhatToDo));
    return;
  }
  awaiting_spare_.emplace_back(rank, failed);
  if (awaiting_spare_.size() == 1) arm_spare_timer();
}

void NodeGathering::arm_spare_timer() {
  const double seconds = job_.spec->cluster->join_timeout_s;
  spare_timer_.expires_after(steady_seconds(seconds));
  spare_timer_.async_wait([this, seconds](const boost::system::error_code& ec) {
    if (ec || awaiting_spare_.empty() || phase_ != Phase::assigning) return;
    const auto& [waiting, name] = awaiting_spare_.front();
    links_.fail(
        fmt::format("node {} (node rank {} of {}) failed its check, and no {} joined within "
                    "cluster.join_timeout ({:g} s) to "
                    "take its place, so no rank starts; {}",
                    printable(name), waiting, nodes_.size(),
                    asked_seats_.empty() ? "spare node" : "node asked for in its place", seconds, kWhatToDo));
  });
}

bool NodeGathering::ask_for_node(int rank, const std::string& failed) {
  // A new node for each of the step's nodes at most: where every node fails
  // alike (a shared file system full), the cluster is not asked node by node.
  if (!links_.ask_for_node || asked_seats_.size() >= nodes_.size()) return false;
  // A new node: none the step has seen, those left out among them.
  std::set<std::string> hosts;
  for (std::size_t seat = 0; seat < nodes_.seats(); ++seat)
    if (nodes_[seat].joined) hosts.insert(slurm_name(nodes_[seat].name));
  for (const auto& name : excluded_) hosts.insert(slurm_name(name));
  // Its seat is made once the engine said how it comes: an engine that
  // cannot leaves no seat a stranger could take, or the step wait on.
  const int seat = static_cast<int>(nodes_.seats());
  const auto command = links_.ask_for_node(seat, {hosts.begin(), hosts.end()});
  if (!command) return false;
  nodes_.add_spare_seat();
  asked_seats_.insert(seat);
  console_.message(
      fmt::format("flowrun: step '{}': no spare waits for node rank {} of {} ({}): asking for a new "
                  "node in its place: {}",
                  plan_.step, rank, nodes_.size(), printable(failed), *command));
  return true;
}

void NodeGathering::seat_spare(int rank) {
  if (!awaiting_spare_.empty() && awaiting_spare_.front().first == rank) {
    if (!links_.take_spare(rank)) return;  // the one that joined has other GPUs: wait on
    awaiting_spare_.erase(awaiting_spare_.begin());
    if (awaiting_spare_.empty()) spare_timer_.cancel();
  }
  Node& spare = nodes_[std::size_t(rank)];
  spare.ready = false;
  spare.assigned = true;
  spare.conn->send(assign_for(rank));
  arm_check_timer();
}

void NodeGathering::write_excluded() {
  const std::string path = job_.ctx.layout.run_dir + "/excluded_nodes";
  std::vector<std::string> names;
  // Another step of the run may have left nodes out before.
  if (auto before = try_read_file(path, 1 << 20)) {
    std::string list = *before;
    while (!list.empty() && list.back() == '\n') list.pop_back();
    if (auto old = expand_hostlist(list, nullptr)) names = *old;
  }
  for (const auto& name : excluded_) names.push_back(slurm_name(name));
  if (const int err = try_write_file(path, compress_hostlist(names) + "\n"); err != 0)
    console_.message(
        fmt::format("flowrun: step '{}': cannot write {}: {}", plan_.step, path, file_error_text(err)));
}

void NodeGathering::maybe_ready() {
  if (phase_ != Phase::assigning || ready_ < static_cast<int>(nodes_.size())) return;
  // Every node is ready, so none begins a shipment now: each ack goes on from
  // the first node still shipping (n acks, n looks; not n^2 / 2).
  while (unshipped_ < nodes_.size() && !nodes_[unshipped_].shipping) ++unshipped_;
  if (unshipped_ < nodes_.size()) return;
  links_.move_to(Phase::ready);
}

NodeGathering::Workdir NodeGathering::workdir_for(const Node& n, bool workdir_ok) const {
  const SharedWorkdir mode = job_.spec->cluster ? job_.spec->cluster->shared_workdir : SharedWorkdir::detect;
  if (mode == SharedWorkdir::no) {
    // Every node but the one on the head's own host (the first that reports
    // its name: on one host every node does), which reads the workdir itself.
    const std::string head = host_name(job_.ctx.parent_env);
    if (!own_host_seat_) {  // looked up once a round, not once a node (n^2 / 2 names compared)
      own_host_seat_ = -1;
      for (const auto& other : nodes_) {
        if (other.name == head) {
          own_host_seat_ = other.rank;
          break;
        }
      }
    }
    if (n.rank != *own_host_seat_) return Workdir::ship;
  }
  if (workdir_ok) return Workdir::shared;
  return mode == SharedWorkdir::detect && job_.ship_when_not_shared ? Workdir::ship : Workdir::refuse;
}

void NodeGathering::ship_to(Node& n) {
  if (!ship_list_) {
    ship_list_ = ship_list(job_);
    for (const auto& e : ship_list_->errors)
      console_.message(fmt::format("flowrun: step '{}': {}", plan_.step, e));
  }
  n.shipping = true;
  console_.message(
      fmt::format("flowrun: step '{}': node{} ({}) does not share the workdir {}: shipping {} to it",
                  plan_.step, n.rank, printable(n.name), job_.step->workdir, ship_size_text(*ship_list_)));
  auto sender =
      std::make_unique<ShipSender>(n.conn, *ship_list_, [this, name = n.name](const std::string& why) {
        links_.fail(
            fmt::format("the step's inputs could not be shipped to node {}: {}", printable(name), why));
      });
  ShipSender& s = *sender;
  shipments_[n.conn.get()] = std::move(sender);
  s.start();
}

void NodeGathering::on_ship_ack(Node& n, const ShipAck& m) {
  if (!n.shipping) {
    links_.protocol_error(n, "unexpected ship_ack");
    return;
  }
  n.shipping = false;
  shipments_.erase(n.conn.get());
  if (!m.ok) {
    links_.fail(fmt::format("node {} could not take the step's inputs: {}", n.name, printable(m.error)));
    return;
  }
  n.shipped = true;
  maybe_ready();
}

void NodeGathering::start_preflight() {
  links_.move_to(Phase::checking);
  preflight_.start(nodes_.names());
}

void NodeGathering::on_preflight_id(Node& n, const PreflightId& m) {
  if (phase_ == Phase::checking && !preflight_.on_id(n.rank, m))
    links_.protocol_error(n, "malformed preflight_id");
}

void NodeGathering::on_preflight_done(Node& n, const PreflightDone& m) {
  if (phase_ != Phase::checking) return;
  const auto state = preflight_.on_done(n.rank, m);
  if (state == NodePreflight::State::failed)
    links_.fail(
        "the preflight check of its GPUs across the nodes failed (the report above); fix what it names, "
        "or set preflight: false");
  if (state == NodePreflight::State::passed) links_.move_to(Phase::ready);
}

}  // namespace flowrun::cluster
