#include "node_table.h"

#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "flowrun/messages.h"
#include "flowrun/util.h"

namespace flowrun::cluster {

namespace {

std::string plural(std::size_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

}  // namespace

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

NodeTable::NodeTable(std::size_t count) : nodes_(count), joined_flags_(count, false) {
  for (std::size_t i = 0; i < nodes_.size(); ++i) nodes_[i].rank = static_cast<int>(i);
}

Admission NodeTable::admit(const Joiner& j, const std::vector<int>& engine_nodes) const {
  // Asked once per joiner: nothing here may copy every node (4096 of them).
  return claim_node_rank(
      j.claim, joined_flags_, [this](int rank) { return nodes_[static_cast<std::size_t>(rank)].name; },
      engine_nodes);
}

bool NodeTable::join(int rank, const Joiner& j, std::shared_ptr<Connection> conn) {
  Node& n = nodes_[static_cast<std::size_t>(rank)];
  n.joined = true;
  joined_flags_[static_cast<std::size_t>(rank)] = true;
  n.name = printable(j.node);  // it is printed, and in the report
  n.peer_ip = j.ip;
  n.via = j.via;
  n.gpus = j.gpus;
  n.conn = std::move(conn);
  return ++joined_ == nodes_.size();
}

void NodeTable::say_bye(bool ok) {
  for (auto& n : nodes_) {
    if (n.conn && n.conn->is_open()) {
      n.conn->send(Bye{ok});
      n.conn->close_after_send();
    }
  }
}

void NodeTable::close_all() {
  for (auto& n : nodes_) {
    if (n.conn) n.conn->close();
  }
}

std::vector<std::string> NodeTable::names() const {
  std::vector<std::string> names;
  names.reserve(nodes_.size());
  for (const auto& n : nodes_) names.push_back(n.name);
  return names;
}

std::vector<std::pair<std::string, std::string>> NodeTable::via_names() const {
  std::vector<std::pair<std::string, std::string>> via_names;
  for (const auto& n : nodes_) via_names.emplace_back(n.via, n.name);
  return via_names;
}

std::vector<std::string> NodeTable::missing(const StepPlan& plan) const {
  std::vector<std::string> missing;
  for (const auto& n : nodes_) {
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
      missing.size(), plural(nodes_.size(), "node", "nodes"), seconds, fmt::join(missing, ", "), endpoint);
}

std::string NodeTable::lost_text(const Node& n, const std::string& why) const {
  return fmt::format("node {} (node rank {} of {}) lost: {}", n.name, n.rank, nodes_.size(), why);
}

std::string NodeTable::gpu_mismatches(const StepPlan& plan) const {
  std::vector<std::string> wrong;
  for (const auto& n : nodes_) {
    const int planned = plan.nodes[static_cast<std::size_t>(n.rank)].gpus_available;
    if (planned > 0 && n.gpus != planned)
      wrong.push_back(fmt::format("node {} has {}, the plan gives each node {}", n.name,
                                  plural(static_cast<std::size_t>(std::max(n.gpus, 0)), "GPU", "GPUs"),
                                  planned));
  }
  return fmt::format("{}", fmt::join(wrong, "; "));
}

bool NodeTable::any_gone() const {
  return std::any_of(nodes_.begin(), nodes_.end(),
                     [](const Node& n) { return n.lost || n.closed || n.signalled; });
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
