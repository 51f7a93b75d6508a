// The Kubernetes objects of flowrun manifest (manifest.h), built as JSON and
// written as YAML by lib/spec's yaml_text.

#include "flowrun/manifest.h"

#include <algorithm>

#include "flowrun/error.h"
#include "flowrun/spec.h"
#include "flowrun/text.h"
#include "flowrun/yaml_text.h"

#include "manifest_detail.h"

namespace flowrun {

using namespace manifest_detail;

PodShape pod_shape(const std::vector<StepPlan>& plans) {
  PodShape shape;
  bool usage_code_retried = false;
  for (const StepPlan& plan : plans) {
    const int nodes = static_cast<int>(plan.nodes.size());
    const int spares = static_cast<int>(plan.spares.size());
    shape.pods = std::max(shape.pods, nodes + spares);
    if (!plan.cpu && !plan.nodes.empty())
      shape.gpus = std::max(shape.gpus, static_cast<int>(plan.nodes.front().gpus.size()));
    const int elastic = plan.min_nodes > 0 ? nodes - plan.min_nodes : 0;
    shape.backoff_limit = std::max(shape.backoff_limit, plan.max_restarts + spares + elastic);
    shape.max_restarts = std::max(shape.max_restarts, plan.max_restarts);
    const auto& codes = plan.restart.exit_codes;
    usage_code_retried =
        usage_code_retried || std::find(codes.begin(), codes.end(), kExitUsage) != codes.end();
  }
  if (!usage_code_retried) shape.fail_exit_codes.push_back(kExitUsage);
  return shape;
}

namespace {

// What Kubernetes would refuse among the options, said before anything is
// written (the name is manifest_name's).
void check_options(const ManifestOptions& options) {
  if (options.image.empty())
    throw Error(
        "--image is required: the container image every pod runs, with flowrun and the flow's code in it "
        "(--image ghcr.io/me/train:1)",
        kExitUsage);
  if (std::any_of(options.image.begin(), options.image.end(),
                  [](unsigned char c) { return c <= ' ' || c == 0x7f; }))
    throw Error("--image " + quote(options.image) +
                    ": an image reference has no spaces or control characters, such as ghcr.io/me/train:1",
                kExitUsage);
  if (!options.kube_namespace.empty() && !is_dns1123_label(options.kube_namespace))
    throw Error("--namespace " + quote(options.kube_namespace) +
                    ": a namespace is a DNS-1123 label: lower-case letters, digits and '-', starting and "
                    "ending with a letter or digit, at most 63 characters",
                kExitUsage);
  if (!options.queue.empty() && !is_queue_name(options.queue))
    throw Error(
        "--queue " + quote(options.queue) +
            ": a Kueue LocalQueue's name, which the label kueue.x-k8s.io/queue-name holds: lower-case "
            "letters, digits, '-' and '.', starting and ending with a letter or digit, at most 63 "
            "characters",
        kExitUsage);
  if (!options.workdir.empty() &&
      (options.workdir.front() != '/' ||
       std::any_of(options.workdir.begin(), options.workdir.end(), [](unsigned char c) { return c < ' '; })))
    throw Error(
        "--workdir " + quote(options.workdir) +
            ": the container's working directory is an absolute path in the image, such as /workspace",
        kExitUsage);
  if (options.spec_word.empty())
    throw Error("flowrun manifest: no SPEC to write into the command", kExitUsage);
  if (options.token.size() != 64 || options.token.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw Error("internal error: the run's token is not 64 hex digits");
}

Json labels(const std::string& name) {
  return {{"app.kubernetes.io/name", "flowrun"}, {"app.kubernetes.io/instance", name}};
}

// An object's metadata: its name, the namespace when one was asked for, the
// labels, and Kueue's queue label on the object Kueue admits.
Json metadata(const std::string& object_name, const std::string& name, const ManifestOptions& options,
              bool queued) {
  Json meta = {{"name", object_name}};
  if (!options.kube_namespace.empty()) meta["namespace"] = options.kube_namespace;
  meta["labels"] = labels(name);
  if (queued && !options.queue.empty()) meta["labels"]["kueue.x-k8s.io/queue-name"] = options.queue;
  return meta;
}

Json secret(const std::string& name, const ManifestOptions& options) {
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata", metadata(name + "-token", name, options, false)},
          {"type", "Opaque"},
          {"stringData", {{"token", options.token}}}};
}

Json service(const std::string& name, const ManifestOptions& options) {
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", metadata(name, name, options, false)},
          {"spec",
           {{"clusterIP", "None"},
            {"publishNotReadyAddresses", true},
            {"selector", labels(name)},
            {"ports", Json::array({{{"name", "flowrun"},
                                    {"port", kManifestPort},
                                    {"targetPort", kManifestPort},
                                    {"protocol", "TCP"}}})}}}};
}

Json env_value(std::string_view name, const std::string& value) { return {{"name", name}, {"value", value}}; }

Json container(const std::string& name, const PodShape& shape, const ManifestOptions& options) {
  Json c = {{"name", kContainerName},
            {"image", options.image},
            {"command", Json::array({"flowrun", options.spec_word})}};
  if (!options.workdir.empty()) c["workingDir"] = options.workdir;
  Json env = Json::array({env_value("FLOWRUN_TOKEN_FILE", std::string(kTokenFilePath)),
                          env_value("FLOWRUN_GANG_NODES", std::to_string(shape.pods)),
                          env_value("FLOWRUN_GANG_HEAD", head_host(name, options.jobset))});
  // The gang's identity across its head's restarts (read_gang_identity):
  // the Job's uid, or the JobSet's, whose restarts make new child Jobs.
  env.push_back(
      {{"name", "FLOWRUN_GANG_ID"},
       {"valueFrom",
        {{"fieldRef",
          {{"fieldPath", options.jobset ? "metadata.labels['jobset.sigs.k8s.io/jobset-uid']"
                                        : "metadata.labels['batch.kubernetes.io/controller-uid']"}}}}}});
  if (options.jobset)
    env.push_back({{"name", "FLOWRUN_JOBSET_NAME"},
                   {"valueFrom",
                    {{"fieldRef", {{"fieldPath", "metadata.labels['jobset.sigs.k8s.io/jobset-name']"}}}}}});
  c["env"] = std::move(env);
  c["ports"] = Json::array({{{"name", "flowrun"}, {"containerPort", kManifestPort}, {"protocol", "TCP"}}});
  if (shape.gpus > 0) c["resources"] = {{"limits", {{"nvidia.com/gpu", shape.gpus}}}};
  c["volumeMounts"] =
      Json::array({{{"name", "flowrun-token"}, {"mountPath", kTokenMountPath}, {"readOnly", true}}});
  return c;
}

// The pod of every node. `subdomain` names the headless Service; a JobSet
// sets it itself. No service links: a Service named `master` in the
// namespace would otherwise give every pod MASTER_PORT=tcp://..., which
// reads as a PyTorchJob's variable.
Json pod_template(const std::string& name, const PodShape& shape, const ManifestOptions& options) {
  Json spec = Json::object();
  if (!options.jobset) spec["subdomain"] = name;
  spec["restartPolicy"] = "Never";
  spec["enableServiceLinks"] = false;
  spec["containers"] = Json::array({container(name, shape, options)});
  spec["volumes"] =
      Json::array({{{"name", "flowrun-token"},
                    {"secret", {{"secretName", name + "-token"}, {"defaultMode", 0400} /* 256 */}}}});
  return {{"metadata", {{"labels", labels(name)}}}, {"spec", std::move(spec)}};
}

// The Indexed Job's spec, also a JobSet's template. podFailurePolicy (why in
// docs/kubernetes.md): a disruption (preemption, eviction, a drained node)
// is not the flow's failure and spends no retry; an exit code no new pod
// would change fails the Job at once.
Json job_spec(const std::string& name, const PodShape& shape, const ManifestOptions& options) {
  Json rules =
      Json::array({{{"action", "Ignore"},
                    {"onPodConditions", Json::array({{{"type", "DisruptionTarget"}, {"status", "True"}}})}}});
  if (!shape.fail_exit_codes.empty())
    rules.push_back(
        {{"action", "FailJob"},
         {"onExitCodes",
          {{"containerName", kContainerName}, {"operator", "In"}, {"values", shape.fail_exit_codes}}}});
  return {{"completionMode", "Indexed"},
          {"completions", shape.pods},
          {"parallelism", shape.pods},
          {"backoffLimit", shape.backoff_limit},
          {"podFailurePolicy", {{"rules", std::move(rules)}}},
          {"template", pod_template(name, shape, options)}};
}

Json job(const std::string& name, const PodShape& shape, const ManifestOptions& options) {
  return {{"apiVersion", "batch/v1"},
          {"kind", "Job"},
          {"metadata", metadata(name, name, options, true)},
          {"spec", job_spec(name, shape, options)}};
}

// A JobSet restarts every pod when its Job fails, up to maxRestarts; not
// when the Job failed by podFailurePolicy (an exit code no restart fixes).
Json jobset(const std::string& name, const PodShape& shape, const ManifestOptions& options) {
  Json failure = {{"maxRestarts", shape.max_restarts}};
  if (!shape.fail_exit_codes.empty())
    failure["rules"] = Json::array({{{"name", "NotFixedByRestart"},
                                     {"action", "FailJobSet"},
                                     {"onJobFailureReasons", Json::array({"PodFailurePolicy"})}}});
  return {{"apiVersion", "jobset.x-k8s.io/v1alpha2"},
          {"kind", "JobSet"},
          {"metadata", metadata(name, name, options, true)},
          {"spec",
           {{"network", {{"enableDNSHostnames", true}, {"subdomain", name}}},
            {"failurePolicy", std::move(failure)},
            {"replicatedJobs", Json::array({{{"name", kJobSetReplicatedJob},
                                             {"replicas", 1},
                                             {"template",
                                              {{"metadata", {{"labels", labels(name)}}},
                                               {"spec", job_spec(name, shape, options)}}}}})}}}};
}

}  // namespace

std::vector<Json> manifest_objects(const Spec& spec, const std::vector<StepPlan>& plans,
                                   const ManifestOptions& options) {
  check_options(options);
  const PodShape shape = pod_shape(plans);
  const std::string name = manifest_name(spec, options, shape.pods);
  if (options.jobset) return {secret(name, options), jobset(name, shape, options)};
  return {secret(name, options), service(name, options), job(name, shape, options)};
}

std::string format_manifests(const Spec& spec, const std::vector<StepPlan>& plans,
                             const ManifestOptions& options) {
  const std::vector<Json> objects = manifest_objects(spec, plans, options);
  const PodShape shape = pod_shape(plans);
  const std::string name = objects.front()["metadata"]["labels"]["app.kubernetes.io/instance"];
  std::string text = "# flowrun manifest of flow " + spec.name + ": " +
                     (options.jobset ? "JobSet " : "Indexed Job ") + name + ", " + plural(shape.pods, "pod") +
                     " running `flowrun SPEC`, pod 0 the head.\n" +
                     "# The Secret holds the run's token: keep this private. Apply: kubectl apply -f FILE\n";
  for (const Json& object : objects) text += "---\n" + yaml_text(object);
  return text;
}

}  // namespace flowrun
