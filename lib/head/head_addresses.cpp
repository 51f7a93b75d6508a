#include "head_addresses.h"

#include "flowrun/child.h"
#include "flowrun/error.h"
#include "flowrun/util.h"

namespace flowrun::cluster {

namespace {

// What `argv` writes on stdout (at most 64 KiB), whatever its exit status;
// empty when it cannot be run. Its stderr goes to /dev/null.
std::string command_output(std::vector<std::string> argv) {
  HelperRequest request;
  request.argv = std::move(argv);
  request.stderr_to = HelperStderr::discard;
  request.output_limit = 64 << 10;
  return run_helper(request).output;
}

bool plain_word(const std::string& word) {
  return !word.empty() &&
         word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.@") ==
             std::string::npos;
}

// The host ssh really connects to for `host` (its config may map the name:
// `ssh -G` prints the resolved configuration).
std::optional<std::string> ssh_hostname(const std::vector<std::string>& ssh, const std::string& host) {
  if (ssh.empty() || !plain_word(host)) return std::nullopt;
  std::vector<std::string> argv = ssh;
  argv.insert(argv.end(), {"-G", host});
  const std::string text = command_output(std::move(argv));
  const auto at = text.find("\nhostname ");
  const std::size_t start = text.rfind("hostname ", 0) == 0 ? 9 : (at == std::string::npos ? 0 : at + 10);
  if (start == 0) return std::nullopt;
  const auto end = text.find('\n', start);
  std::string name = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
  if (name.empty() || name == destination_host(host)) return std::nullopt;
  return name;
}

// A Slurm node's address as slurmctld knows it (NodeAddr), for a node name
// this host cannot resolve itself.
std::optional<std::string> slurm_node_address(const std::string& node) {
  if (!plain_word(node)) return std::nullopt;
  const std::string text = command_output({"scontrol", "show", "node", "-o", node});
  const auto at = text.find("NodeAddr=");
  if (at == std::string::npos) return std::nullopt;
  const auto end = text.find_first_of(" \n", at);
  std::string address = text.substr(at + 9, end == std::string::npos ? std::string::npos : end - at - 9);
  if (address.empty()) return std::nullopt;
  return address;
}

}  // namespace

std::vector<HeadAddress> order_head_addresses(const std::vector<RouteHint>& hints,
                                              const std::string& hostname,
                                              const std::optional<std::string>& hostname_address,
                                              const std::vector<LocalAddress>& interfaces) {
  std::vector<HeadAddress> chosen;
  auto add = [&](const std::string& address, std::string why) {
    if (address.empty() || is_loopback(address)) return;
    for (const auto& c : chosen)
      if (c.address == address) return;
    chosen.push_back({address, std::move(why)});
  };
  for (const auto& hint : hints) add(hint.source, "the address this host uses to reach " + hint.what);
  // The name's address only when it is this host's: a stale DNS or hosts
  // entry would send the agents to another machine.
  if (hostname_address) {
    for (const auto& i : interfaces)
      if (i.up && !i.loopback && i.address == *hostname_address)
        add(*hostname_address, "the address of this host's name, " + hostname);
  }
  for (const auto& i : interfaces)
    if (i.up && !i.loopback) add(i.address, "interface " + i.interface);
  return chosen;
}

std::vector<std::pair<std::string, std::string>> slurmctld_hosts(const std::string& show_config) {
  std::vector<std::pair<std::string, std::string>> hosts, addr;
  std::size_t pos = 0;
  while (pos < show_config.size()) {
    std::size_t end = show_config.find('\n', pos);
    if (end == std::string::npos) end = show_config.size();
    const std::string line = show_config.substr(pos, end - pos);
    pos = end + 1;
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    auto trim = [](std::string text) {
      const auto first = text.find_first_not_of(" \t");
      const auto last = text.find_last_not_of(" \t\r");
      return first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
    };
    const std::string key = trim(line.substr(0, eq));
    const std::string value = trim(line.substr(eq + 1));
    if (value.empty() || value == "(null)" || !plain_word(value.substr(0, value.find('(')))) continue;
    if (key == "SlurmctldAddr") {
      addr.emplace_back(value, value);
    } else if (key.rfind("SlurmctldHost[", 0) == 0 && key.back() == ']') {
      const auto open = value.find('(');
      if (open == std::string::npos) {
        hosts.emplace_back(value, value);
      } else if (value.back() == ')') {
        const std::string name = value.substr(0, open);
        const std::string address = value.substr(open + 1, value.size() - open - 2);
        hosts.emplace_back(name, plain_word(address) ? address : name);
      }
    }
  }
  addr.insert(addr.end(), hosts.begin(), hosts.end());
  return addr;
}

std::vector<HeadAddress> choose_head_addresses(const ClusterSpec& cluster, const std::optional<SlurmJob>& job,
                                               const std::string& hostname,
                                               const std::vector<std::string>& ssh) {
  if (cluster.address) return {{*cluster.address, "cluster.address"}};
  std::vector<RouteHint> hints;
  std::vector<std::string> nodes;
  if (cluster.engine == Engine::ssh) nodes = cluster.hosts;
  if (cluster.engine == Engine::slurm && job) nodes = job->nodes;
  // The first node that has a route decides; every node is on the cluster's network.
  for (const auto& node : nodes) {
    if (auto source = route_source(node); source && !is_loopback(*source)) {
      hints.push_back({destination_host(node), *source});
      break;
    }
    if (resolve_ipv4(destination_host(node))) continue;
    // A node's name may mean something only to ssh's config, or to Slurm.
    const auto address = cluster.engine == Engine::slurm ? slurm_node_address(node) : ssh_hostname(ssh, node);
    if (!address) continue;
    if (auto source = route_source(*address); source && !is_loopback(*source)) {
      hints.push_back({destination_host(node) + " (" + *address + ", from " +
                           (cluster.engine == Engine::slurm ? "scontrol" : "ssh -G") + ")",
                       *source});
      break;
    }
  }
  if (cluster.engine == Engine::slurm) {
    // Every node reaches slurmctld; without an allocation it is the only
    // part of the cluster known before srun names the nodes.
    for (const auto& [name, address] : slurmctld_hosts(command_output({"scontrol", "show", "config"}))) {
      const auto ip = resolve_ipv4(address);
      if (!ip) continue;
      const auto source = route_source(*ip);
      hints.push_back(
          {"slurmctld at " + (name == *ip ? name : name + " (" + *ip + ")"), source.value_or("")});
    }
  }
  auto chosen = order_head_addresses(hints, hostname, resolve_ipv4(hostname), local_addresses());
  if (chosen.empty())
    throw Error("cannot find an address for the other nodes to reach this host: set cluster.address");
  return chosen;
}

std::string describe_head_addresses(const std::vector<HeadAddress>& candidates, std::uint16_t port,
                                    const std::function<std::string(const std::string&)>& interface_of) {
  if (candidates.empty()) return {};
  auto on = [&](const std::string& address, const std::string& why) {
    const std::string name = interface_of(address);
    // cluster.address is shown as written.
    if (name.empty() || why == "interface " + name || why == "cluster.address") return std::string();
    return ", on " + name;
  };
  const auto& first = candidates.front();
  const bool v6 = first.address.find(':') != std::string::npos;
  std::string text = (v6 ? "[" + first.address + "]" : first.address) + ":" + std::to_string(port) + " (" +
                     first.why + on(first.address, first.why);
  for (std::size_t i = 1; i < candidates.size(); ++i) {
    const auto& c = candidates[i];
    text += (i == 1 ? "; agents that cannot reach it try " : ", then ") + c.address + " (" +
            (c.why.rfind("interface ", 0) == 0 ? c.why.substr(10) : c.why + on(c.address, c.why)) + ")";
  }
  return text + ")";
}

}  // namespace flowrun::cluster
