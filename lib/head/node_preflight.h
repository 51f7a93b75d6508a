// A multi-node step's `preflight: true` (docs/multinode.md, "Preflight"):
// flowrun doctor's NCCL check across every node before any rank starts.
// Node 0's agent runs its check child, which makes the communicator's id;
// the head hands the id to the other nodes, whose check children join the
// same communicator (ncclCommInitRank), and every node reports what it
// found. The first node whose check fails stops the others' (a stop); the
// report names it, and the step is refused as one whose nodes never
// started. Internal to lib/head.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "flowrun/doctor.h"
#include "flowrun/messages.h"
#include "flowrun/plan.h"
#include "flowrun/supervisor.h"

namespace flowrun::cluster {

class NodePreflight {
 public:
  // How it reaches the nodes, by node rank.
  struct Links {
    std::function<void(int node, const Preflight&)> send;
    // A Stop with `reason` to the node's agent, when its connection is open.
    std::function<void(int node, const std::string& reason)> stop;
    std::function<bool(int node)> lost;
  };
  enum class State { checking, passed, failed };

  // The check of `plan`'s nodes; the report goes to `report_path`.
  NodePreflight(const Console& console, const StepPlan& plan, std::string report_path, Links links);

  // Says what is checked and sends node 0 its check (the nodes' host names
  // by node rank).
  void start(const std::vector<std::string>& names);
  // Node 0's check made the communicator's id: the others join it now.
  // False for an id that is not one (the node's protocol error).
  bool on_id(int node, const PreflightId& m);
  // A node's report. When every node has answered, the whole report is
  // written to report_path; passed: the console has its summary; failed:
  // the console has the report.
  State on_done(int node, const PreflightDone& m);

 private:
  std::string devices(int node_rank) const;
  void send(int node_rank, const std::string& nccl_id);

  const Console& console_;
  const StepPlan& plan_;
  std::string report_path_;
  Links links_;
  std::vector<std::string> names_;  // by node rank
  ClusterDoctorFacts facts_;        // what each node's check found
  std::vector<bool> answered_;      // by node rank: its preflight_done came (or never will)
  std::vector<bool> started_;       // by node rank: it was sent its preflight
  bool stopping_ = false;           // a node's check failed: the others were told to stop
};

}  // namespace flowrun::cluster
