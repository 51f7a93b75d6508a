// Which node of a gang this is, read from the environment each platform gives
// its nodes: every platform's environment, as its documentation says it sets
// it, with a container's variables around it, to the read; every
// contradiction to its message, compared whole since it reaches the user.
#include "flowrun/gang.h"

#include <catch2/catch.hpp>

#include "testing.h"

using namespace flowrun;

namespace {

// What any container has, which no platform reads.
EnvMap container(EnvMap env) {
  env.emplace("PATH", "/usr/local/bin:/usr/bin:/bin");
  env.emplace("HOME", "/root");
  env.emplace("HOSTNAME", "train-1");
  return env;
}

using testing::with;
using testing::without;

// The read expected of a node: its platform, index, node count, the head's
// index, address and port, and the variables read.
GangRead node(GangPlatform platform, int index, int num_nodes, int head_index, std::string head_host,
              std::optional<int> head_port, std::vector<std::pair<std::string, std::string>> variables) {
  return {platform, index, num_nodes, head_index, std::move(head_host), head_port, std::move(variables)};
}

std::string gang_error(const EnvMap& env) {
  std::string error;
  auto read = read_gang(env, &error);
  CHECK_FALSE(read.has_value());
  return error;
}

// Pod 1 of an Indexed Job `train` of 3 completions, subdomain `train`, with
// the variables flowrun's manifest sets; the Job controller's own index.
const EnvMap kIndexedJob = container({{"JOB_COMPLETION_INDEX", "1"},
                                      {"FLOWRUN_GANG_NODES", "3"},
                                      {"FLOWRUN_GANG_HEAD", "train-0.train"},
                                      {"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                                      {"KUBERNETES_SERVICE_PORT", "443"}});

// Pod 2 of a JobSet `train`, replicated Job `node`, one child Job of 4.
const EnvMap kJobSet = container({{"JOB_COMPLETION_INDEX", "2"},
                                  {"FLOWRUN_JOBSET_NAME", "train"},
                                  {"FLOWRUN_GANG_NODES", "4"},
                                  {"FLOWRUN_GANG_HEAD", "train-node-0-0.train"},
                                  {"KUBERNETES_SERVICE_HOST", "10.96.0.1"}});

// Node 1 of a TrainJob `llm` of numNodes 2 (Trainer v2's torch runtime, on a
// JobSet: the completion index is there too).
const EnvMap kTrainJob = container({{"PET_NODE_RANK", "1"},
                                    {"PET_NNODES", "2"},
                                    {"PET_NPROC_PER_NODE", "auto"},
                                    {"PET_MASTER_ADDR", "llm-node-0-0.llm"},
                                    {"PET_MASTER_PORT", "29500"},
                                    {"JOB_COMPLETION_INDEX", "1"}});

// Worker-0 of a PyTorchJob `mnist` of one Master and two Workers: the third pod.
const EnvMap kPyTorchJob = container({{"MASTER_ADDR", "mnist-master-0"},
                                      {"MASTER_PORT", "23456"},
                                      {"RANK", "1"},
                                      {"WORLD_SIZE", "3"},
                                      {"PYTHONUNBUFFERED", "0"}});

// The same job's Worker-1 under a recent training operator, nprocPerNode 8:
// torchrun's PET_* beside the old variables, WORLD_SIZE in processes.
const EnvMap kPyTorchJobPet = container({{"MASTER_ADDR", "mnist-master-0"},
                                         {"MASTER_PORT", "23456"},
                                         {"PET_MASTER_ADDR", "mnist-master-0"},
                                         {"PET_MASTER_PORT", "23456"},
                                         {"RANK", "2"},
                                         {"WORLD_SIZE", "24"},
                                         {"PET_NODE_RANK", "2"},
                                         {"PET_NNODES", "3"},
                                         {"PET_NPROC_PER_NODE", "8"},
                                         {"PYTHONUNBUFFERED", "0"}});

// Node 2 of an AWS Batch multi-node parallel job of 4 nodes, main node 0.
const EnvMap kBatchChild = container({{"AWS_BATCH_JOB_ID", "f2c1e4a0-1b2c-4d5e-8f90-0a1b2c3d4e5f#2"},
                                      {"AWS_BATCH_JOB_NODE_INDEX", "2"},
                                      {"AWS_BATCH_JOB_NUM_NODES", "4"},
                                      {"AWS_BATCH_JOB_MAIN_NODE_INDEX", "0"},
                                      {"AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS", "10.0.1.17"},
                                      {"AWS_BATCH_JQ_NAME", "gpu-queue"}});

// The main node of that job: never told its own address.
const EnvMap kBatchMain = without(with(kBatchChild, "AWS_BATCH_JOB_NODE_INDEX", "0"),
                                  "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS");

// Node 1 of a SkyPilot task with num_nodes: 2.
const EnvMap kSkyPilot = container({{"SKYPILOT_NODE_RANK", "1"},
                                    {"SKYPILOT_NUM_NODES", "2"},
                                    {"SKYPILOT_NODE_IPS", "10.128.0.5\n10.128.0.6"},
                                    {"SKYPILOT_NUM_GPUS_PER_NODE", "8"},
                                    {"SKYPILOT_TASK_ID", "sky-2026-12-05-01-40-00-000000_mycluster_1"}});

// A task of an srun step in a two-node allocation, whose batch script also
// exported the variables to run torchrun by hand.
const EnvMap kSlurm = container({{"SLURM_JOB_ID", "4242"},
                                 {"SLURM_JOB_NODELIST", "gpu[1-2]"},
                                 {"SLURM_JOB_NUM_NODES", "2"},
                                 {"SLURM_NODEID", "1"},
                                 {"SLURM_PROCID", "1"},
                                 {"SLURM_NNODES", "2"}});

}  // namespace

TEST_CASE("read_gang reads each platform's node as the platform sets it", "[gang]") {
  struct Case {
    std::string name;
    EnvMap env;
    GangRead read;
  };
  const std::vector<Case> cases = {
      {"Indexed Job", kIndexedJob,
       node(GangPlatform::indexed_job, 1, 3, 0, "train-0.train", std::nullopt,
            {{"JOB_COMPLETION_INDEX", "1"},
             {"FLOWRUN_GANG_NODES", "3"},
             {"FLOWRUN_GANG_HEAD", "train-0.train"}})},
      {"Indexed Job, node 0", with(kIndexedJob, "JOB_COMPLETION_INDEX", "0"),
       node(GangPlatform::indexed_job, 0, 3, 0, "train-0.train", std::nullopt,
            {{"JOB_COMPLETION_INDEX", "0"},
             {"FLOWRUN_GANG_NODES", "3"},
             {"FLOWRUN_GANG_HEAD", "train-0.train"}})},
      {"Indexed Job of one pod, its index written 00",
       with(with(kIndexedJob, "JOB_COMPLETION_INDEX", "00"), "FLOWRUN_GANG_NODES", "1"),
       node(GangPlatform::indexed_job, 0, 1, 0, "train-0.train", std::nullopt,
            {{"JOB_COMPLETION_INDEX", "00"},
             {"FLOWRUN_GANG_NODES", "1"},
             {"FLOWRUN_GANG_HEAD", "train-0.train"}})},
      {"JobSet", kJobSet,
       node(GangPlatform::jobset, 2, 4, 0, "train-node-0-0.train", std::nullopt,
            {{"FLOWRUN_JOBSET_NAME", "train"},
             {"JOB_COMPLETION_INDEX", "2"},
             {"FLOWRUN_GANG_NODES", "4"},
             {"FLOWRUN_GANG_HEAD", "train-node-0-0.train"}})},
      {"TrainJob, over its JobSet", kTrainJob,
       node(GangPlatform::trainjob, 1, 2, 0, "llm-node-0-0.llm", 29500,
            {{"PET_NODE_RANK", "1"},
             {"PET_NNODES", "2"},
             {"PET_MASTER_ADDR", "llm-node-0-0.llm"},
             {"PET_MASTER_PORT", "29500"}})},
      {"TrainJob with FLOWRUN_JOBSET_NAME beside it, no port",
       without(with(kTrainJob, "FLOWRUN_JOBSET_NAME", "llm"), "PET_MASTER_PORT"),
       node(GangPlatform::trainjob, 1, 2, 0, "llm-node-0-0.llm", std::nullopt,
            {{"PET_NODE_RANK", "1"}, {"PET_NNODES", "2"}, {"PET_MASTER_ADDR", "llm-node-0-0.llm"}})},
      {"PyTorchJob, WORLD_SIZE in pods", kPyTorchJob,
       node(GangPlatform::pytorchjob, 1, 3, 0, "mnist-master-0", 23456,
            {{"RANK", "1"},
             {"WORLD_SIZE", "3"},
             {"MASTER_ADDR", "mnist-master-0"},
             {"MASTER_PORT", "23456"}})},
      {"PyTorchJob of a recent operator, WORLD_SIZE in processes", kPyTorchJobPet,
       node(GangPlatform::pytorchjob, 2, 3, 0, "mnist-master-0", 23456,
            {{"RANK", "2"},
             {"WORLD_SIZE", "24"},
             {"MASTER_ADDR", "mnist-master-0"},
             {"MASTER_PORT", "23456"},
             {"PET_NODE_RANK", "2"},
             {"PET_NNODES", "3"}})},
      {"AWS Batch, a child node", kBatchChild,
       node(GangPlatform::aws_batch, 2, 4, 0, "10.0.1.17", std::nullopt,
            {{"AWS_BATCH_JOB_NODE_INDEX", "2"},
             {"AWS_BATCH_JOB_NUM_NODES", "4"},
             {"AWS_BATCH_JOB_MAIN_NODE_INDEX", "0"},
             {"AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS", "10.0.1.17"}})},
      {"AWS Batch, the main node, not told its own address", kBatchMain,
       node(GangPlatform::aws_batch, 0, 4, 0, "", std::nullopt,
            {{"AWS_BATCH_JOB_NODE_INDEX", "0"},
             {"AWS_BATCH_JOB_NUM_NODES", "4"},
             {"AWS_BATCH_JOB_MAIN_NODE_INDEX", "0"}})},
      {"AWS Batch, main node 3: node 0 is an agent",
       with(with(kBatchChild, "AWS_BATCH_JOB_MAIN_NODE_INDEX", "3"), "AWS_BATCH_JOB_NODE_INDEX", "0"),
       node(GangPlatform::aws_batch, 0, 4, 3, "10.0.1.17", std::nullopt,
            {{"AWS_BATCH_JOB_NODE_INDEX", "0"},
             {"AWS_BATCH_JOB_NUM_NODES", "4"},
             {"AWS_BATCH_JOB_MAIN_NODE_INDEX", "3"},
             {"AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS", "10.0.1.17"}})},
      {"SkyPilot", kSkyPilot,
       node(GangPlatform::skypilot, 1, 2, 0, "10.128.0.5", std::nullopt,
            {{"SKYPILOT_NODE_RANK", "1"},
             {"SKYPILOT_NUM_NODES", "2"},
             {"SKYPILOT_NODE_IPS", "10.128.0.5\n10.128.0.6"}})},
      {"SkyPilot, the list ending in a newline",
       with(kSkyPilot, "SKYPILOT_NODE_IPS", "10.128.0.5\n10.128.0.6\n"),
       node(GangPlatform::skypilot, 1, 2, 0, "10.128.0.5", std::nullopt,
            {{"SKYPILOT_NODE_RANK", "1"},
             {"SKYPILOT_NUM_NODES", "2"},
             {"SKYPILOT_NODE_IPS", "10.128.0.5\n10.128.0.6\n"}})},
      {"SkyPilot of one node",
       with(with(with(kSkyPilot, "SKYPILOT_NODE_RANK", "0"), "SKYPILOT_NUM_NODES", "1"), "SKYPILOT_NODE_IPS",
            "10.128.0.5"),
       node(GangPlatform::skypilot, 0, 1, 0, "10.128.0.5", std::nullopt,
            {{"SKYPILOT_NODE_RANK", "0"}, {"SKYPILOT_NUM_NODES", "1"}, {"SKYPILOT_NODE_IPS", "10.128.0.5"}})},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    std::string error;
    auto read = read_gang(c.env, &error);
    REQUIRE(read.has_value());
    CHECK(error.empty());
    CHECK(read->platform == c.read.platform);
    CHECK(read->index == c.read.index);
    CHECK(read->num_nodes == c.read.num_nodes);
    CHECK(read->head_index == c.read.head_index);
    CHECK(read->is_head() == (c.read.index == c.read.head_index));
    CHECK(read->head_host == c.read.head_host);
    CHECK(read->head_port == c.read.head_port);
    CHECK(read->variables == c.read.variables);
  }
}

TEST_CASE("read_gang reads no gang where no platform's variables are set", "[gang]") {
  struct Case {
    std::string name;
    EnvMap env;
  };
  const std::vector<Case> cases = {
      {"an empty environment", {}},
      {"a container's environment", container({})},
      // Slurm has an engine of its own: its variables, and what a batch script
      // exports beside them for torchrun by hand, are no gang here.
      {"Slurm's variables alone", kSlurm},
      {"Slurm, with torchrun's variables exported by the batch script",
       with(with(with(kSlurm, "MASTER_ADDR", "gpu1"), "RANK", "1"), "WORLD_SIZE", "2")},
      // A worker of torchrun (or of flowrun) has RANK and WORLD_SIZE counted
      // in processes, not pods.
      {"a torchrun worker", container({{"RANK", "3"},
                                       {"WORLD_SIZE", "8"},
                                       {"LOCAL_RANK", "3"},
                                       {"MASTER_ADDR", "127.0.0.1"},
                                       {"TORCHELASTIC_RUN_ID", "none"}})},
      {"RANK without WORLD_SIZE", container({{"RANK", "0"}, {"MASTER_ADDR", "head"}})},
      {"the gang's own variables without an index",
       container({{"FLOWRUN_GANG_NODES", "2"}, {"FLOWRUN_GANG_HEAD", "train-0.train"}})},
      // torchrun's PET_* variables set by hand, without a node rank: torchrun
      // options, not a TrainJob.
      {"PET_NNODES and PET_NPROC_PER_NODE alone",
       container({{"PET_NNODES", "1"}, {"PET_NPROC_PER_NODE", "4"}})},
      {"an AWS Batch job of one node", container({{"AWS_BATCH_JOB_ID", "f2c1"}, {"AWS_BATCH_JQ_NAME", "q"}})},
      {"a Kubernetes pod that is no Job's", container({{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}})},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    std::string error;
    auto read = read_gang(c.env, &error);
    REQUIRE(read.has_value());
    CHECK(error.empty());
    CHECK(read->platform == GangPlatform::none);
    CHECK(read->variables.empty());
  }
}

TEST_CASE("read_gang refuses a contradiction, naming the variable and the fix", "[gang]") {
  struct Case {
    EnvMap env;
    std::string error;
  };
  const std::vector<Case> cases = {
      // Two platforms at once.
      {with(kIndexedJob, "AWS_BATCH_JOB_NODE_INDEX", "1"),
       "JOB_COMPLETION_INDEX (Kubernetes Indexed Job) and AWS_BATCH_JOB_NODE_INDEX (AWS Batch multi-node "
       "parallel job) are both set: a node is part of one gang; unset the variables of the one it is not "
       "part of"},
      {with(with(kIndexedJob, "RANK", "1"), "WORLD_SIZE", "3"),
       "JOB_COMPLETION_INDEX (Kubernetes Indexed Job) and RANK (Kubeflow PyTorchJob) are both set: a node is "
       "part of one gang; unset the variables of the one it is not part of"},
      {with(with(kSkyPilot, "PET_NODE_RANK", "0"), "PET_NNODES", "2"),
       "PET_NODE_RANK (Kubeflow TrainJob) and SKYPILOT_NODE_RANK (SkyPilot) are both set: a node is part of "
       "one gang; unset the variables of the one it is not part of"},
      {with(kBatchChild, "SKYPILOT_NODE_RANK", "0"),
       "AWS_BATCH_JOB_NODE_INDEX (AWS Batch multi-node parallel job) and SKYPILOT_NODE_RANK (SkyPilot) are "
       "both set: a node is part of one gang; unset the variables of the one it is not part of"},
      // A platform's variable missing.
      {without(kIndexedJob, "FLOWRUN_GANG_NODES"),
       "FLOWRUN_GANG_NODES is not set, but JOB_COMPLETION_INDEX=1 marks a node of a gang (Kubernetes Indexed "
       "Job): set it in the pod template's env to the Job's completions (the Job controller does not pass "
       "the count)"},
      {without(kIndexedJob, "FLOWRUN_GANG_HEAD"),
       "FLOWRUN_GANG_HEAD is not set, but JOB_COMPLETION_INDEX=1 marks a node of a gang (Kubernetes Indexed "
       "Job): set it in the pod template's env to node 0's DNS name, <job>-0.<service>, with subdomain: "
       "<service> and a headless Service of that name"},
      {without(kJobSet, "FLOWRUN_GANG_HEAD"),
       "FLOWRUN_GANG_HEAD is not set, but FLOWRUN_JOBSET_NAME=train marks a node of a gang (Kubernetes "
       "JobSet): set it in the pod template's env to node 0's DNS name, "
       "<jobset>-<replicatedJob>-0-0.<subdomain>"},
      {without(kJobSet, "JOB_COMPLETION_INDEX"),
       "JOB_COMPLETION_INDEX is not set, but FLOWRUN_JOBSET_NAME=train marks a node of a gang (Kubernetes "
       "JobSet): a JobSet's pods are those of Indexed Jobs, whose controller sets JOB_COMPLETION_INDEX; "
       "check the replicated Job's completionMode: Indexed"},
      {without(kTrainJob, "PET_MASTER_ADDR"),
       "PET_MASTER_ADDR is not set, but PET_NODE_RANK=1 marks a node of a gang (Kubeflow TrainJob): the "
       "TrainJob's runtime sets PET_NODE_RANK, PET_NNODES and PET_MASTER_ADDR together"},
      {without(kPyTorchJob, "MASTER_ADDR"),
       "MASTER_ADDR is not set, but RANK=1 with WORLD_SIZE=3 marks a node of a gang (Kubeflow PyTorchJob): "
       "the PyTorchJob's operator sets MASTER_ADDR to the master replica's service; set it to node 0's "
       "address"},
      {without(kBatchChild, "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"),
       "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS is not set, but AWS_BATCH_JOB_NODE_INDEX=2 marks a node "
       "of a gang (AWS Batch multi-node parallel job): AWS Batch sets it on every node but the main one; is "
       "the job's container started by the multi-node parallel job itself?"},
      {without(kBatchChild, "AWS_BATCH_JOB_NUM_NODES"),
       "AWS_BATCH_JOB_NUM_NODES is not set, but AWS_BATCH_JOB_NODE_INDEX=2 marks a node of a gang (AWS Batch "
       "multi-node parallel job): AWS Batch sets it in every container of a multi-node parallel job"},
      {without(kBatchChild, "AWS_BATCH_JOB_MAIN_NODE_INDEX"),
       "AWS_BATCH_JOB_MAIN_NODE_INDEX is not set, but AWS_BATCH_JOB_NODE_INDEX=2 marks a node of a gang (AWS "
       "Batch multi-node parallel job): AWS Batch sets it in every container of a multi-node parallel job"},
      {without(kSkyPilot, "SKYPILOT_NODE_IPS"),
       "SKYPILOT_NODE_IPS is not set, but SKYPILOT_NODE_RANK=1 marks a node of a gang (SkyPilot): SkyPilot "
       "sets it in every node's run: commands"},
      // An index at or past the count.
      {with(kIndexedJob, "JOB_COMPLETION_INDEX", "3"),
       "JOB_COMPLETION_INDEX=3 is not below FLOWRUN_GANG_NODES=3, the number of nodes: set "
       "FLOWRUN_GANG_NODES to the Job's completions, the nodes and spares"},
      {with(kTrainJob, "PET_NODE_RANK", "2"),
       "PET_NODE_RANK=2 is not below PET_NNODES=2, the number of nodes: set PET_NNODES to the TrainJob's "
       "numNodes"},
      {with(kPyTorchJob, "RANK", "3"),
       "RANK=3 is not below WORLD_SIZE=3, the number of nodes: a PyTorchJob's RANK is the pod's index among "
       "its Master and Worker replicas"},
      {with(with(kPyTorchJobPet, "RANK", "3"), "PET_NODE_RANK", "3"),
       "RANK=3 is not below PET_NNODES=3, the number of nodes: a PyTorchJob's RANK is the pod's index among "
       "its Master and Worker replicas"},
      {with(kBatchChild, "AWS_BATCH_JOB_NODE_INDEX", "4"),
       "AWS_BATCH_JOB_NODE_INDEX=4 is not below AWS_BATCH_JOB_NUM_NODES=4, the number of nodes: "
       "AWS_BATCH_JOB_NUM_NODES is the job's numNodes"},
      {with(kBatchChild, "AWS_BATCH_JOB_MAIN_NODE_INDEX", "4"),
       "AWS_BATCH_JOB_MAIN_NODE_INDEX=4 is not below AWS_BATCH_JOB_NUM_NODES=4, the number of nodes: the "
       "job's mainNode must be one of its nodes"},
      {with(kSkyPilot, "SKYPILOT_NODE_RANK", "2"),
       "SKYPILOT_NODE_RANK=2 is not below SKYPILOT_NUM_NODES=2, the number of nodes: SKYPILOT_NUM_NODES is "
       "the task's num_nodes"},
      // A malformed number.
      {with(kIndexedJob, "JOB_COMPLETION_INDEX", "-1"),
       "JOB_COMPLETION_INDEX='-1': expected this node's index, a whole number from 0 to 99999"},
      {with(kIndexedJob, "FLOWRUN_GANG_NODES", "0"),
       "FLOWRUN_GANG_NODES='0': expected the number of nodes, a whole number from 1 to 100000"},
      {with(kIndexedJob, "FLOWRUN_GANG_NODES", "3 "),
       "FLOWRUN_GANG_NODES='3 ': expected the number of nodes, a whole number from 1 to 100000"},
      {with(kIndexedJob, "FLOWRUN_GANG_NODES", "100001"),
       "FLOWRUN_GANG_NODES='100001': expected the number of nodes, a whole number from 1 to 100000"},
      {with(kIndexedJob, "FLOWRUN_GANG_NODES", "99999999999999999999"),
       "FLOWRUN_GANG_NODES='99999999999999999999': expected the number of nodes, a whole number from 1 to "
       "100000"},
      {with(kTrainJob, "PET_NNODES", "1:4"),
       "PET_NNODES='1:4': a range of nodes is an elastic rendezvous, where no node is told its index; a "
       "TrainJob's PET_NNODES is its numNodes, a count"},
      {with(kTrainJob, "PET_MASTER_PORT", "0"),
       "PET_MASTER_PORT='0': expected the head's port, a whole number from 1 to 65535"},
      {with(kPyTorchJob, "WORLD_SIZE", "3.0"),
       "WORLD_SIZE='3.0': expected the number of processes, a whole number from 1 to 100000000"},
      {with(kPyTorchJob, "MASTER_PORT", "65536"),
       "MASTER_PORT='65536': expected the head's port, a whole number from 1 to 65535"},
      {with(kPyTorchJobPet, "PET_NNODES", "1:3"),
       "PET_NNODES='1:3': a range of nodes is an elastic rendezvous, where no node is told its index; give "
       "the PyTorchJob a fixed number of replicas and no elasticPolicy"},
      {with(kPyTorchJobPet, "PET_NODE_RANK", "1"),
       "PET_NODE_RANK=1 but RANK=2: a PyTorchJob sets both to the pod's index; set neither by hand"},
      {with(kPyTorchJob, "WORLD_SIZE", "100001"),
       "WORLD_SIZE='100001': expected the number of nodes, a whole number from 1 to 100000"},
      {with(kSkyPilot, "SKYPILOT_NUM_NODES", "two"),
       "SKYPILOT_NUM_NODES='two': expected the number of nodes, a whole number from 1 to 100000"},
      // An address that is none, or a list that is not one a node.
      {with(kIndexedJob, "FLOWRUN_GANG_HEAD", ""),
       "FLOWRUN_GANG_HEAD='': expected the head's host name or address"},
      {with(kPyTorchJob, "MASTER_ADDR", "mnist master"),
       "MASTER_ADDR='mnist master': expected the head's host name or address"},
      {with(kSkyPilot, "SKYPILOT_NODE_IPS", "10.128.0.5"),
       "SKYPILOT_NODE_IPS lists 1 address but SKYPILOT_NUM_NODES=2: SkyPilot writes one address a line, one "
       "line a node"},
      {with(kSkyPilot, "SKYPILOT_NODE_IPS", ""),
       "SKYPILOT_NODE_IPS lists 0 addresses but SKYPILOT_NUM_NODES=2: SkyPilot writes one address a line, "
       "one line a node"},
      {with(kSkyPilot, "SKYPILOT_NODE_IPS", "\n10.128.0.6"),
       "SKYPILOT_NODE_IPS='\\n10.128.0.6': its first line, the head's address, is not a host name or "
       "address"},
  };
  for (const auto& c : cases) {
    INFO(c.error);
    CHECK(gang_error(c.env) == c.error);
  }
}

TEST_CASE("gang_platform_name names each platform for messages and the plan", "[gang]") {
  CHECK(gang_platform_name(GangPlatform::none) == "none");
  CHECK(gang_platform_name(GangPlatform::indexed_job) == "Kubernetes Indexed Job");
  CHECK(gang_platform_name(GangPlatform::jobset) == "Kubernetes JobSet");
  CHECK(gang_platform_name(GangPlatform::trainjob) == "Kubeflow TrainJob");
  CHECK(gang_platform_name(GangPlatform::pytorchjob) == "Kubeflow PyTorchJob");
  CHECK(gang_platform_name(GangPlatform::aws_batch) == "AWS Batch multi-node parallel job");
  CHECK(gang_platform_name(GangPlatform::skypilot) == "SkyPilot");
}

TEST_CASE("gang: torchrun's PET_NODE_RANK exported by hand, without PET_NNODES, is no TrainJob", "[gang]") {
  std::string error;
  const auto read = read_gang({{"PET_NODE_RANK", "0"}, {"PET_MASTER_ADDR", "10.0.0.1"}}, &error);
  REQUIRE(read.has_value());
  CHECK(read->platform == GangPlatform::none);
  CHECK(error.empty());
}

TEST_CASE("read_gang_identity: what identifies a gang across its head's restarts", "[gang]") {
  std::string error;
  auto identity = [&](GangPlatform platform, const EnvMap& env) {
    GangRead gang;
    gang.platform = platform;
    error.clear();
    return read_gang_identity(gang, env, &error);
  };
  // FLOWRUN_GANG_ID wins, on any platform.
  auto id = identity(GangPlatform::indexed_job, {{"FLOWRUN_GANG_ID", "3f0c"}});
  REQUIRE(id);
  CHECK(id->id == "3f0c");
  CHECK(!id->attempt);
  CHECK(id->said == "FLOWRUN_GANG_ID=3f0c");
  CHECK(identity(GangPlatform::aws_batch, {{"FLOWRUN_GANG_ID", "x"}, {"AWS_BATCH_JOB_ID", "j#0"}})->id ==
        "x");
  // Kubernetes without it: none, and no error.
  CHECK(!identity(GangPlatform::pytorchjob, {{"RANK", "0"}}));
  CHECK(error.empty());
  // Empty, as the downward API gives a label the pod lacks: unset.
  CHECK(!identity(GangPlatform::jobset, {{"FLOWRUN_GANG_ID", ""}}));
  CHECK(error.empty());
  CHECK(identity(GangPlatform::skypilot, {{"FLOWRUN_GANG_ID", ""}, {"SKYPILOT_TASK_ID", "t"}})->id == "t");
  CHECK(!identity(GangPlatform::none, {{"FLOWRUN_GANG_ID", "3f0c"}}));
  // AWS Batch: the job, less the node's "#index", and its attempt.
  id = identity(GangPlatform::aws_batch, {{"AWS_BATCH_JOB_ID", "a1b2#0"}, {"AWS_BATCH_JOB_ATTEMPT", "2"}});
  REQUIRE(id);
  CHECK(id->id == "a1b2");
  CHECK(id->attempt == 2);
  CHECK(id->said == "AWS_BATCH_JOB_ID=a1b2#0, AWS_BATCH_JOB_ATTEMPT=2");
  CHECK(!identity(GangPlatform::aws_batch, {{"AWS_BATCH_JOB_ID", "a1b2"}, {"AWS_BATCH_JOB_ATTEMPT", "two"}}));
  CHECK(error.find("AWS_BATCH_JOB_ATTEMPT='two'") != std::string::npos);
  // SkyPilot: the task id a managed job's recoveries keep.
  id = identity(GangPlatform::skypilot, {{"SKYPILOT_TASK_ID", "sky-2026_c_1"}});
  REQUIRE(id);
  CHECK(id->id == "sky-2026_c_1");
  CHECK(!identity(GangPlatform::indexed_job, {{"FLOWRUN_GANG_ID", "a b"}}));
  CHECK(error.find("FLOWRUN_GANG_ID='a b' is no gang id") != std::string::npos);
}
