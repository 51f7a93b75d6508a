// A worker's environment, made in one place for every rank, on one host and
// across nodes.
//
// As torchrun's local agent does (LocalElasticAgent._start_workers), the
// node that runs ranks builds their environment itself. It does so from two
// halves:
//
//   NodeWork  the node's part of the step's plan and of one launch, as plain
//             values: what node_work() takes from the Spec, the Step, the
//             StepPlan and the LaunchContext. On one host it is made where
//             the ranks run; across nodes the head makes one per node and
//             sends it in that node's Start message.
//   NodeSite  what only the node knows: the environment its ranks start
//             from, where their files go, its agent.
//
// worker_env() turns the two into the variables one rank gets: the torchrun
// contract (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, TORCHELASTIC_*, ...)
// plus flowrun's own FLOWRUN_* variables, over the spec's and the step's env.
#pragma once

#include <string>
#include <vector>

#include "flowrun/plan.h"

namespace flowrun {

// What a rank's CUDA_VISIBLE_DEVICES becomes.
enum class DeviceRule {
  leave,         // as the ranks inherit it: the node's every GPU (a node that uses them all)
  set,           // each rank's `devices`; "" for CPU workers (no GPU)
  if_inherited,  // each rank's `devices`, only where the node's environment sets the variable:
                 // this host uses all the GPUs that value selects, so it is restated as planned
};

// One rank of a NodeWork.
struct RankWork {
  int rank = 0;
  int local_rank = 0;
  std::string devices;  // CUDA_VISIBLE_DEVICES under DeviceRule::set and if_inherited
  friend bool operator==(const RankWork&, const RankWork&) = default;
};

// A node's part of a step's launch: every value worker_env() takes from the
// plan and the launch, for the ranks of one node.
struct NodeWork {
  std::string step;
  std::string run_id;   // FLOWRUN_RUN_ID
  std::string job_id;   // TORCHELASTIC_RUN_ID: parallel.job_id, else the run id
  std::string role;     // ROLE_NAME: parallel.role
  std::string run_dir;  // FLOWRUN_RUN_DIR: the run's directory (on the head)
  EnvList env;          // the spec's env, then the step's
  int world_size = 0;
  int nodes = 0;      // GROUP_WORLD_SIZE, FLOWRUN_NODES
  int node_rank = 0;  // GROUP_RANK, FLOWRUN_NODE_RANK
  int max_restarts = 0;
  int restart_count = 0;
  std::string master_addr;
  int master_port = 0;  // 0: not chosen yet (plan output says so)
  DeviceRule devices = DeviceRule::leave;
  bool virtual_local_rank = false;  // LOCAL_RANK=0 for every rank (LaunchContext's)
  // The step's forensics.nccl: NCCL's flight recorder for every rank, dumping
  // into the rank's directory (worker_env).
  bool nccl_flight_recorder = false;
  std::vector<RankWork> ranks;  // the node's ranks by local rank; their count is LOCAL_WORLD_SIZE
  friend bool operator==(const NodeWork&, const NodeWork&) = default;
};

// Where a node's ranks run: the facts only that node has.
struct NodeSite {
  // The environment its ranks start from: flowrun's own on one host, the
  // agent's on a node. The defaults a user may override read it.
  EnvMap env;
  // Where the ranks' directories are (FLOWRUN_OUTPUT_DIR, TORCHELASTIC_ERROR_FILE):
  // the run's layout on one host, the agent's private scratch directory on a node.
  RunLayout layout;
  std::string agent_id;     // FLOWRUN_AGENT_ID on a node an agent runs; empty: not set
  std::string gloo_ifname;  // GLOO_SOCKET_IFNAME, unless env: or `env` sets it; empty: not set
};

// The MASTER_ADDR of a launch of `plan`: node 0's address as the other nodes
// reach it once its agent joined (ctx.node0_address); before that (a plan,
// one host) 127.0.0.1 on one node, node 0's host across nodes, or a
// placeholder when the engine assigns hosts at launch. The only place that
// decides it.
std::string master_addr(const StepPlan& plan, const LaunchContext& ctx);

// Node `node` (its node rank) of `plan`, for the launch `ctx`.
NodeWork node_work(const Spec& spec, const Step& step, const StepPlan& plan, int node,
                   const LaunchContext& ctx);

// The site of ranks on this host, without an agent: ctx's parent
// environment and run layout.
NodeSite this_host(const LaunchContext& ctx);

// The variables flowrun sets for `rank` (one of work.ranks), in a stable
// order: work.env (the spec's env, then the step's), then the contract and
// FLOWRUN_* variables, then FLOWRUN_AGENT_ID and GLOO_SOCKET_IFNAME where the
// site has them. A worker's full environment is site.env (without Slurm's
// step variables) with these set on top. The defaults a user may override
// (TORCH_NCCL_ASYNC_ERROR_HANDLING, NCCL_ASYNC_ERROR_HANDLING,
// PYTHONUNBUFFERED=1, OMP_NUM_THREADS) take work.env's value when env: sets
// one (even to ""), else site.env's, else flowrun's.
//
// With work.nccl_flight_recorder, PyTorch's ProcessGroupNCCL (2.2 and later)
// records its collectives and dumps them when one times out:
//   TORCH_NCCL_TRACE_BUFFER_SIZE=2000     the entries it keeps (0 turns it off)
//   TORCH_NCCL_DUMP_ON_TIMEOUT=1          dump on a timeout (and, since 2.4, on an NCCL error)
//   TORCH_NCCL_DEBUG_INFO_TEMP_FILE=<rank dir>/<nccl_trace_prefix(restart)>
//                                         the dump's path, to which torch appends the rank
// and the error-handling defaults become 3 (tear the process down without
// aborting the communicators: an abort from the watchdog ends the process
// before the dump is written, pytorch/pytorch#121055). A flight-recorder
// variable that work.env sets, under its name or the TORCH_FR_* name recent
// torch prefers (TORCH_FR_BUFFER_SIZE, TORCH_FR_DUMP_TEMP_FILE), keeps
// work.env's value; site.env's does not count: the spec asked for these. When
// site.env has the TORCH_FR_* name, it is set to flowrun's value too.
EnvList worker_env(const NodeWork& work, const RankWork& rank, const NodeSite& site);

}  // namespace flowrun
