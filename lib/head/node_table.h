// The nodes of a multi-node step as the head sees them, by node rank: who
// joined (its name, where from, its GPUs), the node rank a joiner gets, who
// has not joined, and the heartbeat rule that finds a silent node.
// Internal to lib/head.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "flowrun/node_link.h"
#include "flowrun/plan.h"

namespace flowrun::cluster {

// The node rank the head gives an agent that asks for none: the lowest one
// not yet joined (`joined[i]`) and not kept for an agent that an engine starts
// with --node-rank (`started`, the launches' EngineLaunch::node: ssh's every
// node, flowrun run's rendezvous node 0); -1 when none is left. Looks from
// rank `from` on: the caller knows that none below it is free.
int free_node_rank(const std::vector<bool>& joined, const std::vector<int>& started, std::size_t from = 0);

// The node rank for a joiner that claims `claim` (-1: any) among nodes of
// which `joined[i]` have joined (node i as `name_of(i)`), keeping the ranks that
// `started` holds for the engine's agents (free_node_rank, from `from`). Pure.
Admission claim_node_rank(int claim, const std::vector<bool>& joined,
                          const std::function<std::string(int)>& name_of, const std::vector<int>& started,
                          std::size_t from = 0);

// One node of the step, by node rank, as the head sees it.
struct Node {
  int rank = 0;
  std::shared_ptr<NodeLink> conn;
  std::string name;     // the host name its agent reported
  std::string peer_ip;  // where it connected from
  std::string via;      // the head's address it reached (one of the listener's candidates)
  bool joined = false;
  bool ready = false;
  bool done = false;
  bool lost = false;
  bool closed = false;     // its connection ended after its done
  bool signalled = false;  // its agent was told to stop by a signal (Slurm's scancel, preemption)
  bool retired = false;    // lost, and a spare took its place: never used again in this run
  bool shipping = false;   // the step's inputs are on their way to it (ship_sender.h)
  bool shipped = false;    // they reached it whole: the step's restarts need no other copy
  std::string address;     // node 0: MASTER_ADDR
  int port = 0;            // node 0: MASTER_PORT
  int gpus = -1;
  bool stays = false;         // a gang's agent (Joiner::stays)
  std::string reach_address;  // where the other nodes' checks reach it (Joiner::address)
  int reach_port = 0;         // and its port there (Joiner::reach_port); 0: none
  bool check_failed = false;  // its node check failed (Ready::checks): it is to be left out
  bool left_out = false;      // left out for its check and told bye: its agent ends by itself
  bool assigned = false;      // it had an assign in this step (a spare: once told its seat)
  int promised = -1;          // a spare told it takes this node rank at the restart (-1: none)
};

// How often the head and an agent send heartbeats for `timeout_s`
// (cluster.heartbeat_timeout): a quarter of it, within 50 ms and 5 s. The
// listener's welcome tells the agents. Pure.
double heartbeat_interval_s(double timeout_s);

// Why a node last heard from at `last_heard_ns` is lost at `now_ns` (both
// on the monotonic clock): silent for more than `timeout_s`
// (cluster.heartbeat_timeout). Nothing while it is within it. Pure.
std::optional<std::string> heartbeat_silence(std::int64_t now_ns, std::int64_t last_heard_ns,
                                             double timeout_s);

// Why a node whose connection closed before its done is lost: the head
// closed it (a frame that failed to open: `failed_authentication`), or its
// agent's end did, with `why` unless it is the plain close. Pure.
std::string connection_lost(bool failed_authentication, const std::string& why);

// The table holds `count` nodes, by node rank, and after them `spares`
// seats (parallel.spare_nodes): a spare's agent joins there and waits with
// no rank until replace() moves it to a lost node's rank. Iterating the
// table, size() and any_gone() see the nodes alone; every seat is indexed
// by operator[] and gets heartbeats, bye and close.
//
// An elastic table (parallel.nodes: "MIN:MAX", `min_nodes` > 0) has MAX
// seats: the step may start with fewer, and after a loss go on with fewer,
// while MIN remain; reseat() gathers the nodes of the next attempt into
// seats 0 and up, and the seats after them take nodes that join late.
class NodeTable {
 public:
  explicit NodeTable(std::size_t count, std::size_t spares = 0, int min_nodes = 0);

  std::size_t size() const { return active_; }
  std::size_t seats() const { return nodes_.size(); }  // nodes and spares
  bool is_spare_seat(int seat) const { return seat >= static_cast<int>(active_); }
  Node& operator[](std::size_t seat) { return nodes_[seat]; }
  const Node& operator[](std::size_t seat) const { return nodes_[seat]; }
  std::deque<Node>::iterator begin() { return nodes_.begin(); }
  std::deque<Node>::iterator end() { return nodes_.begin() + static_cast<std::ptrdiff_t>(active_); }
  std::deque<Node>::const_iterator begin() const { return nodes_.begin(); }
  std::deque<Node>::const_iterator end() const {
    return nodes_.begin() + static_cast<std::ptrdiff_t>(active_);
  }

  // The seat an authenticated joiner gets (claim_node_rank), keeping the
  // seats that `engine_nodes` hold for the engine's own agents. With
  // `spares_only` (every node has joined), only a spare's seat.
  Admission admit(const Joiner& j, const std::vector<int>& engine_nodes, bool spares_only = false) const;
  // Seat `seat` joined as `j` over `conn`; true when it was the last of
  // the nodes (not the spares) to join.
  bool join(int seat, const Joiner& j, std::shared_ptr<NodeLink> conn);

  // The spares that wait, ready to take a lost node's place: joined, not
  // lost, connected and with `gpus` GPUs (-1: any).
  std::size_t spares_waiting(int gpus) const;
  // The nodes that a spare could replace: lost, or closed after their done
  // (not signalled: a preempted job is not a node's fault).
  std::vector<int> replaceable() const;
  // Whether a spare (with `gpus` GPUs, -1: any) waits for every node that
  // is gone, and one is: then a restart can take them. Never when a node
  // was signalled (a preemption: the job is ending, spares or not).
  bool spares_cover(int gpus) const;
  // The first spare seat whose node waits (with `gpus` GPUs, -1: any) and
  // was promised no node rank (Node::promised); -1 when there is none.
  int unpromised_spare(int gpus) const;
  // Node rank `rank`'s place taken by the spare that waits (with `gpus`
  // GPUs, -1: any) and was promised it, else by the first that waits and
  // was promised none, else by the first that waits: the spare moves to
  // `rank` ready for an attempt, the node it replaces to the spare's seat,
  // retired, its connection closed unless `close` is false. Returns that
  // seat, or -1 when no spare waits.
  int replace(int rank, int gpus, bool close = true);

  // One more spare seat, after the others, for a node an engine brings up
  // in the place of one left out (AgentEngine::replacement); returns it.
  int add_spare_seat();

  // ---- elastic (min_nodes > 0) ---------------------------------------------
  bool elastic() const { return min_ > 0; }
  int min_nodes() const { return min_; }
  // Nodes of the step that joined (not the spares' seats).
  std::size_t joined() const { return joined_; }
  // Nodes an attempt could run on now: those of the step that are not gone,
  // and the nodes that joined later and wait; at most the table's MAX.
  std::size_t usable() const;
  // The next attempt's nodes: the usable ones, in their order (the step's
  // nodes first, then those that waited), in seats 0 and up; the others
  // after them (a gone node retired, never used again). Each node's
  // `rank` becomes its new seat. Returns the names of the step's nodes left
  // out (gone) and of the waiting nodes taken in.
  struct Reseated {
    std::vector<std::string> dropped, added;
  };
  Reseated reseat();

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
  // A node gone or retired other than for its check: the engine's process
  // serving it (srun, ssh) may hang on its link and is to be stopped.
  bool any_hanging() const;

  // Bye{ok} to every node whose connection is open, which then closes; with
  // `keep_stayers`, a node whose agent stays hears that the head keeps it
  // instead, and its connection stays open for hand_back.
  void say_bye(bool ok, bool keep_stayers = false);
  // Gives `take` the open connection of every node whose agent stays, and
  // forgets it: the step no longer closes or hears it.
  void hand_back(const std::function<void(const std::shared_ptr<NodeLink>&)>& take);
  // Closes every node's connection.
  void close_all();
  // `m` to every node (not the spares) whose connection is open, but for the lost ones with
  // `skip_lost`.
  template <class M>
  void tell(const M& m, bool skip_lost) {
    for (auto& n : *this) {
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
  // The nodes, then the spares' seats. A deque: a seat added (add_spare_seat)
  // moves no node that a caller holds.
  std::deque<Node> nodes_;
  std::size_t active_ = 0;          // how many of nodes_ are the step's nodes
  std::vector<bool> joined_flags_;  // nodes_[i].joined, as claim_node_rank takes it
  // No seat below it is free: each joiner that asks for no rank is seated
  // from here, not from seat 0 (16,384 joiners: 134 million looks).
  std::size_t free_from_ = 0;
  std::size_t joined_ = 0;     // of the nodes, not the spares
  std::vector<Node> retired_;  // an elastic step's nodes that reseat() left out
  std::size_t max_ = 0;        // the step's nodes at most: the plan's
  int min_ = 0;                // parallel.nodes "MIN:MAX": MIN; 0: a fixed count
};

}  // namespace flowrun::cluster
