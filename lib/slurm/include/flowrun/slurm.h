// Slurm's environment, read without touching the process: the pieces the
// multi-node launcher needs when `srun` starts one flowrun agent per node.
// Everything here is pure: it takes strings and EnvMap snapshots, never calls
// getenv() and performs no I/O, so tests can hand it any allocation.
//
// Failures are values: each function returns nullopt and sets *error (when
// `error` is not null) to one line fit for `flowrun: error: ...`.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flowrun/util.h"

namespace flowrun {

// The most hosts (or counts) one list may expand to. Slurm itself refuses a
// bracket range wider than 64K hosts; a bigger list is a typo or hostile
// input, and expanding it would allocate without limit.
inline constexpr std::size_t kSlurmMaxListSize = 65536;

// Expands a Slurm compressed host list (SLURM_JOB_NODELIST) into host names,
// in the order `scontrol show hostnames` prints them (Slurm's
// src/common/hostlist.c):
//  - Entries are separated by ',' outside brackets: `a[1-2],b,c[5,7-8]` is
//    a1 a2 b c5 c7 c8. Order and duplicates are kept as written.
//  - A bracket group holds ',' separated numbers and lo-hi ranges (lo <= hi).
//    Every number is printed zero-padded to the width of the range's first
//    number as written: `gpu-a[01-03]` is gpu-a01..gpu-a03, `n[8-10]` is
//    n8 n9 n10, `n[098-100]` is n098 n099 n100.
//  - Several groups in one name multiply. The last group varies fastest; the
//    groups before it vary in Slurm's order, which is the second-to-last group
//    slowest, then towards the first: `rack[1-2]-n[1-2]` is rack1-n1 rack1-n2
//    rack2-n1 rack2-n2, and `a[1-2]b[3-4]c[5-6]` starts a1b3c5 a1b3c6 a2b3c5.
//  - Text may follow any group but the last: `n[1-2]-ib` is malformed for
//    Slurm as well.
// Stricter than Slurm, which guesses at input it cannot parse (and never
// produces such input itself): an empty list, an empty entry (`a,,b`),
// whitespace or a control character, an unclosed, stray or nested bracket,
// an empty group or range (`n[]`, `n[1,]`, `n[1-]`), a non-decimal number,
// a descending range (`n[3-1]`), and a list of more than kSlurmMaxListSize
// hosts are errors. The error names the entry and what is wrong with it.
std::optional<std::vector<std::string>> expand_hostlist(std::string_view list, std::string* error);

// Host names as one Slurm host list, as `sbatch --exclude=` and
// `scontrol show hostlist` take it: names that differ only in a trailing
// number of one width join in one bracket group, in the order first seen,
// duplicates dropped (`node1 node3 node2 gpu-a01` is `node[1-3],gpu-a01`).
// expand_hostlist gives the names back (in sorted number order). Pure.
std::string compress_hostlist(const std::vector<std::string>& names);

// Expands Slurm's repeated-count lists (SLURM_TASKS_PER_NODE,
// SLURM_JOB_CPUS_PER_NODE): ',' separated entries, each `N` or `N(xR)` for N
// repeated R times: `2(x3),1` is 2 2 2 1. Counts are decimal in [0, INT_MAX];
// R is at least 1. An empty list or entry, anything else in an entry, and a
// total of more than kSlurmMaxListSize counts are errors.
std::optional<std::vector<int>> expand_counts(std::string_view list, std::string* error);

// The allocation a process runs in, as Slurm describes it to the batch
// script and to every task.
struct SlurmJob {
  std::string job_id;                // SLURM_JOB_ID, as written
  std::vector<std::string> nodes;    // expanded SLURM_JOB_NODELIST, in order
  std::vector<int> cpus_per_node;    // one per node; empty when Slurm did not say
  int num_nodes = 0;                 // == nodes.size()
  std::optional<int> gpus_per_node;  // from SLURM_GPUS_PER_NODE, when requested that way
};

// Reads the allocation from `env`:
//  - SLURM_JOB_ID unset: not inside an allocation; nullopt and *error empty.
//  - SLURM_JOB_NODELIST, or the older SLURM_NODELIST, is required and is
//    expanded with expand_hostlist.
//  - SLURM_JOB_NUM_NODES, or the older SLURM_NNODES, must be a count equal to
//    the list's length; when neither is set the list decides.
//  - SLURM_JOB_CPUS_PER_NODE, when set, is expanded with expand_counts and
//    must give one count per node.
//  - SLURM_GPUS_PER_NODE, when set, is `[type:]count` (`4`, `h100:4`), or a
//    ',' list of them whose counts add up (`a100:2,v100:1` is 3).
// The JOB_ names are preferred because inside an `srun` step Slurm sets
// SLURM_NODELIST and SLURM_NNODES to the step's nodes, not the job's.
// Anything malformed or contradictory: nullopt and an error naming the
// variable and its value.
std::optional<SlurmJob> read_slurm_job(const EnvMap& env, std::string* error);

// A job Slurm requeued (`scontrol requeue`, or `sbatch --requeue` after a
// node failure or a preemption) runs its batch script again with the same
// SLURM_JOB_ID, and SLURM_RESTART_COUNT says how many times it was
// restarted (unset, or 0, the first time).
struct SlurmRestart {
  std::string job_id;     // SLURM_JOB_ID, as written
  int restart_count = 0;  // SLURM_RESTART_COUNT; 0 when unset
};

// Reads them from `env`:
//  - SLURM_JOB_ID unset: not inside a job; nullopt and *error empty.
//  - SLURM_JOB_ID empty, or SLURM_RESTART_COUNT set to anything but a count
//    (decimal digits, at most 1000000): nullopt and an error naming the
//    variable and its value.
std::optional<SlurmRestart> read_slurm_restart(const EnvMap& env, std::string* error);

// The Slurm variables that describe one `srun` step or one task of it rather
// than the job, and that a worker started by an srun-started agent must not
// inherit. An entry ending in '*' is a prefix; any other is an exact name.
// Why each goes:
//  - SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID: the agent task's global rank,
//    node-local rank and node index. Lightning's SLURMEnvironment takes them
//    as the worker's global_rank(), local_rank() and node_rank(), so every
//    worker of a node would claim the agent's rank.
//  - SLURM_NTASKS*, SLURM_NPROCS: the step's task count (and its per-node,
//    per-socket, per-GPU... layout). Lightning detects "launched by srun" from
//    SLURM_NTASKS and takes it as world_size(); it also checks
//    SLURM_NTASKS_PER_NODE. Removing them makes Lightning use the torchrun
//    variables flowrun sets instead.
//  - SLURM_TASKS_PER_NODE, SLURM_DISTRIBUTION: the step's task layout.
//  - SLURM_STEP_*, SLURM_STEPID: the step's id, nodes, tasks, GPUs and
//    reserved ports, which are the agent's and not the worker's.
//  - SLURM_TASK_PID, SLURM_GTIDS: the agent task's pid and the global task
//    ids on its node.
//  - SLURM_CPU_BIND*, SLURM_MEM_BIND*: the binding srun applied to the agent
//    task; flowrun decides each worker's placement itself.
//  - SLURM_LAUNCH_NODE_IPADDR, SLURM_SRUN_COMM_*: how the task reaches the
//    srun that launched it; only that task may talk to it.
//  - SLURM_UMASK, SLURM_PRIO_PROCESS: srun's umask and priority propagated
//    to its task; the agent has already applied them.
//  - SLURM_CPUS_PER_TASK: the agent task's CPUs (flowrun asks srun for the
//    node's CPUs for its one task); a worker is not that task.
//  - SLURM_TOPOLOGY_ADDR*: the agent task's place in the network topology,
//    set per step task.
// Besides what the worker reads, every one of these is also an input that
// srun reads: a worker that runs `srun` itself would otherwise copy the
// agent's step layout into its own step.
// Job- and node-level variables stay: SLURM_JOB_* (id, nodes, partition,
// CPUs per node...), SLURM_CLUSTER_NAME, SLURM_SUBMIT_DIR/HOST, SLURM_NODELIST,
// SLURM_NNODES, SLURM_CPUS_ON_NODE, SLURM_GPUS_ON_NODE, SLURMD_NODENAME...
const std::vector<std::string_view>& slurm_step_variables();

// True when `name` matches an entry of slurm_step_variables().
bool is_slurm_step_variable(std::string_view name);

// `env` without the variables is_slurm_step_variable() names; every other
// variable is kept unchanged.
EnvMap strip_step_variables(const EnvMap& env);

}  // namespace flowrun
