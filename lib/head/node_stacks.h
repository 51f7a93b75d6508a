// The stacks of a multi-node step's ranks as the head gathers them: each
// node's agent takes its own ranks' stacks (all nodes at once) and sends
// them in one Stacks message, before its stop's signals (request 0) or for
// the head's TakeStacks (flowrun stacks, SIGQUIT: request 1, 2, ...). The
// head checks every rank against the plan, writes each one's stack.txt in
// its rank directory, and groups them all with group_stacks, as one host
// does. Internal to lib/head.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "flowrun/messages.h"
#include "flowrun/plan.h"
#include "flowrun/result.h"
#include "flowrun/stacks.h"

#include "node_table.h"

namespace flowrun::cluster {

class NodeStacks {
 public:
  // `publish`: a request's stacks are in, grouped, asked for at `requested_ns`.
  // `say`: a line for the console (py-spy missing on a node: its agent said
  // so on its own console, and the head says it once on its own).
  using Publish = std::function<void(const StackReport& report, std::int64_t requested_ns)>;
  using Say = std::function<void(const std::string& line)>;
  NodeStacks(boost::asio::io_context& io, const StepPlan& plan, const RunLayout& layout, Publish publish,
             Say say)
      : timer_(io), plan_(plan), layout_(layout), publish_(std::move(publish)), say_(std::move(say)) {}

  // A new attempt: no stop's stacks yet.
  void reset_stop() { stop_.clear(); }

  // On demand: asks every node of `nodes` that has not ended for its ranks'
  // stacks (TakeStacks) and publishes them once all answered, or after
  // `wait_s`. A request while one is out is answered by it. False: no node
  // to ask.
  bool ask(NodeTable& nodes, double wait_s);

  // Node `node` (named `name`) sent `m`. Returns what is wrong with it (a
  // rank that is not the node's, twice, or a request never made): a protocol
  // error. An answer to a request given up on is dropped.
  std::optional<std::string> take(int node, const std::string& name, const Stacks& m);

  // The stop's stacks of every node that sent them, grouped; nullopt: none.
  std::optional<StackReport> stop_report() const;

  // Node `node` will not answer (lost): its ranks' stacks are missing, `why`.
  void forget(int node, const std::string& why);
  // The step ends: a request still out is given up on.
  void cancel() { timer_.cancel(); }

 private:
  // The request's stacks, grouped, with a missing entry for each rank of a
  // node that did not answer (`why`), to `publish`; the request is over.
  void finish_request(const std::string& why);
  // Each rank of node `node` has no stack in this request, for `why`.
  void mark_missing(int node, const std::string& why);
  // Writes each rank's stack.txt and keeps its findings in `into`.
  void keep(const std::string& name, const Stacks& m, std::map<int, RankStack>& into);

  boost::asio::steady_timer timer_;  // a request given up on
  const StepPlan& plan_;
  const RunLayout& layout_;
  Publish publish_;
  Say say_;
  bool said_no_py_spy_ = false;
  std::map<int, RankStack> stop_;  // by rank
  std::string stop_source_;
  int next_request_ = 1;
  int request_ = 0;  // the request in progress, 0: none
  std::set<int> waiting_;
  std::map<int, RankStack> taken_;
  std::string taken_source_;
  std::int64_t requested_ns_ = 0;
};

}  // namespace flowrun::cluster
