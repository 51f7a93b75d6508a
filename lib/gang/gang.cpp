#include "flowrun/gang.h"

namespace flowrun {

namespace {

// A value from the environment, quoted and made printable (a newline in
// SKYPILOT_NODE_IPS, or anything else a user's env may hold).
std::string quoted(std::string_view s) { return "'" + printable(s) + "'"; }

// Decimal digits only, no sign or blank, at most 9 of them, so that it fits
// an int; a leading zero is accepted, as the platforms' own readers do.
std::optional<int> parse_number(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

// A host name or address as a platform writes one: not empty, no blank or
// control character (a DNS name, an IPv4 or IPv6 address).
bool is_host(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u <= ' ' || u == 0x7f) return false;
  }
  return true;
}

// One platform's reading: each variable looked up is noted in the result, and
// the first problem is kept as the error.
class Reader {
 public:
  Reader(const EnvMap& env, GangPlatform platform, std::string marker)
      : env_(env), marker_(std::move(marker)) {
    read_.platform = platform;
  }

  // The value of `name`, noted when set.
  std::optional<std::string> take(const std::string& name) {
    auto value = env_get(env_, name);
    if (value) read_.variables.emplace_back(name, *value);
    return value;
  }

  // The value of `name`, which this platform always sets; unset is an error
  // that says which variable made this a node of the platform, and the fix.
  std::optional<std::string> need(const std::string& name, std::string_view fix) {
    auto value = take(name);
    if (!value && error_.empty()) {
      error_ = name + " is not set, but " + marker_ + " marks a node of a gang (" +
               std::string(gang_platform_name(read_.platform)) + "): " + std::string(fix);
    }
    return value;
  }

  // `value` of `name` as a number in [min, max]; `what` says what it counts.
  std::optional<int> number(const std::string& name, const std::optional<std::string>& value, int min,
                            int max, std::string_view what) {
    if (!value || !error_.empty()) return std::nullopt;
    auto parsed = parse_number(*value);
    if (!parsed || *parsed < min || *parsed > max) {
      error_ = name + "=" + quoted(*value) + ": expected " + std::string(what) + ", a whole number from " +
               std::to_string(min) + " to " + std::to_string(max);
      return std::nullopt;
    }
    return parsed;
  }

  std::optional<int> count(const std::string& name, const std::optional<std::string>& value) {
    return number(name, value, 1, kGangMaxNodes, "the number of nodes");
  }

  std::optional<int> index(const std::string& name, const std::optional<std::string>& value) {
    return number(name, value, 0, kGangMaxNodes - 1, "this node's index");
  }

  std::optional<int> port(const std::string& name) {
    return number(name, take(name), 1, 65535, "the head's port");
  }

  // An index must be below the count: `fix` says which of the two to mend.
  void below(const std::string& index_name, int index, const std::string& count_name, int count,
             std::string_view fix) {
    if (!error_.empty() || index < count) return;
    error_ = index_name + "=" + std::to_string(index) + " is not below " + count_name + "=" +
             std::to_string(count) + ", the number of nodes: " + std::string(fix);
  }

  // The head's address from `name`'s `value`.
  void head(const std::string& name, const std::optional<std::string>& value) {
    if (!value || !error_.empty()) return;
    if (!is_host(*value)) {
      error_ = name + "=" + quoted(*value) + ": expected the head's host name or address";
      return;
    }
    read_.head_host = *value;
  }

  GangRead& read() { return read_; }
  std::string& error() { return error_; }

  std::optional<GangRead> done(std::string* error) {
    if (error_.empty()) return std::move(read_);
    if (error != nullptr) *error = std::move(error_);
    return std::nullopt;
  }

 private:
  const EnvMap& env_;
  std::string marker_;
  GangRead read_;
  std::string error_;
};

// NAME=value of the variable that marks a platform, for messages.
std::string marked(const EnvMap& env, const std::string& name) {
  return name + "=" + printable(env.at(name));
}

std::optional<GangRead> read_trainjob(const EnvMap& env, std::string* error) {
  Reader r(env, GangPlatform::trainjob, marked(env, "PET_NODE_RANK"));
  constexpr std::string_view fix =
      "the TrainJob's runtime sets PET_NODE_RANK, PET_NNODES and PET_MASTER_ADDR together";
  auto rank_text = r.take("PET_NODE_RANK");
  auto nodes_text = r.need("PET_NNODES", fix);
  auto addr = r.need("PET_MASTER_ADDR", fix);
  if (nodes_text && nodes_text->find(':') != std::string::npos && r.error().empty()) {
    r.error() = "PET_NNODES=" + quoted(*nodes_text) +
                ": a range of nodes is an elastic rendezvous, where no node is told its index; a TrainJob's "
                "PET_NNODES is its numNodes, a count";
  }
  auto rank = r.index("PET_NODE_RANK", rank_text);
  auto nodes = r.count("PET_NNODES", nodes_text);
  r.head("PET_MASTER_ADDR", addr);
  if (env.count("PET_MASTER_PORT") != 0) r.read().head_port = r.port("PET_MASTER_PORT");
  if (rank && nodes) {
    r.below("PET_NODE_RANK", *rank, "PET_NNODES", *nodes, "set PET_NNODES to the TrainJob's numNodes");
    r.read().index = *rank;
    r.read().num_nodes = *nodes;
  }
  return r.done(error);
}

std::optional<GangRead> read_kubernetes_job(const EnvMap& env, bool jobset, std::string* error) {
  const std::string marker = jobset ? std::string(kJobSetNameVariable) : "JOB_COMPLETION_INDEX";
  Reader r(env, jobset ? GangPlatform::jobset : GangPlatform::indexed_job, marked(env, marker));
  const std::string nodes_name(kGangNodesVariable);
  const std::string head_name(kGangHeadVariable);
  if (jobset) r.take(std::string(kJobSetNameVariable));
  auto index_text = r.need("JOB_COMPLETION_INDEX",
                           "a JobSet's pods are those of Indexed Jobs, whose controller "
                           "sets JOB_COMPLETION_INDEX; check the replicated Job's "
                           "completionMode: Indexed");
  auto nodes_text = r.need(nodes_name,
                           "set it in the pod template's env to the Job's completions (the Job "
                           "controller does not pass the count)");
  auto head =
      r.need(head_name, jobset ? "set it in the pod template's env to node 0's DNS name, "
                                 "<jobset>-<replicatedJob>-0-0.<subdomain>"
                               : "set it in the pod template's env to node 0's DNS name, <job>-0.<service>, "
                                 "with subdomain: <service> and a headless Service of that name");
  auto index = r.index("JOB_COMPLETION_INDEX", index_text);
  auto nodes = r.count(nodes_name, nodes_text);
  r.head(head_name, head);
  if (index && nodes) {
    r.below("JOB_COMPLETION_INDEX", *index, nodes_name, *nodes,
            "set " + nodes_name + " to the Job's completions, the nodes and spares");
    r.read().index = *index;
    r.read().num_nodes = *nodes;
  }
  return r.done(error);
}

std::optional<GangRead> read_pytorchjob(const EnvMap& env, std::string* error) {
  Reader r(env, GangPlatform::pytorchjob, marked(env, "RANK") + " with " + marked(env, "WORLD_SIZE"));
  auto rank_text = r.take("RANK");
  auto size_text = r.take("WORLD_SIZE");
  auto addr = r.need("MASTER_ADDR",
                     "the PyTorchJob's operator sets MASTER_ADDR to the master replica's "
                     "service; set it to node 0's address");
  auto rank = r.index("RANK", rank_text);
  auto size = r.number("WORLD_SIZE", size_text, 1, kGangMaxProcesses, "the number of processes");
  r.head("MASTER_ADDR", addr);
  if (env.count("MASTER_PORT") != 0) r.read().head_port = r.port("MASTER_PORT");
  // Recent releases of the training operator also set torchrun's PET_NODE_RANK, the
  // pod's index again, and PET_NNODES, the pods, and counts WORLD_SIZE in
  // processes (the pods times nprocPerNode); before, WORLD_SIZE counted pods.
  auto node_rank_text = r.take("PET_NODE_RANK");
  auto nnodes_text = r.take("PET_NNODES");
  if (node_rank_text) {
    auto node_rank = r.index("PET_NODE_RANK", node_rank_text);
    if (rank && node_rank && *rank != *node_rank && r.error().empty()) {
      r.error() = "PET_NODE_RANK=" + printable(*node_rank_text) + " but RANK=" + printable(*rank_text) +
                  ": a PyTorchJob sets both to the pod's index; set neither by hand";
    }
  }
  std::optional<int> nodes = size;
  std::string count_name = "WORLD_SIZE";
  if (nnodes_text) {
    count_name = "PET_NNODES";
    if (nnodes_text->find(':') != std::string::npos && r.error().empty()) {
      r.error() = "PET_NNODES=" + quoted(*nnodes_text) +
                  ": a range of nodes is an elastic rendezvous, where no node is told its index; give the "
                  "PyTorchJob a fixed number of replicas and no elasticPolicy";
    }
    nodes = r.count("PET_NNODES", nnodes_text);
  } else if (size && *size > kGangMaxNodes) {
    nodes = r.count("WORLD_SIZE", size_text);
  }
  if (rank && nodes) {
    r.below("RANK", *rank, count_name, *nodes,
            "a PyTorchJob's RANK is the pod's index among its Master and Worker replicas");
    r.read().index = *rank;
    r.read().num_nodes = *nodes;
  }
  return r.done(error);
}

std::optional<GangRead> read_aws_batch(const EnvMap& env, std::string* error) {
  Reader r(env, GangPlatform::aws_batch, marked(env, "AWS_BATCH_JOB_NODE_INDEX"));
  constexpr std::string_view fix = "AWS Batch sets it in every container of a multi-node parallel job";
  auto index_text = r.take("AWS_BATCH_JOB_NODE_INDEX");
  auto nodes_text = r.need("AWS_BATCH_JOB_NUM_NODES", fix);
  auto main_text = r.need("AWS_BATCH_JOB_MAIN_NODE_INDEX", fix);
  auto index = r.index("AWS_BATCH_JOB_NODE_INDEX", index_text);
  auto nodes = r.count("AWS_BATCH_JOB_NUM_NODES", nodes_text);
  auto main = r.index("AWS_BATCH_JOB_MAIN_NODE_INDEX", main_text);
  if (!index || !nodes || !main) return r.done(error);
  r.below("AWS_BATCH_JOB_NODE_INDEX", *index, "AWS_BATCH_JOB_NUM_NODES", *nodes,
          "AWS_BATCH_JOB_NUM_NODES is the job's numNodes");
  r.below("AWS_BATCH_JOB_MAIN_NODE_INDEX", *main, "AWS_BATCH_JOB_NUM_NODES", *nodes,
          "the job's mainNode must be one of its nodes");
  r.read().index = *index;
  r.read().num_nodes = *nodes;
  r.read().head_index = *main;
  // The main node is never told its own address; every other node is.
  const std::string addr_name = "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS";
  if (*index == *main) {
    if (env.count(addr_name) != 0) r.head(addr_name, r.take(addr_name));
  } else {
    r.head(addr_name, r.need(addr_name,
                             "AWS Batch sets it on every node but the main one; is the job's "
                             "container started by the multi-node parallel job itself?"));
  }
  return r.done(error);
}

std::optional<GangRead> read_skypilot(const EnvMap& env, std::string* error) {
  Reader r(env, GangPlatform::skypilot, marked(env, "SKYPILOT_NODE_RANK"));
  constexpr std::string_view fix = "SkyPilot sets it in every node's run: commands";
  auto rank_text = r.take("SKYPILOT_NODE_RANK");
  auto nodes_text = r.need("SKYPILOT_NUM_NODES", fix);
  auto ips = r.need("SKYPILOT_NODE_IPS", fix);
  auto rank = r.index("SKYPILOT_NODE_RANK", rank_text);
  auto nodes = r.count("SKYPILOT_NUM_NODES", nodes_text);
  if (!rank || !nodes || !ips || !r.error().empty()) return r.done(error);
  std::vector<std::string> lines;
  std::string_view rest = *ips;
  while (!rest.empty()) {
    auto end = rest.find('\n');
    lines.emplace_back(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
  }
  if (lines.size() != static_cast<std::size_t>(*nodes)) {
    r.error() = "SKYPILOT_NODE_IPS lists " + std::to_string(lines.size()) + " address" +
                (lines.size() == 1 ? "" : "es") + " but SKYPILOT_NUM_NODES=" + *nodes_text +
                ": SkyPilot writes one address a line, one line a node";
    return r.done(error);
  }
  r.below("SKYPILOT_NODE_RANK", *rank, "SKYPILOT_NUM_NODES", *nodes,
          "SKYPILOT_NUM_NODES is the task's num_nodes");
  if (!is_host(lines.front())) {
    r.error() = "SKYPILOT_NODE_IPS=" + quoted(*ips) +
                ": its first line, the head's address, is not a host name or address";
    return r.done(error);
  }
  r.read().head_host = lines.front();
  r.read().index = *rank;
  r.read().num_nodes = *nodes;
  return r.done(error);
}

}  // namespace

std::string_view gang_platform_name(GangPlatform platform) {
  switch (platform) {
    case GangPlatform::none: return "none";
    case GangPlatform::indexed_job: return "Kubernetes Indexed Job";
    case GangPlatform::jobset: return "Kubernetes JobSet";
    case GangPlatform::trainjob: return "Kubeflow TrainJob";
    case GangPlatform::pytorchjob: return "Kubeflow PyTorchJob";
    case GangPlatform::aws_batch: return "AWS Batch multi-node parallel job";
    case GangPlatform::skypilot: return "SkyPilot";
  }
  return "none";
}

std::optional<GangRead> read_gang(const EnvMap& env, std::string* error) {
  auto set = [&](std::string_view name) { return env.count(std::string(name)) != 0; };
  // Each family's marker. Kubernetes' three nest (a TrainJob runs on a
  // JobSet, a JobSet's pods are an Indexed Job's), so the most specific of
  // them is the family's; the others are gangs of their own.
  struct Family {
    std::string marker;  // the variable that says it
    GangPlatform platform;
  };
  std::vector<Family> families;
  // RANK and WORLD_SIZE are also what torchrun hands each worker, and what
  // batch scripts export to run torchrun by hand under Slurm. A PyTorchJob's
  // operator's recent releases set PET_NODE_RANK beside them, which alone would
  // say a TrainJob.
  const bool pytorchjob = set("RANK") && set("WORLD_SIZE") && !set("SLURM_JOB_ID") &&
                          !set("TORCHELASTIC_RUN_ID") && !set("LOCAL_RANK");
  // PET_NODE_RANK alone is torchrun's --node-rank default, which a user may
  // export by hand; a TrainJob's runtime sets it with PET_NNODES.
  if (set("PET_NODE_RANK") && set("PET_NNODES") && !pytorchjob) {
    families.push_back({"PET_NODE_RANK", GangPlatform::trainjob});
  } else if (set(kJobSetNameVariable)) {
    families.push_back({std::string(kJobSetNameVariable), GangPlatform::jobset});
  } else if (set("JOB_COMPLETION_INDEX")) {
    families.push_back({"JOB_COMPLETION_INDEX", GangPlatform::indexed_job});
  }
  if (pytorchjob) families.push_back({"RANK", GangPlatform::pytorchjob});
  if (set("AWS_BATCH_JOB_NODE_INDEX"))
    families.push_back({"AWS_BATCH_JOB_NODE_INDEX", GangPlatform::aws_batch});
  if (set("SKYPILOT_NODE_RANK")) families.push_back({"SKYPILOT_NODE_RANK", GangPlatform::skypilot});

  if (families.size() > 1) {
    const Family& a = families[0];
    const Family& b = families[1];
    if (error != nullptr) {
      *error = a.marker + " (" + std::string(gang_platform_name(a.platform)) + ") and " + b.marker + " (" +
               std::string(gang_platform_name(b.platform)) +
               ") are both set: a node is part of one gang; unset the variables of the one it is not part of";
    }
    return std::nullopt;
  }
  if (families.empty()) return GangRead{};
  switch (families.front().platform) {
    case GangPlatform::trainjob: return read_trainjob(env, error);
    case GangPlatform::jobset: return read_kubernetes_job(env, true, error);
    case GangPlatform::indexed_job: return read_kubernetes_job(env, false, error);
    case GangPlatform::pytorchjob: return read_pytorchjob(env, error);
    case GangPlatform::aws_batch: return read_aws_batch(env, error);
    case GangPlatform::skypilot: return read_skypilot(env, error);
    case GangPlatform::none: break;
  }
  return GangRead{};
}

}  // namespace flowrun
