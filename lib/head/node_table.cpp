#include "node_table.h"

#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <iterator>

#include "flowrun/messages.h"
#include "flowrun/text.h"
#include "flowrun/util.h"

namespace flowrun::cluster {

namespace {}  // namespace

int free_node_rank(const std::vector<bool>& joined, const std::vector<int>& started, std::size_t from) {
  for (std::size_t i = from; i < joined.size(); ++i) {
    const int rank = static_cast<int>(i);
    if (!joined[i] && std::find(started.begin(), started.end(), rank) == started.end()) return rank;
  }
  return -1;
}

Admission claim_node_rank(int claim, const std::vector<bool>& joined,
                          const std::function<std::string(int)>& name_of, const std::vector<int>& started,
                          std::size_t from) {
  int rank = claim;
  if (rank >= static_cast<int>(joined.size()))
    return {-1, fmt::format("it asks for node rank {}, but the step has {}", rank,
                            plural(joined.size(), "node", "nodes"))};
  if (rank >= 0 && joined[static_cast<std::size_t>(rank)])
    return {-1, fmt::format("node rank {} has already joined (from {})", rank, name_of(rank))};
  if (rank < 0) rank = free_node_rank(joined, started, from);
  if (rank < 0) return {-1, "no node rank is left for it"};
  return {rank, {}};
}

double heartbeat_interval_s(double timeout_s) { return std::clamp(timeout_s / 4, 0.05, 5.0); }

std::optional<std::string> heartbeat_silence(std::int64_t now_ns, std::int64_t last_heard_ns,
                                             double timeout_s) {
  const double silent = static_cast<double>(now_ns - last_heard_ns) / 1e9;
  if (silent <= timeout_s) return std::nullopt;
  return fmt::format("no heartbeat for {:.1f} s (cluster.heartbeat_timeout: {:g} s)", silent, timeout_s);
}

std::string connection_lost(bool failed_authentication, const std::string& why) {
  if (failed_authentication) return "the head closed its connection: " + why;
  return "its agent's connection closed" +
         (why == "the connection closed" ? std::string() : " (" + why + ")");
}

NodeTable::NodeTable(std::size_t count, std::size_t spares, int min_nodes)
    : nodes_(count + spares),
      active_(count),
      joined_flags_(count + spares, false),
      max_(count),
      min_(min_nodes) {
  for (std::size_t i = 0; i < nodes_.size(); ++i) nodes_[i].rank = static_cast<int>(i);
}

int NodeTable::add_spare_seat() {
  Node& seat = nodes_.emplace_back();
  seat.rank = static_cast<int>(nodes_.size() - 1);
  joined_flags_.push_back(false);
  return seat.rank;
}

Admission NodeTable::admit(const Joiner& j, const std::vector<int>& engine_nodes, bool spares_only) const {
  // Asked once per joiner: nothing here may copy every node (4096 of them).
  auto name_of = [this](int rank) { return nodes_[static_cast<std::size_t>(rank)].name; };
  if (!spares_only) return claim_node_rank(j.claim, joined_flags_, name_of, engine_nodes, free_from_);
  // An elastic step's node that joins late waits in any free seat: the seats
  // were renumbered when the step started without it.
  if (elastic()) return claim_node_rank(-1, joined_flags_, name_of, {}, free_from_);
  if (j.claim >= 0 && j.claim < static_cast<int>(active_))
    return {-1, fmt::format("node rank {} has already joined (from {})", j.claim, name_of(j.claim))};
  std::vector<bool> taken = joined_flags_;  // flags, not nodes
  std::fill(taken.begin(), taken.begin() + static_cast<std::ptrdiff_t>(active_), true);
  return claim_node_rank(j.claim, taken, name_of, engine_nodes, std::max(free_from_, active_));
}

bool NodeTable::join(int seat, const Joiner& j, std::shared_ptr<NodeLink> conn) {
  Node& n = nodes_[static_cast<std::size_t>(seat)];
  n = Node{};  // a seat reseat() freed may have held a retired node
  n.rank = seat;
  n.joined = true;
  joined_flags_[static_cast<std::size_t>(seat)] = true;
  while (free_from_ < joined_flags_.size() && joined_flags_[free_from_]) ++free_from_;
  n.name = printable(j.node);  // it is printed, and in the report
  n.peer_ip = j.ip;
  n.via = j.via;
  n.gpus = j.gpus;
  n.stays = j.stays;
  n.reach_address = j.address;
  n.reach_port = j.reach_port;
  n.conn = std::move(conn);
  if (is_spare_seat(seat)) return false;
  return ++joined_ == active_;
}

namespace {

bool waits(const Node& n, int gpus) {
  return n.joined && !n.lost && !n.retired && !n.closed && !n.signalled && n.conn && n.conn->is_open() &&
         (gpus < 0 || n.gpus == gpus);
}

}  // namespace

std::size_t NodeTable::spares_waiting(int gpus) const {
  return static_cast<std::size_t>(std::count_if(nodes_.begin() + static_cast<std::ptrdiff_t>(active_),
                                                nodes_.end(),
                                                [gpus](const Node& n) { return waits(n, gpus); }));
}

std::vector<int> NodeTable::replaceable() const {
  std::vector<int> ranks;
  for (const auto& n : *this) {
    if ((n.lost || n.closed) && !n.signalled) ranks.push_back(n.rank);
  }
  return ranks;
}

bool NodeTable::spares_cover(int gpus) const {
  if (seats() == size()) return false;
  if (std::any_of(begin(), end(), [](const Node& n) { return n.signalled; })) return false;
  const std::size_t gone = replaceable().size();
  return gone > 0 && gone <= spares_waiting(gpus);
}

int NodeTable::unpromised_spare(int gpus) const {
  for (std::size_t seat = active_; seat < nodes_.size(); ++seat)
    if (waits(nodes_[seat], gpus) && nodes_[seat].promised < 0) return static_cast<int>(seat);
  return -1;
}

int NodeTable::replace(int rank, int gpus, bool close) {
  // The spare promised this rank, else one promised none, else any.
  std::size_t seat = nodes_.size();
  for (const auto taker : {rank, -1, -2}) {
    for (std::size_t s = active_; s < nodes_.size() && seat == nodes_.size(); ++s)
      if (waits(nodes_[s], gpus) && (taker == -2 || nodes_[s].promised == taker)) seat = s;
  }
  if (seat < nodes_.size()) {
    std::swap(nodes_[static_cast<std::size_t>(rank)], nodes_[seat]);
    Node& spare = nodes_[static_cast<std::size_t>(rank)];
    spare.rank = rank;
    spare.promised = -1;
    spare.ready = spare.done = false;
    Node& gone = nodes_[seat];
    gone.rank = static_cast<int>(seat);
    gone.retired = true;
    if (gone.conn && close) gone.conn->close();
    return static_cast<int>(seat);
  }
  return -1;
}

namespace {

bool gone(const Node& n) { return !n.joined || n.lost || n.closed || n.signalled || n.retired; }

}  // namespace

std::size_t NodeTable::usable() const {
  const auto step_nodes =
      static_cast<std::size_t>(std::count_if(begin(), end(), [](const Node& n) { return !gone(n); }));
  return std::min(max_, step_nodes + spares_waiting(-1));
}

NodeTable::Reseated NodeTable::reseat() {
  Reseated change;
  std::vector<Node> taken, rest;
  for (std::size_t seat = 0; seat < nodes_.size(); ++seat) {
    Node& n = nodes_[seat];
    const bool step_node = seat < active_;
    const bool usable = step_node ? !gone(n) : waits(n, -1);
    if (usable && taken.size() < max_) {
      if (!step_node) change.added.push_back(n.name);
      n.ready = n.done = false;
      taken.push_back(std::move(n));
      continue;
    }
    if (step_node && n.joined) {  // gone: retired, and its seat free for a node that joins later
      change.dropped.push_back(n.name);
      n.retired = true;
      if (n.conn) n.conn->close();  // and its handlers, which name its seat, let go
      retired_.push_back(std::move(n));
      rest.emplace_back();
      continue;
    }
    rest.push_back(std::move(n));
  }
  active_ = taken.size();
  joined_ = active_;
  nodes_.assign(std::make_move_iterator(taken.begin()), std::make_move_iterator(taken.end()));
  for (auto& n : rest) nodes_.push_back(std::move(n));
  for (std::size_t seat = 0; seat < nodes_.size(); ++seat) {
    nodes_[seat].rank = static_cast<int>(seat);
    joined_flags_[seat] = nodes_[seat].joined;
  }
  free_from_ = 0;
  while (free_from_ < joined_flags_.size() && joined_flags_[free_from_]) ++free_from_;
  return change;
}

void NodeTable::say_bye(bool ok, bool keep_stayers) {
  for (auto& n : nodes_) {
    if (!n.conn || !n.conn->is_open()) continue;
    if (keep_stayers && n.stays) {
      n.conn->send(Bye{ok, true, -1});
      continue;
    }
    n.conn->send(Bye{ok});
    n.conn->close_after_send();
  }
}

void NodeTable::hand_back(const std::function<void(const std::shared_ptr<NodeLink>&)>& take) {
  for (auto& n : nodes_) {
    if (!n.stays || !n.conn || !n.conn->is_open()) continue;
    take(n.conn);
    n.conn.reset();
  }
}

void NodeTable::close_all() {
  for (auto& n : nodes_) {
    if (n.conn) n.conn->close();
  }
}

std::vector<std::string> NodeTable::names() const {
  std::vector<std::string> names;
  names.reserve(active_);
  for (const auto& n : *this) names.push_back(n.name);
  return names;
}

std::vector<std::pair<std::string, std::string>> NodeTable::via_names() const {
  std::vector<std::pair<std::string, std::string>> via_names;
  for (const auto& n : *this) via_names.emplace_back(n.via, n.name);
  return via_names;
}

std::vector<std::string> NodeTable::missing(const StepPlan& plan) const {
  std::vector<std::string> missing;
  for (const auto& n : *this) {
    if (n.joined) continue;
    const auto& host = plan.nodes[static_cast<std::size_t>(n.rank)].host;
    missing.push_back(host.empty() ? fmt::format("node {}", n.rank)
                                   : fmt::format("node {} ({})", n.rank, host));
  }
  return missing;
}

std::string NodeTable::join_timeout(const StepPlan& plan, double seconds, const std::string& endpoint) const {
  const std::vector<std::string> missing = this->missing(plan);
  return fmt::format(
      "{} of {} did not join within {:g} s: {}; check that 'flowrun agent' can start there and reach {} "
      "(cluster.join_timeout)",
      missing.size(), plural(active_, "node", "nodes"), seconds, fmt::join(missing, ", "), endpoint);
}

std::string NodeTable::lost_text(const Node& n, const std::string& why) const {
  if (is_spare_seat(n.rank))
    return fmt::format("{} node {} lost: {}", elastic() ? "waiting" : "spare", n.name, why);
  return fmt::format("node {} (node rank {} of {}) lost: {}", n.name, n.rank, active_, why);
}

std::string NodeTable::gpu_mismatches(const StepPlan& plan) const {
  std::vector<std::string> wrong;
  for (const auto& n : *this) {
    const int planned = plan.nodes[static_cast<std::size_t>(n.rank)].gpus_available;
    if (planned > 0 && n.gpus != planned)
      wrong.push_back(fmt::format("node {} has {}, the plan gives each node {}", n.name,
                                  plural(static_cast<std::size_t>(std::max(n.gpus, 0)), "GPU", "GPUs"),
                                  planned));
  }
  return fmt::format("{}", fmt::join(wrong, "; "));
}

bool NodeTable::any_gone() const {
  return std::any_of(begin(), end(), [](const Node& n) { return n.lost || n.closed || n.signalled; });
}

bool NodeTable::any_hanging() const {
  const auto gone = [](const Node& n) { return !n.left_out && (n.lost || n.closed || n.signalled); };
  const auto retired = [](const Node& n) { return !n.left_out && n.retired; };
  return std::any_of(begin(), end(), gone) || std::any_of(nodes_.begin(), nodes_.end(), retired) ||
         std::any_of(retired_.begin(), retired_.end(), [](const Node& n) { return !n.left_out; });
}

bool NodeTable::heartbeat(std::int64_t now_ns, double timeout_s,
                          const std::function<bool(Node&, const std::string& why)>& lost) {
  for (auto& n : nodes_) {
    if (!n.joined || n.lost || !n.conn || !n.conn->is_open()) continue;
    if (const auto why = heartbeat_silence(now_ns, n.conn->last_heard_ns(), timeout_s)) {
      if (!lost(n, *why)) return false;
      continue;
    }
    if (n.conn->queued() == 0) n.conn->send(Heartbeat{});
  }
  return true;
}

}  // namespace flowrun::cluster
