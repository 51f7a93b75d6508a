// The head's listener (docs/multinode.md, "Security"): the acceptors on
// the addresses the agents dial, and the connections that have not proved
// the run's token yet. Each new connection gets a handshake (hello,
// challenge, auth) under a deadline and a small frame limit; at most
// kMaxPending are in their handshake at once, kMaxPendingPerSource from
// one address. One that proves the token is offered to the head (Admit),
// which gives it a node rank or refuses it; admitted, it is welcomed,
// sealed and handed over (Joined). The control layer: the one module with sockets.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "flowrun/connection.h"
#include "flowrun/net_addresses.h"
#include "flowrun/node_link.h"
#include "flowrun/supervisor.h"

namespace flowrun::cluster {

// A connection in its handshake, as the rule that makes room sees it.
struct HandshakeSlot {
  std::string ip;
  bool said_hello = false;  // it has been challenged
  std::int64_t last_heard_ns = 0;
};

// Where a connection from `ip` finds `slots`, with room for `max_total` in
// all and `max_per_source` from one address; `spoke(i)`: bytes from slot i
// wait unread (or reading them failed), asked only of slots that may give way.
struct Room {
  bool full = false;
  std::size_t from_ip = 0;          // slots from `ip`
  std::string source;               // full: the address that gives way
  std::optional<std::size_t> drop;  // full: the slot dropped for it, if any
};
// Full: the connection silent longest (no hello yet, nothing unread) of the
// source that gives way makes room: over the per-source cap, `ip` itself;
// over the total, the address that holds the most, and there only one that
// has been silent since `silent_since_ns` at least (one that connected only
// just, its hello perhaps on its way, is kept: the newcomer waits). One in
// the middle of its handshake is never dropped. Pure.
Room make_room(const std::vector<HandshakeSlot>& slots, const std::string& ip, std::size_t max_total,
               std::size_t max_per_source, std::int64_t silent_since_ns,
               const std::function<bool(std::size_t)>& spoke);

class Listener : public NodeDoor {
 public:
  // Connections in their handshake at once: in all (a few hundred bytes and a
  // timer each), and from one address (1024 agents on one host, or behind one
  // NAT, dial at once: the rendezvous benchmark; a flowrun agent refused
  // for want of room tries again, rdzv_clients does not).
  // Full of handshakes none of which may give way, it accepts no more until
  // one ends or a silent one has been silent for kSilentGraceS: the
  // kernel's listen queue holds the newcomers meanwhile.
  static constexpr std::size_t kMaxPending = 2048;
  static constexpr std::size_t kMaxPendingPerSource = 1024;
  static constexpr double kSilentGraceS = 1.0;
  // The kernel's queue of connections not yet accepted (net.core.somaxconn
  // caps it, 4096 by default).
  static constexpr int kListenBacklog = 4096;

  // `timeout_s` (cluster.heartbeat_timeout) is the time a connection has to
  // authenticate; the welcome gives the agents it and `interval_s`.
  Listener(boost::asio::io_context& io, const Console& console, std::string step, std::string token,
           double interval_s, double timeout_s);

  // Listens on `address` (an IP address or a host name) and `port` (0: any
  // free one). Throws Error when it cannot.
  void listen(const std::string& address, std::uint16_t port);
  // Takes over `fd`, a socket that listens already (flowrun run's rendezvous
  // port, which the command line bound to decide that this host is the head).
  void adopt(int fd);
  // One port on every candidate address (a single one may be a host name,
  // replaced by its address), dropping those that are not this host's.
  // Throws Error when there is none left.
  void listen_on_candidates(std::vector<HeadAddress> candidates);

  // Accepts connections from now on.
  void start(Admit admit, Joined joined) override;
  // Room for `nodes` agents to handshake at once, beside kMaxPending for
  // strangers and agents trying again: the step's nodes all dial together, and
  // a cap below their number left the rest to the kernel's listen queue,
  // whose overflow costs each of them a SYN retried a second or more later
  // (16,384 agents: 10,239 overflows, and a rendezvous twice as long).
  void expect(std::size_t nodes) { expected_ = nodes; }
  // Other caps than kMaxPending, kMaxPendingPerSource and kSilentGraceS (tests).
  void set_pending_limits(std::size_t total, std::size_t per_source, double silent_grace_s) {
    max_pending_ = total;
    max_pending_per_source_ = per_source;
    silent_grace_s_ = silent_grace_s;
  }
  // Accepts no more; the handshakes under way go on.
  void close_acceptors() override;
  // Ends every handshake under way.
  void close_pending() override;

  // The candidates listened on, best first.
  const std::vector<HeadAddress>& candidates() const { return candidates_; }
  std::uint16_t port() const { return port_; }
  // What the agents dial: "ADDRESS:PORT[,ADDRESS:PORT...]".
  const std::string& endpoint() const override { return endpoint_; }
  void set_endpoint(std::string endpoint) { endpoint_ = std::move(endpoint); }

  // For the join timeout's report: "; meanwhile N connections that did not
  // prove the run's token (from ...) were refused or dropped: ...", or "".
  std::string strangers_note() const override;
  // Agents that could not reach the first candidate and dialed another
  // (`via` and name of each node): the choice was wrong for them, which the
  // console says (nothing when every agent reached the first).
  void say_fallback_addresses(
      const std::vector<std::pair<std::string, std::string>>& via_names) const override;

 private:
  // A connection that has not authenticated yet: it may read at most
  // kMaxHandshakeFrame per frame and has cluster.heartbeat_timeout to prove
  // the token; at most kMaxPending of them are open at once.
  struct Pending {
    std::shared_ptr<Connection> conn;
    std::unique_ptr<boost::asio::steady_timer> deadline;
    std::string node;
    std::string agent_nonce;
    std::string head_nonce;
    int claim = -1;
    int gpus = -1;
    bool stays = false;
    std::string address;  // Hello::address
    int reach_port = 0;
    std::string ip;
    std::string via;             // the head's address it dialed
    bool authenticated = false;  // its auth proved the token
    bool settled = false;        // admitted, refused or gone
  };

  void open_acceptor(const boost::asio::ip::address& ip, std::uint16_t port);
  std::unique_ptr<boost::asio::ip::tcp::acceptor> open_acceptor_at(const boost::asio::ip::address& ip,
                                                                   std::uint16_t port,
                                                                   boost::system::error_code& ec);
  void accept_next(boost::asio::ip::tcp::acceptor& acceptor);
  // Accepts what the kernel queued meanwhile, after an accept completed.
  void accept_queued(boost::asio::ip::tcp::acceptor& acceptor);
  void on_accept(boost::asio::ip::tcp::socket socket);
  // Where a newcomer from `ip` finds the handshakes under way (make_room;
  // `drop` indexes pending_).
  Room room_for(const std::string& ip) const;
  // A newcomer from a new address would be kept (not closed at once).
  bool room_for_newcomer() const;
  void settle(Pending& p);
  // A handshake ended (call where a handler settled one), or a silent one
  // may give way now: the newcomers that waited for room get it, and the
  // acceptors that stopped resume; else wait_for_room.
  void after_settle();
  // No room: after_settle again once the first silent connection has been
  // silent for the grace (nothing to wait for if none is silent).
  void wait_for_room();
  // Says why on the console and to the peer, then closes; `version`: the
  // peer speaks that protocol, and gets the refusal in it.
  void refuse(Pending& p, const std::string& ip, const std::string& reason,
              std::optional<std::uint8_t> version = std::nullopt);
  void on_handshake(Pending& p, const std::string& ip, Frame& frame);
  void note_stranger(const std::string& ip);
  void admit(Pending& p, const std::string& ip);

  boost::asio::io_context& io_;
  const Console& console_;
  std::string step_;
  std::string token_;
  double interval_s_, timeout_s_;
  Admit admit_;
  Joined joined_;
  std::vector<std::unique_ptr<boost::asio::ip::tcp::acceptor>> acceptors_;  // one per address it listens on
  std::vector<HeadAddress> candidates_;  // where the agents dial, best first (not flowrun run's)
  std::uint16_t port_ = 0;               // the port it listens on, on each of them
  std::string endpoint_;
  std::vector<std::shared_ptr<Pending>> pending_;                // connections still in their handshake
  std::size_t under_way_ = 0;                                    // of them, not settled
  std::unordered_map<std::string, std::size_t> under_way_from_;  // by address
  std::size_t max_pending_ = kMaxPending, max_pending_per_source_ = kMaxPendingPerSource;
  std::size_t expected_ = 0;  // expect(): room beside max_pending_
  bool crowded_ = false;      // a newcomer found the handshakes full: accept_queued stops
  std::size_t pending_cap() const { return max_pending_ + expected_; }
  double silent_grace_s_ = kSilentGraceS;
  std::unique_ptr<boost::asio::steady_timer> room_timer_;  // wait_for_room's
  std::vector<boost::asio::ip::tcp::acceptor*> parked_;    // not accepting until a handshake ends
  std::deque<boost::asio::ip::tcp::socket> waiting_;       // accepted when full, not read yet
  bool said_too_many_pending_ = false;
  static constexpr int kSilentRefusalLines = 10;
  int silent_refused_ = 0;                     // refused connections that never said hello
  int strangers_ = 0;                          // connections refused or dropped before the token
  std::vector<std::string> stranger_sources_;  // their addresses, the first few
};

}  // namespace flowrun::cluster
