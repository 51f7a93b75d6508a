// The planner: where every rank of a parallel step runs, and why.
//
// plan_step() is a pure function of the step, the cluster section, the GPUs
// this host has and a few options: it performs no I/O, so every row of the
// decision table in docs/plan.md is a unit test. It either returns a StepPlan
// or a Refusal that says what was asked, what was found and what to change.
//
// A worker's environment is made from a plan and a launch: worker_env.h.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "flowrun/contract.h"
#include "flowrun/error.h"
#include "flowrun/gang.h"
#include "flowrun/gpu.h"
#include "flowrun/spec.h"
#include "flowrun/util.h"

namespace flowrun {

// What the planner knows about the machine it runs on.
struct HostFacts {
  std::string hostname;
  Inventory inventory;  // GPUs this host may use
  // The nodes of the Slurm allocation flowrun runs in (SLURM_JOB_NODELIST,
  // expanded), in Slurm's node order; empty outside one.
  std::vector<std::string> allocation;
  // The gang this host is a node of, when the flow runs on it (engine gang:
  // a Kubernetes Indexed Job, ..., lib/gang): a parallel step spans its nodes.
  std::optional<GangRead> gang;
  // A gang whose variables are set but which the spec's explicit engine
  // overrides: what `flowrun plan` says of it. Empty otherwise.
  std::string gang_ignored;
};

struct PlanOptions {
  std::optional<int> cpus;  // --cpus N: CPU workers for every parallel step
};

// One node of a step.
struct NodePlan {
  int node_rank = 0;
  std::string host;       // empty when the engine assigns it at launch
  bool is_local = false;  // this host
  std::vector<Gpu> gpus;  // the node's selected GPUs; for remote nodes, ordinals 0..n-1
  // GPUs a worker on this node sees when CUDA_VISIBLE_DEVICES is left as it
  // is: all of the node's GPUs, whether the step uses them or not (on this
  // host, what Slurm or a parent's selection did not already hide). 0 for CPU.
  int gpus_available = 0;
  int procs = 0;       // workers on this node (LOCAL_WORLD_SIZE)
  int first_rank = 0;  // global rank of its local rank 0
};

// One worker.
struct RankPlan {
  int rank = 0;
  int node = 0;
  int local_rank = 0;
  std::vector<int> gpus;  // positions in its node's `gpus` (= cuda ordinals the worker sees)
};

enum class PlanMode { single_node, multi_node };

struct StepPlan {
  std::string step;
  PlanMode mode = PlanMode::single_node;
  int world_size = 0;
  bool cpu = false;              // CPU workers (cpus: or --cpus); no GPU is used
  int gpus_per_proc = 0;         // 0 for CPU workers
  std::optional<Engine> engine;  // multi_node: how the nodes are reached
  std::vector<NodePlan> nodes;
  // parallel.spare_nodes: nodes whose agents join and wait with no rank,
  // node ranks nodes.size() and up, until one takes a lost node's place.
  std::vector<NodePlan> spares;
  // parallel.nodes: "MIN:MAX": MIN (the plan's `nodes` are MAX); 0 for a
  // fixed count. An attempt runs on plan_for_nodes(plan, n), MIN <= n <= MAX.
  int min_nodes = 0;
  std::vector<RankPlan> ranks;
  std::vector<std::string> why;  // the decision, in plain sentences
  Visibility visible_devices = Visibility::node;
  int max_restarts = 0;
  RestartPolicy restart;         // parallel.restart: which failures restart, what is progress
  std::string role = "default";  // parallel.role: ROLE_NAME
  std::string job_id;            // parallel.job_id: TORCHELASTIC_RUN_ID; empty: the run id
};

// A plan that cannot be made: reported like a spec error, at `loc`.
struct Refusal {
  Location loc;
  std::string path;     // e.g. "steps.train.parallel.gpus"
  std::string message;  // what was asked, what was found, what to change
};

using PlanResult = std::variant<StepPlan, Refusal>;

// Plans one parallel step. `step` must be parallel.
PlanResult plan_step(const Step& step, const std::optional<ClusterSpec>& cluster, const HostFacts& host,
                     const PlanOptions& options);

// An elastic step's plan for an attempt on its first `nodes` nodes
// (min_nodes <= nodes <= plan.nodes.size()): the same nodes' workers, the
// ranks numbered over them, WORLD_SIZE = nodes x procs per node. Pure.
StepPlan plan_for_nodes(const StepPlan& plan, int nodes);

// Plans every parallel step of a validated spec. Throws DiagnosticError with
// every refusal, located in `spec.file`.
std::vector<StepPlan> plan_flow(const Spec& spec, const HostFacts& host, const PlanOptions& options);

// Where a run keeps its files (docs/spec.md, "Run directory").
struct RunLayout {
  std::string run_dir;                                  // absolute: <workdir>/.flowrun/runs/<run-id>
  std::string step_dir(const std::string& step) const;  // <run_dir>/<step>
  std::string rank_dir(const std::string& step, int rank) const;    // <run_dir>/<step>/rank<R>
  std::string output_dir(const std::string& step, int rank) const;  // <rank_dir>/out
  std::string error_file(const std::string& step, int rank) const;  // <rank_dir>/error.json
  // <rank_dir>/end.json: how the rank ended, written the moment flowrun
  // learns of it (write_rank_end), for `flowrun status` while the
  // step's other ranks still run.
  std::string end_file(const std::string& step, int rank) const;
  std::string inputs_dir(const std::string& step) const;  // <run_dir>/<step>/outputs
  // <rank_dir>/<nccl_trace_prefix(restart)><R>: where NCCL's flight recorder
  // dumps rank R's collectives in attempt `restart` (forensics: nccl).
  std::string nccl_trace(const std::string& step, int rank, int restart) const;
};

// The name PyTorch's TORCH_NCCL_DEBUG_INFO_TEMP_FILE gets, without its
// directory: a prefix to which torch appends the rank. "nccl_trace_rank_" for
// the first attempt, "nccl_trace_attempt<N>_rank_" after restart N, so that
// fr_trace's --prefix, which matches anywhere in a file name under the
// directory it walks, picks one attempt's dumps among those kept.
std::string nccl_trace_prefix(int restart);

// Whether `name` (a file name) is rank `rank`'s flight-recorder dump of some
// attempt: nccl_trace_prefix(N) followed by the rank.
bool is_nccl_trace_name(std::string_view name, int rank);

// A new run id: "<name>-<yyyymmdd-hhmmss>-<6 hex>". Reads the clock and random device.
std::string make_run_id(const std::string& flow_name);

// Why `id` cannot be a run id, or nullopt when it can: a run id names the
// run directory and files of its own elsewhere (an agent's scratch directory,
// the workdir's node-check marker), so it follows check_name's rule:
// "'a/b': expected a run id of letters, digits, ...". Nor is it `latest`,
// the link to the newest run in .flowrun/runs.
std::optional<std::string> run_id_problem(const std::string& id);

// The run directory: `chosen` (--run-dir) made absolute against the current
// directory, since workers run elsewhere, and normal (no '.', '..' or
// trailing '/'); by default <workdir>/.flowrun/runs/<run-id>.
// Throws Error (exit code 2) for a run id run_id_problem refuses.
std::string run_dir_for(const Spec& spec, const std::string& run_id, const std::string& chosen);

// The argv a step runs, its templates filled in: ${steps.NAME.outputs} is
// layout.inputs_dir(NAME) and ${args} the arguments given after `--`.
// A list or string `run` never passes through a shell: a word that is exactly
// ${args} becomes one word per argument (none when there are none), and inside
// a longer word the arguments are joined with spaces. Shell text (under
// `shell: true`, {"/bin/sh", "-c", SCRIPT}; the script word of a shell run
// with -c, shell_script_word) has each value quoted for the place its
// template stands in (shell_text.h), so no path or argument can inject shell
// syntax; the spec refused every template no quoting makes safe, and one
// here all the same throws Error.
std::vector<std::string> expand_command(const Step& step, const RunLayout& layout,
                                        const std::vector<std::string>& args);

// What a launch adds to a plan.
struct LaunchContext {
  std::string run_id;
  // Node 0's address as the other nodes reach it (its agent's end of the
  // connection to the head), once it joined; empty on one host and in a plan.
  std::string node0_address;
  int master_port = 0;  // 0: not chosen yet (plan output says so)
  RunLayout layout;
  int restart_count = 0;
  EnvMap parent_env;  // the environment flowrun itself was started with
  // torchrun's --virtual-local-rank (one node): every worker gets LOCAL_RANK=0
  // and CUDA_VISIBLE_DEVICES naming its own GPU alone.
  bool virtual_local_rank = false;
  // torchrun's --numa-binding (one node): the CPUs each local rank may run
  // on, by local rank; empty: no binding.
  std::vector<std::vector<int>> cpus;
};

// The variables flowrun sets for a plain (not parallel) step: the spec's env,
// the step's env, PYTHONUNBUFFERED=1 unless env: or ctx.parent_env sets it
// (as for a worker), then FLOWRUN_RUN_ID, FLOWRUN_STEP, FLOWRUN_RUN_DIR and,
// for a join step, FLOWRUN_INPUTS (the joined step's outputs directory).
EnvList step_env(const Spec& spec, const Step& step, const LaunchContext& ctx);

}  // namespace flowrun
