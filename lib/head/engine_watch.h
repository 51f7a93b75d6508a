// The engine's processes of a multi-node step (srun, ssh to each node) as
// the head watches them: the node each one serves, the last lines it wrote,
// srun's wait for resources, and what the head says when one ends.
// Internal to lib/head.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "flowrun/logmux.h"
#include "flowrun/result.h"

#include "engines.h"

namespace flowrun::cluster {

class EngineWatch {
 public:
  void add(const EngineLaunch& e);

  // The node process `index` serves, -1 for all (srun).
  int node(std::size_t index) const { return nodes_[index]; }
  // The node ranks the engine's processes serve (NodeTable::admit).
  const std::vector<int>& nodes() const { return nodes_; }

  // Output of process `index`, kept for its end's message. srun waiting for
  // resources (queued: the join timeout stops) or given them (granted: it
  // counts again from here).
  enum class Grant { none, queued, granted };
  Grant feed(std::size_t index, std::string_view data);

  // Process `index` ended as `record` says before the agents it serves
  // joined: what failed, with its last output.
  std::string ended_before_join(std::size_t index, const WorkerRecord& record) const;
  // Process `index` ended while the ranks run: a note with its last line.
  std::string ended_note(std::size_t index, const WorkerRecord& record) const;

 private:
  std::string tail(std::size_t index) const;

  std::vector<int> nodes_;
  std::vector<std::string> what_;  // "srun", "ssh to node2", "node 0's agent"
  std::vector<TailBuffer> tail_;
  bool waiting_for_grant_ = false;
};

}  // namespace flowrun::cluster
