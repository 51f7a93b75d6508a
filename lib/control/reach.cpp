#include "flowrun/reach.h"

#include <boost/asio/ip/v6_only.hpp>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace flowrun::cluster {

namespace asio = boost::asio;

ReachDoor::ReachDoor(asio::io_context& io) : acceptor_(io) {
  if (!open(asio::ip::tcp::v6()) && !open(asio::ip::tcp::v4())) return;
  accept();
}

bool ReachDoor::open(asio::ip::tcp protocol) {
  boost::system::error_code ec;
  acceptor_.open(protocol, ec);
  if (!ec && protocol == asio::ip::tcp::v6()) acceptor_.set_option(asio::ip::v6_only(false), ec);
  if (!ec) acceptor_.bind({protocol, 0}, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  const auto local = ec ? asio::ip::tcp::endpoint() : acceptor_.local_endpoint(ec);
  if (ec) {
    acceptor_.close(ec);
    return false;
  }
  port_ = local.port();
  return true;
}

void ReachDoor::accept() {
  // On an error (the door's end included) `this` may be gone: touch nothing.
  acceptor_.async_accept([this](const boost::system::error_code& ec, asio::ip::tcp::socket) {
    if (!ec) accept();  // the connection closes as its socket goes
  });
}

Reach reach_tcp(const std::string& address, int port, std::chrono::milliseconds timeout,
                const std::atomic<bool>* cancel) {
  Reach r;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    r.error = fmt::format("not an address: {}", gai_strerror(rc));
    return r;
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    r.error = std::strerror(errno);
    freeaddrinfo(found);
    return r;
  }
  const auto begin = std::chrono::steady_clock::now();
  int err = connect(fd, found->ai_addr, found->ai_addrlen) == 0 ? 0 : errno;
  freeaddrinfo(found);
  if (err == EINPROGRESS) {
    err = ETIMEDOUT;
    while (std::chrono::steady_clock::now() - begin < timeout && !(cancel != nullptr && cancel->load())) {
      pollfd p{fd, POLLOUT, 0};
      const int n = poll(&p, 1, 100);
      if (n < 0 && errno != EINTR) {
        err = errno;
        break;
      }
      if (n > 0) {
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        break;
      }
    }
  }
  close(fd);
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  r.ok = err == 0;
  if (err == ETIMEDOUT)
    r.error = fmt::format("no answer within {:g} s", static_cast<double>(timeout.count()) / 1000);
  else if (err != 0)
    r.error = std::strerror(err);
  return r;
}

}  // namespace flowrun::cluster
