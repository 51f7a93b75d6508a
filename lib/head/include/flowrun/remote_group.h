// Multi-node: a parallel step whose plan spans several nodes.
//
// The flowrun the user started is the head. For such a step it listens on
// the address the plan chose, starts one `flowrun agent` per node through
// the cluster's engine (srun, ssh, or the user by hand), and runs the step
// as one job over the control plane (docs/multinode.md):
//
//   join      every agent connects and proves it holds the run's token;
//             the head waits for all of them (cluster.join_timeout)
//   assign    each agent checks the step's workdir is the head's (a marker
//             file) and node 0's agent picks MASTER_PORT
//   start     every node starts its ranks at once; their output streams to
//             the head's console and per-rank files
//   done      each agent uploads its ranks' error files and collected
//             outputs, checksummed, and says done; the step runner
//             restarts the group (assign again) or the head sends bye,
//             and the join runs here
//
// A worker failing anywhere, a node whose connection drops or whose
// heartbeats stop, the step's timeout and Ctrl-C all stop every node, and
// the report names the culprit rank and its node.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flowrun/plan.h"
#include "flowrun/result.h"
#include "flowrun/supervisor.h"
#include "flowrun/worker_group.h"

namespace flowrun {

namespace cluster {
struct NodeReach;  // lib/head/node_reach.h
}

struct NodeStep {
  const Spec* spec = nullptr;
  const Step* step = nullptr;
  const StepPlan* plan = nullptr;
  LaunchContext ctx;                                            // run id, layout, flowrun's environment
  std::vector<std::string> argv;                                // the step's command, templates filled in
  GroupOptions group;                                           // step name, grace, style, time left
  std::function<ConsoleShows(int rank, int local_rank)> shows;  // a rank's streams on the console
  int fake_gpus = -1;                                           // --fake-gpus, passed on to every agent
  std::string flowrun_path;                                     // this binary, the same path on every node
  // A node that does not see the step's workdir (the marker check) gets
  // the step's inputs shipped to it under cluster.shared_workdir: auto,
  // where the nodes are started by their platform and share nothing (a
  // gang); otherwise auto refuses such a node, as shared_workdir: true does.
  bool ship_when_not_shared = false;
  // Starts the agents in place of the engine's processes (srun, ssh; none
  // for manual): a test's agents in this process. Called once the head
  // listens, with the --rdzv-endpoint they dial and the run's token.
  std::function<void(const std::string& endpoint, const std::string& token)> start_agents;
};

// The head: a WorkerGroup whose ranks run on the nodes' agents. The agents
// join once and stay connected between the step's attempts; the step
// runner decides whether another attempt starts (a restart assigns every
// node again), and close() ends the step on every node.
class RemoteGroup : public WorkerGroup {
 public:
  // Listens and starts the engine's processes that bring up the agents.
  // Throws Error when the step cannot even begin (no address to listen on,
  // the marker cannot be written).
  RemoteGroup(Supervisor& supervisor, const Console& console, const NodeStep& step);
  // The same over `reach` in place of the sockets and the engine: the
  // head's tests, whose nodes are scripted links.
  RemoteGroup(Supervisor& supervisor, const Console& console, const NodeStep& step, cluster::NodeReach reach);
  ~RemoteGroup() override;
  RemoteGroup(const RemoteGroup&) = delete;
  RemoteGroup& operator=(const RemoteGroup&) = delete;

  // Waits for every node to join, then runs the check across them.
  std::optional<AttemptResult> preflight() override;
  // The first waits for every node to join; a restart assigns them again.
  AttemptResult run_attempt(const Attempt& attempt) override;
  void stop(Outcome why) override;
  void kill() override;
  int interrupt_signal() override;
  std::string placement() const override;  // "2 nodes"

  // Says bye to every node and waits until the engine's processes have
  // ended. Returns the notes and errors that came after the last attempt.
  AttemptResult close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Supervisor* sup_ = nullptr;
};

}  // namespace flowrun
