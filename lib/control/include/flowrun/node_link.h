// The seam between the head and the sockets: what the head needs of a
// node's connection once it joined (NodeLink) and of the door agents come in
// by (NodeDoor). The control layer implements both over TCP (Connection,
// Listener); the head's tests implement them with no port and no thread
// (tests/unit/head_test.cpp), as ninja's FakeCommandRunner stands in for
// its subprocesses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "flowrun/messages.h"
#include "flowrun/protocol.h"

namespace flowrun::cluster {

// One node's connection, at the level of messages.
class NodeLink {
 public:
  using FrameHandler = std::function<void(Frame&)>;
  using CloseHandler = std::function<void(const std::string& why)>;

  virtual ~NodeLink() = default;

  // Queues a message (never blocks).
  template <class M>
  void send(const M& message) {
    send_frame(to_wire(encode(message)));
  }
  // `frame` as to_wire(encode(...)) made it.
  virtual void send_frame(std::string frame) = 0;
  // What the node sends goes to `on_frame`; `on_close` is called once when
  // the link ends by the node's doing (never after close()). Safe to call
  // from inside a handler: the next frame goes to the new one.
  virtual void set_handlers(FrameHandler on_frame, CloseHandler on_close) = 0;
  // Closes now; what is queued is dropped. Idempotent.
  virtual void close() = 0;
  // Closes once everything queued is written.
  virtual void close_after_send() = 0;
  virtual bool is_open() const = 0;
  // Bytes queued and not yet written.
  virtual std::size_t queued() const = 0;
  // Called each time queued frames have been written (queued() went down):
  // a producer that stopped at a high-water mark (the head's shipment of a
  // step's inputs) goes on from here.
  virtual void set_sent_handler(std::function<void()> on_sent) = 0;
  // It closed because a frame failed to open (tampered, replayed, forged).
  virtual bool failed_authentication() const = 0;
  // When the node was last heard from, on the monotonic clock.
  virtual std::int64_t last_heard_ns() const = 0;
};

// An agent that proved the run's token, as its hello described it.
struct Joiner {
  std::string node;  // the host name it reported, as sent
  int claim = -1;    // the node rank it asks for (--node-rank), -1: any
  int gpus = -1;
  std::string ip;   // where it connected from
  std::string via;  // the head's address it dialed
  // A gang's agent, which serves every parallel step of the flow
  // (Hello::stays): its door may keep its link between steps.
  bool stays = false;
  // Its end of the connection as it sees it, and the port it listens on
  // there for the other nodes' checks (Hello::address, Hello::reach_port).
  std::string address;
  int reach_port = 0;
};

// The head's answer to a joiner: its node rank, or why it is refused.
struct Admission {
  int rank = -1;
  std::string refusal;  // empty when admitted
};

// Where the agents come in: each joiner is offered to the head (Admit), and
// one it admits is handed over with its link (Joined).
class NodeDoor {
 public:
  using Admit = std::function<Admission(const Joiner&)>;
  // The joiner got node rank `rank`; its link is the head's from now on
  // (set its handlers).
  using Joined = std::function<void(int rank, const Joiner&, const std::shared_ptr<NodeLink>&)>;

  virtual ~NodeDoor() = default;

  // Takes joiners from now on.
  virtual void start(Admit admit, Joined joined) = 0;
  // Takes no more; the handshakes under way go on.
  virtual void close_acceptors() = 0;
  // Ends every handshake under way.
  virtual void close_pending() = 0;
  // What the agents dial: "ADDRESS:PORT[,ADDRESS:PORT...]".
  virtual const std::string& endpoint() const = 0;
  // For the join timeout's report: who knocked without the token, or "".
  virtual std::string strangers_note() const = 0;
  // Agents that reached another address than the first (`via` and name of
  // each node): the console says the choice was wrong for them.
  virtual void say_fallback_addresses(
      const std::vector<std::pair<std::string, std::string>>& via_names) const = 0;
  // Whether the door keeps the links of agents that stay (Joiner::stays)
  // when the step ends: a gang's lobby does, for the flow's next step. The
  // head then says bye with keep and hands each such open link back
  // (take_back) rather than closing it.
  virtual bool keeps_stayers() const { return false; }
  virtual void take_back(const std::shared_ptr<NodeLink>& link) { (void)link; }
};

}  // namespace flowrun::cluster
