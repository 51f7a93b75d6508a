// Where the head listens: the addresses the agents dial, chosen from what
// the cluster says (its hosts, the Slurm allocation, slurmctld), and their
// console text. Internal to lib/head.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "flowrun/net_addresses.h"
#include "flowrun/slurm.h"
#include "flowrun/spec.h"

namespace flowrun::cluster {

// A host the nodes are known to reach (one of the step's nodes, slurmctld),
// and the local address of this host's route to it.
struct RouteHint {
  std::string what;    // "node1", "slurmctld at head (10.200.0.1)"
  std::string source;  // the route's local address; empty: no route, or unresolvable
};

// The addresses the agents try, best first, each with why it is there: the
// route sources of `hints`, in order ("the address this host uses to reach
// node1"); then `hostname_address`, what this host's name resolves to, when
// it is one of `interfaces` ("the address of this host's name, NAME"); then
// every other address of an up interface ("interface eth0"). Loopback
// addresses (a Debian host name maps to 127.0.1.1) and repeats are left out;
// the list may be empty. Pure: the caller gathers routes and interfaces.
std::vector<HeadAddress> order_head_addresses(const std::vector<RouteHint>& hints,
                                              const std::string& hostname,
                                              const std::optional<std::string>& hostname_address,
                                              const std::vector<LocalAddress>& interfaces);

// slurmctld's addresses from the output of `scontrol show config`, each as
// {name, address or name}: SlurmctldAddr when set (the address slurmd
// dials), then every SlurmctldHost[i], "head(10.200.0.1)" giving its address
// and "head" only the name. Pure.
std::vector<std::pair<std::string, std::string>> slurmctld_hosts(const std::string& show_config);

// The addresses agents dial, best first: cluster.address alone when set;
// else order_head_addresses over the hints this cluster gives: the routes
// to its first node that has one (ssh hosts, the Slurm allocation's nodes;
// a name this host cannot resolve is looked up as ssh would, `ssh -G` with
// `ssh`, the ssh command, or as Slurm does, `scontrol show node`), then with
// engine: slurm the route to slurmctld (`scontrol show config`), which every
// node reaches, also before srun has named the nodes. Throws Error when
// there is none.
std::vector<HeadAddress> choose_head_addresses(const ClusterSpec& cluster, const std::optional<SlurmJob>& job,
                                               const std::string& hostname,
                                               const std::vector<std::string>& ssh = {});

// The candidates' console text: "10.200.0.1:PORT (WHY, on frc-br; agents
// that cannot reach it try 192.0.2.2 (eth0))"; cluster.address as written,
// without its interface. `interface_of` names the interface of an address
// (empty: unknown). Pure.
std::string describe_head_addresses(const std::vector<HeadAddress>& candidates, std::uint16_t port,
                                    const std::function<std::string(const std::string&)>& interface_of);

}  // namespace flowrun::cluster
