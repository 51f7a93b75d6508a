// Who takes which node rank between a multi-node step's attempts: a spare
// that waits takes a lost node's place (parallel.spare_nodes), and an
// elastic step (parallel.nodes: "MIN:MAX") starts on, or goes on with, the
// nodes there, its plan renumbered over them. The head asks before an
// attempt; what changed goes into that attempt's record and the notes.
// Internal to lib/head.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "flowrun/plan.h"
#include "flowrun/result.h"
#include "flowrun/supervisor.h"

#include "node_table.h"

namespace flowrun::cluster {

class NodeSeats {
 public:
  struct Links {
    std::function<void(int seat)> bind;                // what seat's connection sends goes to the node there
    std::function<void(const std::string& why)> fail;  // the step fails before the attempt starts
    std::function<void(int nodes)> replan;             // the head's plan becomes full's on `nodes` nodes
  };
  // `plan` is the head's plan of the attempt, which an elastic step's
  // reseat asks the head to replace with `full`'s on the nodes there
  // (Links::replan); `notes` the head's.
  NodeSeats(NodeTable& nodes, const StepPlan& full, const StepPlan& plan, const Console& console,
            std::vector<std::string>& notes, Links links);

  // The GPUs a spare must have to take a node's place (-1: any).
  int spare_gpus() const;
  // A spare waits for every node that is gone.
  bool spares_cover() const { return nodes_.spares_cover(spare_gpus()); }
  // An elastic step can go on without the nodes that are gone: MIN nodes
  // are left (or wait to join), and none was signalled (a preemption ends
  // the job, nodes or not).
  bool goes_on_elastic() const;
  // "nodes: \"1:2\"".
  std::string range_text() const;

  // What the nodes that are gone leave the step, asked in this one place:
  // whether a node is gone, a spare waits for every one of them, an elastic
  // step goes on with the nodes left, and the workers a restart would start.
  struct Outlook {
    bool node_gone = false;
    bool spare_ready = false;
    std::optional<int> elastic_nodes;
    int next_world_size = 0;  // an elastic step's; 0: the plan's
    // A restart can cover the loss: a spare, or the elastic range.
    bool covered() const { return spare_ready || elastic_nodes.has_value(); }
  };
  Outlook outlook() const;

  // Before a restart: spares take the gone nodes' places, or an elastic
  // step's nodes are gathered anew. False when the step cannot go on (then
  // `fail` was called).
  bool before_restart();
  // Before the first attempt: a spare that waits takes the seat of node rank
  // `rank`, whose node failed its check (its connection stays open for its
  // bye). False when none waits.
  bool take_spare(int rank);
  // Before an elastic step's first attempt, with fewer nodes than MAX there.
  void start_fewer(const std::string& why);
  // What changed before the attempt about to end: into its record, once.
  void record(AttemptRecord& attempt);

 private:
  bool take_spares();
  bool reseat_elastic();
  void take_usable_nodes();
  void say(const std::string& text);

  NodeTable& nodes_;
  const StepPlan& full_;
  const StepPlan& plan_;
  const Console& console_;
  std::vector<std::string>& notes_;
  Links links_;
  std::vector<NodeReplacement> replacements_;  // the spares that took a place for the attempt about to start
  std::vector<std::string> dropped_, added_;   // an elastic step's nodes left out and taken in, likewise
};

}  // namespace flowrun::cluster
