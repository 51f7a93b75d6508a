// rdzv_clients: N agents in one process, for the rendezvous benchmark
// (scripts/bench, case e). Every connection speaks the control plane as
// `flowrun agent` does, with its messages (lib/protocol/include/flowrun/messages.h):
//
//   -> hello{node, flowrun, nonce, node_rank, pid, gpus}
//   <- challenge      -> auth{proof}
//   <- welcome        the head's proof is checked; every later frame is sealed
//                     (AES-256-GCM, protocol.h), both ways
//   <- assign         -> ready{workdir_ok (the marker file read and compared),
//                              workdir_error, address, port (node rank 0 only), gpus}
//   <- start          -> exited{rank, kind, code 0, ...} for every rank it names,
//                        then done{attempt, errors}
//   <- bye            close
//
// but it runs no worker. One thread, one epoll set, non-blocking sockets.
// On loopback every agent dials from its own address (127.1.0.1 + i), as
// agents on N hosts would.
//
//   rdzv_clients --nodes N --endpoint HOST:PORT --token-file FILE [--window W] [--timeout S]
//                [--spares K --lose R]
//   rdzv_clients --nodes N --bare [--window W] [--timeout S]
//
// --bare forks a minimal server that makes the same exchange with the same
// messages and nothing else (no plan, no per-rank files, no report): the
// floor for these clients on this loopback. --window W keeps at most W
// connections between connect and the server's first answer (0, the
// default: connect all at once).
//
// --spares K --lose R: a lost node and its spare (scripts/bench, case s).
// N + K agents dial (a step of N nodes and K spare_nodes). The agents hold
// the first attempt's ranks as running; once all N have their start, the
// agent of node rank R closes its connection, as a SIGKILLed agent's kernel
// does. On the head's stop the others answer as agents whose ranks ended on
// SIGTERM (exited{signaled, 15, stopped}, then done). The next attempt's
// ranks end at once, as without --lose.
//
// Prints one line of key=value, times in ns from the first connect:
//   nodes=N welcome_ns=T assign_ns=T start_ns=T total_ns=T
// and with --lose, times in ns from the close:
//   noticed_ns=T spare_assign_ns=T spare_start_ns=T restarted_ns=T
// noticed: the first stop arrived; spare_assign, spare_start: the spare got
// node rank R's assign, its start; restarted: the last start of the next
// attempt arrived.
// welcome: the last welcome arrived (every node joined and authenticated);
// assign: the last assign arrived; start: the last start arrived; total:
// the last bye arrived. Exits 1, saying why, when a connection is refused or
// closes early, or the exchange takes longer than --timeout seconds.
#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <memory>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <optional>
#include <string>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <tuple>
#include <unistd.h>
#include <utility>
#include <vector>

#include "flowrun/messages.h"
#include "flowrun/protocol.h"
#include "flowrun/version.h"

namespace {

using flowrun::encode;
using flowrun::Frame;
using flowrun::FrameReader;
using flowrun::MessageType;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "rdzv_clients: %s\n", what.c_str());
  std::exit(1);
}

std::int64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::int64_t now_ns() { return clock_ns(CLOCK_MONOTONIC); }

flowrun::Message decode(const Frame& frame) {
  std::string error;
  auto message = flowrun::decode_message(frame, &error);
  if (!message) die("a malformed " + std::string(flowrun::message_type_name(frame.type)) + ": " + error);
  return std::move(*message);
}

std::string read_file(const std::string& path, std::string* error) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = path + ": " + std::strerror(errno);
    return {};
  }
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  close(fd);
  return text;
}

// Thousands of connections are thousands of descriptors.
void raise_nofile(std::size_t need) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < need)
    die("RLIMIT_NOFILE allows " + std::to_string(limit.rlim_cur) + " descriptors, " + std::to_string(need) +
        " are needed");
}

// One non-blocking socket: frames in through a FrameReader, frames out
// through a buffer flushed as far as the socket takes it.
struct Conn {
  int fd = -1;
  FrameReader reader;
  std::string out;
  std::size_t sent = 0;
  bool polling_out = false;
  bool open = true;
  // Set after welcome: every later frame is sealed (protocol.h).
  std::optional<flowrun::FrameCipher> sealer, opener;

  explicit Conn(std::string peer) : reader(std::move(peer)) {}

  void seal_from_now(const flowrun::FrameKeys& keys, bool head) {
    using flowrun::Direction;
    sealer.emplace(head ? keys.head_to_agent : keys.agent_to_head,
                   head ? Direction::head_to_agent : Direction::agent_to_head);
    opener.emplace(head ? keys.agent_to_head : keys.head_to_agent,
                   head ? Direction::agent_to_head : Direction::head_to_agent, head ? "agent" : "head");
  }

  // The next whole frame, opened when sealed; dies on one that fails.
  std::optional<Frame> next() {
    auto frame = reader.next();
    std::string error;
    if (frame && opener && !opener->open(*frame, &error)) die(error);
    return frame;
  }
};

class Loop {
 public:
  Loop() : epfd_(epoll_create1(EPOLL_CLOEXEC)) {
    if (epfd_ < 0) die(std::string("epoll_create1: ") + std::strerror(errno));
  }
  ~Loop() { close(epfd_); }

  void add(int fd, std::uint32_t events, std::uint64_t tag) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) die(std::string("epoll_ctl: ") + std::strerror(errno));
  }

  void watch_out(Conn& c, std::uint64_t tag, bool on) {
    if (c.polling_out == on) return;
    epoll_event ev{};
    ev.events = EPOLLIN | (on ? EPOLLOUT : 0u);
    ev.data.u64 = tag;
    epoll_ctl(epfd_, EPOLL_CTL_MOD, c.fd, &ev);
    c.polling_out = on;
  }

  void send(Conn& c, std::uint64_t tag, const Frame& message) {
    std::string frame = flowrun::to_wire(message);
    if (c.sealer) c.sealer->seal(frame);
    c.out += frame;
    flush(c, tag);
  }

  // Writes what the socket takes; polls for EPOLLOUT while bytes are left.
  void flush(Conn& c, std::uint64_t tag) {
    while (c.open && c.sent < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == ENOTCONN)) break;
      if (n < 0) die(std::string("send: ") + std::strerror(errno));
      c.sent += static_cast<std::size_t>(n);
    }
    if (c.sent == c.out.size()) {
      c.out.clear();
      c.sent = 0;
    }
    watch_out(c, tag, !c.out.empty());
  }

  // Reads what is there; false at end of stream.
  bool fill(Conn& c) {
    char buf[65536];
    while (true) {
      const ssize_t n = ::read(c.fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return true;
      if (n < 0 && errno == ECONNRESET) return false;
      if (n < 0) die(std::string("read: ") + std::strerror(errno));
      if (n == 0) return false;
      c.reader.feed(std::string_view(buf, static_cast<std::size_t>(n)));
      if (static_cast<std::size_t>(n) < sizeof buf) return true;
    }
  }

  void close_conn(Conn& c) {
    if (!c.open) return;
    c.open = false;
    epoll_ctl(epfd_, EPOLL_CTL_DEL, c.fd, nullptr);
    close(c.fd);
  }

  // Waits up to `ms` for events.
  int wait(epoll_event* events, int max, int ms) {
    const int n = epoll_wait(epfd_, events, max, ms);
    if (n < 0 && errno != EINTR) die(std::string("epoll_wait: ") + std::strerror(errno));
    return n < 0 ? 0 : n;
  }

 private:
  int epfd_;
};

sockaddr_in parse_endpoint(const std::string& endpoint) {
  const auto colon = endpoint.rfind(':');
  if (colon == std::string::npos) die("--endpoint '" + endpoint + "': expected HOST:PORT (an IPv4 address)");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(std::atoi(endpoint.c_str() + colon + 1)));
  if (inet_pton(AF_INET, endpoint.substr(0, colon).c_str(), &addr.sin_addr) != 1)
    die("--endpoint '" + endpoint + "': expected HOST:PORT (an IPv4 address)");
  return addr;
}

void set_nodelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// ---- the clients ----------------------------------------------------------

struct Agent {
  Conn conn{"head"};
  std::string node;
  std::string nonce, head_nonce;
  int node_rank = -1;
  bool welcomed = false, assigned = false, started = false, done = false;
  // --lose: the ranks of the start it holds as running, and that start's attempt.
  std::vector<int> held;
  int held_attempt = 0;
};

struct Times {
  std::int64_t welcome = 0, assign = 0, start = 0, total = 0;
  // --lose, from the close: the first stop, the spare's assign and start, the next attempt's last start.
  std::int64_t noticed = 0, spare_assign = 0, spare_start = 0, restarted = 0;
};

// --spares K --lose R.
struct Loss {
  int spares = 0;
  int rank = -1;  // the node rank whose agent goes; -1: none
};

class Clients {
 public:
  Clients(int nodes, sockaddr_in head, std::string token, int window, double timeout_s, Loss loss)
      : head_(head),
        token_(std::move(token)),
        window_(window),
        timeout_s_(timeout_s),
        seated_(static_cast<std::size_t>(nodes)),
        loss_(loss) {
    const int agents = nodes + loss.spares;
    agents_.resize(static_cast<std::size_t>(agents));
    for (int i = 0; i < agents; ++i) {
      auto a = std::make_unique<Agent>();
      a->node = "rdzv-" + std::to_string(i);
      a->nonce = flowrun::make_nonce();
      agents_[static_cast<std::size_t>(i)] = std::move(a);
    }
    // Node rank 0's agent offers a port it holds, as `flowrun agent` does.
    port_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof any;
    if (bind(port_fd_, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0 ||
        getsockname(port_fd_, reinterpret_cast<sockaddr*>(&any), &len) != 0)
      die(std::string("cannot hold a port: ") + std::strerror(errno));
    held_port_ = ntohs(any.sin_port);
  }

  ~Clients() { close(port_fd_); }

  Times run() {
    const std::int64_t t0 = now_ns();
    const std::int64_t deadline = t0 + static_cast<std::int64_t>(timeout_s_ * 1e9);
    const std::size_t n = agents_.size();
    while (next_ < n && (window_ <= 0 || in_flight_ < window_)) connect_next();
    std::vector<epoll_event> events(1024);
    while (closed_ < n) {
      const int got = loop_.wait(events.data(), static_cast<int>(events.size()), 1000);
      for (int e = 0; e < got; ++e) {
        Agent& a = *agents_[events[static_cast<std::size_t>(e)].data.u64];
        const std::uint64_t tag = events[static_cast<std::size_t>(e)].data.u64;
        if (!a.conn.open) continue;
        if (events[static_cast<std::size_t>(e)].events & EPOLLOUT) loop_.flush(a.conn, tag);
        if (events[static_cast<std::size_t>(e)].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(a, tag);
      }
      while (next_ < n && (window_ <= 0 || in_flight_ < window_)) connect_next();
      if (now_ns() > deadline) die("timed out after " + std::to_string(timeout_s_) + " s: " + progress());
    }
    times_.total = now_ns() - t0;
    times_.welcome -= t0;
    times_.assign -= t0;
    times_.start -= t0;
    if (loss_.rank >= 0) {
      if (times_.spare_start == 0 || times_.restarted == 0) die("the spare never started: " + progress());
      for (std::int64_t* t : {&times_.noticed, &times_.spare_assign, &times_.spare_start, &times_.restarted})
        *t -= lost_at_;
    }
    return times_;
  }

 private:
  std::string progress() const {
    return std::to_string(agents_.size()) + " agents: " + std::to_string(next_) + " connected, " +
           std::to_string(welcomed_) + " welcomed, " + std::to_string(assigned_) + " assigned, " +
           std::to_string(started_) + " started, " + std::to_string(closed_) + " closed after bye";
  }

  // --lose: every seated node holds its first ranks; node rank R's agent goes now.
  void lose_one() {
    for (auto& a : agents_) {
      if (a->node_rank != loss_.rank || !a->conn.open) continue;
      lost_at_ = now_ns();
      loop_.close_conn(a->conn);
      ++closed_;
      a->node_rank = -1;  // what holds node rank R from now is the spare
      return;
    }
    die("no agent holds node rank " + std::to_string(loss_.rank));
  }

  void connect_next() {
    Agent& a = *agents_[next_];
    const std::uint64_t tag = next_++;
    a.conn.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (a.conn.fd < 0) die(std::string("socket: ") + std::strerror(errno));
    set_nodelay(a.conn.fd);
    // Every agent from its own address, as on real nodes: all of 127/8 is
    // this host's, so agent i dials from 127.1.0.1 + i. From one address
    // the head would admit only Listener::kMaxPendingPerSource at once.
    if ((ntohl(head_.sin_addr.s_addr) >> 24) == 127) {
      sockaddr_in source{};
      source.sin_family = AF_INET;
      source.sin_addr.s_addr = htonl((127u << 24 | 1u << 16 | 1u) + static_cast<std::uint32_t>(tag));
      if (bind(a.conn.fd, reinterpret_cast<const sockaddr*>(&source), sizeof source) != 0)
        die(std::string("bind to a loopback source address: ") + std::strerror(errno));
    }
    if (connect(a.conn.fd, reinterpret_cast<const sockaddr*>(&head_), sizeof head_) != 0 &&
        errno != EINPROGRESS)
      die(std::string("connect: ") + std::strerror(errno));
    ++in_flight_;
    loop_.add(a.conn.fd, EPOLLIN | EPOLLOUT, tag);
    a.conn.polling_out = true;
    // The hello waits in the buffer until the socket is writable (connected).
    a.conn.out += flowrun::to_wire(
        encode(flowrun::Hello{a.node, FLOWRUN_VERSION, a.nonce, -1, static_cast<int>(getpid()), 0}));
  }

  void on_readable(Agent& a, std::uint64_t tag) {
    const bool more = loop_.fill(a.conn);
    while (a.conn.open) {
      auto frame = a.conn.next();
      if (!frame) break;
      on_frame(a, tag, *frame);
    }
    if (a.conn.reader.failed()) die(a.node + ": " + a.conn.reader.error());
    if (!more && a.conn.open)
      die(a.node + ": the head closed the connection before bye (" + progress() + ")");
  }

  void on_frame(Agent& a, std::uint64_t tag, const Frame& frame) {
    if (frame.type == MessageType::heartbeat) {
      loop_.send(a.conn, tag, encode(flowrun::Heartbeat{}));
      return;
    }
    const flowrun::Message m = decode(frame);
    if (const auto* challenge = std::get_if<flowrun::Challenge>(&m)) {
      --in_flight_;
      a.head_nonce = challenge->nonce;
      loop_.send(a.conn, tag,
                 encode(flowrun::Auth{flowrun::auth_proof(token_, a.head_nonce, "agent:" + a.node)}));
    } else if (const auto* welcome = std::get_if<flowrun::Welcome>(&m)) {
      if (!flowrun::proofs_equal(welcome->proof, flowrun::auth_proof(token_, a.nonce, "head:" + a.node)))
        die(a.node + ": the head's proof in welcome is wrong");
      a.conn.seal_from_now(flowrun::derive_frame_keys(token_, a.nonce, a.head_nonce, a.node), false);
      a.welcomed = true;
      a.node_rank = welcome->node_rank;
      if (++welcomed_ == agents_.size()) times_.welcome = now_ns();
    } else if (const auto* assign = std::get_if<flowrun::Assign>(&m)) {
      on_assign(a, tag, *assign);
    } else if (const auto* start = std::get_if<flowrun::Start>(&m)) {
      on_start(a, tag, *start);
    } else if (std::holds_alternative<flowrun::Bye>(m)) {
      loop_.close_conn(a.conn);
      ++closed_;
    } else if (const auto* refused = std::get_if<flowrun::Refused>(&m)) {
      die(a.node + ": the head refused it: " + refused->reason);
    } else if (const auto* stop = std::get_if<flowrun::Stop>(&m)) {
      if (lost_at_ == 0) die(a.node + ": the head sent stop: " + stop->reason);
      on_stop(a, tag);
    } else {
      die(a.node + ": unexpected " + std::string(flowrun::message_type_name(frame.type)));
    }
  }

  void on_assign(Agent& a, std::uint64_t tag, const flowrun::Assign& f) {
    a.node_rank = f.node_rank;
    std::string error;
    const std::string marker = read_file(f.marker_path, &error);
    const bool same = error.empty() && marker == f.marker_text;
    if (error.empty() && !same) error = f.marker_path + ": its content differs from the head's";
    sockaddr_in local{};
    socklen_t len = sizeof local;
    getsockname(a.conn.fd, reinterpret_cast<sockaddr*>(&local), &len);
    char address[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &local.sin_addr, address, sizeof address);
    loop_.send(a.conn, tag, encode(flowrun::Ready{same, error, address, f.want_port ? held_port_ : 0, 0, {}, 0}));
    if (lost_at_ != 0 && f.node_rank == loss_.rank && times_.spare_assign == 0) times_.spare_assign = now_ns();
    if (!a.assigned) {
      a.assigned = true;
      if (++assigned_ == seated_) times_.assign = now_ns();
    }
  }

  void on_start(Agent& a, std::uint64_t tag, const flowrun::Start& f) {
    if (loss_.rank >= 0 && lost_at_ == 0) {  // held as running until the head's stop
      for (const flowrun::StartRank& rank : f.ranks) a.held.push_back(rank.rank);
      a.held_attempt = f.attempt;
      if (++held_ == seated_) lose_one();
      return;
    }
    if (lost_at_ != 0) {
      const std::int64_t now = now_ns();
      if (a.node_rank == loss_.rank && times_.spare_start == 0) times_.spare_start = now;
      if (++restarted_ == seated_) times_.restarted = now;
    }
    for (const flowrun::StartRank& rank : f.ranks) {
      flowrun::Exited exited;
      exited.rank = rank.rank;
      exited.pid = static_cast<int>(getpid());
      exited.start_ns = exited.end_ns = clock_ns(CLOCK_REALTIME);
      loop_.send(a.conn, tag, encode(exited));
    }
    loop_.send(a.conn, tag, encode(flowrun::Done{f.attempt, {}}));
    if (!a.started) {
      a.started = true;
      if (++started_ == seated_) times_.start = now_ns();
    }
  }

  // The head stops the attempt the lost node was in: the held ranks end as
  // on SIGTERM.
  void on_stop(Agent& a, std::uint64_t tag) {
    if (times_.noticed == 0) times_.noticed = now_ns();
    if (a.held.empty()) return;
    for (int rank : a.held) {
      flowrun::Exited exited;
      exited.rank = rank;
      exited.kind = flowrun::Exited::Kind::signaled;
      exited.code = SIGTERM;
      exited.stopped = true;
      exited.pid = static_cast<int>(getpid());
      exited.start_ns = exited.end_ns = clock_ns(CLOCK_REALTIME);
      loop_.send(a.conn, tag, encode(exited));
    }
    a.held.clear();
    loop_.send(a.conn, tag, encode(flowrun::Done{a.held_attempt, {}}));
  }

  Loop loop_;
  sockaddr_in head_;
  std::string token_;
  int window_;
  double timeout_s_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::size_t seated_;  // the step's nodes, without the spares
  Loss loss_;
  std::size_t next_ = 0, welcomed_ = 0, assigned_ = 0, started_ = 0, closed_ = 0;
  std::size_t held_ = 0, restarted_ = 0;
  std::int64_t lost_at_ = 0;
  int in_flight_ = 0;
  int port_fd_ = -1;
  int held_port_ = 0;
  Times times_;
};

// ---- the bare server (--bare) ----------------------------------------------

// The same exchange with nothing behind it: join, authenticate, assign to all
// once all joined, start all once all are ready, bye once all are done.
class BareServer {
 public:
  BareServer(int listener, int nodes, std::string token, std::string marker_path, std::string marker_text)
      : listener_(listener),
        nodes_(static_cast<std::size_t>(nodes)),
        token_(std::move(token)),
        marker_path_(std::move(marker_path)),
        marker_text_(std::move(marker_text)) {}

  void run() {
    loop_.add(listener_, EPOLLIN, kListener);
    std::vector<epoll_event> events(1024);
    while (!(joined_ == nodes_ && closed_ == nodes_)) {
      const int got = loop_.wait(events.data(), static_cast<int>(events.size()), 1000);
      for (int e = 0; e < got; ++e) {
        const epoll_event& ev = events[static_cast<std::size_t>(e)];
        if (ev.data.u64 == kListener) {
          accept_all();
          continue;
        }
        Peer& p = *peers_[ev.data.u64];
        if (!p.conn.open) continue;
        if (ev.events & EPOLLOUT) loop_.flush(p.conn, ev.data.u64);
        if (ev.events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
          const bool more = loop_.fill(p.conn);
          while (p.conn.open) {
            auto frame = p.conn.next();
            if (!frame) break;
            on_frame(p, ev.data.u64, *frame);
          }
          if (p.conn.reader.failed()) die("server: " + p.conn.reader.error());
          if (!more) {
            loop_.close_conn(p.conn);
            ++closed_;
          }
        }
      }
    }
  }

 private:
  static constexpr std::uint64_t kListener = ~std::uint64_t{0};

  struct Peer {
    Conn conn{"agent"};
    std::string node, agent_nonce, head_nonce;
    int rank = -1;
  };

  void accept_all() {
    while (true) {
      const int fd = accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return;
        die(std::string("server: accept4: ") + std::strerror(errno));
      }
      set_nodelay(fd);
      auto p = std::make_unique<Peer>();
      p->conn.fd = fd;
      loop_.add(fd, EPOLLIN, peers_.size());
      peers_.push_back(std::move(p));
    }
  }

  void on_frame(Peer& p, std::uint64_t tag, const Frame& frame) {
    if (frame.type == MessageType::heartbeat) return;
    const flowrun::Message m = decode(frame);
    if (const auto* hello = std::get_if<flowrun::Hello>(&m)) {
      p.node = hello->node;
      p.agent_nonce = hello->nonce;
      p.head_nonce = flowrun::make_nonce();
      loop_.send(p.conn, tag, encode(flowrun::Challenge{p.head_nonce}));
    } else if (const auto* auth = std::get_if<flowrun::Auth>(&m)) {
      if (!flowrun::proofs_equal(auth->proof, flowrun::auth_proof(token_, p.head_nonce, "agent:" + p.node)))
        die("server: " + p.node + " sent a wrong proof");
      p.rank = static_cast<int>(joined_);
      by_rank_.push_back(tag);
      loop_.send(p.conn, tag,
                 encode(flowrun::Welcome{flowrun::auth_proof(token_, p.agent_nonce, "head:" + p.node), p.rank,
                                         2500, 10000}));
      p.conn.seal_from_now(flowrun::derive_frame_keys(token_, p.agent_nonce, p.head_nonce, p.node), true);
      if (++joined_ == nodes_) assign_all();
    } else if (const auto* ready = std::get_if<flowrun::Ready>(&m)) {
      if (p.rank == 0) master_port_ = ready->port;
      if (++ready_ == nodes_) start_all();
    } else if (std::holds_alternative<flowrun::Exited>(m)) {
    } else if (std::holds_alternative<flowrun::Done>(m)) {
      if (++done_ == nodes_) {
        for (std::uint64_t t : by_rank_) loop_.send(peers_[t]->conn, t, encode(flowrun::Bye{false}));
      }
    } else {
      die("server: unexpected " + std::string(flowrun::message_type_name(frame.type)));
    }
  }

  void assign_all() {
    for (std::uint64_t t : by_rank_) {
      Peer& p = *peers_[t];
      flowrun::Assign assign;
      assign.step = "work";
      assign.run_id = "rdzv-bench";
      assign.node_rank = p.rank;
      assign.nodes = static_cast<int>(nodes_);
      assign.workdir = "/tmp";
      assign.marker_path = marker_path_;
      assign.marker_text = marker_text_;
      assign.want_port = p.rank == 0;
      assign.grace_ms = 10000;
      loop_.send(p.conn, t, encode(assign));
    }
  }

  // What the head sends for bench/nodes.yaml: the node's share of the plan
  // (one /bin/true rank, no env of the spec's); the agent makes the rank's
  // environment from it.
  void start_all() {
    for (std::uint64_t t : by_rank_) {
      Peer& p = *peers_[t];
      flowrun::Start start;
      start.step = "work";
      start.run_id = "rdzv-bench";
      start.run_dir = "/tmp";
      start.world_size = static_cast<int>(nodes_);
      start.nodes = static_cast<int>(nodes_);
      start.node_rank = p.rank;
      start.master_addr = "127.0.0.1";
      start.master_port = master_port_;
      start.workdir = "/tmp";
      start.argv = {"/bin/true"};
      start.ranks = {{p.rank, 0, "", false}};
      loop_.send(p.conn, t, encode(start));
    }
  }

  Loop loop_;
  int listener_;
  std::size_t nodes_;
  std::string token_, marker_path_, marker_text_;
  int master_port_ = 0;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::vector<std::uint64_t> by_rank_;
  std::size_t joined_ = 0, ready_ = 0, done_ = 0, closed_ = 0;
};

// Forks the bare server on 127.0.0.1; returns its endpoint and pid.
std::pair<sockaddr_in, pid_t> fork_bare_server(int nodes, const std::string& token,
                                               const std::string& marker_path,
                                               const std::string& marker_text) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listener, 4096) != 0 || getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    die(std::string("server: cannot listen: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) die(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    BareServer(listener, nodes, token, marker_path, marker_text).run();
    std::fflush(stderr);
    _exit(0);
  }
  close(listener);
  return {addr, pid};
}

void usage() {
  std::fprintf(stderr,
               "usage: rdzv_clients --nodes N (--endpoint HOST:PORT --token-file FILE | --bare) "
               "[--window W] [--timeout S] [--spares K --lose R]\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int nodes = 0, window = 0;
  double timeout_s = 120;
  bool bare = false;
  Loss loss;
  std::string endpoint, token_file;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (arg == "--nodes") {
      nodes = std::atoi(value().c_str());
    } else if (arg == "--endpoint") {
      endpoint = value();
    } else if (arg == "--token-file") {
      token_file = value();
    } else if (arg == "--window") {
      window = std::atoi(value().c_str());
    } else if (arg == "--timeout") {
      timeout_s = std::atof(value().c_str());
    } else if (arg == "--bare") {
      bare = true;
    } else if (arg == "--spares") {
      loss.spares = std::atoi(value().c_str());
    } else if (arg == "--lose") {
      loss.rank = std::atoi(value().c_str());
    } else {
      usage();
    }
  }
  if (nodes <= 0 || (bare == !endpoint.empty()) || (!bare && token_file.empty())) usage();
  if (loss.spares < 0 || (loss.rank >= 0 && loss.spares == 0) || loss.rank >= nodes || (bare && loss.spares > 0))
    usage();
  // The forked server and the clients each hold N sockets, in two processes.
  raise_nofile(static_cast<std::size_t>(nodes + loss.spares) + 64);

  try {
    std::string token, marker_path, marker_text;
    sockaddr_in head{};
    pid_t server = -1;
    char scratch[] = "/tmp/rdzv-bare-XXXXXX";
    if (bare) {
      token = flowrun::make_token();
      if (mkdtemp(scratch) == nullptr) die(std::string("mkdtemp: ") + std::strerror(errno));
      marker_path = std::string(scratch) + "/node-check";
      marker_text = flowrun::make_nonce();
      const int fd = open(marker_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0 || write(fd, marker_text.data(), marker_text.size()) < 0) die("cannot write " + marker_path);
      close(fd);
      std::tie(head, server) = fork_bare_server(nodes, token, marker_path, marker_text);
    } else {
      std::string error;
      token = read_file(token_file, &error);
      if (!error.empty()) die("cannot read the token: " + error);
      while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
      head = parse_endpoint(endpoint);
    }
    const Times t = Clients(nodes, head, token, window, timeout_s, loss).run();
    if (bare) {
      int status = 0;
      waitpid(server, &status, 0);
      unlink(marker_path.c_str());
      rmdir(scratch);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("the bare server failed");
    }
    std::printf("nodes=%d welcome_ns=%lld assign_ns=%lld start_ns=%lld total_ns=%lld\n", nodes,
                static_cast<long long>(t.welcome), static_cast<long long>(t.assign),
                static_cast<long long>(t.start), static_cast<long long>(t.total));
    if (loss.rank >= 0)
      std::printf("noticed_ns=%lld spare_assign_ns=%lld spare_start_ns=%lld restarted_ns=%lld\n",
                  static_cast<long long>(t.noticed), static_cast<long long>(t.spare_assign),
                  static_cast<long long>(t.spare_start), static_cast<long long>(t.restarted));
  } catch (const std::exception& e) {
    die(e.what());
  }
  return 0;
}
