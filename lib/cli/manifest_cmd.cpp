// flowrun manifest: the Kubernetes objects that run a spec on a gang of pods
// (docs/kubernetes.md). The objects are lib/manifest's; this reads the spec
// and makes the run's token.
#include <CLI/CLI.hpp>
#include <iostream>

#include "flowrun/error.h"
#include "flowrun/manifest.h"
#include "flowrun/protocol.h"
#include "flowrun/spec.h"

#include "commands.h"

namespace flowrun {

int cmd_manifest(int argc, char** argv) {
  ManifestOptions options;
  int gpus_per_node = 0;
  CLI::App app{
      "Write the Kubernetes objects that run SPEC on a gang of pods, each pod one node running `flowrun\n"
      "SPEC`: pod 0 is the head and runs the flow, every other pod its agent. On stdout, as one YAML\n"
      "stream: a Secret NAME-token with a fresh token for the run (mounted read-only at /etc/flowrun), a\n"
      "headless Service NAME (the pods' DNS names) and an Indexed Job NAME, as many pods as the step that\n"
      "needs most nodes has nodes and spares, nvidia.com/gpu as its plan uses; or, with --jobset, a\n"
      "JobSet in place of the Service and the Job.",
      "flowrun manifest"};
  app.add_option("spec", options.spec_word,
                 "The flow spec; the pods run `flowrun SPEC` with SPEC as written here, from the container's "
                 "working directory")
      ->required()
      ->type_name("SPEC");
  app.add_option("--image", options.image,
                 "The container image of every pod, with flowrun and the flow's code")
      ->required()
      ->type_name("IMAGE");
  app.add_option("--gpus-per-node", gpus_per_node,
                 "The GPUs each pod's node has, which the plan divides (default: the spec's "
                 "cluster.gpus_per_node; not needed for CPU workers)")
      ->check(CLI::Range(1, 1024))
      ->type_name("N");
  app.add_option(
         "--name", options.name,
         "The objects' name, a DNS-1035 label (default: the spec's name, lower-cased, '-' for the rest)")
      ->type_name("NAME");
  app.add_option("--namespace", options.kube_namespace, "The namespace of every object (default: kubectl's)")
      ->type_name("NS");
  app.add_option("--queue", options.queue,
                 "Kueue's LocalQueue: the label kueue.x-k8s.io/queue-name on the Job or JobSet")
      ->type_name("QUEUE");
  app.add_option("--workdir", options.workdir, "The container's working directory (default: the image's)")
      ->type_name("DIR");
  app.add_flag("--jobset", options.jobset,
               "Write a JobSet (jobset.x-k8s.io/v1alpha2) in place of the Service and the Job");
  app.footer(
      "Example:\n"
      "  flowrun manifest train.yaml --image ghcr.io/me/train:1 --gpus-per-node 8 | kubectl apply -f -\n"
      "The Secret holds the run's token: keep what this writes private, and write it afresh for each run.\n"
      "The pods must reach each other on any port (the ranks' NCCL or gloo and torch's store pick theirs).\n"
      "Exit codes: 0 written; 2 for a bad option, a spec error or a step the pods cannot run.\n"
      "More: docs/kubernetes.md.");
  if (const auto done = parse_subcommand(app, "manifest", argc, argv)) return *done;
  return report_errors([&]() -> int {
    if (gpus_per_node > 0) options.gpus_per_node = gpus_per_node;
    const Spec spec = load_or_throw(options.spec_word);
    const std::vector<StepPlan> plans = plan_pods(spec, options);
    options.token = make_token();
    std::cout << format_manifests(spec, plans, options);
    return kExitOk;
  });
}

}  // namespace flowrun
