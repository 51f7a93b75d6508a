#include "connection.h"

#include <boost/asio/write.hpp>

#include "flowrun/supervisor.h"

namespace flowrun::cluster {

namespace asio = boost::asio;

namespace {
constexpr std::size_t kReadBytes = 256 * 1024;
}

Connection::Connection(asio::ip::tcp::socket socket, std::string peer)
    : socket_(std::move(socket)), peer_(std::move(peer)), reader_(peer_), buffer_(kReadBytes, '\0') {
  boost::system::error_code ignored;
  socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
  last_heard_ns_ = monotonic_now_ns();
}

void Connection::start(FrameHandler on_frame, CloseHandler on_close) {
  on_frame_ = std::move(on_frame);
  on_close_ = std::move(on_close);
  read_more();
}

void Connection::read_more() {
  if (!open_) return;
  socket_.async_read_some(asio::buffer(buffer_), [self = shared_from_this()](
                                                     const boost::system::error_code& ec, std::size_t n) {
    if (!self->open_) return;
    if (ec) {
      self->fail(ec == asio::error::eof ? "the connection closed" : "the connection failed: " + ec.message());
      return;
    }
    self->last_heard_ns_ = monotonic_now_ns();
    self->reader_.feed(std::string_view(self->buffer_.data(), n));
    while (self->open_) {
      auto frame = self->reader_.next();
      if (!frame) break;
      self->on_frame_(*frame);
    }
    if (!self->open_) return;
    if (self->reader_.failed()) {
      self->fail(self->reader_.error());
      return;
    }
    self->read_more();
  });
}

void Connection::send(MessageType type, const Fields& fields) {
  send_frame(encode_frame(type, encode_fields(fields)));
}

void Connection::send_frame(std::string frame) {
  if (!open_ || closing_) return;
  queued_bytes_ += frame.size();
  out_.push_back(std::move(frame));
  if (!writing_) write_next();
}

void Connection::write_next() {
  if (!open_) return;
  if (out_.empty()) {
    writing_ = false;
    if (closing_) close();
    return;
  }
  writing_ = true;
  asio::async_write(socket_, asio::buffer(out_.front()),
                    [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                      if (!self->open_) return;
                      if (ec) {
                        self->fail("the connection failed: " + ec.message());
                        return;
                      }
                      self->queued_bytes_ -= self->out_.front().size();
                      self->out_.pop_front();
                      self->write_next();
                    });
}

void Connection::close_after_send() {
  if (!open_) return;
  closing_ = true;
  if (!writing_) close();
}

void Connection::close() {
  if (!open_) return;
  open_ = false;
  boost::system::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  out_.clear();
  queued_bytes_ = 0;
}

void Connection::fail(const std::string& why) {
  if (!open_) return;
  close();
  if (on_close_) on_close_(why);
}

}  // namespace flowrun::cluster
