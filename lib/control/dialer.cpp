#include "flowrun/dialer.h"

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "flowrun/clock.h"
#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/messages.h"
#include "flowrun/net_addresses.h"
#include "flowrun/util.h"
#include "flowrun/version.h"

namespace flowrun::cluster {

namespace asio = boost::asio;

namespace {

using Clock = std::chrono::steady_clock;

class Dialer {
 public:
  Dialer(asio::io_context& io, const Console& console, const DialOptions& options, const AgentHello& hello,
         std::string token, const std::function<int()>& interrupted)
      : io_(io),
        console_(console),
        options_(options),
        hello_(hello),
        token_(std::move(token)),
        interrupted_(interrupted) {}

  std::optional<HeadLink> join() {
    const auto give_up = Clock::now() + steady_seconds(options_.connect_timeout_s);
    std::optional<asio::ip::tcp::socket> socket;
    FrameReader reader("head");
    for (int attempt = 1;; ++attempt) {
      socket.emplace(connect(io_, give_up));
      reader = FrameReader("the head at " + head_at_);
      const Handshake outcome = handshake(*socket, reader);
      if (outcome.kind == Handshake::joined) break;
      if (outcome.kind == Handshake::refused) return std::nullopt;
      if (Clock::now() >= give_up || interrupted_() != 0)
        throw Error(
            fmt::format("the head at {} dropped the connection before the handshake ended, {} "
                        "(last: {}); something that does not hold the run's token may be holding "
                        "its connections, or the network cuts them (--connect-timeout: {:g} s)",
                        head_at_, attempt == 1 ? "once" : std::to_string(attempt) + " times", outcome.why,
                        options_.connect_timeout_s));
      if (attempt == 1)
        console_.message(
            fmt::format("flowrun agent: {}: the head at {} dropped the connection before the "
                        "handshake ended ({}); trying again",
                        printable(hello_.node), head_at_, outcome.why));
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(1000, 50 * attempt)));
    }
    return HeadLink{std::move(*socket), std::move(reader), head_at_,    token_,    my_nonce_,
                    head_nonce_,        node_rank_,        interval_s_, timeout_s_};
  }

 private:
  // Dials the head at every endpoint of --rdzv-endpoint (the head's
  // addresses, best first) as RFC 8305 does: a new attempt starts every
  // 250 ms, or at once when one fails; the first connection made wins and
  // the others are closed. An address this node has no route to fails at
  // once, one that drops the SYN gives up after kAttemptLimit. Rounds go on
  // until --connect-timeout (the head may not listen yet).
  asio::ip::tcp::socket connect(asio::io_context& io, Clock::time_point deadline) {
    std::string error;
    const auto endpoints = parse_endpoints(options_.endpoint, &error);
    if (!endpoints) throw Error("--rdzv-endpoint " + error, kExitUsage);
    std::vector<std::string> why(endpoints->size());
    while (true) {
      std::vector<Target> targets;
      for (std::size_t i = 0; i < endpoints->size(); ++i) {
        const auto& e = (*endpoints)[i];
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* found = nullptr;
        if (const int rc = getaddrinfo(e.host.c_str(), e.port.c_str(), &hints, &found); rc != 0) {
          why[i] = gai_strerror(rc);
          continue;
        }
        for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
          Target t;
          t.endpoint = i;
          std::memcpy(&t.address, a->ai_addr, a->ai_addrlen);
          t.size = a->ai_addrlen;
          targets.push_back(t);
        }
        freeaddrinfo(found);
      }
      const auto [fd, index] = dial(targets, why, deadline);
      if (fd >= 0) {
        head_at_ = (*endpoints)[targets[index].endpoint].text;
        asio::ip::tcp::socket socket(io);
        boost::system::error_code ec;
        socket.assign(
            targets[index].address.ss_family == AF_INET6 ? asio::ip::tcp::v6() : asio::ip::tcp::v4(), fd, ec);
        if (ec) throw Error("cannot use the connection to the head: " + ec.message());
        return socket;
      }
      if (Clock::now() >= deadline || interrupted_() != 0) {
        std::string all;
        for (std::size_t i = 0; i < endpoints->size(); ++i)
          all += (all.empty() ? "" : "; ") + (*endpoints)[i].text + ": " + why[i];
        throw Error("cannot reach the head at " +
                    (endpoints->size() == 1 ? all : "any of its addresses (" + all + ")"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  struct Handshake {
    enum Kind { joined, refused, dropped } kind = joined;
    std::string why;  // dropped: how the connection ended
  };

  struct Target {
    std::size_t endpoint = 0;  // its index in --rdzv-endpoint
    sockaddr_storage address{};
    socklen_t size = 0;
  };
  static constexpr auto kAttemptDelay = std::chrono::milliseconds(250);
  static constexpr auto kAttemptLimit = std::chrono::seconds(10);

  // One round over `targets`: {fd, index in targets} of the first connection
  // made (a blocking socket), or {-1, 0} when every attempt failed, `why`
  // (by endpoint) saying how.
  std::pair<int, std::size_t> dial(const std::vector<Target>& targets, std::vector<std::string>& why,
                                   Clock::time_point deadline) {
    struct Attempt {
      int fd;
      std::size_t target;
      Clock::time_point started;
    };
    std::vector<Attempt> open;
    auto close_all = [&] {
      for (const auto& a : open) ::close(a.fd);
      open.clear();
    };
    std::size_t next = 0;
    auto next_start = Clock::now();
    while (true) {
      auto now = Clock::now();
      if (next < targets.size() && (now >= next_start || open.empty())) {
        const Target& t = targets[next];
        const int fd = ::socket(t.address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
          why[t.endpoint] = std::strerror(errno);
        } else if (::connect(fd, reinterpret_cast<const sockaddr*>(&t.address), t.size) == 0) {
          close_all();
          return {blocking(fd), next};
        } else if (errno == EINPROGRESS) {
          open.push_back({fd, next, now});
          next_start = now + kAttemptDelay;
        } else {
          why[t.endpoint] = std::strerror(errno);
          ::close(fd);
        }
        ++next;
        continue;
      }
      if (open.empty()) return {-1, 0};
      if (now >= deadline || interrupted_() != 0) {
        // What an earlier round found says more than a cut-off attempt.
        for (const auto& a : open)
          if (why[targets[a.target].endpoint].empty()) why[targets[a.target].endpoint] = "no answer";
        close_all();
        return {-1, 0};
      }
      auto wake = std::min(deadline, now + std::chrono::milliseconds(100));
      if (next < targets.size()) wake = std::min(wake, next_start);
      for (const auto& a : open) wake = std::min(wake, a.started + kAttemptLimit);
      std::vector<pollfd> fds;
      for (const auto& a : open) fds.push_back({a.fd, POLLOUT, 0});
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count();
      if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<long>(wait, 0) + 1)) < 0 && errno != EINTR)
        throw Error(std::string("poll: ") + std::strerror(errno));
      now = Clock::now();
      std::vector<Attempt> still;
      for (std::size_t i = 0; i < open.size(); ++i) {
        const Attempt& a = open[i];
        if (fds[i].revents != 0) {
          int err = 0;
          socklen_t size = sizeof err;
          if (getsockopt(a.fd, SOL_SOCKET, SO_ERROR, &err, &size) != 0) err = errno;
          if (err == 0) {
            for (std::size_t j = 0; j < open.size(); ++j)
              if (j != i) ::close(open[j].fd);
            return {blocking(a.fd), a.target};
          }
          why[targets[a.target].endpoint] = std::strerror(err);
          ::close(a.fd);
          next_start = now;  // a failure starts the next attempt at once
        } else if (now >= a.started + kAttemptLimit) {
          why[targets[a.target].endpoint] =
              fmt::format("no answer within {} s",
                          std::chrono::duration_cast<std::chrono::seconds>(kAttemptLimit).count());
          ::close(a.fd);
          next_start = now;
        } else {
          still.push_back(a);
        }
      }
      open = std::move(still);
    }
  }

  static int blocking(int fd) {
    const int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
  }

  // The handshake, before anything else runs: blocking, with a timeout.
  // Throws Error when the head's frames make no sense.
  Handshake handshake(asio::ip::tcp::socket& socket, FrameReader& reader) {
    try {
      return handshake_once(socket, reader);
    } catch (const boost::system::system_error& e) {
      return {Handshake::dropped, e.code().message()};
    }
  }

  Handshake handshake_once(asio::ip::tcp::socket& socket, FrameReader& reader) {
    timeval tv{30, 0};
    setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    my_nonce_ = make_nonce();
    const std::string& my_nonce = my_nonce_;
    auto send = [&](const Frame& frame) { asio::write(socket, asio::buffer(to_wire(frame))); };
    auto receive = [&]() -> Message {
      char buf[4096];
      while (true) {
        if (auto frame = reader.next()) {
          std::string error;
          auto message = decode_message(*frame, &error);
          if (!message)
            throw Error("the head sent a malformed " + std::string(message_type_name(frame->type)) + ": " +
                        error);
          return std::move(*message);
        }
        if (reader.failed()) {
          // A head of another protocol that refused this agent in its own.
          if (const auto& other = reader.other_version(); other && !other->reason.empty())
            console_.message("flowrun agent: the head at " + head_at_ +
                             " refused this agent: " + printable(other->reason));
          throw Error(reader.error());
        }
        const ssize_t n = ::read(socket.native_handle(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw boost::system::system_error(errno, boost::system::system_category());
        if (n == 0) throw boost::system::system_error(asio::error::eof);
        reader.feed(std::string_view(buf, static_cast<std::size_t>(n)));
      }
    };
    boost::system::error_code local_error;
    const auto local = socket.local_endpoint(local_error);
    send(encode(Hello{hello_.node, FLOWRUN_VERSION, my_nonce, hello_.node_rank_claim,
                      static_cast<int>(getpid()), hello_.gpus, hello_.stays,
                      local_error ? std::string() : local.address().to_string(), hello_.reach_port}));
    const Message first = receive();
    if (const auto* refused = std::get_if<Refused>(&first)) {
      console_.message("flowrun agent: the head refused this agent: " + printable(refused->reason));
      return {Handshake::refused, {}};
    }
    const auto* challenge = std::get_if<Challenge>(&first);
    if (challenge == nullptr)
      throw Error("the head sent " + std::string(message_type_name(type_of(first))) +
                  " instead of a challenge");
    head_nonce_ = challenge->nonce;
    if (options_.token_after_connect && token_.empty()) {
      // The head wrote the token before it accepted this connection (its
      // socket may listen earlier: flowrun run binds it to become the head),
      // so a token file left by an earlier head is gone by now; a shared
      // filesystem may show the new one a moment later.
      const auto token_deadline = Clock::now() + std::chrono::seconds(10);
      struct stat st {};
      while (stat(options_.token_file.c_str(), &st) != 0 && Clock::now() < token_deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      token_ = read_token(options_);
    }
    send(encode(Auth{auth_proof(token_, head_nonce_, "agent:" + hello_.node)}));
    const Message second = receive();
    if (const auto* refused = std::get_if<Refused>(&second)) {
      console_.message("flowrun agent: the head refused this agent: " + printable(refused->reason));
      return {Handshake::refused, {}};
    }
    const auto* welcome = std::get_if<Welcome>(&second);
    if (welcome == nullptr ||
        !proofs_equal(welcome->proof, auth_proof(token_, my_nonce, "head:" + hello_.node))) {
      console_.message("flowrun agent: the head at " + head_at_ +
                       " could not prove it holds the run's token; not running anything for it");
      return {Handshake::refused, {}};
    }
    node_rank_ = welcome->node_rank;
    interval_s_ = static_cast<double>(welcome->heartbeat_ms) / 1000.0;
    timeout_s_ = static_cast<double>(welcome->timeout_ms) / 1000.0;
    timeval none{0, 0};
    setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
    return {Handshake::joined, {}};
  }

  asio::io_context& io_;
  const Console& console_;
  const DialOptions& options_;
  const AgentHello& hello_;
  std::string token_;
  const std::function<int()>& interrupted_;
  std::string head_at_;
  std::string my_nonce_, head_nonce_;
  int node_rank_ = 0;
  double interval_s_ = 2.5, timeout_s_ = 10;
};

}  // namespace

std::string read_token(const DialOptions& options) {
  if (!options.token.empty()) return options.token;
  std::string text;
  if (!options.token_file.empty()) {
    struct stat st {};
    if (stat(options.token_file.c_str(), &st) != 0)
      throw Error("cannot read the token file " + options.token_file + ": " + std::strerror(errno));
    if ((st.st_mode & 077) != 0)
      throw Error("the token file " + options.token_file +
                  " can be read by other users; it must be private (chmod 600)");
    int err = 0;
    const auto token = try_read_file(options.token_file, 64 << 10, &err);
    if (!token) throw Error("cannot read the token file " + options.token_file + ": " + file_error_text(err));
    text = *token;
  } else {
    if (isatty(STDIN_FILENO) == 1)
      throw Error(
          "no token: give --token-file FILE (the head prints the command to run), or the token on stdin");
    char c;
    while (text.size() < 1024 && read(STDIN_FILENO, &c, 1) == 1 && c != '\n') text += c;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  if (text.empty()) throw Error("the token is empty; the agent needs the run's token from the head");
  return text;
}

std::optional<HeadLink> join_head(asio::io_context& io, const Console& console, const DialOptions& options,
                                  const AgentHello& hello, std::string token,
                                  const std::function<int()>& interrupted) {
  return Dialer(io, console, options, hello, std::move(token), interrupted).join();
}

std::shared_ptr<Connection> sealed_connection(HeadLink link, const std::string& node) {
  auto conn = std::make_shared<Connection>(std::move(link.socket), "head");
  conn->set_max_frame(kMaxSealedFrameSize);
  conn->adopt_reader(std::move(link.reader));  // the head may have sent more right after welcome
  const FrameKeys keys = derive_frame_keys(link.token, link.agent_nonce, link.head_nonce, node);
  conn->set_ciphers(FrameCipher(keys.agent_to_head, Direction::agent_to_head),
                    FrameCipher(keys.head_to_agent, Direction::head_to_agent, "the head"));
  return conn;
}

}  // namespace flowrun::cluster
