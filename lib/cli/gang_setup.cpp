// A gang: nodes a scheduler other than flowrun started, every one running
// the same `flowrun SPEC` or `flowrun run ...` (docs/kubernetes.md). Which
// node this is comes from lib/gang; here the command line decides what that
// means for this invocation: the spec's explicit engine wins, else the flow
// runs on the gang; node 0 is the head and the others become its agents.
#include "gang_setup.h"

#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <iostream>
#include <sys/stat.h>

#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/text.h"

namespace flowrun {

namespace {

constexpr std::size_t kMinTokenBytes = 16;

std::string trimmed(std::string text) {
  const auto end = text.find_first_of("\r\n");
  if (end != std::string::npos) text.resize(end);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.pop_back();
  return text;
}

}  // namespace

std::optional<GangRead> read_gang_or_throw(const EnvMap& env) {
  std::string error;
  auto read = read_gang(env, &error);
  if (!read) throw Error(error, kExitUsage);
  if (read->platform == GangPlatform::none) return std::nullopt;
  return read;
}

std::string use_gang(Spec& spec, HostFacts& host, const std::optional<GangRead>& gang) {
  const std::string platform = gang ? std::string(gang_platform_name(gang->platform)) : "";
  if (spec.cluster && spec.cluster->engine == Engine::gang) {
    if (!gang)
      throw Error(fmt::format("{}:{}: cluster.engine is gang, but this node is in no gang that flowrun "
                              "recognises: none of the variables of a Kubernetes Indexed Job or JobSet "
                              "(JOB_COMPLETION_INDEX with FLOWRUN_GANG_NODES and FLOWRUN_GANG_HEAD), a "
                              "Kubeflow TrainJob (PET_NODE_RANK) or PyTorchJob (RANK, WORLD_SIZE, "
                              "MASTER_ADDR), AWS Batch (AWS_BATCH_JOB_NODE_INDEX) or SkyPilot "
                              "(SKYPILOT_NODE_RANK) is set; run it in one (flowrun manifest writes a "
                              "Kubernetes Job), or choose another engine",
                              spec.file, spec.cluster->loc.line),
                  kExitUsage);
  } else if (spec.cluster) {
    if (gang)
      host.gang_ignored = fmt::format(
          "the variables of a {} are set (node {} of {}), but the spec's cluster.engine is {}, which wins; "
          "write engine: gang to run on the {}'s nodes",
          platform, gang->index, gang->num_nodes, engine_name(spec.cluster->engine), platform);
    return {};
  }
  if (!gang) return {};
  if (!spec.cluster) {
    ClusterSpec cluster;
    cluster.engine = Engine::gang;
    spec.cluster = cluster;
  }
  host.gang = gang;
  return platform;
}

int gang_port(const GangRead& gang) { return gang.head_port.value_or(kGangDefaultPort); }

// The agents' node ranks count from the head, which is node 0 wherever the
// platform numbers it (AWS Batch's main node may have any index).
int gang_node_rank(const GangRead& gang) {
  return (gang.index - gang.head_index + gang.num_nodes) % gang.num_nodes;
}

std::string gang_token(const EnvMap& env) {
  const auto file = env_get(env, std::string(kGangTokenFileVariable));
  const auto value = env_get(env, std::string(kGangTokenVariable));
  if (file && !file->empty() && value && !value->empty())
    throw Error(fmt::format("both {} and {} are set: give the run's token one way", kGangTokenFileVariable,
                            kGangTokenVariable),
                kExitUsage);
  std::string token;
  if (file && !file->empty()) {
    // A Kubernetes Secret's file is a link into its ..data directory: the
    // mode that counts is its target's. Group-readable is the pod's fsGroup.
    struct stat st {};
    if (stat(file->c_str(), &st) != 0)
      throw Error(fmt::format("{}={}: cannot read the run's token there: {}; mount the Secret there "
                              "(flowrun manifest does)",
                              kGangTokenFileVariable, printable(*file), std::strerror(errno)),
                  kExitUsage);
    if ((st.st_mode & 007) != 0)
      throw Error(fmt::format("{}={}: the token file can be read by every user of the node (mode {:o}); "
                              "mount the Secret with defaultMode: 0400",
                              kGangTokenFileVariable, printable(*file), st.st_mode & 0777),
                  kExitUsage);
    int err = 0;
    auto text = try_read_file(*file, 64 << 10, &err);
    if (!text)
      throw Error(fmt::format("{}={}: cannot read the run's token there: {}", kGangTokenFileVariable,
                              printable(*file), file_error_text(err)),
                  kExitUsage);
    token = trimmed(*text);
  } else if (value && !value->empty()) {
    token = trimmed(*value);
  } else {
    throw Error(
        fmt::format("this node is in a gang, but the run has no token: without one anyone who reaches the "
                    "control plane's port could run commands on every node, so flowrun does not start. Mount "
                    "a Secret and set {} to its file (flowrun manifest writes both), or set {} from the "
                    "platform's secrets (AWS Batch: the job definition's secrets; SkyPilot: secrets:)",
                    kGangTokenFileVariable, kGangTokenVariable),
        kExitUsage);
  }
  if (token.size() < kMinTokenBytes)
    throw Error(fmt::format("the run's token ({}) has {} characters; use at least {} random ones "
                            "(openssl rand -hex 32)",
                            file && !file->empty() ? kGangTokenFileVariable : kGangTokenVariable,
                            token.size(), kMinTokenBytes),
                kExitUsage);
  return token;
}

AgentOptions gang_agent(const GangRead& gang, const ClusterSpec& cluster, const EnvMap& env, int fake_gpus) {
  AgentOptions agent;
  agent.endpoint = gang.head_host + ":" + std::to_string(gang_port(gang));
  agent.node_rank = gang_node_rank(gang);
  agent.token = gang_token(env);
  agent.stays = true;
  agent.fake_gpus = fake_gpus;
  agent.connect_timeout_s = cluster.join_timeout_s;
  std::cerr << fmt::format(
      "flowrun: node {} of {} of the {}: joining the head at {} as its agent for every parallel step\n",
      gang.index, gang.num_nodes, gang_platform_name(gang.platform), agent.endpoint);
  return agent;
}

GangLobbyOptions gang_head(const GangRead& gang, const ClusterSpec& cluster, const EnvMap& env) {
  GangLobbyOptions o;
  o.platform = std::string(gang_platform_name(gang.platform));
  o.nodes = gang.num_nodes;
  o.head_host = gang.head_host;
  o.port = gang_port(gang);
  o.token = gang_token(env);
  o.heartbeat_timeout_s = cluster.heartbeat_timeout_s;
  o.join_timeout_s = cluster.join_timeout_s;
  return o;
}

}  // namespace flowrun
