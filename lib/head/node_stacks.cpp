#include "node_stacks.h"

#include <chrono>
#include <fmt/format.h>
#include <vector>

#include "flowrun/clock.h"
#include "flowrun/files.h"
#include "flowrun/supervisor.h"

namespace flowrun::cluster {

namespace {

// Where the ranks' stacks came from, across nodes: "py-spy", "kernel", or
// "py-spy and kernel" when nodes differ.
void add_source(std::string& sources, const std::string& source) {
  if (source.empty() || sources.find(source) != std::string::npos) return;
  sources = sources.empty() ? source : sources + " and " + source;
}

std::vector<RankStack> values(const std::map<int, RankStack>& by_rank) {
  std::vector<RankStack> ranks;
  for (const auto& [rank, found] : by_rank) ranks.push_back(found);
  return ranks;
}

}  // namespace

std::optional<std::string> NodeStacks::take(int node, const std::string& name, const Stacks& m) {
  if (m.request < 0 || m.request >= next_request_)
    return fmt::format("stacks for request {}, which the head never made", m.request);
  std::set<int> seen;
  for (const StackEntry& e : m.ranks) {
    if (e.rank < 0 || e.rank >= plan_.world_size ||
        plan_.ranks[static_cast<std::size_t>(e.rank)].node != node)
      return fmt::format("stacks of rank {}, which does not run on node {}", e.rank, node);
    if (!seen.insert(e.rank).second) return fmt::format("stacks of rank {} twice", e.rank);
    if (e.dump.size() > kMaxStackDumpBytes + 1024)
      return fmt::format("a stack of rank {} of {} bytes, over the {} allowed", e.rank, e.dump.size(),
                         kMaxStackDumpBytes);
  }
  // An agent's stacks come from the kernel when it finds no py-spy.
  if (m.source == "kernel" && !said_no_py_spy_) {
    said_no_py_spy_ = true;
    say_(py_spy_missing_line("no py-spy on node " + name));
  }
  if (m.request == 0) {
    keep(name, m, stop_);
    add_source(stop_source_, m.source);
    return std::nullopt;
  }
  if (m.request != request_ || waiting_.erase(node) == 0) return std::nullopt;  // given up on, or said
  keep(name, m, taken_);
  add_source(taken_source_, m.source);
  if (waiting_.empty()) finish_request("");
  return std::nullopt;
}

bool NodeStacks::ask(NodeTable& nodes, double wait_s) {
  if (request_ > 0) return true;
  std::set<int> asked;
  for (const auto& n : nodes) {
    if (!n.done && !n.lost && !n.closed) asked.insert(n.rank);
  }
  if (asked.empty()) return false;
  request_ = next_request_++;
  waiting_ = asked;
  taken_.clear();
  taken_source_.clear();
  requested_ns_ = unix_now_ns();
  for (int rank : asked) nodes[static_cast<std::size_t>(rank)].conn->send(TakeStacks{request_});
  timer_.expires_after(steady_seconds(wait_s));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && request_ > 0) finish_request("its node did not answer in time");
  });
  return true;
}

void NodeStacks::keep(const std::string& name, const Stacks& m, std::map<int, RankStack>& into) {
  for (const StackEntry& e : m.ranks) {
    RankStack found;
    found.rank = e.rank;
    found.kernel = e.kernel;
    found.missing = e.missing;
    if (!e.dump.empty()) {
      found.stack = parse_py_spy_dump(e.dump);
      if (found.stack)
        found.dump = e.dump;
      else if (found.missing.empty())
        found.missing = "py-spy printed no stack";
    }
    const std::string looked = e.dump.empty() && !e.kernel.empty() ? "no py-spy on node " + name : "";
    try_write_file(layout_.rank_dir(plan_.step, e.rank) + "/stack.txt", stack_file_text(found, looked));
    into[e.rank] = std::move(found);
  }
}

std::optional<StackReport> NodeStacks::stop_report() const {
  if (stop_.empty()) return std::nullopt;
  return group_stacks(values(stop_), stop_source_);
}

void NodeStacks::mark_missing(int node, const std::string& why) {
  for (const RankPlan& r : plan_.ranks) {
    if (r.node == node) {
      taken_[r.rank].rank = r.rank;
      taken_[r.rank].missing = why;
    }
  }
}

void NodeStacks::forget(int node, const std::string& why) {
  if (request_ == 0 || waiting_.erase(node) == 0) return;
  mark_missing(node, why);
  if (waiting_.empty()) finish_request("");
}

void NodeStacks::finish_request(const std::string& why) {
  timer_.cancel();
  for (int node : waiting_) mark_missing(node, why);
  waiting_.clear();
  request_ = 0;
  publish_(group_stacks(values(taken_), taken_source_.empty() ? "py-spy" : taken_source_), requested_ns_);
}

}  // namespace flowrun::cluster
