// A node's verdict before a multi-node step's ranks start (parallel.node_checks):
// the facts its agent gathered (node_check.h) judged check by check. Pure:
// the unit tests give it facts of their own. Internal to lib/agent.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flowrun/gpu.h"
#include "flowrun/messages.h"

namespace flowrun::cluster {

// The free space a node's scratch and the step's workdir need by default:
// 1 GiB. FLOWRUN_NODE_CHECK_MIN_FREE_MB in the agent's environment sets it.
inline constexpr std::int64_t kDefaultMinFreeBytes = std::int64_t(1) << 30;

// The free space of one directory (statvfs's f_bavail blocks).
struct FreeSpace {
  std::string path;
  std::int64_t free_bytes = -1;
  std::string error;  // statvfs failed: why (then free_bytes is -1)
};

// Whether the step's Python imports torch, as `python -c "import torch"` said.
struct TorchImport {
  std::string python;  // empty: not asked (not a step of Python GPU workers)
  bool ok = false;
  std::string error;  // the last line it wrote to stderr, or how it ended
};

// Whether this node reaches node 0 (Assign::node0_port): a TCP connection to
// the port node 0's agent listens on, at the address that is its ranks'
// MASTER_ADDR.
struct Node0Reach {
  std::string name;     // node 0's host name
  std::string address;  // empty: not asked (this is node 0, or it has no port)
  int port = 0;
  bool ok = false;
  double ms = 0;      // how long the connection took
  std::string error;  // why it failed
};

struct NodeFacts {
  int expected_gpus = -1;  // the plan's GPUs for this node; -1: a step of CPU workers
  // The GPUs the agent may use (its Inventory: NVML's, less what
  // CUDA_VISIBLE_DEVICES or Slurm hide), and why none when none.
  int gpus_seen = 0;
  std::string gpus_unavailable;
  // Their health; a GPU that cannot be opened is here too, whichever it is.
  NodeGpuHealth gpus;
  FreeSpace scratch;  // the parent of the ranks' scratch directory ($TMPDIR or /tmp)
  FreeSpace workdir;
  std::int64_t min_free_bytes = kDefaultMinFreeBytes;
  TorchImport torch;
  Node0Reach node0;
};

// Each check's outcome, in this order: gpu_count and gpu_health (a step of
// GPU workers), scratch_space, workdir_space, torch_import and reach_node0
// (when asked). A failed check's detail says what is wrong and what to do
// about it.
std::vector<NodeCheck> judge_node(const NodeFacts& facts);

}  // namespace flowrun::cluster
