// The nodes of a multi-node step as the head sees them, by node rank: who
// joined (its name, where from, its GPUs), the node rank a joiner gets, who
// has not joined, and the heartbeat rule that finds a silent node.
// Internal to lib/cluster.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "flowrun/plan.h"

#include "connection.h"
#include "listener.h"

namespace flowrun::cluster {

// One node of the step, by node rank, as the head sees it.
struct Node {
  int rank = 0;
  std::shared_ptr<Connection> conn;
  std::string name;     // the host name its agent reported
  std::string peer_ip;  // where it connected from
  std::string via;      // the head's address it reached (one of the listener's candidates)
  bool joined = false;
  bool ready = false;
  bool done = false;
  bool lost = false;
  bool closed = false;     // its connection ended after its done
  bool signalled = false;  // its agent was told to stop by a signal (Slurm's scancel, preemption)
  std::string address;     // node 0: MASTER_ADDR
  int port = 0;            // node 0: MASTER_PORT
  int gpus = -1;
};

// Why a node last heard from at `last_heard_ns` is lost at `now_ns` (both
// on the monotonic clock): silent for more than `timeout_s`
// (cluster.heartbeat_timeout). Nothing while it is within it. Pure.
std::optional<std::string> heartbeat_silence(std::int64_t now_ns, std::int64_t last_heard_ns,
                                             double timeout_s);

// Why a node whose connection closed before its done is lost: the head
// closed it (a frame that failed to open: `failed_authentication`), or its
// agent's end did, with `why` unless it is the plain close. Pure.
std::string connection_lost(bool failed_authentication, const std::string& why);

class NodeTable {
 public:
  explicit NodeTable(std::size_t count);

  std::size_t size() const { return nodes_.size(); }
  Node& operator[](std::size_t rank) { return nodes_[rank]; }
  const Node& operator[](std::size_t rank) const { return nodes_[rank]; }
  std::vector<Node>::iterator begin() { return nodes_.begin(); }
  std::vector<Node>::iterator end() { return nodes_.end(); }
  std::vector<Node>::const_iterator begin() const { return nodes_.begin(); }
  std::vector<Node>::const_iterator end() const { return nodes_.end(); }

  // The node rank an authenticated joiner gets (claim_node_rank), keeping
  // the ranks that `engine_nodes` hold for the engine's own agents.
  Admission admit(const Joiner& j, const std::vector<int>& engine_nodes) const;
  // Node `rank` joined as `j` over `conn`; true once every node has.
  bool join(int rank, const Joiner& j, std::shared_ptr<Connection> conn);

  std::vector<std::string> names() const;
  // Each node's (head address it reached, name), for the listener's note on fallbacks.
  std::vector<std::pair<std::string, std::string>> via_names() const;
  // The nodes that have not joined, for the join timeout's report: "node 1 (host)".
  std::vector<std::string> missing(const StepPlan& plan) const;
  // The join timeout's report after `seconds`: who did not join, and where
  // their agents should have reached the head (`endpoint`).
  std::string join_timeout(const StepPlan& plan, double seconds, const std::string& endpoint) const;
  // "node NAME (node rank R of N) lost: WHY".
  std::string lost_text(const Node& n, const std::string& why) const;
  // Nodes that do not have the GPUs the plan gave them, said in one line;
  // empty when every one has.
  std::string gpu_mismatches(const StepPlan& plan) const;
  // A node can take no further attempt: lost, closed after its done, or signalled.
  bool any_gone() const;

  // Bye{ok} to every node whose connection is open, which then closes.
  void say_bye(bool ok);
  // Closes every node's connection.
  void close_all();
  // `m` to every node whose connection is open, but for the lost ones with
  // `skip_lost`.
  template <class M>
  void tell(const M& m, bool skip_lost) {
    for (auto& n : nodes_) {
      if (n.conn && n.conn->is_open() && !(skip_lost && n.lost)) n.conn->send(m);
    }
  }

  // One heartbeat tick at `now_ns`: every joined node whose connection is
  // open gets a heartbeat when nothing else waits to go to it, and one
  // silent past `timeout_s` goes to `lost` with the reason instead (the
  // head's loss may end the step: `lost` returns false, and the tick stops
  // there). Returns false when the tick stopped.
  bool heartbeat(std::int64_t now_ns, double timeout_s,
                 const std::function<bool(Node&, const std::string& why)>& lost);

 private:
  std::vector<Node> nodes_;
  std::vector<bool> joined_flags_;  // nodes_[i].joined, as claim_node_rank takes it
  std::size_t joined_ = 0;
};

}  // namespace flowrun::cluster
