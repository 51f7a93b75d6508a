// The phases of a multi-node step before its ranks start, as the head runs
// them: the agents join (each gets its node rank), every node is checked
// (its GPUs) and assigned the attempt, each reports ready (node 0 with the
// rendezvous port), and with preflight: true the NCCL check runs across
// them. Internal to lib/head.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flowrun/messages.h"
#include "flowrun/node_link.h"
#include "flowrun/remote_group.h"
#include "flowrun/result.h"

#include "engine_watch.h"
#include "node_preflight.h"
#include "node_table.h"
#include "ship_sender.h"

namespace flowrun::cluster {

// ready: every node is ready for an attempt; between: an attempt ended,
// and the step runner decides what comes next.
enum class Phase { joining, assigning, checking, ready, running, between, finished };

class NodeGathering {
 public:
  struct Links {
    // Node `rank` joined over `conn`: what it sends goes to the head.
    std::function<void(int rank, const std::shared_ptr<NodeLink>& conn)> joined;
    // The step fails before its ranks start, for `why`.
    std::function<void(const std::string& why)> fail;
    std::function<void(Node& n, const std::string& what)> protocol_error;
    // An elastic step starts with fewer nodes than its MAX, for `why`: the
    // head gathers them into node ranks 0 and up (NodeTable::reseat).
    std::function<void(const std::string& why)> start_fewer;
    // The head's phase moves on to `next` (the head alone writes it).
    std::function<void(Phase next)> move_to;
    // A spare that waits takes the seat of node rank `rank`, which failed its
    // check (NodeSeats::take_spare); false when none waits.
    std::function<bool(int rank)> take_spare;
    // Brings up one new node's agent in spare seat `seat`, on no host of
    // `exclude`, for a node left out with no spare (AgentEngine::replacement):
    // the command, for the console, or nullopt when the engine cannot.
    // Empty where it never can.
    std::function<std::optional<std::string>(int seat, const std::vector<std::string>& exclude)> ask_for_node;
  };
  // `phase` is the head's, which this reads, and asks the head to move on
  // from joining to ready (Links::move_to); `attempt` and the marker are the
  // head's too, read at each assign.
  NodeGathering(boost::asio::io_context& io, const Console& console, const NodeStep& job, NodeTable& nodes,
                NodeDoor& door, EngineWatch& engines, const Phase& phase, const int& attempt,
                const std::string& marker_path, const std::string& marker_text, Links links);

  // An agent that proved the token: the node rank it gets, or why not.
  Admission admit(const Joiner& j);
  void on_joined(int rank, const Joiner& j, const std::shared_ptr<NodeLink>& conn);

  // The join timeout: the step fails when not every node joined within
  // `seconds`; an elastic step starts with those that did, if MIN did.
  void start_join_timer(double seconds);
  void cancel_join_timer() {
    join_timer_.cancel();
    last_call_timer_.cancel();
    spare_timer_.cancel();
    check_timer_.cancel();
  }
  // Output of the engine's process `index`: srun waiting for resources
  // stops the join timeout, which counts from the grant.
  void on_engine_output(std::size_t index, std::string_view data);
  // The engine's process `index` ended as `record` says: before the agents
  // it serves joined, the step fails; while the nodes take the attempt or
  // run it, the note the head keeps; nothing once the step finished.
  std::optional<std::string> on_engine_exit(std::size_t index, const WorkerRecord& record);

  // Every node again, for the attempt the head is at (a spare told early,
  // seat_early, has its assign and is not sent it again).
  void assign();
  // Node rank `rank` of the running attempt is lost: the first spare that
  // waits (with `gpus` GPUs, -1: any) and was promised no rank is told at
  // once that it takes `rank` in attempt `next` (its assign), so it checks
  // itself and answers while the other nodes stop; the restart then takes
  // that spare for `rank` (NodeTable::replace). Nothing when no spare waits.
  void seat_early(int rank, int next, int gpus);
  void on_ready(Node& n, const Ready& m);
  // The node's answer to its shipment of the step's inputs.
  void on_ship_ack(Node& n, const ShipAck& m);

  // The nodes' verdicts (parallel.node_checks) since the last call, for the
  // attempt record about to be made.
  std::vector<NodeVerdict> take_verdicts() { return std::exchange(verdicts_, {}); }

  // preflight: true (node_preflight.h), once every node is ready.
  void start_preflight();
  void on_preflight_id(Node& n, const PreflightId& m);
  void on_preflight_done(Node& n, const PreflightDone& m);

 private:
  void all_joined();
  // An elastic step: starts with the nodes that joined when MIN have and no
  // more can come (`not_coming_`) or the last call ran out.
  void maybe_start_fewer();
  void start_fewer(const std::string& why);
  std::string joined_of() const;
  NodePreflight::Links preflight_links();
  // What a node that answered the assign with `workdir_ok` needs: nothing,
  // a shipment, or a refusal (cluster.shared_workdir, NodeStep::ship_when_not_shared).
  enum class Workdir { shared, ship, refuse };
  Workdir workdir_for(const Node& n, bool workdir_ok) const;
  void ship_to(Node& n);
  // Every node answered the assign and has its inputs: the head moves on.
  void maybe_ready();
  // Node checks: keeps `n`'s verdict from `m`.
  void keep_verdict(Node& n, const Ready& m);
  // The verdicts that came since the last round, judged: torch_import
  // counts only where some node's Python imports torch.
  void judge_round();
  // Every node answered: those whose check failed are left out before any
  // rank starts (a spare takes the seat, an elastic step starts with fewer,
  // else the step fails). True when that is under way or failed the step.
  bool leave_out_failed();
  // A spare seat that has not joined yet may still bring one: `rank` waits
  // for it, until cluster.join_timeout.
  void await_spare(int rank, const std::string& failed);
  // No spare comes for node rank `rank` (`failed`): a new node is asked of
  // the engine in a seat of its own, on none of the step's hosts. False when
  // the engine cannot.
  bool ask_for_node(int rank, const std::string& failed);
  void arm_spare_timer();
  void seat_spare(int rank);
  // The assign of node rank `rank` for the attempt the head is at (or for
  // `attempt`), with node 0's reach for the node checks of every other node.
  Assign assign_for(int rank) const { return assign_for(rank, attempt_); }
  Assign assign_for(int rank, int attempt) const;
  // Node checks: a node that has not answered its assign within
  // cluster.join_timeout failed its check (something there hangs).
  void arm_check_timer();
  void check_overdue(double seconds);
  // The run's excluded_nodes file: every node left out, as one Slurm host list.
  void write_excluded();

  const Console& console_;
  const NodeStep& job_;
  const StepPlan& plan_;
  NodeTable& nodes_;
  NodeDoor& door_;
  EngineWatch& engines_;
  const Phase& phase_;
  const int& attempt_;
  const std::string& marker_path_;
  const std::string& marker_text_;
  Links links_;
  boost::asio::steady_timer join_timer_;
  boost::asio::steady_timer last_call_timer_;  // nodes: "MIN:MAX", once MIN joined
  bool last_call_ = false;
  std::size_t not_coming_ = 0;  // nodes whose srun or ssh ended before they joined
  std::vector<std::string> workdir_errors_;
  std::optional<ShipList> ship_list_;  // listed at the first shipment, once for the step
  // The spares told early of a seat (seat_early), by connection, until the
  // restart's assign(): the assign each got, and its answer once it came.
  struct Early {
    int rank = -1;
    Assign assign;
    std::optional<Ready> ready;
  };
  std::map<const NodeLink*, Early> early_;
  // Those whose check reached for a node 0 lost since (Early::assign).
  std::set<const NodeLink*> old_node0_;
  std::map<const NodeLink*, std::unique_ptr<ShipSender>> shipments_;
  int ready_ = 0;
  // Reset with each assign: no node below unshipped_ is still shipping once
  // every node is ready (maybe_ready); the lowest seat whose node runs on the
  // head's own host, -1 for none, once looked up (workdir_for).
  std::size_t unshipped_ = 0;
  mutable std::optional<int> own_host_seat_;
  NodePreflight preflight_;                         // preflight: true
  std::vector<NodeVerdict> verdicts_;               // since take_verdicts
  std::vector<std::string> excluded_;               // the nodes left out, for the excluded_nodes file
  std::vector<std::pair<int, std::size_t>> round_;  // node rank, index in verdicts_: not judged yet
  bool torch_imports_ = false;                      // some node's Python imports torch
  std::vector<std::pair<int, std::string>> awaiting_spare_;  // node ranks to fill, and the failed node
  std::set<const NodeLink*> judged_;                         // the agents whose verdict came
  std::set<int> asked_seats_;  // spare seats of nodes asked of the engine (ask_for_node)
  boost::asio::steady_timer spare_timer_;
  boost::asio::steady_timer check_timer_;
};

}  // namespace flowrun::cluster
