// The stacks of a multi-node step's ranks as the head gathers them: each
// node's agent takes its own ranks' stacks (all nodes at once) and sends
// them in one Stacks message, before its stop's signals (request 0) or for
// the head's TakeStacks (flowrun stacks, SIGQUIT: request 1, 2, ...). The
// head checks every rank against the plan, writes each one's stack.txt in
// its rank directory, and groups them all with group_stacks, as one host
// does. Internal to lib/cluster.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "flowrun/messages.h"
#include "flowrun/plan.h"
#include "flowrun/result.h"
#include "flowrun/stacks.h"

namespace flowrun::cluster {

class NodeStacks {
 public:
  NodeStacks(const StepPlan& plan, const RunLayout& layout) : plan_(plan), layout_(layout) {}

  // A new attempt: no stop's stacks yet.
  void reset_stop() { stop_.clear(); }

  // Node `node` (named `name`) sent `m`. Returns what is wrong with it (a
  // rank that is not the node's, twice, or a request never made): a protocol
  // error. An answer to a request given up on is dropped.
  std::optional<std::string> take(int node, const std::string& name, const Stacks& m);

  // The stop's stacks of every node that sent them, grouped; nullopt: none.
  std::optional<StackReport> stop_report() const;

  // On demand: a request to the nodes `nodes` (node ranks), made at
  // `requested_ns`; returns its number for TakeStacks.
  int begin_request(std::set<int> nodes, std::int64_t requested_ns);
  bool pending() const { return request_ > 0 && !waiting_.empty(); }
  // Node `node` will not answer (lost): true when the request is then complete.
  bool forget(int node, const std::string& why);
  // Whether every node asked has answered (or been forgotten).
  bool complete() const { return request_ > 0 && waiting_.empty(); }
  // The request's stacks, grouped, with a missing entry for each rank of a
  // node that did not answer (`why`); the request is over.
  StackReport finish_request(const std::string& why);
  std::int64_t requested_ns() const { return requested_ns_; }

 private:
  // Writes each rank's stack.txt and keeps its findings in `into`.
  void keep(const std::string& name, const Stacks& m, std::map<int, RankStack>& into);

  const StepPlan& plan_;
  const RunLayout& layout_;
  std::map<int, RankStack> stop_;  // by rank
  std::string stop_source_;
  int next_request_ = 1;
  int request_ = 0;  // the request in progress, 0: none
  std::set<int> waiting_;
  std::set<int> asked_;
  std::map<int, RankStack> taken_;
  std::string taken_source_;
  std::int64_t requested_ns_ = 0;
};

}  // namespace flowrun::cluster
