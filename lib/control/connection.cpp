#include "flowrun/connection.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "flowrun/supervisor.h"

namespace flowrun::cluster {

namespace asio = boost::asio;

namespace {

constexpr std::size_t kReadBytes = 256 * 1024;
constexpr int kReadsPerWakeup = 8;  // fairness between connections that stream

// One read buffer for every connection: the loop is single-threaded and a
// read's bytes go into the connection's FrameReader before the next read,
// so thousands of agents do not cost a buffer each.
char* shared_read_buffer() {
  static thread_local std::unique_ptr<char[]> buffer(new char[kReadBytes]);
  return buffer.get();
}

}  // namespace

Connection::Connection(asio::ip::tcp::socket socket, std::string peer)
    : socket_(std::move(socket)), peer_(std::move(peer)), reader_(peer_) {
  boost::system::error_code ignored;
  socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
  socket_.non_blocking(true, ignored);
  last_heard_ns_ = monotonic_now_ns();
}

void Connection::start(FrameHandler on_frame, CloseHandler on_close) {
  set_handlers(std::move(on_frame), std::move(on_close));
  if (reader_.buffered() > 0) {
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      if (self->dispatch()) self->read_more();
    });
    return;
  }
  read_more();
}

bool Connection::dispatch() {
  while (open_) {
    auto frame = reader_.next();
    if (!frame) break;
    if (open_cipher_) {
      std::string error;
      if (!open_cipher_->open(*frame, &error)) {
        failed_authentication_ = true;
        fail(error);
        return false;
      }
    }
    const auto handler = on_frame_;  // it may replace itself
    (*handler)(*frame);
    FrameReader::recycle(std::move(frame->payload));
  }
  if (!open_) return false;
  if (reader_.failed()) {
    if (on_other_version_ && reader_.other_version() && !seal_) {
      const auto handler = on_other_version_;
      handler(*reader_.other_version());
      return false;
    }
    fail(reader_.error());
    return false;
  }
  return true;
}

void Connection::set_handlers(FrameHandler on_frame, CloseHandler on_close) {
  on_frame_ = std::make_shared<FrameHandler>(std::move(on_frame));
  on_close_ = std::make_shared<CloseHandler>(std::move(on_close));
}

void Connection::read_more() {
  if (!open_) return;
  // Wait for readiness, then read into the shared buffer (no buffer is held
  // while waiting).
  socket_.async_wait(asio::ip::tcp::socket::wait_read,
                     [self = shared_from_this()](const boost::system::error_code& ec) {
                       if (!self->open_) return;
                       if (ec) {
                         self->fail("the connection failed: " + ec.message());
                         return;
                       }
                       self->drain();
                     });
}

void Connection::drain() {
  for (int i = 0; i < kReadsPerWakeup; ++i) {
    // The rest of a large frame goes straight into its payload; the rest
    // through the shared buffer.
    const std::span<char> direct = reader_.direct_space();
    char* into = direct.empty() ? shared_read_buffer() : direct.data();
    std::size_t room = direct.empty() ? kReadBytes : direct.size();
    // After a large frame another is likely (an upload's or a shipment's
    // chunks): its header alone first, so that its payload too is read in
    // place, not into the shared buffer and copied from there twice.
    if (direct.empty() && header_first_ && reader_.buffered() == 0) room = kFrameHeaderBytes;
    header_first_ = !direct.empty();
    boost::system::error_code ec;
    const std::size_t n = socket_.read_some(asio::buffer(into, room), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) break;
    if (ec) {
      fail(ec == asio::error::eof ? "the connection closed" : "the connection failed: " + ec.message());
      return;
    }
    last_heard_ns_ = monotonic_now_ns();
    if (direct.empty())
      reader_.feed(std::string_view(into, n));
    else
      reader_.direct_wrote(n);
    if (!dispatch()) return;
    if (n < room) break;
  }
  read_more();
}

void Connection::set_ciphers(FrameCipher send, FrameCipher receive) {
  seal_.emplace(std::move(send));
  open_cipher_.emplace(std::move(receive));
}

void Connection::send_frame(std::string frame) {
  if (!open_ || closing_) return;
  if (seal_) seal_->seal(frame);
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
                      if (self->on_sent_) {
                        const auto handler = self->on_sent_;  // it may close the connection
                        handler();
                      }
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
  // The handlers may hold what holds this connection: let them all go.
  on_frame_.reset();
  on_close_.reset();
  on_sent_ = nullptr;
  on_other_version_ = nullptr;
}

void Connection::fail(const std::string& why) {
  if (!open_) return;
  const auto handler = on_close_;
  close();
  if (handler && *handler) (*handler)(why);
}

std::string Connection::local_address() const {
  boost::system::error_code ec;
  const auto local = socket_.local_endpoint(ec);
  return ec ? std::string() : local.address().to_string();
}

}  // namespace flowrun::cluster
