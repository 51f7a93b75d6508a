// A node's link and the door agents come in by, with no socket, no port and
// no thread: the head's seam (lib/control's node_link.h) faked as ninja's
// FakeCommandRunner fakes its subprocesses. A FakeLink keeps what the head
// sends (decoded, in order) and queues it until drain(); the test speaks
// for the node with deliver() (a message), deliver_bytes() (anything, as a
// node sending garbage would) and drop() (the node's end closed).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "flowrun/messages.h"
#include "flowrun/node_link.h"
#include "flowrun/protocol.h"

namespace flowrun::testing {

class FakeLink : public cluster::NodeLink {
 public:
  // Called with each message the head sends, after it is recorded: the
  // node's script (it may deliver() replies, or drop()).
  std::function<void(const Message&)> on_sent;

  void send_frame(std::string frame) override {
    if (!open_) return;
    reader_.feed(frame);
    queued_ += frame.size();
    while (auto f = reader_.next()) {
      std::string why;
      auto m = decode_message(*f, &why);
      if (!m) {
        undecodable.push_back(why);
        continue;
      }
      sent.push_back(*m);
      if (on_sent) on_sent(sent.back());
    }
  }
  void set_handlers(FrameHandler on_frame, CloseHandler on_close) override {
    on_frame_ = std::move(on_frame);
    on_close_ = std::move(on_close);
  }
  void close() override { open_ = false; }
  void close_after_send() override { open_ = false; }
  bool is_open() const override { return open_; }
  std::size_t queued() const override { return queued_; }
  void set_sent_handler(std::function<void()> handler) override { on_sent_handler_ = std::move(handler); }
  bool failed_authentication() const override { return false; }
  std::int64_t last_heard_ns() const override { return last_heard_ns_; }

  // What the node sends: the head handles it now, as its loop would.
  template <class M>
  void deliver(const M& m) {
    Frame frame = encode(m);
    deliver_frame(frame);
  }
  void deliver_frame(Frame& frame) {
    if (open_ && on_frame_) on_frame_(frame);
  }
  // The node's end closed (a crash, a cut cable), with `why`.
  void drop(const std::string& why = "end of file") {
    if (!open_) return;
    open_ = false;
    if (on_close_) on_close_(why);
  }
  // As if the loop wrote everything queued.
  void drain() {
    queued_ = 0;
    if (on_sent_handler_) on_sent_handler_();
  }
  void heard_at(std::int64_t ns) { last_heard_ns_ = ns; }

  // Every message the head sent, in order; and the frames that did not decode.
  std::vector<Message> sent;
  std::vector<std::string> undecodable;

  // The messages of type M the head sent, in order.
  template <class M>
  std::vector<M> sent_of() const {
    std::vector<M> found;
    for (const auto& m : sent)
      if (const auto* p = std::get_if<M>(&m)) found.push_back(*p);
    return found;
  }

 private:
  FrameReader reader_{"head"};
  FrameHandler on_frame_;
  CloseHandler on_close_;
  std::function<void()> on_sent_handler_;
  bool open_ = true;
  std::size_t queued_ = 0;
  std::int64_t last_heard_ns_ = 0;
};

// The door: join() offers a joiner to the head and, admitted, hands over
// a FakeLink (nullptr when the head refused it; refusals says why).
class FakeDoor : public cluster::NodeDoor {
 public:
  void start(Admit admit, Joined joined) override {
    admit_ = std::move(admit);
    joined_ = std::move(joined);
    open_ = true;
  }
  void close_acceptors() override { open_ = false; }
  void close_pending() override {}
  const std::string& endpoint() const override { return endpoint_; }
  std::string strangers_note() const override { return {}; }
  void say_fallback_addresses(const std::vector<std::pair<std::string, std::string>>&) const override {}

  // `on_sent` is the node's script, set before the head has the link.
  std::shared_ptr<FakeLink> join(const cluster::Joiner& j, std::function<void(const Message&)> on_sent = {}) {
    if (!open_ || !admit_) {
      refusals.push_back("the door is closed");
      return nullptr;
    }
    const cluster::Admission a = admit_(j);
    if (a.rank < 0) {
      refusals.push_back(a.refusal);
      return nullptr;
    }
    auto link = std::make_shared<FakeLink>();
    link->on_sent = std::move(on_sent);
    joined_(a.rank, j, link);
    return link;
  }
  bool is_open() const { return open_; }

  std::vector<std::string> refusals;

 private:
  Admit admit_;
  Joined joined_;
  bool open_ = false;
  std::string endpoint_ = "head.test:29400";
};

}  // namespace flowrun::testing
