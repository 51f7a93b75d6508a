// The head's listener (lib/control/listener.cpp): which connection in its
// handshake gives way when they are too many, and the handshake itself over
// loopback: an agent that proves the token is welcomed and handed over;
// one with the wrong token, another flowrun or a rank the head refuses gets
// a refused frame saying why; so does an agent of another protocol, in its
// own (and the agent's side of that, join_head against a head of another
// protocol).
#include "flowrun/listener.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <fcntl.h>
#include <fmt/format.h>
#include <memory>
#include <optional>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <variant>
#include <vector>

#include "flowrun/dialer.h"
#include "flowrun/error.h"
#include "flowrun/protocol.h"
#include "flowrun/version.h"

#include "testing.h"

using namespace flowrun;
using namespace flowrun::cluster;
namespace asio = boost::asio;

namespace {

HandshakeSlot slot(const std::string& ip, std::int64_t last_heard_ns, bool said_hello = false) {
  return {ip, said_hello, last_heard_ns};
}

const auto kNoneSpoke = [](std::size_t) { return false; };
// Every slot of these tests has been silent long enough to give way.
constexpr std::int64_t kLongAgo = 1000;

}  // namespace

TEST_CASE("make_room: room left, nothing gives way", "[listener]") {
  const std::vector<HandshakeSlot> slots{slot("10.0.0.1", 1), slot("10.0.0.2", 2)};
  const Room room = make_room(slots, "10.0.0.1", 3, 2, kLongAgo, kNoneSpoke);
  CHECK_FALSE(room.full);
  CHECK(room.from_ip == 1);
  CHECK_FALSE(room.drop);
}

TEST_CASE("make_room: over the per-source cap, that source's longest silent connection gives way",
          "[listener]") {
  const std::vector<HandshakeSlot> slots{slot("10.0.0.1", 5), slot("10.0.0.2", 1), slot("10.0.0.1", 3),
                                         slot("10.0.0.1", 2, true), slot("10.0.0.1", 4)};
  // Slot 3 said hello (it is in its handshake) and slot 2 has spoken since:
  // neither gives way, so the idlest left of 10.0.0.1 is slot 4.
  const Room room = make_room(slots, "10.0.0.1", 100, 4, kLongAgo, [](std::size_t i) { return i == 2; });
  CHECK(room.full);
  CHECK(room.from_ip == 4);
  CHECK(room.source == "10.0.0.1");
  REQUIRE(room.drop);
  CHECK(*room.drop == 4);
}

TEST_CASE("make_room: over the total, the source that holds the most gives way", "[listener]") {
  const std::vector<HandshakeSlot> slots{slot("10.0.0.2", 9), slot("10.0.0.3", 1), slot("10.0.0.2", 7)};
  const Room room = make_room(slots, "10.0.0.1", 3, 3, kLongAgo, kNoneSpoke);
  CHECK(room.full);
  CHECK(room.from_ip == 0);
  CHECK(room.source == "10.0.0.2");
  REQUIRE(room.drop);
  CHECK(*room.drop == 2);
}

TEST_CASE("make_room: full of handshakes under way, none gives way", "[listener]") {
  const std::vector<HandshakeSlot> slots{slot("10.0.0.1", 1, true), slot("10.0.0.1", 2, true)};
  const Room room = make_room(slots, "10.0.0.1", 10, 2, kLongAgo, kNoneSpoke);
  CHECK(room.full);
  CHECK_FALSE(room.drop);
}

TEST_CASE("make_room: over the total, one that connected only just does not give way", "[listener]") {
  // Slot 0 has been silent since 5, slot 1 only since 2000: with the grace
  // ending at 1000, only slot 0 may give way; once it is gone, none.
  const std::vector<HandshakeSlot> slots{slot("10.0.0.2", 5), slot("10.0.0.2", 2000)};
  Room room = make_room(slots, "10.0.0.1", 2, 8, kLongAgo, kNoneSpoke);
  REQUIRE(room.drop);
  CHECK(*room.drop == 0);
  room = make_room({slot("10.0.0.2", 2000), slot("10.0.0.2", 3000)}, "10.0.0.1", 2, 8, kLongAgo, kNoneSpoke);
  CHECK(room.full);
  CHECK_FALSE(room.drop);
  // Over one address's cap that address is the crowd: its silent ones go at once.
  room = make_room({slot("10.0.0.2", 2000), slot("10.0.0.2", 3000)}, "10.0.0.2", 8, 2, kLongAgo, kNoneSpoke);
  REQUIRE(room.drop);
  CHECK(*room.drop == 0);
}

namespace {

// A listener on 127.0.0.1 and one agent's side of the handshake, on one loop.
class Handshake {
 public:
  Handshake() : console_fd_(open(console_path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) {
    REQUIRE(console_fd_ >= 0);
    listener_.listen("127.0.0.1", 0);
  }
  ~Handshake() {
    listener_.close_acceptors();
    listener_.close_pending();
    if (agent_) agent_->close();
    if (joined_conn_) joined_conn_->close();
    io_.poll();
    close(console_fd_);
  }
  Handshake(const Handshake&) = delete;
  Handshake& operator=(const Handshake&) = delete;

  // The agent says `hello` and proves `token`; returns the head's last word
  // (welcome or refused) once it came.
  Message run(Hello hello, const std::string& token, Admission admission = {1, {}}) {
    listener_.start(
        [&](const Joiner& j) {
          asked_ = j;
          return admission;
        },
        [&](int rank, const Joiner& j, const std::shared_ptr<NodeLink>& conn) {
          joined_rank_ = rank;
          joined_ = j;
          joined_conn_ = conn;
        });
    asio::ip::tcp::socket socket(io_);
    socket.connect({asio::ip::make_address("127.0.0.1"), listener_.port()});
    agent_ = std::make_shared<Connection>(std::move(socket), "the head");
    std::optional<Message> last;
    agent_->start(
        [&, node = hello.node](Frame& frame) {
          std::string error;
          auto message = decode_message(frame, &error);
          REQUIRE(message);
          if (const auto* challenge = std::get_if<Challenge>(&*message))
            agent_->send(Auth{auth_proof(token, challenge->nonce, "agent:" + node)});
          else
            last = std::move(message);
        },
        [](const std::string&) {});
    agent_->send(hello);
    // Bounded only so that a broken handshake fails instead of hanging.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!last && std::chrono::steady_clock::now() < give_up)
      io_.run_one_for(std::chrono::milliseconds(100));
    REQUIRE(last);
    return *last;
  }

  // A peer of protocol `version` says `hello` (in that version's frame);
  // returns every byte the head sent it before it closed.
  std::string run_other_version(const Hello& hello, std::uint8_t version) {
    listener_.start(
        [&](const Joiner& j) {
          asked_ = j;
          return Admission{1, {}};
        },
        [](int, const Joiner&, const std::shared_ptr<NodeLink>&) {});
    asio::ip::tcp::socket socket(io_);
    socket.connect({asio::ip::make_address("127.0.0.1"), listener_.port()});
    std::string frame = to_wire(encode(hello));
    frame[4] = static_cast<char>(version);
    asio::write(socket, asio::buffer(frame));
    std::string got;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < give_up) {
      io_.run_one_for(std::chrono::milliseconds(20));
      char buf[4096];
      const ssize_t n = recv(socket.native_handle(), buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0) break;  // the head closed
      if (n > 0) got.append(buf, static_cast<std::size_t>(n));
    }
    return got;
  }

  std::string console_text() const {
    std::string text;
    char buf[4096];
    const int fd = open(console_path().c_str(), O_RDONLY | O_CLOEXEC);
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
    close(fd);
    return text;
  }

  static constexpr const char* kToken = "0123456789abcdef0123456789abcdef";
  Listener& listener() { return listener_; }
  std::optional<Joiner> asked_, joined_;
  int joined_rank_ = -1;

 private:
  std::string console_path() const { return dir_.path() + "/console.txt"; }

  testing::ScopedTempDir dir_{"listener"};
  int console_fd_;
  asio::io_context io_;
  Console console_{console_fd_, console_fd_};
  Listener listener_{io_, console_, "train", kToken, 0.5, 5.0};
  std::shared_ptr<Connection> agent_;
  std::shared_ptr<NodeLink> joined_conn_;
};

Hello hello_from(const std::string& node, int node_rank = -1) {
  return Hello{node, FLOWRUN_VERSION, make_nonce(), node_rank, 1, 2};
}

}  // namespace

TEST_CASE("listener: an agent that proves the token is welcomed with its rank and handed over",
          "[listener]") {
  Handshake h;
  const Message last = h.run(hello_from("node-a", 1), Handshake::kToken);
  const auto* welcome = std::get_if<Welcome>(&last);
  REQUIRE(welcome);
  CHECK(welcome->node_rank == 1);
  CHECK(welcome->heartbeat_ms == 500);
  CHECK(welcome->timeout_ms == 5000);
  REQUIRE(h.asked_);
  CHECK(h.asked_->node == "node-a");
  CHECK(h.asked_->claim == 1);
  CHECK(h.asked_->gpus == 2);
  CHECK(h.asked_->ip == "127.0.0.1");
  CHECK(h.asked_->via == "127.0.0.1");
  CHECK(h.joined_rank_ == 1);
  REQUIRE(h.joined_);
  CHECK(h.joined_->node == "node-a");
  CHECK(h.listener().strangers_note().empty());
}

TEST_CASE("listener: the wrong token is refused, and the join timeout's report will say so", "[listener]") {
  Handshake h;
  const Message last = h.run(hello_from("node-a"), "fedcba9876543210fedcba9876543210");
  const auto* refused = std::get_if<Refused>(&last);
  REQUIRE(refused);
  CHECK(refused->reason == "wrong token");
  CHECK_FALSE(h.asked_);
  CHECK(h.console_text() == "flowrun: step 'train': refused an agent from 127.0.0.1 (node-a): wrong token\n");
  CHECK(
      h.listener().strangers_note().find("; meanwhile 1 connection that did not prove the run's token (from "
                                         "127.0.0.1) were refused or dropped") == 0);
}

TEST_CASE("listener: another flowrun version is refused before its token is asked", "[listener]") {
  Handshake h;
  Hello hello = hello_from("node-a");
  hello.flowrun = "0.0.1";
  const Message last = h.run(hello, Handshake::kToken);
  const auto* refused = std::get_if<Refused>(&last);
  REQUIRE(refused);
  CHECK(refused->reason == std::string("it runs flowrun 0.0.1, the head runs ") + FLOWRUN_VERSION +
                               ": run the same flowrun on every node");
  CHECK_FALSE(h.asked_);
}

TEST_CASE("listener: an agent of another protocol is refused by name, in its own protocol", "[listener]") {
  Handshake h;
  Hello hello = hello_from("node-b");
  hello.flowrun = "0.9.0";
  const std::uint8_t other = kProtocolVersion + 1;
  const std::string reply = h.run_other_version(hello, other);
  const std::string reason = fmt::format(
      "it speaks protocol {} (flowrun 0.9.0), the head speaks protocol {} (flowrun {}): run the same flowrun "
      "version on every node",
      other, kProtocolVersion, FLOWRUN_VERSION);
  // The head's console names the agent, its address and both protocols.
  CHECK(h.console_text() ==
        "flowrun: step 'train': refused an agent from 127.0.0.1 (node-b): " + reason + "\n");
  CHECK_FALSE(h.asked_);
  // The agent reads the refusal: a frame of its own version, with the reason.
  FrameReader agent("the head");
  std::string bytes = reply;
  bytes[4] = static_cast<char>(kProtocolVersion);  // read as that agent would
  agent.feed(bytes);
  const auto frame = agent.next();
  REQUIRE(frame);
  CHECK(static_cast<unsigned char>(reply[4]) == other);
  std::string error;
  const auto message = decode_message(*frame, &error);
  REQUIRE(message);
  const auto* refused = std::get_if<Refused>(&*message);
  REQUIRE(refused);
  CHECK(refused->reason == reason);
}

TEST_CASE("dialer: a head of another protocol refuses this agent: the agent says why, naming both versions",
          "[listener]") {
  testing::ScopedTempDir dir{"dialer"};
  const std::string console_path = dir.path() + "/console.txt";
  const int fd = open(console_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  asio::io_context head_io;
  asio::ip::tcp::acceptor acceptor(head_io, {asio::ip::make_address("127.0.0.1"), 0});
  const std::string endpoint = "127.0.0.1:" + std::to_string(acceptor.local_endpoint().port());
  const std::uint8_t old = kProtocolVersion - 1;
  // The head of the protocol before this one: it refuses in its own version.
  std::thread head([&] {
    auto socket = acceptor.accept();
    char buf[4096];
    boost::system::error_code ec;
    socket.read_some(asio::buffer(buf), ec);  // the hello
    asio::write(socket, asio::buffer(refused_frame_in(old, "it speaks a newer protocol")), ec);
  });
  asio::io_context io;
  Console console{fd, fd};
  DialOptions options;
  options.endpoint = endpoint;
  options.connect_timeout_s = 10;
  const std::function<int()> not_interrupted = [] { return 0; };
  std::string error;
  try {
    join_head(io, console, options, AgentHello{"node-a", -1, 0}, "token", not_interrupted);
  } catch (const Error& e) {
    error = e.what();
  }
  head.join();
  close(fd);
  CHECK(error ==
        fmt::format("the head at {} speaks protocol {}, this flowrun speaks {}: run the same flowrun "
                    "version on every node",
                    endpoint, old, kProtocolVersion));
  std::string said;
  char buf[4096];
  const int in = open(console_path.c_str(), O_RDONLY | O_CLOEXEC);
  for (ssize_t n; (n = read(in, buf, sizeof buf)) > 0;) said.append(buf, static_cast<std::size_t>(n));
  close(in);
  CHECK(said ==
        "flowrun agent: the head at " + endpoint + " refused this agent: it speaks a newer protocol\n");
}

TEST_CASE("listener: a hello without a nonce is refused", "[listener]") {
  Handshake h;
  Hello hello = hello_from("node-a");
  hello.nonce = "short";
  const Message last = h.run(hello, Handshake::kToken);
  const auto* refused = std::get_if<Refused>(&last);
  REQUIRE(refused);
  CHECK(refused->reason == "its hello lacks a node name or nonce");
}

TEST_CASE("listener: the head's refusal of an authenticated agent reaches it", "[listener]") {
  Handshake h;
  const Message last =
      h.run(hello_from("node-a", 0), Handshake::kToken, {-1, "node rank 0 has already joined"});
  const auto* refused = std::get_if<Refused>(&last);
  REQUIRE(refused);
  CHECK(refused->reason == "node rank 0 has already joined");
  REQUIRE(h.asked_);
  CHECK_FALSE(h.joined_);
  CHECK(h.listener().strangers_note().empty());  // it proved the token
}

namespace {

// Agents' sides of the handshake against a listener with small caps, all on
// one loop: each says hello at once and proves the token when told to.
class Crowd {
 public:
  struct Agent {
    std::shared_ptr<Connection> conn;
    std::string node;
    std::string challenge;  // the head's nonce, once challenged
    std::optional<Message> last;
    bool closed = false;
  };

  Crowd(std::size_t total, std::size_t per_source, double silent_grace_s, std::size_t expected = 0)
      : console_fd_(
            open((dir_.path() + "/console.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) {
    REQUIRE(console_fd_ >= 0);
    listener_.set_pending_limits(total, per_source, silent_grace_s);
    listener_.expect(expected);
    listener_.listen("127.0.0.1", 0);
    listener_.start(
        [this](const Joiner&) {
          return Admission{next_rank_++, {}};
        },
        [this](int, const Joiner& j, const std::shared_ptr<NodeLink>& conn) {
          joined_.push_back(j.node);
          handed_over_.push_back(conn);
        });
  }
  ~Crowd() {
    listener_.close_acceptors();
    listener_.close_pending();
    for (auto& a : agents_) a->conn->close();
    for (auto& c : handed_over_) c->close();
    for (int fd : silent_) close(fd);
    io_.poll();
    close(console_fd_);
  }
  Crowd(const Crowd&) = delete;
  Crowd& operator=(const Crowd&) = delete;

  Agent& dial(const std::string& node) {
    asio::ip::tcp::socket socket(io_);
    socket.connect({asio::ip::make_address("127.0.0.1"), listener_.port()});
    auto agent = std::make_unique<Agent>();
    Agent* a = agent.get();
    a->node = node;
    a->conn = std::make_shared<Connection>(std::move(socket), "the head");
    a->conn->start(
        [a](Frame& frame) {
          std::string error;
          auto message = decode_message(frame, &error);
          REQUIRE(message);
          if (const auto* challenge = std::get_if<Challenge>(&*message))
            a->challenge = challenge->nonce;
          else
            a->last = std::move(message);
        },
        [a](const std::string&) { a->closed = true; });
    a->conn->send(Hello{node, FLOWRUN_VERSION, make_nonce(), -1, 1, 0});
    agents_.push_back(std::move(agent));
    return *a;
  }
  // A connection that says nothing.
  void dial_silent() {
    asio::ip::tcp::socket socket(io_);
    socket.connect({asio::ip::make_address("127.0.0.1"), listener_.port()});
    silent_.push_back(socket.release());
  }
  void prove(Agent& a) { a.conn->send(Auth{auth_proof(kToken, a.challenge, "agent:" + a.node)}); }

  // Runs the loop until `done`; bounded only so that a broken handshake
  // fails instead of hanging.
  template <class Done>
  bool run_until(Done done) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!done() && std::chrono::steady_clock::now() < give_up)
      io_.run_one_for(std::chrono::milliseconds(100));
    return done();
  }
  void poll() { io_.poll(); }

  std::vector<std::string> joined_;

 private:
  static constexpr const char* kToken = "0123456789abcdef0123456789abcdef";
  testing::ScopedTempDir dir_{"listener"};
  int console_fd_;
  asio::io_context io_;
  Console console_{console_fd_, console_fd_};
  Listener listener_{io_, console_, "train", kToken, 0.5, 30.0};
  int next_rank_ = 0;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::vector<std::shared_ptr<NodeLink>> handed_over_;
  std::vector<int> silent_;
};

bool welcomed(const Crowd::Agent& a) { return a.last && std::holds_alternative<Welcome>(*a.last); }

}  // namespace

TEST_CASE("listener: full of handshakes under way, a newcomer waits its turn instead of being closed",
          "[listener]") {
  // Room for two at once (from any address), and a grace longer than the test: neither of the
  // first two may give way, so the third must wait for one to end.
  Crowd crowd(2, 8, 600.0);
  Crowd::Agent& a = crowd.dial("node-a");
  Crowd::Agent& b = crowd.dial("node-b");
  REQUIRE(crowd.run_until([&] { return !a.challenge.empty() && !b.challenge.empty(); }));
  Crowd::Agent& c = crowd.dial("node-c");
  crowd.poll();  // what the head does with it at once: it used to close it here
  crowd.prove(a);
  REQUIRE(crowd.run_until([&] { return welcomed(a) && (!c.challenge.empty() || c.closed); }));
  CHECK_FALSE(c.closed);
  crowd.prove(c);
  crowd.prove(b);
  REQUIRE(crowd.run_until([&] { return (welcomed(b) && welcomed(c)) || c.closed || b.closed; }));
  CHECK(crowd.joined_.size() == 3);
}

TEST_CASE("listener: the step's nodes all handshake at once, beside the cap; one more waits its turn",
          "[listener]") {
  // A cap of two and a step of two nodes: four at once. All four are challenged before any of
  // them proves the token (with the cap alone, the third waited: the test above); the fifth waits.
  Crowd crowd(2, 8, 600.0, 2);
  std::vector<Crowd::Agent*> first;
  for (const char* node : {"node-a", "node-b", "node-c", "node-d"}) first.push_back(&crowd.dial(node));
  REQUIRE(crowd.run_until([&] {
    return std::all_of(first.begin(), first.end(),
                       [](const Crowd::Agent* a) { return !a->challenge.empty(); });
  }));
  Crowd::Agent& e = crowd.dial("node-e");
  crowd.poll();
  CHECK(e.challenge.empty());
  CHECK_FALSE(e.closed);
  crowd.prove(*first[0]);
  REQUIRE(crowd.run_until([&] { return !e.challenge.empty() || e.closed; }));
  CHECK_FALSE(e.closed);
}

TEST_CASE("listener: connections that say nothing give way to agents once their grace is over",
          "[listener]") {
  Crowd crowd(2, 8, 0.05);
  crowd.dial_silent();
  crowd.dial_silent();
  Crowd::Agent& a = crowd.dial("node-a");
  REQUIRE(crowd.run_until([&] { return !a.challenge.empty() || a.closed; }));
  crowd.prove(a);
  REQUIRE(crowd.run_until([&] { return welcomed(a) || a.closed; }));
  CHECK(crowd.joined_ == std::vector<std::string>{"node-a"});
}

namespace {

// A private token file, as the head writes it.
void write_token(const std::string& path, const std::string& token) {
  unlink(path.c_str());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  const std::string line = token + "\n";
  REQUIRE(::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()));
  close(fd);
}

// The next message the peer of `socket` sends.
std::optional<Message> next_message(asio::ip::tcp::socket& socket, FrameReader& reader) {
  char buf[4096];
  while (true) {
    if (auto frame = reader.next()) {
      std::string error;
      return decode_message(*frame, &error);
    }
    boost::system::error_code ec;
    const std::size_t n = socket.read_some(asio::buffer(buf), ec);
    if (ec) return std::nullopt;
    reader.feed(std::string_view(buf, n));
  }
}

}  // namespace

TEST_CASE("dialer: flowrun run's agent reads the token file after the head's challenge, not a stale one",
          "[listener]") {
  // The head's socket may listen before the head writes the token (flowrun
  // run binds it to become the head), with a file a killed head left: the
  // agent connects at once, and must prove the token written before the
  // head accepted, not the one that was there when it connected.
  testing::ScopedTempDir dir{"dialer"};
  const std::string token_file = dir.path() + "/rdzv.token";
  write_token(token_file, std::string(64, '0'));
  const int console_fd = open((dir.path() + "/console.txt").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(console_fd >= 0);
  const std::string token = "0123456789abcdef0123456789abcdef";
  asio::io_context head_io;
  asio::ip::tcp::acceptor acceptor(head_io, {asio::ip::make_address("127.0.0.1"), 0});
  const std::string endpoint = "127.0.0.1:" + std::to_string(acceptor.local_endpoint().port());
  bool proved = false;
  std::thread head([&] {
    auto socket = acceptor.accept();
    FrameReader reader("agent");
    const auto hello = next_message(socket, reader);  // the agent is connected: now the head writes its token
    write_token(token_file, token);
    const std::string nonce = make_nonce();
    boost::system::error_code ec;
    asio::write(socket, asio::buffer(to_wire(encode(Challenge{nonce}))), ec);
    const auto auth = next_message(socket, reader);
    const auto* a = auth ? std::get_if<Auth>(&*auth) : nullptr;
    proved = hello && a && proofs_equal(a->proof, auth_proof(token, nonce, "agent:node-a"));
    asio::write(socket, asio::buffer(to_wire(encode(Refused{"the test ends here"}))), ec);
  });
  asio::io_context io;
  Console console{console_fd, console_fd};
  DialOptions options;
  options.endpoint = endpoint;
  options.token_file = token_file;
  options.token_after_connect = true;
  options.connect_timeout_s = 10;
  const std::function<int()> not_interrupted = [] { return 0; };
  const auto link = join_head(io, console, options, AgentHello{"node-a", -1, 0}, "", not_interrupted);
  head.join();
  close(console_fd);
  CHECK_FALSE(link);  // refused, as the head said
  CHECK(proved);
}
