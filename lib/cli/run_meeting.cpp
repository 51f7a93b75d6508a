// How the nodes of flowrun run meet, as torchrun's do: inside Slurm this
// flowrun starts the others; with --rdzv-endpoint or --master-addr, node 0
// (--node-rank 0, or the first on the endpoint's host to bind its port) is
// the head and the others join it as agents. Apart from the spec's text, since
// it is sockets and ports, not YAML (docs/multinode.md, docs/migrating.md).
// meeting_for decides from the host's answers (a RunHost) and is pure;
// claim_rendezvous binds the port, and join_node0 runs the agent.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <iostream>
#include <unistd.h>

#include "flowrun/agent.h"
#include "flowrun/error.h"
#include "flowrun/net_addresses.h"
#include "flowrun/process.h"

#include "commands.h"
#include "gang_setup.h"
#include "run_detail.h"

namespace flowrun::run_detail {

namespace {

constexpr int kDefaultMasterPort = 29500;  // torchrun's

// HOST:PORT where the nodes meet, empty for none.
std::string rendezvous_endpoint(const Request& r, const std::string& command) {
  std::string host = r.master_addr;
  int port = r.master_port.value_or(kDefaultMasterPort);
  if (!r.rdzv_endpoint.empty()) {
    host = r.rdzv_endpoint;
    const auto colon = host.rfind(':');
    // [v6]:PORT, or HOST:PORT; a bare HOST keeps the default port.
    if (colon != std::string::npos && (host.front() != '[' || host.find(']') < colon)) {
      port = parse_int(command, "rdzv-endpoint port", host.substr(colon + 1), 1, 65535);
      host.resize(colon);
    }
  }
  if (host.empty()) return {};
  return host + ":" + std::to_string(port);
}

}  // namespace

// No --node-rank on the endpoint's host: the first flowrun run to bind the
// port is the head, as the first torchrun to host the c10d store is; one
// that finds it taken by another flowrun run (of this user) joins that
// one. Anything else holding the port is an error, said at once: joining it
// would only wait out the join timeout.
void claim_rendezvous(Meeting& m, const Request& r) {
  const int port = std::stoi(m.endpoint.substr(m.endpoint.rfind(':') + 1));
  const std::string where = "--rdzv-endpoint " + m.endpoint;
  for (int round = 0;; ++round) {
    int err = 0;
    m.listen_fd = cluster::listen_on_port(r.local_addr, port, &err);
    if (m.listen_fd >= 0) {
      m.kind = Meeting::Kind::head;
      return;
    }
    if (err != EADDRINUSE)
      throw Error(fmt::format("{}: cannot listen on {}:{}: {}", where,
                              r.local_addr.empty() ? "0.0.0.0" : r.local_addr, port, std::strerror(err)));
    const auto holder = port_listener(port);
    if (!holder && round < 3) continue;  // it closed meanwhile: try again
    if (!holder)
      throw Error(
          fmt::format("{}: port {} of this host is in use by a socket that does not listen (a "
                      "connection, or a port held by another program); choose another port",
                      where, port));
    if (holder->uid != getuid())
      throw Error(
          fmt::format("{}: port {} of this host is taken by a process of another user (uid {}), "
                      "not by a flowrun run to join; choose another port",
                      where, port, holder->uid));
    if (holder->pid != 0 && holder->name != process_name(getpid()))
      throw Error(
          fmt::format("{}: port {} of this host is taken by {} (pid {}), not by a flowrun run to "
                      "join; choose another port, or stop it",
                      where, port, holder->name.empty() ? "a process" : holder->name, holder->pid));
    m.kind = Meeting::Kind::agent;
    m.node_rank = -1;
    m.joins = holder->pid != 0
                  ? fmt::format("port {} of this host is held by flowrun (pid {})", port, holder->pid)
                  : fmt::format("port {} of this host is taken", port);
    return;
  }
}

Meeting meeting_for(const Request& r, const Shape& shape, const RunHost& host, const std::string& command,
                    std::vector<std::string>& notes) {
  Meeting m;
  const std::string endpoint = rendezvous_endpoint(r, command);
  if (shape.nodes == 1) {
    if (!endpoint.empty() && !r.standalone)
      notes.push_back("one node: its workers meet on this host (MASTER_ADDR=127.0.0.1, a free port); " +
                      endpoint + " is used only with --nnodes above 1");
    return m;
  }
  if (endpoint.empty()) {
    if (env_get(host.env, "SLURM_JOB_ID")) {
      m.kind = Meeting::Kind::slurm;
      return m;
    }
    usage_error(command,
                "--nnodes " + std::to_string(shape.nodes) +
                    " needs a way to reach the other nodes: run inside a Slurm allocation (salloc -N" +
                    std::to_string(shape.nodes) +
                    ", sbatch), where flowrun starts them with srun; or run this command on every node with "
                    "--rdzv-endpoint NODE0:PORT and --node-rank N; or write a spec with cluster: "
                    "(docs/multinode.md)");
  }
  m.endpoint = endpoint;
  const std::string node0 = endpoint.substr(0, endpoint.rfind(':'));
  int rank = -1;
  if (r.node_rank) {
    rank = *r.node_rank;
  } else if (auto id = env_get(host.env, "SLURM_NODEID");
             id && !id->empty() && id->size() < 6 && std::all_of(id->begin(), id->end(), ::isdigit)) {
    rank = std::stoi(*id);
  }
  if (rank >= shape.nodes)
    usage_error(command, fmt::format("--node-rank {}: --nnodes {} has node ranks 0 to {}", rank, shape.nodes,
                                     shape.nodes - 1));
  const bool here = rank < 0 && host.is_this_host(node0);
  in_addr ipv4{};
  if (here && !r.dry_run && (r.local_addr.empty() || inet_pton(AF_INET, r.local_addr.c_str(), &ipv4) == 1)) {
    m.kind = Meeting::Kind::head;  // unless claim_rendezvous finds another there
    m.claim = true;
    return m;
  }
  const bool head = rank == 0 || here;
  m.kind = head ? Meeting::Kind::head : Meeting::Kind::agent;
  m.node_rank = head ? 0 : rank;
  return m;
}

std::string token_path(const std::string& workdir, const std::string& endpoint) {
  std::string key = endpoint;
  for (char& c : key) {
    if (c == ':' || c == '/' || c == '[' || c == ']') c = '_';
  }
  return workdir + "/.flowrun/rendezvous/" + key + ".token";
}

int join_node0(const Request& r, const Built& built, const ClusterSpec& cluster, const std::string& cwd,
               int fake, const EnvMap& env) {
  AgentOptions agent;
  agent.endpoint = built.meeting.endpoint;
  if (built.meeting.node_rank > 0) agent.node_rank = built.meeting.node_rank;
  agent.token_file = token_path(cwd, built.meeting.endpoint);
  agent.token_after_connect = true;
  agent.exit_with_step = true;
  agent.fake_gpus = fake;
  agent.connect_timeout_s = cluster.join_timeout_s;
  const std::string& joins = built.meeting.joins;
  std::cerr << "flowrun run: " << (joins.empty() ? "" : joins + "; ") << "joining node 0 at "
            << agent.endpoint << " as node "
            << (agent.node_rank ? std::to_string(*agent.node_rank) : std::string("(the next free rank)"))
            << "; node 0 runs the command it was given\n";
  if (r.dry_run) {
    std::cout << "This host joins node 0 at " << agent.endpoint << "; `flowrun run --dry-run` there shows "
              << "the plan.\n";
    return kExitOk;
  }
  return run_agent(agent, env);
}

namespace {

std::string names_of(const std::vector<std::pair<std::string, std::string>>& variables) {
  std::string names;
  for (const auto& [name, value] : variables) names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace

void as_gang_node(Request& r, const GangRead& gang) {
  if (r.nnodes.empty()) r.nnodes = std::to_string(gang.num_nodes);
  r.node_rank = gang_node_rank(gang);
  // Node 0 dials what the others dial; AWS Batch tells its main node no
  // address of its own (the gang engine then finds this host's).
  r.rdzv_endpoint = (gang.head_host.empty() ? std::string("127.0.0.1") : gang.head_host) + ":" +
                    std::to_string(gang_port(gang));
  r.notes.push_back(
      fmt::format("node {} of {} of a {}: --nnodes {}, --node-rank {} and --rdzv-endpoint {} from {}",
                  gang.index, gang.num_nodes, gang_platform_name(gang.platform), r.nnodes, *r.node_rank,
                  r.rdzv_endpoint, names_of(gang.variables)));
}

}  // namespace flowrun::run_detail
