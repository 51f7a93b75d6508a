// `flowrun manifest SPEC`: the Kubernetes objects that run a spec as a gang,
// every pod running the same `flowrun SPEC` (docs/kubernetes.md).
//
// Pure: the spec, the plans of its steps and the options in, the objects out,
// as JSON values and as one YAML stream; no file, clock or random source (the
// caller makes the token). A problem with an option throws Error with exit
// code 2, naming the option and what to write instead; one with the spec
// throws DiagnosticError at the key.
//
// The objects, in the order kubectl creates them:
//  - a Secret `<name>-token` holding the run's token under `token`, which
//    every pod mounts read-only at /etc/flowrun (FLOWRUN_TOKEN_FILE);
//  - a headless Service `<name>` (clusterIP: None, the pods' DNS names before
//    they are ready), whose name is the pods' subdomain;
//  - an Indexed Job `<name>`: one pod a node, node 0 the head, as many pods as
//    the step that needs most nodes has nodes and spares;
//  - or, with `jobset`, a JobSet `<name>` in place of the Service and the Job,
//    with that Job as its one replicated job `node` (JobSet makes the
//    headless Service itself).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "flowrun/json.h"
#include "flowrun/plan.h"

namespace flowrun {

// The port of the control plane in a gang whose platform names none: the
// pods' containerPort and the Service's port `flowrun` (kGangDefaultPort).
inline constexpr int kManifestPort = kGangDefaultPort;

// Where the Secret is mounted and the file the pods read the token from.
inline constexpr std::string_view kTokenMountPath = "/etc/flowrun";
inline constexpr std::string_view kTokenFilePath = "/etc/flowrun/token";

// The one container of every pod, which podFailurePolicy's exit codes name.
inline constexpr std::string_view kContainerName = "flowrun";

// The replicated job of a JobSet: its pods are `<name>-node-0-<index>`.
inline constexpr std::string_view kJobSetReplicatedJob = "node";

// Kubernetes holds a label, and so a pod's host name, to 63 characters.
inline constexpr std::size_t kMaxLabelLength = 63;

struct ManifestOptions {
  // SPEC as the user named it: the container's command is `flowrun SPEC`,
  // resolved against the container's working directory.
  std::string spec_word;
  std::string image;           // --image: required
  std::string name;            // --name; empty: the spec's name as a DNS-1035 label
  std::string kube_namespace;  // --namespace; empty: none written (kubectl's current one)
  std::string queue;           // --queue: Kueue's LocalQueue; empty: no Kueue label
  std::string workdir;         // --workdir: the container's workingDir; empty: the image's
  // --gpus-per-node: the GPUs of each pod's node; nullopt: the spec's
  // cluster.gpus_per_node, else none known.
  std::optional<int> gpus_per_node;
  bool jobset = false;  // --jobset
  std::string token;    // the run's token, 64 hex digits; the caller makes it fresh
};

// What each pod is, read from the plans of the flow's parallel steps.
struct PodShape {
  // completions = parallelism: the most nodes plus spares any step has (an
  // elastic range counts its MAX); 1 when no step spans nodes.
  int pods = 1;
  // nvidia.com/gpu of each pod: the most GPUs a node of any step uses; 0 when
  // every parallel step runs on CPU workers (or there is none).
  int gpus = 0;
  // The Job's backoffLimit: the pod failures the flow outlives, the most of
  // any step: one a spare, the MAX - MIN nodes an elastic range may lose, and
  // its max_restarts for the head's own pod, which the Job replaces and whose
  // flowrun resumes the run.
  int backoff_limit = 0;
  // A JobSet's failurePolicy.maxRestarts: the most max_restarts of any step.
  int max_restarts = 0;
  // podFailurePolicy's FailJob exit codes: 2, flowrun's code for a bad
  // command line, spec or plan, which a new pod would meet again, unless a
  // step's restart.exit_codes says 2 is worth another try. Ascending.
  std::vector<int> fail_exit_codes;
};

PodShape pod_shape(const std::vector<StepPlan>& plans);

// Plans every parallel step as it runs in the pods: the planner's own
// decision (plan_flow) on a host with `gpus_per_node` GPUs (the option, else
// cluster.gpus_per_node), each further node a pod like it. Throws
// DiagnosticError for a step the pods cannot run, and for an explicit
// cluster.engine, which would win over the gang the pods make; Error (exit 2)
// for a GPU step when no GPU count is known.
std::vector<StepPlan> plan_pods(const Spec& spec, const ManifestOptions& options);

// The objects' name: options.name when it is a DNS-1035 label short enough
// for the pods' host names (`<name>-<index>`, or `<name>-node-0-<index>` in
// a JobSet), else Error naming the rule and a name that keeps it; without
// it the spec's name, lower-cased, every other character a '-', cut to fit.
std::string manifest_name(const Spec& spec, const ManifestOptions& options, int pods);

// The objects, in the order kubectl should create them. Throws Error (exit
// 2) for an option Kubernetes would refuse: no image, a bad name, namespace
// or queue, a relative workdir, a token that is not 64 hex digits.
std::vector<Json> manifest_objects(const Spec& spec, const std::vector<StepPlan>& plans,
                                   const ManifestOptions& options);

// manifest_objects as one YAML stream: a comment saying what it is and how
// to apply it, then each object after a `---` line.
std::string format_manifests(const Spec& spec, const std::vector<StepPlan>& plans,
                             const ManifestOptions& options);

}  // namespace flowrun
