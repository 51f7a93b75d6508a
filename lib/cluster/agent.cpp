#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <netdb.h>
#include <poll.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "flowrun/beneath.h"
#include "flowrun/cluster.h"
#include "flowrun/doctor.h"
#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/gpu.h"
#include "flowrun/join.h"
#include "flowrun/messages.h"
#include "flowrun/process.h"
#include "flowrun/protocol.h"
#include "flowrun/slurm.h"
#include "flowrun/version.h"

#include "connection.h"
#include "engines.h"
#include "node_start.h"

namespace flowrun {

namespace asio = boost::asio;
using cluster::Connection;

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kUploadChunk = 1 << 20;

// Flow control: what the agent sends the head (its ranks' output, uploads)
// waits in the connection's queue (Connection::queued) until the socket
// takes it. Past kQueueHighWater queued bytes the agent stops reading its
// ranks' pipes (a rank that fills its pipe then blocks in write(2), as under
// a slow terminal) and reads them again once the queue is down to
// kQueueLowWater; an upload reads its next chunk only below kQueueHighWater.
// So the queue holds at most the mark plus one pipe read (256 KiB) or one
// upload chunk (1 MiB), however fast the ranks write and however slow the
// head or the network. Why 4 MiB:
// - memory: a few MiB per node, whatever the ranks write;
// - throughput: 4 MiB is 3 ms of a 10 Gbit/s link, on top of the kernel's
//   socket buffer, so a fast link never waits while the agent refills (it
//   resumes with 1 MiB still queued, and the ranks' pipes hold 1 MiB each);
// - latency: frames are not reordered, so a rank's exit, a stop or done
//   queued behind a full queue waits until at most 5 MiB (42 Mbit) are
//   written: 42 ms at 1 Gbit/s, 0.42 s at 100 Mbit/s, over the default
//   heartbeat_timeout (10 s) only below 4.2 Mbit/s. That delays the head's
//   decisions (stopping the other nodes), never its heartbeat check.
// Heartbeats do not need to jump the queue: the head counts every byte it
// reads from an agent as hearing from it (Connection::last_heard_ns), and
// the agent sends a heartbeat only when its queue is empty, so a link that
// moves the queue, however slowly, is never silent; the head's heartbeats
// come the other way, where output never queues.
constexpr std::size_t kQueueHighWater = 4 << 20;
constexpr std::size_t kQueueLowWater = 1 << 20;

std::string hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

struct LocalRank {
  int rank = 0;
  int local_rank = 0;
  bool upload = false;
  std::string dir;  // node-local: out/ and error.json
};

class Agent : public GroupObserver {
 public:
  Agent(const AgentOptions& options, const EnvMap& env) : options_(options), env_(env) {}

  int run() {
    if (!options_.token_after_connect) token_ = read_token();
    node_ = hostname();
    if (auto name = env_get(env_, "FLOWRUN_HOSTNAME"); name && !name->empty()) node_ = *name;
    node_rank_claim_ = options_.node_rank.value_or(-1);
    if (!options_.node_rank) {
      if (auto id = env_get(env_, "SLURM_NODEID"); id && !id->empty() && id->size() < 6) {
        try {
          node_rank_claim_ = std::stoi(*id);
        } catch (...) {
        }
      }
    }
    auto probe = make_probe(env_, options_.fake_gpus);
    gpus_ = static_cast<int>(select_gpus(probe->probe(), env_).gpus.size());

    // The guardian's mark: this agent's own secret (the preflight's check
    // child inherits it, the ranks get it from spawn_process).
    agent_id_ = node_ + "-" + std::to_string(getpid()) + "-" + make_secret();
    guardian_.start("FLOWRUN_AGENT_ID", agent_id_);
    become_subreaper();
    Supervisor supervisor(console_, guardian_.pid());
    supervisor.set_repeat_signal_kills(false);
    sup_ = &supervisor;
    asio::io_context& io = supervisor.io();

    // Connects and shakes hands until the head welcomes or refuses this
    // agent. A connection the head drops before either (it was full of
    // connections that never authenticated, and dropped the idlest, or the
    // network cut it) is tried again until the connect timeout.
    const auto give_up = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(options_.connect_timeout_s));
    std::optional<asio::ip::tcp::socket> socket;
    FrameReader reader("head");
    for (int attempt = 1;; ++attempt) {
      socket.emplace(connect(io, give_up));
      if (options_.token_after_connect && token_.empty()) {
        // The head wrote the token before it began to listen; a shared
        // filesystem may show the file a moment later.
        const auto token_deadline = Clock::now() + std::chrono::seconds(10);
        struct stat st {};
        while (stat(options_.token_file.c_str(), &st) != 0 && Clock::now() < token_deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        token_ = read_token();
      }
      reader = FrameReader("head");
      const Handshake outcome = handshake(*socket, reader);
      if (outcome.kind == Handshake::joined) break;
      if (outcome.kind == Handshake::refused) {
        guardian_.disarm();
        return 1;
      }
      if (Clock::now() >= give_up || sup_->interrupt_signal() != 0)
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
                        printable(node_), head_at_, outcome.why));
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(1000, 50 * attempt)));
    }
    asio::ip::tcp::socket& joined = *socket;
    // gloo listens on the address the host name resolves to; where that is
    // a loopback address (Debian maps the name to 127.0.1.1) no other node
    // could reach it: point gloo at the interface this node reaches the head by.
    if (auto own = cluster::resolve_ipv4(hostname()); !own || cluster::is_loopback(*own)) {
      boost::system::error_code ec;
      const auto local = joined.local_endpoint(ec);
      if (!ec && !local.address().is_loopback()) {
        if (auto name = cluster::interface_of(local.address().to_string())) gloo_ifname_ = *name;
      }
    }
    conn_ = std::make_shared<Connection>(std::move(joined), "head");
    conn_->set_max_frame(kMaxSealedFrameSize);
    conn_->adopt_reader(std::move(reader));  // the head may have sent more right after welcome
    // Every frame after welcome is sealed, both ways (the head's already are).
    const FrameKeys keys = derive_frame_keys(token_, my_nonce_, head_nonce_, node_);
    conn_->set_ciphers(FrameCipher(keys.agent_to_head, Direction::agent_to_head),
                       FrameCipher(keys.head_to_agent, Direction::head_to_agent, "the head"));
    conn_->start([this](Frame& frame) { on_frame(frame); },
                 [this](const std::string& why) {
                   // Nothing more drains the queue (also after the head's bye).
                   if (output_paused_) resume_output();
                   lost_head(why);
                 });
    conn_->set_sent_handler([this] {
      if (output_paused_ && conn_->queued() <= kQueueLowWater) resume_output();
    });
    heartbeat_timer_.emplace(io);
    tick();

    while (!finished_) {
      if (start_pending_) {
        run_attempt();
        continue;
      }
      io.run_one();
      if (!finished_ && !in_group_ && supervisor.interrupt_signal() != 0 && !told_interrupt_) {
        told_interrupt_ = true;
        const int sig = supervisor.interrupt_signal();
        conn_->send(Stop{fmt::format("its agent received {}{}", signal_name(sig), slurm_hint(sig))});
        conn_->close_after_send();
        exit_code_ = 128 + sig;
        finished_ = true;
      }
    }
    stop_check();
    // Let the last messages go out.
    for (int i = 0; i < 1000 && conn_->is_open() && conn_->queued() > 0; ++i)
      io.run_one_for(std::chrono::milliseconds(10));
    conn_->close();
    heartbeat_timer_->cancel();
    io.poll();
    if (!scratch_.empty()) remove_tree(scratch_);
    // The timer and the socket belong to the supervisor's loop: they go before it does.
    heartbeat_timer_.reset();
    conn_.reset();
    sup_ = nullptr;
    guardian_.disarm();
    return exit_code_;
  }

  // ---- GroupObserver ------------------------------------------------------

  void on_output(std::size_t index, bool is_err, std::string_view data) override {
    const LocalRank& r = ranks_[index];
    for (std::size_t pos = 0; pos < data.size(); pos += kMaxChunkBytes) {
      conn_->send(Output{r.rank, is_err, std::string(data.substr(pos, kMaxChunkBytes))});
    }
    if (!output_paused_ && conn_->queued() >= kQueueHighWater) {
      output_paused_ = true;
      sup_->pause_output();
    }
  }

  bool on_exit(std::size_t index, const WorkerRecord& rec) override {
    const LocalRank& r = ranks_[index];
    Exited m;
    m.rank = r.rank;
    m.kind = rec.status.kind == ExitStatus::Kind::signaled       ? Exited::Kind::signaled
             : rec.status.kind == ExitStatus::Kind::spawn_failed ? Exited::Kind::spawn_failed
                                                                 : Exited::Kind::exited;
    m.code = rec.status.code;
    m.spawn_error = rec.status.spawn_error;
    m.pid = rec.pid;
    m.start_ns = rec.start_unix_ns;
    m.end_ns = rec.end_unix_ns;
    m.rss_kib = rec.peak_rss_kib;
    m.stopped = sup_->stopping() || sup_->interrupt_received() != 0;
    if (rec.silent_s) m.silent_ms = std::llround(*rec.silent_s * 1000);
    m.suspended = rec.suspended;
    m.stalled = rec.stalled;
    m.command = rec.command;
    m.program = rec.program;
    m.path_python = rec.path_python;
    conn_->send(m);
    if (!rec.status.ok()) local_failure_ = true;
    return !rec.status.ok();
  }

  // The step's stall_timeout, enforced here (the head says why in assign):
  // tell the head which ranks stalled before they are stopped.
  bool on_stall(const std::vector<std::size_t>& indices, const std::vector<WorkerRecord>& stalled) override {
    (void)indices;
    Stalled m;
    for (const auto& w : stalled)
      m.ranks.push_back({w.rank, std::llround(w.silent_s.value_or(0) * 1000), w.suspended});
    conn_->send(m);
    return true;
  }

  bool on_stop(Outcome why) override {
    if (why == Outcome::interrupted && !stop_from_head_ && !lost_head_ && sup_->interrupt_received() != 0) {
      const int sig = sup_->interrupt_received();
      told_interrupt_ = true;
      conn_->send(Stop{fmt::format("its agent received {}{}", signal_name(sig), slurm_hint(sig))});
    }
    return false;
  }

 private:
  std::string slurm_hint(int sig) const {
    if (sig == SIGTERM && env_get(env_, "SLURM_JOB_ID"))
      return " from Slurm (scancel, preemption or the job's time limit)";
    return "";
  }

  std::string read_token() {
    std::string text;
    if (!options_.token_file.empty()) {
      struct stat st {};
      if (stat(options_.token_file.c_str(), &st) != 0)
        throw Error("cannot read the token file " + options_.token_file + ": " + std::strerror(errno));
      if ((st.st_mode & 077) != 0)
        throw Error("the token file " + options_.token_file +
                    " can be read by other users; it must be private (chmod 600)");
      int err = 0;
      const auto token = try_read_file(options_.token_file, 64 << 10, &err);
      if (!token)
        throw Error("cannot read the token file " + options_.token_file + ": " + std::strerror(err));
      text = *token;
    } else {
      if (isatty(STDIN_FILENO) == 1)
        throw Error(
            "no token: give --token-file FILE (the head prints the command to run), or the token on stdin");
      char c;
      while (text.size() < 1024 && read(STDIN_FILENO, &c, 1) == 1 && c != '\n') text += c;
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
      text.pop_back();
    if (text.empty()) throw Error("the token is empty; the agent needs the run's token from the head");
    return text;
  }

  // Dials the head at every endpoint of --rdzv-endpoint (the head's
  // addresses, best first) as RFC 8305 does: a new attempt starts every
  // 250 ms, or at once when one fails; the first connection made wins and
  // the others are closed. An address this node has no route to fails at
  // once, one that drops the SYN gives up after kAttemptLimit. Rounds go on
  // until --connect-timeout (the head may not listen yet).
  asio::ip::tcp::socket connect(asio::io_context& io, Clock::time_point deadline) {
    std::string error;
    const auto endpoints = cluster::parse_endpoints(options_.endpoint, &error);
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
      if (Clock::now() >= deadline || sup_->interrupt_signal() != 0) {
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
      if (now >= deadline || sup_->interrupt_signal() != 0) {
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
        if (reader.failed()) throw Error(reader.error());
        const ssize_t n = ::read(socket.native_handle(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw boost::system::system_error(errno, boost::system::system_category());
        if (n == 0) throw boost::system::system_error(asio::error::eof);
        reader.feed(std::string_view(buf, static_cast<std::size_t>(n)));
      }
    };
    send(
        encode(Hello{node_, FLOWRUN_VERSION, my_nonce, node_rank_claim_, static_cast<int>(getpid()), gpus_}));
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
    send(encode(Auth{auth_proof(token_, head_nonce_, "agent:" + node_)}));
    const Message second = receive();
    if (const auto* refused = std::get_if<Refused>(&second)) {
      console_.message("flowrun agent: the head refused this agent: " + printable(refused->reason));
      return {Handshake::refused, {}};
    }
    const auto* welcome = std::get_if<Welcome>(&second);
    if (welcome == nullptr || !proofs_equal(welcome->proof, auth_proof(token_, my_nonce, "head:" + node_))) {
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

  void tick() {
    heartbeat_timer_->expires_after(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval_s_)));
    heartbeat_timer_->async_wait([this](const boost::system::error_code& ec) {
      if (ec || finished_) return;
      const double silent = static_cast<double>(monotonic_now_ns() - conn_->last_heard_ns()) / 1e9;
      if (silent > timeout_s_) {
        lost_head(fmt::format("no heartbeat from it for {:.1f} s", silent));
        return;
      }
      if (conn_->queued() == 0) conn_->send(Heartbeat{});
      tick();
    });
  }

  void resume_output() {
    output_paused_ = false;
    sup_->resume_output();
  }

  void lost_head(const std::string& why) {
    if (lost_head_ || finished_) return;
    lost_head_ = true;
    conn_->close();
    if (output_paused_) resume_output();  // what the ranks still write goes nowhere now
    console_.message(fmt::format("flowrun agent: {}: lost the head at {} ({}){}", node_, head_at_, why,
                                 in_group_ ? "; stopping this node's workers" : ""));
    exit_code_ = 1;
    if (in_group_) {
      sup_->stop_group(Outcome::interrupted);
    } else {
      finished_ = true;
    }
  }

  // ---- messages -----------------------------------------------------------

  void on_frame(Frame& frame) {
    std::string error;
    auto message = decode_message(frame, &error);
    if (!message) {
      lost_head("it sent a malformed " + std::string(message_type_name(frame.type)) + ": " + error);
      return;
    }
    std::visit([this](auto& m) { on_message(m); }, *message);
  }

  // What the head sends that an agent does not act on (heartbeat: hearing
  // from it is enough).
  template <class M>
  void on_message(const M&) {}

  void on_message(const Assign& m) { on_assign(m); }
  void on_message(Start& m) { on_start(std::move(m)); }
  void on_message(const Preflight& m) { on_preflight(m); }

  void on_message(const Stop& m) {
    stop_from_head_ = true;
    check_cancel_ = true;
    if (in_group_) {
      sup_->stop_group(Outcome::interrupted);
      if (m.kill) sup_->kill_group();
    }
  }

  // The head got SIGUSR1 or SIGUSR2: this node's ranks get it too.
  void on_message(const Signal& m) {
    const int sig = m.signal == "SIGUSR1" ? SIGUSR1 : m.signal == "SIGUSR2" ? SIGUSR2 : 0;
    if (sig != 0 && in_group_) sup_->signal_workers(sig);
  }

  void on_message(const Bye& m) {
    finished_ = true;
    check_cancel_ = true;
    if (options_.exit_with_step && !m.succeeded) exit_code_ = 1;
    if (in_group_) sup_->stop_group(Outcome::interrupted);
  }

  void on_assign(const Assign& a) {
    // Both name directories here (the scratch directory, a rank's in it): a
    // head's spec checker and --run-id let no other names through.
    if (auto problem = run_id_problem(a.run_id)) {
      lost_head("it sent an assign with the run id " + *problem);
      return;
    }
    if (check_name(a.step) != NameCheck::ok) {
      lost_head("it sent an assign with an invalid step name");
      return;
    }
    run_id_ = a.run_id;
    step_ = a.step;
    attempt_ = a.attempt;
    node_rank_ = a.node_rank;
    grace_s_ = static_cast<double>(a.grace_ms) / 1000.0;
    stall_s_ = static_cast<double>(a.stall_ms.value_or(0)) / 1000;  // 0: none
    stop_from_head_ = false;
    local_failure_ = false;
    Ready ready;
    std::string error;
    int err = 0;
    const auto marker = try_read_file(a.marker_path, 64 << 10, &err);
    if (!marker) error = a.marker_path + ": " + std::strerror(err);
    const bool same = marker && *marker == a.marker_text;
    if (error.empty() && !same) error = a.marker_path + ": its content differs from the head's";
    ready.workdir_ok = same;
    ready.workdir_error = error;
    boost::system::error_code ec;
    ready.address = conn_->socket().local_endpoint(ec).address().to_string();
    held_port_.release();
    if (a.want_port) {
      held_port_ = hold_free_port(ready.address);
      ready.port = held_port_.port;
    }
    ready.gpus = gpus_;
    conn_->send(ready);
  }

  // A multi-node step's preflight: flowrun doctor's NCCL check on this
  // node's GPUs, as its part of one communicator across every node. The
  // check child runs from a thread, so heartbeats go on meanwhile; node 0's
  // id goes to the head as soon as its child made it.
  void on_preflight(const Preflight& p) {
    if (check_thread_.joinable()) return;  // one check at a time
    const std::vector<int> devices = p.devices;
    DoctorOptions options;
    options.fake_gpus = options_.fake_gpus;
    options.min_bytes = p.min_bytes;
    options.max_bytes = p.max_bytes;
    options.factor = p.factor;
    options.warmup = p.warmup;
    options.iters = p.iters;
    options.timeout_s = p.timeout_s;
    options.nranks = p.nranks;
    options.first_rank = p.first_rank;
    options.nccl_id = p.nccl_id;
    asio::io_context& io = sup_->io();
    options.on_line = [this, &io](std::string_view line) {
      if (!line.starts_with("nccl_id\t")) return;
      asio::post(io, [this, id = std::string(line.substr(8))] {
        if (conn_ && conn_->is_open()) conn_->send(PreflightId{id});
      });
    };
    options.cancel = &check_cancel_;
    check_cancel_ = false;
    check_thread_ = std::thread([this, &io, devices, options, env = env_, node = node_] {
      Inventory inventory;
      std::string facts;
      try {
        inventory = select_gpus(make_probe(env, options.fake_gpus, /*topology=*/true)->probe(), env);
        const PreflightResult result = run_preflight(inventory, devices, options, node);
        facts = format_doctor_json(result.facts, evaluate_doctor(result.facts));
      } catch (const std::exception& e) {
        DoctorFacts none;
        none.hostname = node;
        none.inventory = inventory;
        none.allreduce.status = "failed";
        none.allreduce.reason = e.what();
        facts = format_doctor_json(none, evaluate_doctor(none));
      }
      asio::post(io, [this, facts = std::move(facts)] {
        if (check_thread_.joinable()) check_thread_.join();
        if (!lost_head_ && conn_ && conn_->is_open()) conn_->send(PreflightDone{facts});
      });
    });
  }

  // Ends a preflight check still running (the head is gone or said bye).
  void stop_check() {
    check_cancel_ = true;
    if (check_thread_.joinable()) check_thread_.join();
  }

  void on_start(Start start) {
    // Its ranks' directories are named by the assign's step (checked there).
    if (start.step != step_ || start.run_id != run_id_ || start.node_rank != node_rank_) {
      lost_head("it sent a start for another step or node than its assign");
      return;
    }
    start_ = std::move(start);
    start_pending_ = true;
  }

  // ---- one attempt ----------------------------------------------------------

  void run_attempt() {
    start_pending_ = false;
    if (scratch_.empty()) {
      // Node-local, private, new: made by mkdtemp (never a directory someone
      // made beforehand at a name they guessed), mode 0700, and removed when
      // the agent ends however it ends (its guardian removes it should the
      // agent be killed).
      try {
        scratch_ = make_private_dir(scratch_parent(std::getenv("TMPDIR")),
                                    fmt::format("flowrun-{}-node{}", run_id_, node_rank_));
      } catch (const Error& e) {
        refuse_attempt(std::string("cannot make the ranks' scratch directory: ") + e.what());
        return;
      }
      guardian_.remove_on_exit(scratch_);
    }
    std::vector<WorkerLaunch> launches = launches_for_start();
    GroupOptions group;
    group.step = step_;
    group.grace_s = grace_s_;
    if (stall_s_ > 0) group.stall_timeout_s = stall_s_;
    group.restart_count = attempt_;
    in_group_ = true;
    held_port_.release();  // node 0's MASTER_PORT, for rank 0 to bind (as on one host)
    const AttemptRecord attempt = sup_->run_group(launches, group, this);
    in_group_ = false;
    if (lost_head_) {
      finished_ = true;
      return;
    }
    // A signal to the agent (Slurm's scancel) that came as the ranks ended:
    // the head hears of it before this node's done.
    if (const int sig = sup_->interrupt_signal(); sig != 0 && !told_interrupt_) {
      told_interrupt_ = true;
      conn_->send(Stop{fmt::format("its agent received {}{}", signal_name(sig), slurm_hint(sig))});
    }
    std::vector<std::string> errors;
    const bool all_ok = !local_failure_ && attempt.outcome == Outcome::succeeded && !stop_from_head_;
    for (const auto& r : ranks_) {
      // The rank's directory is reached from the scratch directory without
      // following a symlink, and error.json is read only when it is a
      // regular file there (a FIFO in its place is not opened).
      const BeneathRoot dir = BeneathRoot::open_under(scratch_, r.dir, false);
      struct stat st {};
      if (const int fd = dir.open_regular("error.json", Links::none, &st); fd >= 0)
        upload_file(r.rank, "error.json", UniqueFd(fd), st, errors);
      if (all_ok && r.upload) upload_tree(r, errors);
      if (lost_head_) break;
    }
    if (lost_head_) {
      finished_ = true;
      return;
    }
    conn_->send(Done{attempt_, std::move(errors)});
  }

  // The start's ranks, each with the environment worker_env makes from the
  // start's part of the plan and what only this node has: the agent's own
  // environment (the defaults a user may override read it), its private
  // scratch directory for FLOWRUN_OUTPUT_DIR and TORCHELASTIC_ERROR_FILE,
  // its mark and its gloo interface. Makes each rank's directory anew.
  std::vector<WorkerLaunch> launches_for_start() {
    const NodeWork work = cluster::node_work_of(start_);
    const NodeSite site{env_, RunLayout{scratch_}, agent_id_, gloo_ifname_};
    const EnvMap base = strip_step_variables(env_);
    ranks_.clear();
    std::vector<WorkerLaunch> launches;
    for (std::size_t i = 0; i < work.ranks.size(); ++i) {
      const RankWork& rank = work.ranks[i];
      LocalRank r;
      r.rank = rank.rank;
      r.local_rank = rank.local_rank;
      r.upload = start_.ranks[i].upload;
      r.dir = site.layout.rank_dir(step_, r.rank);
      remove_tree(r.dir);
      make_dirs(r.dir + "/out", 0700);
      WorkerLaunch launch;
      launch.rank = r.rank;
      launch.local_rank = r.local_rank;
      launch.argv = start_.argv;
      launch.env = full_env(base, worker_env(work, rank, site));
      launch.workdir = start_.workdir;
      launch.error_file = site.layout.error_file(step_, r.rank);
      launch.console = false;
      launches.push_back(std::move(launch));
      ranks_.push_back(std::move(r));
    }
    return launches;
  }

  // No rank of this attempt can start (the scratch directory cannot be
  // made): each is reported as a command that could not start, with `why`.
  void refuse_attempt(const std::string& why) {
    const std::int64_t now = unix_now_ns();
    for (const StartRank& planned : start_.ranks) {
      Exited m;
      m.rank = planned.rank;
      m.kind = Exited::Kind::spawn_failed;
      m.code = 1;
      m.spawn_error = why;
      m.start_ns = now;
      m.end_ns = now;
      conn_->send(m);
    }
    conn_->send(Done{attempt_, {why}});
    held_port_.release();
  }

  // Waits while kQueueHighWater bytes or more are queued (the head reads at
  // its pace; memory stays bounded).
  void wait_for_queue() {
    while (conn_->is_open() && !lost_head_ && conn_->queued() >= kQueueHighWater) sup_->io().run_one();
  }

  // Why an upload stops early: the head went away or said stop, or the
  // agent received SIGINT or SIGTERM. Empty while it may go on.
  std::string upload_stop_reason() const {
    if (lost_head_) return "the head is gone";
    if (stop_from_head_) return "the head stopped the step";
    if (const int sig = sup_->interrupt_received(); sig != 0) return "the agent received " + signal_name(sig);
    return {};
  }

  // Sends the open regular file `fd` (`st` its fstat) as rank's `rel`.
  // Returns false when the upload stopped (upload_stop_reason()).
  bool upload_file(int rank, const std::string& rel, UniqueFd fd, const struct stat& st,
                   std::vector<std::string>& errors) {
    conn_->send(UploadBegin{rank, rel, st.st_size});
    Crc32c crc;
    std::string buf(kUploadChunk, '\0');
    std::int64_t sent = 0;
    int read_error = 0;
    while (sent < st.st_size) {
      wait_for_queue();  // the next chunk is read only once the queue is below the mark
      if (lost_head_) break;
      const ssize_t n = read(fd.get(), buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        read_error = errno;  // EAGAIN too: the fd is O_NONBLOCK, a read that would wait is no content
      if (n <= 0) break;
      const std::string_view piece(buf.data(),
                                   static_cast<std::size_t>(std::min<std::int64_t>(n, st.st_size - sent)));
      crc.update(piece);
      conn_->send_frame(encode_upload_chunk_frame(piece));
      sent += static_cast<std::int64_t>(piece.size());
    }
    conn_->send(UploadEnd{rel, crc.hex()});
    if (read_error != 0)
      errors.push_back(fmt::format("rank {}: cannot read {}: {}", rank, rel, std::strerror(read_error)));
    else if (sent != st.st_size)
      errors.push_back(fmt::format("rank {}: {} changed while it was uploaded", rank, rel));
    return !lost_head_;
  }

  // The rank's FLOWRUN_OUTPUT_DIR, walked as gathering on one node walks it
  // (scan_rank_output: the same refusals in the same words), each file read
  // through an fd opened beneath it. Stops between files, and says so, when
  // the head goes away or stops the step, or the agent is interrupted.
  void upload_tree(const LocalRank& r, std::vector<std::string>& errors) {
    auto stop = [this] { return !upload_stop_reason().empty(); };
    RankOutput out = scan_rank_output(r.rank, scratch_, r.dir + "/out", stop);
    for (auto& e : out.errors) errors.push_back(std::move(e));
    std::size_t done = 0;
    for (const auto& f : out.files) {
      if (stop()) break;
      ++done;
      struct stat st {};
      const int fd = out.root.open_regular(f.rel, Links::beneath, &st);
      if (fd == kNotRegular) {
        errors.push_back(fmt::format("rank {}: FLOWRUN_OUTPUT_DIR/{} is now {}, not a regular file; refused",
                                     r.rank, f.rel, file_type_name(st.st_mode)));
      } else if (fd < 0) {
        errors.push_back(fmt::format("rank {}: cannot read out/{}: {}", r.rank, f.rel, std::strerror(errno)));
      } else if (!upload_file(r.rank, "out/" + f.rel, UniqueFd(fd), st, errors)) {
        return;
      }
    }
    if (const std::string why = upload_stop_reason();
        !why.empty() && !lost_head_ && (out.stopped || done < out.files.size()))
      errors.push_back(fmt::format(
          "rank {}: the upload of FLOWRUN_OUTPUT_DIR stopped ({}); {} of its {} files not uploaded", r.rank,
          why, out.files.size() - done, out.files.size()));
  }

  const AgentOptions& options_;
  const EnvMap& env_;
  Console console_;
  Guardian guardian_;
  Supervisor* sup_ = nullptr;
  std::shared_ptr<Connection> conn_;
  std::optional<asio::steady_timer> heartbeat_timer_;
  std::string token_, node_, agent_id_, run_id_, step_, scratch_;
  std::string my_nonce_, head_nonce_;  // the handshake's, for the frame keys
  std::string gloo_ifname_;            // set for the workers when the host name is a loopback address
  std::string head_at_;                // the --rdzv-endpoint entry it reached the head at
  int node_rank_claim_ = -1, node_rank_ = 0, gpus_ = 0, attempt_ = 0;
  double interval_s_ = 2.5, timeout_s_ = 10, grace_s_ = 10, stall_s_ = 0;
  HeldPort held_port_;
  std::thread check_thread_;  // a preflight's check (on_preflight)
  std::atomic<bool> check_cancel_{false};
  Start start_;
  std::vector<LocalRank> ranks_;
  bool finished_ = false, start_pending_ = false, in_group_ = false, lost_head_ = false;
  bool stop_from_head_ = false, local_failure_ = false, told_interrupt_ = false;
  bool output_paused_ = false;  // the queue passed kQueueHighWater: the ranks' pipes are not read
  int exit_code_ = 0;
};

}  // namespace

int run_agent(const AgentOptions& options, const EnvMap& env) {
  // Upload chunks are 1 MiB strings made and freed in a loop: keep them on
  // the heap instead of mapping and unmapping pages for each one.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  Agent agent(options, env);
  return agent.run();
}

}  // namespace flowrun
