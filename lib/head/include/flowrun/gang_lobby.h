// The head of a gang: nodes that a scheduler other than flowrun started (a
// Kubernetes Indexed Job or JobSet, a Kubeflow TrainJob or PyTorchJob, an
// AWS Batch multi-node parallel job, a SkyPilot cluster), every one running
// the same `flowrun SPEC`. Node 0 runs the flow; every other node's agent
// dials it once, in whatever order and however late the pods start, and
// stays for the whole flow (docs/kubernetes.md).
//
// The lobby holds the control plane's port from the flow's start to its end,
// so that an agent that comes up while a plain step runs is welcomed and
// waits. Between parallel steps it keeps the agents' links, with heartbeats
// both ways: an agent whose head died hears nothing and ends within
// cluster.heartbeat_timeout, and a pod deleted between steps is said on the
// console. For each parallel step it is the step's door (NodeDoor): the
// agents waiting in it join the step at once, a pod that comes up during the
// step joins it as a late node or a spare, and at the step's end the head
// hands the links back. When the flow ends, every agent is told the flow's
// exit code and exits with it, so the Job succeeds or fails as one.
#pragma once

#include <memory>
#include <string>

#include "flowrun/remote_group.h"
#include "flowrun/supervisor.h"

namespace flowrun {

namespace cluster {
class NodeDoor;
}

struct GangLobbyOptions {
  std::string platform;   // "Kubernetes Indexed Job", ... (gang_platform_name)
  int nodes = 0;          // the gang's nodes, the head's included
  std::string head_host;  // node 0's address as the platform gives it; empty: this host's first address
  int port = 0;           // the control plane's port, on every address of this host
  std::string token;      // the run's token (the platform's Secret, or FLOWRUN_TOKEN)
  double heartbeat_timeout_s = 10;
  double join_timeout_s = 300;
};

class GangLobby {
 public:
  // Listens on `options.port`. Throws Error when it cannot.
  GangLobby(Supervisor& supervisor, const Console& console, GangLobbyOptions options);
  // The same with `door` in place of the listener: tests, with no socket.
  GangLobby(Supervisor& supervisor, const Console& console, GangLobbyOptions options,
            std::unique_ptr<cluster::NodeDoor> door);
  // A lobby not finished tells the agents the flow failed (exit code 1).
  ~GangLobby();
  GangLobby(const GangLobby&) = delete;
  GangLobby& operator=(const GangLobby&) = delete;

  // The head of a parallel step whose nodes are the gang's: its door is the
  // lobby, and the engine starts node 0's agent on this host.
  std::unique_ptr<RemoteGroup> group(const NodeStep& step);

  // The door of one parallel step, which group() gives the step's head;
  // tests give it to a head of their own.
  std::unique_ptr<cluster::NodeDoor> step_door();

  // The flow ended with `exit_code`: every agent that joined hears it and
  // exits with it. Waits, until the join timeout counted from the lobby's
  // start, for the agents that have not joined yet, so that they hear it too.
  void finish(int exit_code);

  // What the agents dial: "HOST:PORT".
  const std::string& endpoint() const;
  // Agents waiting between steps (tests).
  std::size_t waiting() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace flowrun
