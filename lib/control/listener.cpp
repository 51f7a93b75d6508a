#include "flowrun/listener.h"

#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>
#include <sys/socket.h>
#include <unistd.h>
#include <utility>

#include "flowrun/clock.h"
#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/process.h"
#include "flowrun/text.h"
#include "flowrun/util.h"
#include "flowrun/version.h"

namespace flowrun::cluster {

namespace asio = boost::asio;

namespace {

// Thousands of agents are thousands of sockets. The workers still get the
// limit flowrun started with (raise_open_file_limit keeps it for them).
void raise_fd_limit() { raise_open_file_limit(); }

}  // namespace

Room make_room(const std::vector<HandshakeSlot>& slots, const std::string& ip, std::size_t max_total,
               std::size_t max_per_source, std::int64_t silent_since_ns,
               const std::function<bool(std::size_t)>& spoke) {
  Room room;
  room.from_ip = static_cast<std::size_t>(
      std::count_if(slots.begin(), slots.end(), [&](const HandshakeSlot& s) { return s.ip == ip; }));
  if (room.from_ip < max_per_source && slots.size() < max_total) return room;
  room.full = true;
  room.source = ip;
  const bool over_source = room.from_ip >= max_per_source;
  if (!over_source) {
    std::map<std::string, std::size_t> count;
    for (const auto& s : slots) ++count[s.ip];
    room.source = std::max_element(count.begin(), count.end(), [](const auto& a, const auto& b) {
                    return a.second < b.second;
                  })->first;
  }
  for (std::size_t i = 0; i < slots.size(); ++i) {
    // Only one that has not even said hello: an agent in the middle of
    // its handshake is never dropped for a newcomer.
    if (slots[i].ip != room.source || slots[i].said_hello) continue;
    if (!over_source && slots[i].last_heard_ns > silent_since_ns) continue;  // its hello may be on its way
    if (spoke(i)) continue;                                                  // it has spoken since
    if (!room.drop || slots[i].last_heard_ns < slots[*room.drop].last_heard_ns) room.drop = i;
  }
  return room;
}

Listener::Listener(asio::io_context& io, const Console& console, std::string step, std::string token,
                   double interval_s, double timeout_s)
    : io_(io),
      console_(console),
      step_(std::move(step)),
      token_(std::move(token)),
      interval_s_(interval_s),
      timeout_s_(timeout_s) {}

void Listener::listen(const std::string& address, std::uint16_t port) {
  raise_fd_limit();
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(address, ec);
  if (ec) {
    // A host name: listen on the address it resolves to.
    asio::ip::tcp::resolver resolver(io_);
    auto found = resolver.resolve(address, "0", ec);
    if (ec || found.empty())
      throw Error("cannot resolve the head's address '" + address + "': " + ec.message());
    open_acceptor(found.begin()->endpoint().address(), port);
  } else {
    open_acceptor(ip, port);
  }
}

void Listener::open_acceptor(const asio::ip::address& ip, std::uint16_t port) {
  boost::system::error_code ec;
  auto acceptor = open_acceptor_at(ip, port, ec);
  if (ec)
    throw Error("cannot listen on " + ip.to_string() + (port ? ":" + std::to_string(port) : "") + ": " +
                ec.message() +
                (port ? " (is another job using that port? choose another)" : " (set cluster.address)"));
  port_ = acceptor->local_endpoint().port();
  endpoint_ = (ip.is_v6() ? "[" + ip.to_string() + "]" : ip.to_string()) + ":" + std::to_string(port_);
  acceptors_.push_back(std::move(acceptor));
}

void Listener::adopt(int fd) {
  raise_fd_limit();
  sockaddr_storage where{};
  socklen_t size = sizeof where;
  boost::system::error_code ec;
  auto acceptor = std::make_unique<asio::ip::tcp::acceptor>(io_);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&where), &size) != 0) {
    ec = boost::system::error_code(errno, boost::system::system_category());
  } else {
    acceptor->assign(where.ss_family == AF_INET6 ? asio::ip::tcp::v6() : asio::ip::tcp::v4(), fd, ec);
  }
  if (ec) {
    ::close(fd);
    throw Error("cannot use the rendezvous port's socket: " + ec.message());
  }
  const auto local = acceptor->local_endpoint();
  port_ = local.port();
  endpoint_ = local.address().to_string() + ":" + std::to_string(port_);
  acceptors_.push_back(std::move(acceptor));
}

std::unique_ptr<asio::ip::tcp::acceptor> Listener::open_acceptor_at(const asio::ip::address& ip,
                                                                    std::uint16_t port,
                                                                    boost::system::error_code& ec) {
  auto acceptor = std::make_unique<asio::ip::tcp::acceptor>(io_);
  asio::ip::tcp::endpoint where(ip, port);
  acceptor->open(where.protocol(), ec);
  if (!ec && port != 0) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(where, ec);
  if (!ec) acceptor->listen(kListenBacklog, ec);
  return acceptor;
}

// One port on every candidate address, and on no other: the first takes a
// free port, the others bind the same one; when one of them finds it taken
// (another program listens there on that address) all start again.
void Listener::listen_on_candidates(std::vector<HeadAddress> candidates) {
  candidates_ = std::move(candidates);
  if (candidates_.size() == 1) {
    // cluster.address may be a host name: the console shows the address it resolved to.
    listen(candidates_.front().address, 0);
    candidates_.front().address = acceptors_.front()->local_endpoint().address().to_string();
    return;
  }
  raise_fd_limit();
  std::string last_error;
  for (int round = 0; round < 20; ++round) {
    acceptors_.clear();
    std::vector<HeadAddress> kept;
    boost::system::error_code ec;
    for (const auto& c : candidates_) {
      const auto ip = asio::ip::make_address(c.address, ec);
      if (ec) break;
      auto acceptor = open_acceptor_at(ip, port_, ec);
      if (ec == asio::error::address_in_use && port_ != 0) break;
      if (ec) {
        // Not this host's after all (it changed meanwhile): the others still serve.
        last_error = c.address + ": " + ec.message();
        ec.clear();
        continue;
      }
      if (port_ == 0) port_ = acceptor->local_endpoint().port();
      acceptors_.push_back(std::move(acceptor));
      kept.push_back(c);
    }
    if (!ec && !kept.empty()) {
      candidates_ = std::move(kept);
      std::string list;
      for (const auto& c : candidates_)
        list += (list.empty() ? "" : ",") + c.address + ":" + std::to_string(port_);
      endpoint_ = list;
      return;
    }
    if (ec && ec != asio::error::address_in_use) last_error = ec.message();
    port_ = 0;
  }
  acceptors_.clear();
  throw Error("cannot listen on this host's addresses: " +
              (last_error.empty() ? "no port free" : last_error) + " (set cluster.address)");
}

void Listener::start(Admit admit, Joined joined) {
  admit_ = std::move(admit);
  joined_ = std::move(joined);
  for (auto& a : acceptors_) accept_next(*a);
}

void Listener::close_acceptors() {
  boost::system::error_code ignored;
  for (auto& a : acceptors_) a->close(ignored);
}

void Listener::accept_next(asio::ip::tcp::acceptor& acceptor) {
  if (!room_for_newcomer()) {
    // Full of handshakes under way, none of which would give way: a
    // newcomer accepted now would only be closed, so the kernel's queue
    // holds it until one of them ends or gives way (after_settle).
    parked_.push_back(&acceptor);
    wait_for_room();
    return;
  }
  acceptor.async_accept([this, &acceptor](const boost::system::error_code& ec, asio::ip::tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) {
      on_accept(std::move(socket));
      accept_queued(acceptor);
    }
    accept_next(acceptor);
  });
}

void Listener::accept_queued(asio::ip::tcp::acceptor& acceptor) {
  // One accept per turn of the loop let the handshakes under way, thousands
  // in a burst, go first each time: the kernel's queue (kListenBacklog)
  // overflowed and each agent it dropped retried its SYN a second or more
  // later. What the queue holds now is taken at once, as a bare epoll server
  // does, while there is room for it: once a newcomer finds the handshakes
  // full (one gives way, it waits or it is closed), one accept per turn again,
  // so that a peer that reopens every connection closed cannot keep the loop
  // accepting while the agents' handshakes wait.
  boost::system::error_code ec;
  if (!acceptor.non_blocking()) acceptor.non_blocking(true, ec);  // once: setting it is a syscall
  crowded_ = false;
  for (int n = 0; !ec && !crowded_ && n < kListenBacklog && acceptor.is_open() && waiting_.empty() &&
                  room_for_newcomer();
       ++n) {
    asio::ip::tcp::socket socket(io_);
    acceptor.accept(socket, ec);  // would_block once the queue is empty
    if (!ec) on_accept(std::move(socket));
  }
}

void Listener::on_accept(asio::ip::tcp::socket socket) {
  boost::system::error_code ec;
  const auto remote = socket.remote_endpoint(ec);
  const std::string ip = ec ? std::string("?") : remote.address().to_string();
  const auto local = socket.local_endpoint(ec);
  const std::string via = ec ? std::string() : local.address().to_string();
  // Settled handshakes leave pending_ once they are half of it: erasing them at
  // every accept walked the whole list each time, N^2/2 steps for a burst of N.
  if (pending_.size() >= 2 * under_way_ + 64)
    std::erase_if(pending_, [](const std::shared_ptr<Pending>& p) { return p->settled; });
  const Room room = room_for(ip);
  crowded_ = crowded_ || room.full;
  if (room.full && !room.drop && room.from_ip < max_pending_per_source_) {
    // Over the total with every handshake under way: it waits, unread, for
    // one of them to end (after_settle), and the acceptors stop meanwhile.
    waiting_.push_back(std::move(socket));
    wait_for_room();
    return;
  }
  if (room.full) {
    // Full: the connection silent longest makes room, so that one that
    // holds connections open without a word cannot keep the agents out
    // (they answer within a round trip; an agent dropped anyway tries
    // again within its connect timeout). Over the per-source cap with
    // none silent, the newcomer itself is closed.
    if (!said_too_many_pending_) {
      const std::string who = room.from_ip >= max_pending_per_source_
                                  ? fmt::format("{} connections from {}", room.from_ip, ip)
                                  : fmt::format("{} connections", under_way_);
      console_.message(
          fmt::format("flowrun: step '{}': {} are waiting to authenticate; dropping the longest "
                      "idle of them for each new one",
                      step_, who));
    }
    said_too_many_pending_ = true;
    note_stranger(room.source);
    if (!room.drop) {
      socket.close(ec);
      return;
    }
    const auto idlest = pending_[*room.drop];
    settle(*idlest);
    idlest->conn->close();
    std::erase(pending_, idlest);
  }
  auto conn = std::make_shared<Connection>(std::move(socket), "agent at " + ip);
  conn->set_max_frame(kMaxHandshakeFrame);
  auto pending = std::make_shared<Pending>();
  conn->on_other_version([this, pending, ip](const OtherVersion& other) {
    if (pending->settled) return;
    pending->node = other.node;
    refuse(*pending, ip,
           fmt::format("it speaks protocol {}{}, the head speaks protocol {} (flowrun {}): run the same "
                       "flowrun version on every node",
                       other.protocol,
                       other.flowrun.empty() ? "" : " (flowrun " + printable(other.flowrun) + ")",
                       kProtocolVersion, FLOWRUN_VERSION),
           static_cast<std::uint8_t>(other.protocol));
    after_settle();
  });
  pending->conn = conn;
  pending->ip = ip;
  pending->via = via;
  pending->deadline = std::make_unique<asio::steady_timer>(io_);
  pending->deadline->expires_after(steady_seconds(timeout_s_));
  // Captures `this` only behind the error check: at the end of the step
  // every deadline is cancelled before the head goes away.
  pending->deadline->async_wait([this, pending, ip](const boost::system::error_code& error) {
    if (error || pending->settled) return;
    refuse(*pending, ip,
           fmt::format("it did not authenticate within {:g} s (cluster.heartbeat_timeout)", timeout_s_));
    after_settle();
  });
  pending_.push_back(pending);
  ++under_way_;
  ++under_way_from_[ip];
  conn->start(
      [this, pending, ip](Frame& frame) {
        on_handshake(*pending, ip, frame);
        if (pending->settled) after_settle();
      },
      [this, pending, ip](const std::string& why) {
        if (pending->settled) return;
        settle(*pending);
        // A port scan opens and closes; only a peer that sent bytes
        // flowrun could not read is worth a line.
        note_stranger(ip);
        if (why != "the connection closed" && why.rfind("the connection failed", 0) != 0)
          console_.message(
              fmt::format("flowrun: step '{}': dropped a connection from {} before it "
                          "authenticated: {}",
                          step_, ip, why));
        after_settle();
      });
}

Room Listener::room_for(const std::string& ip) const {
  // The usual case, room under both caps, without a look at each one.
  const auto from = under_way_from_.find(ip);
  const std::size_t from_ip = from == under_way_from_.end() ? 0 : from->second;
  if (under_way_ < pending_cap() && from_ip < max_pending_per_source_) {
    Room room;
    room.from_ip = from_ip;
    return room;
  }
  // Settled connections may wait in pending_ for the next accept to erase
  // them (one may be on the caller's stack), so they are skipped here.
  std::vector<HandshakeSlot> slots;
  std::vector<const Pending*> of_slot;
  slots.reserve(pending_.size());
  of_slot.reserve(pending_.size());
  for (const auto& p : pending_) {
    if (p->settled) continue;
    slots.push_back({p->ip, !p->head_nonce.empty(), p->conn->last_heard_ns()});
    of_slot.push_back(p.get());
  }
  const auto grace_ns = static_cast<std::int64_t>(silent_grace_s_ * 1e9);
  Room room = make_room(slots, ip, pending_cap(), max_pending_per_source_, monotonic_now_ns() - grace_ns,
                        [&](std::size_t i) {
                          boost::system::error_code unread_ec;
                          return of_slot[i]->conn->socket().available(unread_ec) > 0 || unread_ec;
                        });
  if (room.drop) {
    // make_room counts among the unsettled; the caller indexes pending_.
    const Pending* dropped = of_slot[*room.drop];
    room.drop = static_cast<std::size_t>(
        std::find_if(pending_.begin(), pending_.end(), [&](const auto& p) { return p.get() == dropped; }) -
        pending_.begin());
  }
  return room;
}

bool Listener::room_for_newcomer() const {
  if (under_way_ < pending_cap()) return true;
  // Only one silent past its grace may give way: when there is none (a
  // burst of agents whose hellos are on their way), say so without the
  // whole rule, which counts every address.
  const std::int64_t silent_since = monotonic_now_ns() - static_cast<std::int64_t>(silent_grace_s_ * 1e9);
  if (std::none_of(pending_.begin(), pending_.end(), [&](const auto& p) {
        return !p->settled && p->head_nonce.empty() && p->conn->last_heard_ns() <= silent_since;
      }))
    return false;
  // One from an address not among them: over the total only.
  const Room room = room_for(std::string());
  return !room.full || room.drop.has_value();
}

void Listener::settle(Pending& p) {
  if (!p.settled && under_way_ > 0) {
    --under_way_;
    const auto from = under_way_from_.find(p.ip);
    if (from != under_way_from_.end() && --from->second == 0) under_way_from_.erase(from);
  }
  p.settled = true;
  if (p.deadline) p.deadline->cancel();
  // Its handler holds `p`, which holds the connection: let it go, the
  // handshake is over either way.
  if (p.conn) p.conn->on_other_version(nullptr);
}

void Listener::after_settle() {
  // Each of those waiting at most once: on_accept may queue it again.
  for (std::size_t n = waiting_.size(); n > 0 && !waiting_.empty() && room_for_newcomer(); --n) {
    asio::ip::tcp::socket socket = std::move(waiting_.front());
    waiting_.pop_front();
    on_accept(std::move(socket));
  }
  if (!waiting_.empty()) {
    wait_for_room();
    return;
  }
  if (parked_.empty() || !room_for_newcomer()) return;
  const std::vector<asio::ip::tcp::acceptor*> parked = std::exchange(parked_, {});
  for (auto* acceptor : parked)
    if (acceptor->is_open()) accept_next(*acceptor);
}

void Listener::wait_for_room() {
  // The first silent one whose grace is still running: once it is over, it
  // may give way. One past its grace that did not (another address holds
  // more) waits like the rest for a handshake to end.
  const auto grace_ns = static_cast<std::int64_t>(silent_grace_s_ * 1e9);
  const std::int64_t now = monotonic_now_ns();
  std::int64_t first_ns = 0;
  bool any = false;
  for (const auto& p : pending_) {
    if (p->settled || !p->head_nonce.empty() || p->conn->last_heard_ns() + grace_ns <= now) continue;
    if (!any || p->conn->last_heard_ns() < first_ns) first_ns = p->conn->last_heard_ns();
    any = true;
  }
  if (!any) return;  // a handshake ending wakes it
  if (!room_timer_) room_timer_ = std::make_unique<asio::steady_timer>(io_);
  const std::int64_t wait_ns = first_ns + grace_ns - now + 1'000'000;
  room_timer_->expires_after(std::chrono::nanoseconds(wait_ns));
  // Cancelled by close_pending before the listener goes away.
  room_timer_->async_wait([this](const boost::system::error_code& error) {
    if (!error) after_settle();
  });
}

void Listener::close_pending() {
  for (auto& p : pending_) {
    if (p->settled) continue;
    settle(*p);
    p->conn->close();
  }
  pending_.clear();
  under_way_ = 0;
  under_way_from_.clear();
  waiting_.clear();  // closes them
  parked_.clear();
  if (room_timer_) room_timer_->cancel();
}

void Listener::refuse(Pending& p, const std::string& ip, const std::string& reason,
                      std::optional<std::uint8_t> version) {
  settle(p);
  if (!p.authenticated) note_stranger(ip);
  // A peer that never said hello gets a line, up to a point: one that
  // keeps opening connections must not flood the console.
  if (p.node.empty() && ++silent_refused_ > kSilentRefusalLines) {
    if (silent_refused_ == kSilentRefusalLines + 1)
      console_.message(
          fmt::format("flowrun: step '{}': more connections that say nothing are being refused; "
                      "no further line for them",
                      step_));
  } else {
    console_.message(fmt::format("flowrun: step '{}': refused an agent from {}{}: {}", step_, ip,
                                 p.node.empty() ? "" : " (" + printable(p.node) + ")", printable(reason)));
  }
  if (version)
    p.conn->send_frame(refused_frame_in(*version, reason));  // a peer of another protocol reads it
  else
    p.conn->send(Refused{reason});
  p.conn->close_after_send();
}

void Listener::on_handshake(Pending& p, const std::string& ip, Frame& frame) {
  std::string error;
  const auto message = decode_message(frame, &error);
  if (!message) {
    refuse(p, ip, "malformed " + std::string(message_type_name(frame.type)) + ": " + error);
    return;
  }
  if (const auto* hello = std::get_if<Hello>(&*message); hello && p.head_nonce.empty()) {
    p.node = hello->node;
    p.agent_nonce = hello->nonce;
    p.claim = hello->node_rank;
    p.gpus = hello->gpus;
    p.stays = hello->stays;
    p.address = hello->address;
    p.reach_port = hello->reach_port;
    const std::string& version = hello->flowrun;
    if (p.node.empty() || p.agent_nonce.size() < 16) {
      refuse(p, ip, "its hello lacks a node name or nonce");
      return;
    }
    if (version != FLOWRUN_VERSION) {
      refuse(p, ip,
             fmt::format("it runs flowrun {}, the head runs {}: run the same flowrun on every node",
                         version.empty() ? "(unknown)" : version, FLOWRUN_VERSION));
      return;
    }
    p.head_nonce = make_nonce();
    p.conn->send(Challenge{p.head_nonce});
    return;
  }
  if (const auto* auth = std::get_if<Auth>(&*message); auth && !p.head_nonce.empty()) {
    if (!proofs_equal(auth->proof, auth_proof(token_, p.head_nonce, "agent:" + p.node))) {
      refuse(p, ip, "wrong token");
      return;
    }
    p.authenticated = true;
    admit(p, ip);
    return;
  }
  refuse(p, ip, fmt::format("unexpected {} during the handshake", message_type_name(frame.type)));
}

// A connection that did not prove the token was refused or dropped: the
// join timeout's report says so, rather than only blaming the nodes.
void Listener::note_stranger(const std::string& ip) {
  ++strangers_;
  if (stranger_sources_.size() < 4 &&
      std::find(stranger_sources_.begin(), stranger_sources_.end(), ip) == stranger_sources_.end())
    stranger_sources_.push_back(ip);
}

void Listener::admit(Pending& p, const std::string& ip) {
  const Joiner joiner{p.node, p.claim, p.gpus, ip, p.via, p.stays, p.address, p.reach_port};
  const Admission admission = admit_(joiner);
  if (!admission.refusal.empty()) {
    refuse(p, ip, admission.refusal);
    return;
  }
  const int rank = admission.rank;
  settle(p);
  p.conn->set_max_frame(kMaxSealedFrameSize);
  p.conn->send(Welcome{auth_proof(token_, p.agent_nonce, "head:" + p.node), rank,
                       static_cast<std::int64_t>(interval_s_ * 1000),
                       static_cast<std::int64_t>(timeout_s_ * 1000)});
  // Every frame after welcome is sealed, both ways.
  const FrameKeys keys = derive_frame_keys(token_, p.agent_nonce, p.head_nonce, p.node);
  p.conn->set_ciphers(
      FrameCipher(keys.head_to_agent, Direction::head_to_agent),
      FrameCipher(keys.agent_to_head, Direction::agent_to_head, "the agent of node " + printable(p.node)));
  // From now on frames go to the node.
  joined_(rank, joiner, p.conn);
}

std::string Listener::strangers_note() const {
  if (strangers_ == 0) return {};
  return fmt::format(
      "; meanwhile {} that did not prove the run's token (from {}) were refused or dropped: "
      "something other than the agents is connecting to {}",
      plural(static_cast<std::size_t>(strangers_), "connection", "connections"),
      fmt::join(stranger_sources_, ", "), endpoint_);
}

void Listener::say_fallback_addresses(
    const std::vector<std::pair<std::string, std::string>>& via_names) const {
  if (candidates_.size() < 2) return;
  std::vector<std::pair<std::string, std::vector<std::string>>> by_address;
  for (const auto& [via, name] : via_names) {
    if (via.empty() || via == candidates_.front().address) continue;
    auto at =
        std::find_if(by_address.begin(), by_address.end(), [&](const auto& e) { return e.first == via; });
    if (at == by_address.end()) at = by_address.insert(by_address.end(), {via, {}});
    at->second.push_back(name);
  }
  for (const auto& [address, names] : by_address) {
    std::string why;
    for (const auto& c : candidates_)
      if (c.address == address) why = c.why;
    const std::size_t shown = std::min<std::size_t>(names.size(), 8);
    std::string who =
        fmt::format("{}", fmt::join(names.begin(), names.begin() + static_cast<long>(shown), ", "));
    if (names.size() > shown) who += fmt::format(" and {} more", names.size() - shown);
    console_.message(fmt::format(
        "flowrun: step '{}': {} ({} of {}) reached the head at {} ({}), not at {}; set cluster.address to "
        "an address every node reaches",
        step_, who, names.size(), plural(via_names.size(), "node", "nodes"), address, why,
        candidates_.front().address));
  }
}

}  // namespace flowrun::cluster
