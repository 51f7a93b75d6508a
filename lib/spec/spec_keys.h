// The keys of each level of the format (docs/spec.md), and for a key written
// at the wrong level, where to put it. Private to lib/spec; each level's reader
// passes its lists to Checker::entries() (spec_detail.h), and
// tests/test_schema.py compares the key lists with the JSON schema.
#pragma once

#include <string_view>

namespace flowrun::spec_detail {

// Where to point a user who wrote a valid key at the wrong level.
struct Elsewhere {
  std::string_view key;
  std::string_view where;
};

inline constexpr std::string_view kTopKeys[] = {"name", "env", "workdir", "python", "steps", "cluster"};
inline constexpr std::string_view kStepKeys[] = {
    "name",     "run",     "shell",  "env",     "workdir", "needs", "timeout",  "stall_timeout",
    "parallel", "outputs", "inputs", "collect", "join",    "logs",  "forensics"};
inline constexpr std::string_view kParallelKeys[] = {
    "gpus",      "nodes", "procs_per_node", "cpus",        "max_restarts", "restart", "visible_devices",
    "preflight", "role",  "job_id",         "spare_nodes", "node_checks"};
inline constexpr std::string_view kRestartKeys[] = {"causes", "exit_codes", "min_attempt", "progress_file"};
inline constexpr std::string_view kLogsKeys[] = {"console", "fold"};
inline constexpr std::string_view kForensicsKeys[] = {"stacks", "timeout", "nccl", "sample"};
inline constexpr std::string_view kClusterKeys[] = {
    "engine",        "hosts",   "hostfile",          "gpus_per_node", "ssh_command",
    "srun_args",     "address", "heartbeat_timeout", "join_timeout",  "last_call_timeout",
    "shared_workdir"};

inline constexpr Elsewhere kTopElsewhere[] = {
    {"run", "in a step, under 'steps:'"},
    {"needs", "in a step, under 'steps:'"},
    {"parallel", "in a step, under 'steps:'"},
    {"shell", "in a step, under 'steps:'"},
    {"timeout", "in a step, under 'steps:'"},
    {"stall_timeout", "in a step, under 'steps:'"},
    {"outputs", "in a step, under 'steps:'"},
    {"inputs", "in a step, under 'steps:'"},
    {"collect", "in a step, under 'steps:'"},
    {"join", "in a step, under 'steps:'"},
    {"forensics", "in a step, under 'steps:'"},
    {"gpus", "under a step's 'parallel:'"},
    {"nodes", "under a step's 'parallel:'"},
    {"procs_per_node", "under a step's 'parallel:'"},
    {"cpus", "under a step's 'parallel:'"},
    {"engine", "under 'cluster:'"},
    {"hosts", "under 'cluster:'"},
    {"gpus_per_node", "under 'cluster:'"},
    {"ssh_command", "under 'cluster:'"},
    {"srun_args", "under 'cluster:'"},
    {"hostfile", "under 'cluster:'"},
    {"address", "under 'cluster:'"},
    {"heartbeat_timeout", "under 'cluster:'"},
    {"join_timeout", "under 'cluster:'"},
    {"last_call_timeout", "under 'cluster:'"},
    {"shared_workdir", "under 'cluster:'"},
};
inline constexpr Elsewhere kStepElsewhere[] = {
    {"gpus", "under 'parallel:'"},
    {"nodes", "under 'parallel:'"},
    {"procs_per_node", "under 'parallel:'"},
    {"cpus", "under 'parallel:'"},
    {"max_restarts", "under 'parallel:'"},
    {"restart", "under 'parallel:'"},
    {"visible_devices", "under 'parallel:'"},
    {"preflight", "under 'parallel:'"},
    {"role", "under 'parallel:'"},
    {"job_id", "under 'parallel:'"},
    {"spare_nodes", "under 'parallel:'"},
    {"node_checks", "under 'parallel:'"},
    {"engine", "under the top-level 'cluster:'"},
    {"hosts", "under the top-level 'cluster:'"},
    {"gpus_per_node", "under the top-level 'cluster:'"},
    {"hostfile", "under the top-level 'cluster:'"},
    {"heartbeat_timeout", "under the top-level 'cluster:'"},
    {"join_timeout", "under the top-level 'cluster:'"},
};
inline constexpr Elsewhere kParallelElsewhere[] = {
    {"outputs", "in the step, next to 'parallel:'"},
    {"inputs", "in the step, next to 'parallel:'"},
    {"collect", "in the step, next to 'parallel:'"},
    {"timeout", "in the step, next to 'parallel:'"},
    {"env", "in the step, next to 'parallel:'"},
    {"stall_timeout", "in the step, next to 'parallel:'"},
    {"run", "in the step, next to 'parallel:'"},
    {"gpus_per_node", "under the top-level 'cluster:'"},
    {"hosts", "under the top-level 'cluster:'"},
    {"engine", "under the top-level 'cluster:'"},
    {"forensics", "in the step, next to 'parallel:'"},
    {"causes", "under 'restart:'"},
    {"exit_codes", "under 'restart:'"},
    {"min_attempt", "under 'restart:'"},
    {"progress_file", "under 'restart:'"},
};
inline constexpr Elsewhere kRestartElsewhere[] = {
    {"max_restarts", "in 'parallel:', next to 'restart:'"},
};
inline constexpr Elsewhere kClusterElsewhere[] = {
    {"gpus", "under a step's 'parallel:'"},
    {"nodes", "under a step's 'parallel:'"},
    {"procs_per_node", "under a step's 'parallel:'"},
    {"timeout", "in a step, under 'steps:' (the cluster has 'heartbeat_timeout' and 'join_timeout')"},
    {"stall_timeout", "in a step, under 'steps:'"},
};

}  // namespace flowrun::spec_detail
