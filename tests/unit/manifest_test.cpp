// flowrun manifest's objects (lib/manifest) from specs parsed as a user
// writes them: the names and Kubernetes' rules for them, the pods' plans and
// shape (pods, GPUs, backoffLimit, podFailurePolicy), every field flowrun's
// pods rely on, exactly, and yaml_text's YAML (lib/spec). Whether Kubernetes
// itself accepts the objects is tests/test_manifests.py's part, against its
// schemas for 1.29 to 1.35.
#include "flowrun/manifest.h"

#include <catch2/catch.hpp>
#include <functional>
#include <string>

#include "flowrun/error.h"
#include "flowrun/spec.h"
#include "flowrun/yaml_text.h"

#include "manifest_detail.h"

using namespace flowrun;

namespace {

const std::string kToken(64, 'a');

Spec spec_of(const std::string& text) {
  SpecParse parsed = parse_spec(text, "train.yaml", "/work");
  INFO(text);
  REQUIRE(parsed.diagnostics.empty());
  return *parsed.spec;
}

// name: train; a plain step, a parallel step with `parallel` (indented as
// the keys under parallel:), and its join.
Spec flow(const std::string& parallel, const std::string& name = "train") {
  return spec_of("name: " + name +
                 "\nsteps:\n"
                 "  - name: prepare\n"
                 "    run: python3 prepare.py\n"
                 "  - name: fit\n"
                 "    run: python3 fit.py\n"
                 "    parallel:\n" +
                 parallel +
                 "  - name: report\n"
                 "    join: fit\n"
                 "    run: python3 report.py\n");
}

ManifestOptions options(std::optional<int> gpus_per_node = 8) {
  ManifestOptions o;
  o.spec_word = "train.yaml";
  o.image = "ghcr.io/me/train:1";
  o.gpus_per_node = gpus_per_node;
  o.token = kToken;
  return o;
}

PodShape shape_of(const Spec& spec, const ManifestOptions& o = options()) {
  return pod_shape(plan_pods(spec, o));
}

std::string error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const DiagnosticError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    return e.diagnostics().front().to_string();
  } catch (const Error& e) {
    CHECK(e.exit_code() == kExitUsage);
    return e.what();
  }
  FAIL("no error");
  return {};
}

}  // namespace

TEST_CASE("yaml_text quotes every string a YAML 1.1 reader would take for something else", "[manifest]") {
  for (const char* plain : {"flowrun", "/etc/flowrun", "train-0.train", "nvidia.com/gpu", "batch/v1", "Never",
                            "_x", "yes-no", "DisruptionTarget"}) {
    INFO(plain);
    CHECK(yaml_text(Json(plain)) == std::string(plain) + "\n");
  }
  for (const char* quoted : {"yes", "No", "ON", "off", "y", "True", "null", "8", "0400", "1:20", "", "a b",
                             ".inf", "-x", "ghcr.io/me/train:1", "~", "#c", "metadata.labels['a']"}) {
    INFO(quoted);
    CHECK(yaml_text(Json(quoted)) == "\"" + std::string(quoted) + "\"\n");
  }
  CHECK(yaml_text(Json("a\"b\n")) == "\"a\\\"b\\n\"\n");
  CHECK(yaml_text(Json(256)) == "256\n");
  CHECK(yaml_text(Json(true)) == "true\n");
  CHECK(yaml_text(Json(nullptr)) == "~\n");
  CHECK(yaml_text(Json::parse(R"({"a": [], "b": {}, "c": [1, {"d": "x", "e": ["8"]}]})")) ==
        "a: []\nb: {}\nc:\n  - 1\n  - d: x\n    e:\n      - \"8\"\n");
}

TEST_CASE("the objects' name: the spec's, made a DNS-1035 label that leaves room for the pod index",
          "[manifest]") {
  using manifest_detail::dns1035_slug;
  CHECK(dns1035_slug("Train_Demo", 61) == "train-demo");
  CHECK(dns1035_slug("2024.run", 61) == "flow-2024-run");
  CHECK(dns1035_slug("__", 61) == "flow");
  CHECK(dns1035_slug("abcdefgh-ij", 9) == "abcdefgh");
  CHECK(manifest_detail::host_suffix(false, 3) == "-2");
  CHECK(manifest_detail::host_suffix(true, 12) == "-node-0-11");
  CHECK(manifest_detail::head_host("train", false) == "train-0.train");
  CHECK(manifest_detail::head_host("train", true) == "train-node-0-0.train");

  const Spec spec = flow("      nodes: 2\n", "My_Flow.v2");
  ManifestOptions o = options();
  CHECK(manifest_name(spec, o, 2) == "my-flow-v2");
  const std::string long_name(70, 'x');
  CHECK(manifest_name(flow("      nodes: 2\n", long_name), o, 2) == std::string(61, 'x'));
  CHECK(manifest_name(flow("      nodes: 2\n", long_name), o, 10) == std::string(61, 'x'));
  CHECK(manifest_name(flow("      nodes: 2\n", long_name), o, 11) == std::string(60, 'x'));
  o.jobset = true;
  CHECK(manifest_name(flow("      nodes: 2\n", long_name), o, 2) == std::string(54, 'x'));

  o = options();
  o.name = "train-1";
  CHECK(manifest_name(spec, o, 2) == "train-1");
  o.name = "Train_1";
  CHECK(error_of([&] { manifest_name(spec, o, 2); }) ==
        "--name 'Train_1': a Kubernetes name here is a DNS-1035 label: lower-case letters, digits and '-', "
        "starting with a letter and ending with a letter or digit; try --name train-1");
  o.name = "1st";
  CHECK(error_of([&] { manifest_name(spec, o, 2); }).ends_with("; try --name flow-1st"));
  o.name = std::string(60, 'a');
  o.jobset = true;
  CHECK(error_of([&] { manifest_name(spec, o, 3); }) ==
        "--name '" + o.name +
            "' has 60 characters, but each pod's host name is NAME-node-0-INDEX (the last '" + o.name +
            "-node-0-2'), which Kubernetes holds to 63 characters; use at most 54, such as --name " +
            std::string(54, 'a'));
}

TEST_CASE("the pods: the most nodes and spares of any step, the GPUs its nodes use, the retries",
          "[manifest]") {
  struct Row {
    const char* what;
    std::string parallel;
    int pods, gpus, backoff, max_restarts;
    std::vector<int> fail;
  };
  const std::vector<Row> rows = {
      {"one node, all its GPUs", "      gpus: all\n", 1, 8, 0, 0, {2}},
      {"two of a node's GPUs", "      gpus: 2\n", 1, 2, 0, 0, {2}},
      {"2 nodes", "      nodes: 2\n", 2, 8, 0, 0, {2}},
      {"16 GPUs fan out to 2 nodes", "      gpus: 16\n", 2, 8, 0, 0, {2}},
      {"2 nodes and a spare", "      nodes: 2\n      spare_nodes: 1\n", 3, 8, 1, 0, {2}},
      {"elastic 2:4, 3 restarts", "      nodes: \"2:4\"\n      max_restarts: 3\n", 4, 8, 5, 3, {2}},
      {"CPU workers on 2 nodes", "      nodes: 2\n      cpus: 8\n", 2, 0, 0, 0, {2}},
      {"a restart policy that retries exit code 2",
       "      nodes: 2\n      max_restarts: 2\n      restart:\n        causes: [signal]\n        exit_codes: "
       "[2, 75]\n",
       2,
       8,
       2,
       2,
       {}},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    const PodShape shape = shape_of(flow(row.parallel));
    CHECK(shape.pods == row.pods);
    CHECK(shape.gpus == row.gpus);
    CHECK(shape.backoff_limit == row.backoff);
    CHECK(shape.max_restarts == row.max_restarts);
    CHECK(shape.fail_exit_codes == row.fail);
  }
  // No parallel step: one pod, no GPU, nothing to plan.
  const Spec plain = spec_of("name: plain\nsteps:\n  - name: a\n    run: echo a\n");
  const PodShape shape = shape_of(plain, options(std::nullopt));
  CHECK(shape.pods == 1);
  CHECK(shape.gpus == 0);
}

TEST_CASE("the pods' plans: what the pods cannot run is refused at the key, with the fix", "[manifest]") {
  CHECK(error_of([] { plan_pods(flow("      nodes: 2\n"), options(std::nullopt)); }) ==
        "step fit runs on GPUs, and nothing says how many each pod has: pass --gpus-per-node N, the "
        "nvidia.com/gpu of every pod (or give the step cpus: N for CPU workers)");
  CHECK(error_of([] { plan_pods(flow("      gpus: 12\n      nodes: 2\n"), options(4)); }) ==
        "train.yaml:8:13: steps.fit.parallel.gpus: gpus: 12 over 2 nodes is 6 GPUs per node, but "
        "cluster.gpus_per_node says each node has 4 GPUs; ask for at most 8 or more nodes");
  const Spec ssh = spec_of(
      "name: t\ncluster:\n  engine: ssh\n  hosts: [a, b]\n  gpus_per_node: 4\nsteps:\n  - name: fit\n"
      "    run: python3 fit.py\n    parallel:\n      nodes: 2\n");
  CHECK(
      error_of([&] { plan_pods(ssh, options()); }) ==
      "train.yaml:2:1: cluster.engine: engine 'ssh' starts the agents over ssh, and an engine the spec names "
      "wins over the gang that a Job's pods make, each pod its own node; write engine: gang, or leave "
      "cluster: "
      "out (its gpus_per_node as --gpus-per-node)");
  CHECK(manifest_detail::reach_outside_gang(Engine::slurm) == "starts the agents with srun");
  CHECK(manifest_detail::reach_outside_gang(Engine::manual) == "waits for agents started by hand");
  // The plan is the planner's on a pod of --gpus-per-node GPUs: 2 nodes, 8 ranks each.
  const std::vector<StepPlan> plans = plan_pods(flow("      nodes: 2\n"), options());
  REQUIRE(plans.size() == 1);
  CHECK(plans[0].world_size == 16);
  CHECK(plans[0].mode == PlanMode::multi_node);
}

TEST_CASE("the Secret, the headless Service and the Indexed Job, field by field", "[manifest]") {
  const Spec spec = flow("      nodes: 2\n      spare_nodes: 1\n      max_restarts: 2\n");
  ManifestOptions o = options();
  o.kube_namespace = "ml";
  o.workdir = "/workspace";
  const std::vector<Json> objects = manifest_objects(spec, plan_pods(spec, o), o);
  REQUIRE(objects.size() == 3);
  const Json labels = {{"app.kubernetes.io/name", "flowrun"}, {"app.kubernetes.io/instance", "train"}};

  const Json& secret = objects[0];
  CHECK(secret["apiVersion"] == "v1");
  CHECK(secret["kind"] == "Secret");
  CHECK(secret["metadata"] == Json({{"name", "train-token"}, {"namespace", "ml"}, {"labels", labels}}));
  CHECK(secret["type"] == "Opaque");
  CHECK(secret["stringData"] == Json({{"token", kToken}}));

  const Json& service = objects[1];
  CHECK(service["kind"] == "Service");
  CHECK(service["metadata"] == Json({{"name", "train"}, {"namespace", "ml"}, {"labels", labels}}));
  CHECK(service["spec"]["clusterIP"] == "None");
  CHECK(service["spec"]["publishNotReadyAddresses"] == true);
  CHECK(service["spec"]["selector"] == labels);
  CHECK(service["spec"]["ports"] ==
        Json::parse(R"([{"name": "flowrun", "port": 29400, "targetPort": 29400, "protocol": "TCP"}])"));

  const Json& job = objects[2];
  CHECK(job["apiVersion"] == "batch/v1");
  CHECK(job["kind"] == "Job");
  CHECK(job["metadata"] == Json({{"name", "train"}, {"namespace", "ml"}, {"labels", labels}}));
  const Json& spec_ = job["spec"];
  CHECK(spec_["completionMode"] == "Indexed");
  CHECK(spec_["completions"] == 3);
  CHECK(spec_["parallelism"] == 3);
  CHECK(spec_["backoffLimit"] == 3);
  CHECK(spec_["podFailurePolicy"] == Json::parse(R"({"rules": [
      {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
      {"action": "FailJob", "onExitCodes": {"containerName": "flowrun", "operator": "In", "values": [2]}}]})"));
  const Json& pod = spec_["template"];
  CHECK(pod["metadata"] == Json({{"labels", labels}}));
  CHECK(pod["spec"]["subdomain"] == "train");
  CHECK(pod["spec"]["restartPolicy"] == "Never");
  CHECK(pod["spec"]["enableServiceLinks"] == false);
  CHECK(pod["spec"]["volumes"] == Json::parse(R"([{"name": "flowrun-token",
      "secret": {"secretName": "train-token", "defaultMode": 256}}])"));
  REQUIRE(pod["spec"]["containers"].size() == 1);
  const Json& c = pod["spec"]["containers"][0];
  CHECK(c["name"] == "flowrun");
  CHECK(c["image"] == "ghcr.io/me/train:1");
  CHECK(c["command"] == Json::parse(R"(["flowrun", "train.yaml"])"));
  CHECK(c["workingDir"] == "/workspace");
  CHECK(c["env"] == Json::parse(R"([{"name": "FLOWRUN_TOKEN_FILE", "value": "/etc/flowrun/token"},
      {"name": "FLOWRUN_GANG_NODES", "value": "3"}, {"name": "FLOWRUN_GANG_HEAD", "value": "train-0.train"},
      {"name": "FLOWRUN_GANG_ID", "valueFrom": {"fieldRef":
          {"fieldPath": "metadata.labels['batch.kubernetes.io/controller-uid']"}}}])"));
  CHECK(c["ports"] == Json::parse(R"([{"name": "flowrun", "containerPort": 29400, "protocol": "TCP"}])"));
  CHECK(c["resources"] == Json::parse(R"({"limits": {"nvidia.com/gpu": 8}})"));
  CHECK(c["volumeMounts"] ==
        Json::parse(R"([{"name": "flowrun-token", "mountPath": "/etc/flowrun", "readOnly": true}])"));

  // CPU workers: no GPU asked for; no namespace: none written; one node: one pod.
  const Spec cpu = flow("      cpus: 4\n");
  const ManifestOptions plain = options(std::nullopt);
  const Json cpu_job = manifest_objects(cpu, plan_pods(cpu, plain), plain)[2];
  CHECK(cpu_job["metadata"].count("namespace") == 0);
  CHECK(cpu_job["spec"]["completions"] == 1);
  CHECK(cpu_job["spec"]["template"]["spec"]["containers"][0].count("resources") == 0);
  CHECK(cpu_job["spec"]["template"]["spec"]["containers"][0].count("workingDir") == 0);
}

TEST_CASE("--jobset: a JobSet of one replicated job in place of the Service and the Job; --queue",
          "[manifest]") {
  const Spec spec = flow("      nodes: 2\n      max_restarts: 2\n");
  ManifestOptions o = options();
  o.jobset = true;
  o.queue = "team-a";
  const std::vector<Json> objects = manifest_objects(spec, plan_pods(spec, o), o);
  REQUIRE(objects.size() == 2);
  CHECK(objects[0]["kind"] == "Secret");
  CHECK(objects[0]["metadata"]["labels"].count("kueue.x-k8s.io/queue-name") == 0);
  const Json& js = objects[1];
  CHECK(js["apiVersion"] == "jobset.x-k8s.io/v1alpha2");
  CHECK(js["kind"] == "JobSet");
  CHECK(js["metadata"]["name"] == "train");
  CHECK(js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a");
  CHECK(js["spec"]["network"] == Json::parse(R"({"enableDNSHostnames": true, "subdomain": "train"})"));
  CHECK(js["spec"]["failurePolicy"] ==
        Json::parse(R"({"maxRestarts": 2, "rules": [{"name": "NotFixedByRestart",
      "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}]})"));
  REQUIRE(js["spec"]["replicatedJobs"].size() == 1);
  const Json& rj = js["spec"]["replicatedJobs"][0];
  CHECK(rj["name"] == "node");
  CHECK(rj["replicas"] == 1);
  const Json& job = rj["template"]["spec"];
  CHECK(job["completionMode"] == "Indexed");
  CHECK(job["completions"] == 2);
  CHECK(job["backoffLimit"] == 2);
  CHECK(job["template"]["spec"].count("subdomain") == 0);  // the JobSet's network sets it
  CHECK(job["template"]["spec"]["containers"][0]["env"] == Json::parse(R"([
      {"name": "FLOWRUN_TOKEN_FILE", "value": "/etc/flowrun/token"},
      {"name": "FLOWRUN_GANG_NODES", "value": "2"},
      {"name": "FLOWRUN_GANG_HEAD", "value": "train-node-0-0.train"},
      {"name": "FLOWRUN_GANG_ID", "valueFrom": {"fieldRef":
          {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/jobset-uid']"}}},
      {"name": "FLOWRUN_JOBSET_NAME", "valueFrom": {"fieldRef":
          {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/jobset-name']"}}}])"));

  // The Indexed Job takes the queue label; the Service does not.
  o.jobset = false;
  const std::vector<Json> job_objects = manifest_objects(spec, plan_pods(spec, o), o);
  CHECK(job_objects[1]["metadata"]["labels"].count("kueue.x-k8s.io/queue-name") == 0);
  CHECK(job_objects[2]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a");
}

TEST_CASE("options Kubernetes would refuse are refused first, each with the rule", "[manifest]") {
  const Spec spec = flow("      nodes: 2\n");
  const std::vector<StepPlan> plans = plan_pods(spec, options());
  struct Row {
    std::function<void(ManifestOptions&)> set;
    std::string error;
  };
  const std::vector<Row> rows = {
      {[](ManifestOptions& o) { o.image.clear(); },
       "--image is required: the container image every pod runs, with flowrun and the flow's code in it "
       "(--image ghcr.io/me/train:1)"},
      {[](ManifestOptions& o) { o.image = "my image"; },
       "--image 'my image': an image reference has no spaces or control characters, such as "
       "ghcr.io/me/train:1"},
      {[](ManifestOptions& o) { o.kube_namespace = "ML"; },
       "--namespace 'ML': a namespace is a DNS-1123 label: lower-case letters, digits and '-', starting and "
       "ending with a letter or digit, at most 63 characters"},
      {[](ManifestOptions& o) { o.queue = "team a"; },
       "--queue 'team a': a Kueue LocalQueue's name, which the label kueue.x-k8s.io/queue-name holds: "
       "lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 63 "
       "characters"},
      {[](ManifestOptions& o) { o.workdir = "src"; },
       "--workdir 'src': the container's working directory is an absolute path in the image, such as "
       "/workspace"},
  };
  for (const Row& row : rows) {
    ManifestOptions o = options();
    row.set(o);
    CHECK(error_of([&] { manifest_objects(spec, plans, o); }) == row.error);
  }
  ManifestOptions o = options();
  o.queue = "team-a.gpu";
  o.kube_namespace = "0ml";
  CHECK(manifest_objects(spec, plans, o).size() == 3);
}

TEST_CASE("format_manifests: a comment, then each object as YAML after '---'", "[manifest]") {
  const Spec spec = flow("      nodes: 2\n");
  const ManifestOptions o = options();
  const std::string text = format_manifests(spec, plan_pods(spec, o), o);
  CHECK(text.starts_with(
      "# flowrun manifest of flow train: Indexed Job train, 2 pods running `flowrun SPEC`, pod 0 the head.\n"
      "# The Secret holds the run's token: keep this private. Apply: kubectl apply -f FILE\n---\n"
      "apiVersion: v1\nkind: Secret\nmetadata:\n  name: train-token\n"));
  CHECK(text.find("---\napiVersion: v1\nkind: Service\n") != std::string::npos);
  CHECK(text.find("---\napiVersion: batch/v1\nkind: Job\n") != std::string::npos);
  CHECK(text.find("          image: \"ghcr.io/me/train:1\"\n") != std::string::npos);
  CHECK(text.find("              value: \"2\"\n") != std::string::npos);  // FLOWRUN_GANG_NODES, a string
}
