// This host's IPv4 addresses and routes, and the HOST:PORT lists agents
// dial: what the control plane's sockets bind to and connect to.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace flowrun::cluster {

// An address the head listens on, and why it is there.
struct HeadAddress {
  std::string address;
  std::string why;  // "cluster.address", "the address this host uses to reach node1", ...
};

// One IPv4 address of one of this host's interfaces (getifaddrs).
struct LocalAddress {
  std::string interface;  // "eth0"
  std::string address;    // "10.200.0.1"
  bool up = true;
  bool loopback = false;
};

// Every IPv4 address of this host's interfaces, in the kernel's order.
std::vector<LocalAddress> local_addresses();

// The local IPv4 address this host would use to reach `host`, or nullopt
// (unresolvable, or no route). Sends nothing.
std::optional<std::string> route_source(const std::string& host);

bool is_loopback(const std::string& address);

// The IPv4 address `host` resolves to on this host, or nullopt.
std::optional<std::string> resolve_ipv4(const std::string& host);

// The name of the interface that holds the local IPv4 `address` ("eth0"), or nullopt.
std::optional<std::string> interface_of(const std::string& address);

// "user@host" -> "host" (an ssh destination); a plain host as it is.
std::string destination_host(const std::string& destination);

// The endpoints of a --rdzv-endpoint list, "HOST:PORT[,HOST:PORT...]", in
// order; nullopt when one is not HOST:PORT (`error` says which). "[::1]:80"
// gives host "::1". Pure.
struct Endpoint {
  std::string host;
  std::string port;
  std::string text;  // as written
};
std::optional<std::vector<Endpoint>> parse_endpoints(const std::string& list, std::string* error);

// Whether `host` names this host: "localhost", `hostname`, or a name that
// resolves to a loopback address or to one of this host's interfaces.
bool is_this_host(const std::string& host, const std::string& hostname);

// flowrun run's rendezvous: a listening socket on `addr`:`port` (an IPv4
// address; empty: every address), bound with SO_REUSEADDR as the head's
// listener binds, close-on-exec. The bind and the listen are the decision:
// of several processes trying at once, one gets the socket and the others
// find the port in use. Returns the socket, or -1 with `*err` the errno
// (EADDRINUSE: something listens there, or holds the port without
// SO_REUSEADDR).
int listen_on_port(const std::string& addr, int port, int* err);

}  // namespace flowrun::cluster
