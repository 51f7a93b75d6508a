// A gang: nodes that a scheduler other than flowrun started, one process per
// node, every node running the same command (a Kubernetes Indexed Job,
// JobSet, Kubeflow TrainJob or PyTorchJob, an AWS Batch multi-node parallel
// job, a SkyPilot cluster). Each node learns from its environment which node
// it is, how many there are and where the head is; this module reads that.
//
// Pure, like lib/slurm: it takes an EnvMap snapshot, never calls getenv() and
// performs no I/O. Failures are values: read_gang returns nullopt and sets
// *error to one line fit for `flowrun: error: ...`, naming the variable, its
// value and the fix. Slurm is not a gang here: it has an engine of its own
// (lib/slurm), and its variables alone read as no gang.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flowrun/util.h"

namespace flowrun {

enum class GangPlatform {
  none,         // no gang: the variables of none of the platforms below
  indexed_job,  // Kubernetes Indexed Job (completionMode: Indexed)
  jobset,       // Kubernetes JobSet (jobset.x-k8s.io), one child Indexed Job
  trainjob,     // Kubeflow Trainer v2 TrainJob: torchrun's PET_* variables
  pytorchjob,   // Kubeflow PyTorchJob v1: MASTER_ADDR, RANK and WORLD_SIZE counted in pods
  aws_batch,    // AWS Batch multi-node parallel job
  skypilot,     // SkyPilot, num_nodes: N
};

// The platform in words, for messages and `flowrun plan`: "Kubernetes Indexed
// Job", "Kubernetes JobSet", "Kubeflow TrainJob", "Kubeflow PyTorchJob",
// "AWS Batch multi-node parallel job", "SkyPilot"; "none" for none.
std::string_view gang_platform_name(GangPlatform platform);

// The variables of a Kubernetes Indexed Job or JobSet that the Job controller
// does not set, which the pod template must (flowrun's own manifests do):
//  - FLOWRUN_GANG_NODES: the node count, the Job's completions.
//  - FLOWRUN_GANG_HEAD: node 0's address, `<job>-0.<service>` for a Job with
//    `subdomain: <service>` and a headless Service of that name,
//    `<jobset>-<replicatedJob>-0-0.<subdomain>` for a JobSet.
//  - FLOWRUN_JOBSET_NAME: the JobSet's name, from the downward API
//    (metadata.labels['jobset.sigs.k8s.io/jobset-name']); it is what tells a
//    JobSet's pod from a plain Indexed Job's.
inline constexpr std::string_view kGangNodesVariable = "FLOWRUN_GANG_NODES";
inline constexpr std::string_view kGangHeadVariable = "FLOWRUN_GANG_HEAD";
inline constexpr std::string_view kJobSetNameVariable = "FLOWRUN_JOBSET_NAME";

// Where a gang's node finds the run's token, never on a command line: the
// file a Kubernetes Secret is mounted at (flowrun manifest mounts it at
// /etc/flowrun/token and sets FLOWRUN_TOKEN_FILE), or the variable a
// platform's secrets set (AWS Batch, SkyPilot).
inline constexpr std::string_view kGangTokenFileVariable = "FLOWRUN_TOKEN_FILE";
inline constexpr std::string_view kGangTokenVariable = "FLOWRUN_TOKEN";
// The control plane's port on the head where the platform names none
// (MASTER_PORT, PET_MASTER_PORT): torchrun's c10d rendezvous port.
inline constexpr int kGangDefaultPort = 29400;

// The most nodes a gang may have: a Kubernetes Indexed Job's completions are
// at most 100000, as is anything flowrun could gather; a bigger count is a typo.
inline constexpr int kGangMaxNodes = 100000;
// The most processes a PyTorchJob's WORLD_SIZE may count (its pods times
// nprocPerNode).
inline constexpr int kGangMaxProcesses = 100000000;

// What one node of a gang read from its environment.
struct GangRead {
  GangPlatform platform = GangPlatform::none;
  // This node's index as the platform numbers it, 0 .. num_nodes - 1.
  int index = 0;
  int num_nodes = 0;
  // The index of the head, which runs the flow while every other node becomes
  // its agent: 0, but on AWS Batch, where it is AWS_BATCH_JOB_MAIN_NODE_INDEX.
  int head_index = 0;
  // The head's address as the platform gives it (a DNS name or an IP
  // address). Empty only on the head itself where the platform does not say
  // (AWS Batch's main node is never told its own address).
  std::string head_host;
  // The head's port, where the platform gives one (MASTER_PORT,
  // PET_MASTER_PORT); the port torchrun's store would listen on there.
  std::optional<int> head_port;
  // Each variable read, NAME and value, in the order read, so that `flowrun
  // plan` can name what it saw. Empty for none.
  std::vector<std::pair<std::string, std::string>> variables;

  // True on the node that runs the flow; also for GangPlatform::none, where
  // the one node is its own head.
  bool is_head() const { return index == head_index; }
};

// Reads which gang `env` is a node of, each platform by the variables its own
// documentation and source name:
//  - Kubeflow TrainJob, marked by PET_NODE_RANK with PET_NNODES (the first
//    alone is torchrun's --node-rank default, exported by hand): PET_NODE_RANK, PET_NNODES
//    (a count; a min:max range is refused), PET_MASTER_ADDR, PET_MASTER_PORT
//    when set. A TrainJob runs on a JobSet, so JOB_COMPLETION_INDEX and
//    FLOWRUN_JOBSET_NAME may be set beside it.
//  - Kubernetes JobSet, marked by FLOWRUN_JOBSET_NAME, and Indexed Job,
//    marked by JOB_COMPLETION_INDEX: JOB_COMPLETION_INDEX, FLOWRUN_GANG_NODES,
//    FLOWRUN_GANG_HEAD.
//  - Kubeflow PyTorchJob, marked by RANK and WORLD_SIZE both set: RANK (the
//    pod's index), MASTER_ADDR, MASTER_PORT when set, and the pods from
//    PET_NNODES where the training operator sets it (recent releases, with
//    PET_NODE_RANK, which must equal RANK, and WORLD_SIZE in processes),
//    else from WORLD_SIZE (older operators count it in pods).
//    Not when SLURM_JOB_ID is set (a batch script that exports them for
//    torchrun by hand) nor when TORCHELASTIC_RUN_ID or LOCAL_RANK is (a
//    worker of a launcher, whose RANK counts processes, not pods).
//  - AWS Batch, marked by AWS_BATCH_JOB_NODE_INDEX: AWS_BATCH_JOB_NUM_NODES,
//    AWS_BATCH_JOB_MAIN_NODE_INDEX, and on every node but the main one
//    AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS.
//  - SkyPilot, marked by SKYPILOT_NODE_RANK: SKYPILOT_NUM_NODES and
//    SKYPILOT_NODE_IPS (one address a line, the head's first, one line a node).
// No marker: GangPlatform::none, not an error. Errors, each naming the
// variable and the fix: the markers of two platforms that do not nest (only
// TrainJob over JobSet over Indexed Job do; a PyTorchJob's own PET_NODE_RANK
// is no TrainJob's), a platform's variable missing, PET_NODE_RANK and RANK
// apart in a PyTorchJob, a number that is not decimal digits or out of
// range, an index at or past the count, an empty or blank address, an IP list
// whose length is not the node count.
std::optional<GangRead> read_gang(const EnvMap& env, std::string* error);

// What identifies a gang across its head's restarts, by which a restarted
// head finds the run its earlier pod began (run.json's "gang"), as a requeued
// Slurm job finds its own by SLURM_JOB_ID. The platform replaces a lost
// pod, or reruns the whole gang, under the same identity:
//  - FLOWRUN_GANG_ID, on any platform, wins: flowrun manifest sets it from
//    the downward API to the Job's uid (label batch.kubernetes.io/controller-uid)
//    or, for a JobSet, whose restarts make new child Jobs, to the JobSet's
//    (label jobset.sigs.k8s.io/jobset-uid). A PyTorchJob's or TrainJob's pod
//    template sets it by hand (docs/kubernetes.md).
//  - AWS Batch: AWS_BATCH_JOB_ID, less its "#<node index>", and the attempt
//    AWS_BATCH_JOB_ATTEMPT (1 on the first), which a retry raises.
//  - SkyPilot: SKYPILOT_TASK_ID, which a managed job's recoveries keep.
// nullopt for none of these (a head that cannot resume), or for a value
// that cannot be an id, with *error naming the variable and the fix.
inline constexpr std::string_view kGangIdVariable = "FLOWRUN_GANG_ID";
struct GangIdentity {
  std::string id;
  std::optional<int> attempt;  // where the platform numbers its attempts
  std::string said;            // "NAME=value[, NAME=value]", for messages
};
std::optional<GangIdentity> read_gang_identity(const GangRead& gang, const EnvMap& env, std::string* error);

}  // namespace flowrun
