// One control-plane connection (head side or agent side) on the event loop:
// frames in through a bounded FrameReader, frames out through a write queue.
// The control layer: the one module with sockets.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "flowrun/messages.h"
#include "flowrun/node_link.h"
#include "flowrun/protocol.h"

namespace flowrun::cluster {

class Connection : public NodeLink, public std::enable_shared_from_this<Connection> {
 public:
  using SentHandler = std::function<void()>;

  Connection(boost::asio::ip::tcp::socket socket, std::string peer);

  // Starts reading. `on_frame` gets each frame; `on_close` is called once,
  // when the peer closes, a read or write fails, or a frame is malformed
  // (never after close() was called by us).
  void start(FrameHandler on_frame, CloseHandler on_close);

  // Takes over a reader that already holds bytes read before this
  // connection existed (a blocking handshake that read past its last
  // frame); call before start(), whose first act is to hand those frames on.
  void adopt_reader(FrameReader reader) { reader_ = std::move(reader); }

  // Replaces the handlers (after a handshake); safe to call from inside a
  // handler: the frame being handled finishes with the old one, the next
  // frame goes to the new one.
  void set_handlers(FrameHandler on_frame, CloseHandler on_close) override;

  // A peer whose frames are of another protocol version goes to `handler`
  // (with what its first frame says, FrameReader::other_version) instead of
  // the close handler, before ciphers are set: the head's connections that
  // have not shaken hands, where the agent speaks first. Nothing more is
  // read; the handler answers (send_frame(refused_frame_in(...))) and closes.
  void on_other_version(std::function<void(const OtherVersion&)> handler) {
    on_other_version_ = std::move(handler);
  }

  // The largest frame accepted from now on (see FrameReader::set_max_frame).
  void set_max_frame(std::size_t max_frame) { reader_.set_max_frame(max_frame); }

  // Seals every frame sent and opens every frame received from now on
  // (FrameCipher): after the handshake's welcome, on both sides. A frame that
  // fails to open closes the connection (on_close with the reason). Safe to
  // call from inside a frame handler: the next frame is opened.
  void set_ciphers(FrameCipher send, FrameCipher receive);

  using NodeLink::send;
  // `frame` as encode_frame made it; sealed here when ciphers are set.
  void send_frame(std::string frame) override;

  // Bytes queued and not yet written.
  std::size_t queued() const override { return queued_bytes_; }

  // Called each time a queued frame has been written (queued() just went
  // down): a producer that stopped at a high-water mark resumes from here.
  void set_sent_handler(SentHandler on_sent) override { on_sent_ = std::move(on_sent); }

  // Closes now; queued bytes are dropped. Idempotent.
  void close() override;
  // Closes once every queued byte is written.
  void close_after_send() override;

  bool is_open() const override { return open_; }
  // Whether it closed because a received frame failed to open (tampered,
  // replayed, forged): not the peer's doing, as a plain close would be.
  bool failed_authentication() const override { return failed_authentication_; }
  std::int64_t last_heard_ns() const override { return last_heard_ns_; }
  const std::string& peer() const { return peer_; }
  // The address of this end ("10.0.0.2"); empty when the socket has none.
  std::string local_address() const;
  boost::asio::ip::tcp::socket& socket() { return socket_; }

 private:
  void read_more();
  void drain();     // reads what is there, hands on the frames, waits again
  bool dispatch();  // hands on every whole frame read; false when the connection ended
  void write_next();
  void fail(const std::string& why);

  boost::asio::ip::tcp::socket socket_;
  std::string peer_;
  FrameReader reader_;
  std::optional<FrameCipher> seal_;
  std::optional<FrameCipher> open_cipher_;
  std::deque<std::string> out_;
  std::size_t queued_bytes_ = 0;
  bool writing_ = false;
  bool open_ = true;
  bool closing_ = false;
  bool failed_authentication_ = false;
  // The last read went into a large frame's payload: the next read takes
  // the next frame's header alone (drain()).
  bool header_first_ = false;
  std::function<void(const OtherVersion&)> on_other_version_;
  std::int64_t last_heard_ns_ = 0;
  std::shared_ptr<FrameHandler> on_frame_;
  std::shared_ptr<CloseHandler> on_close_;
  SentHandler on_sent_;
};

}  // namespace flowrun::cluster
