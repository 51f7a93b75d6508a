// Whether one node reaches another, as the node checks ask before a step's
// ranks start (reach_node0): each agent listens on a port of its own
// (ReachDoor), and the other nodes open a TCP connection to node 0's
// (reach_port). Nothing is read or sent either way.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <string>

namespace flowrun::cluster {

// A port on every address of this host (IPv6 and IPv4 where the host has
// IPv6, else IPv4's) that takes each connection and closes it at once. Port
// 0 where it cannot listen: the other nodes then do not check that they
// reach this one. After an accept error (out of descriptors) it takes no
// more, and the kernel still completes as many connections as its backlog
// holds. Lives on `io`'s loop.
class ReachDoor {
 public:
  explicit ReachDoor(boost::asio::io_context& io);
  ReachDoor(const ReachDoor&) = delete;
  ReachDoor& operator=(const ReachDoor&) = delete;
  int port() const { return port_; }

 private:
  bool open(boost::asio::ip::tcp protocol);
  void accept();
  boost::asio::ip::tcp::acceptor acceptor_;
  int port_ = 0;
};

struct Reach {
  bool ok = false;
  double ms = 0;      // how long the connection took (or the attempt)
  std::string error;  // why not: the connect's error, "no answer within 5 s", "not an address: ..."
};

// A TCP connection to `address` (numeric, IPv4 or IPv6) port `port`, closed
// at once: within `timeout`, or until `*cancel`. Blocking; safe on any thread.
Reach reach_tcp(const std::string& address, int port, std::chrono::milliseconds timeout,
                const std::atomic<bool>* cancel = nullptr);

}  // namespace flowrun::cluster
