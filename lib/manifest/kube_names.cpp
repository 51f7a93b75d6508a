// The names flowrun manifest writes, held to Kubernetes' rules (manifest.h),
// and the plans of the steps as they run in the pods.

#include <algorithm>
#include <string>

#include "flowrun/error.h"
#include "flowrun/gpu.h"
#include "flowrun/manifest.h"
#include "flowrun/spec.h"
#include "flowrun/text.h"

#include "manifest_detail.h"

namespace flowrun {

namespace manifest_detail {

namespace {

bool lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

}  // namespace

bool is_dns1035_label(std::string_view name) {
  return !name.empty() && name.size() <= kMaxLabelLength && name.front() >= 'a' && name.front() <= 'z' &&
         lower_alnum(name.back()) &&
         std::all_of(name.begin(), name.end(), [](char c) { return lower_alnum(c) || c == '-'; });
}

bool is_dns1123_label(std::string_view name) {
  return !name.empty() && name.size() <= kMaxLabelLength && lower_alnum(name.front()) &&
         lower_alnum(name.back()) &&
         std::all_of(name.begin(), name.end(), [](char c) { return lower_alnum(c) || c == '-'; });
}

bool is_queue_name(std::string_view name) {
  return !name.empty() && name.size() <= kMaxLabelLength && lower_alnum(name.front()) &&
         lower_alnum(name.back()) &&
         std::all_of(name.begin(), name.end(), [](char c) { return lower_alnum(c) || c == '-' || c == '.'; });
}

std::string dns1035_slug(std::string_view text, std::size_t max) {
  std::string out;
  for (const char raw : text) {
    const char c = raw >= 'A' && raw <= 'Z' ? static_cast<char>(raw - 'A' + 'a') : raw;
    if (lower_alnum(c))
      out += c;
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  // A DNS-1035 label starts with a letter: "2024-run" becomes "flow-2024-run".
  if (out.empty() || out.front() < 'a' || out.front() > 'z') out = "flow-" + out;
  if (out.size() > max) out.resize(max);
  while (out.back() == '-') out.pop_back();
  return out;
}

std::string host_suffix(bool jobset, int pods) {
  const std::string last = std::to_string(std::max(pods, 1) - 1);
  return jobset ? "-" + std::string(kJobSetReplicatedJob) + "-0-" + last : "-" + last;
}

std::string head_host(const std::string& name, bool jobset) {
  return name + host_suffix(jobset, 1) + "." + name;
}

}  // namespace manifest_detail

using namespace manifest_detail;

std::string manifest_name(const Spec& spec, const ManifestOptions& options, int pods) {
  const std::string suffix = host_suffix(options.jobset, pods);
  const std::size_t max = kMaxLabelLength - suffix.size();
  if (options.name.empty()) return dns1035_slug(spec.name, max);
  const std::string& name = options.name;
  const std::string fix = dns1035_slug(name, max);
  if (!is_dns1035_label(name))
    throw Error("--name " + quote(name) +
                    ": a Kubernetes name here is a DNS-1035 label: lower-case letters, digits and '-', "
                    "starting with a letter and ending with a letter or digit; try --name " +
                    fix,
                kExitUsage);
  if (name.size() > max)
    throw Error("--name " + quote(name) + " has " + plural(static_cast<int>(name.size()), "character") +
                    ", but each pod's host name is NAME" + suffix.substr(0, suffix.rfind('-')) +
                    "-INDEX (the last " + quote(name + suffix) + "), which Kubernetes holds to " +
                    std::to_string(kMaxLabelLength) + " characters; use at most " + std::to_string(max) +
                    ", such as --name " + fix,
                kExitUsage);
  return name;
}

// A switch without a default, so that an engine added to the spec is
// decided here too.
std::optional<std::string> manifest_detail::reach_outside_gang(Engine engine) {
  switch (engine) {
    case Engine::slurm: return "starts the agents with srun";
    case Engine::ssh: return "starts the agents over ssh";
    case Engine::manual: return "waits for agents started by hand";
    case Engine::gang: return std::nullopt;
  }
  return std::nullopt;
}

std::vector<StepPlan> plan_pods(const Spec& spec, const ManifestOptions& options) {
  Spec in_pods = spec;
  ClusterSpec& cluster = in_pods.cluster.emplace(spec.cluster.value_or(ClusterSpec{}));
  if (spec.cluster) {
    if (auto reach = reach_outside_gang(spec.cluster->engine))
      throw DiagnosticError({Diagnostic{
          spec.file, spec.cluster->loc, "cluster.engine",
          "engine '" + std::string(engine_name(spec.cluster->engine)) + "' " + *reach +
              ", and an engine the spec names wins over the gang that a Job's pods make, each pod its own "
              "node; write engine: gang, or leave cluster: out (its gpus_per_node as --gpus-per-node)"}});
  }
  // In the pods no engine starts an agent: each pod does. `manual` is the
  // engine of that among the spec's, and the planner asks only that it is
  // neither ssh's hosts nor Slurm's allocation.
  cluster.engine = Engine::manual;
  if (options.gpus_per_node) cluster.gpus_per_node = *options.gpus_per_node;
  const int gpus = cluster.gpus_per_node.value_or(0);
  if (gpus == 0) {
    for (const std::size_t index : spec.order) {
      const Step& step = spec.steps[index];
      if (step.is_parallel() && !step.parallel->cpus)
        throw Error("step " + step.name +
                        " runs on GPUs, and nothing says how many each pod has: pass --gpus-per-node N, "
                        "the nvidia.com/gpu of every pod (or give the step cpus: N for CPU workers)",
                    kExitUsage);
    }
  }
  HostFacts pod;
  pod.hostname = "each pod";
  pod.inventory.source = "manifest";
  pod.inventory.system_count = static_cast<std::size_t>(gpus);
  for (int i = 0; i < gpus; ++i) {
    Gpu gpu;
    gpu.index = i;
    gpu.uuid = "GPU-" + std::to_string(i);
    gpu.name = "nvidia.com/gpu";
    gpu.select_token = std::to_string(i);
    pod.inventory.gpus.push_back(std::move(gpu));
  }
  return plan_flow(in_pods, pod, PlanOptions{});
}

}  // namespace flowrun
