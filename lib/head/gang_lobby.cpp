#include "flowrun/gang_lobby.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <map>
#include <set>

#include "flowrun/clock.h"
#include "flowrun/error.h"
#include "flowrun/listener.h"
#include "flowrun/messages.h"
#include "flowrun/net_addresses.h"
#include "flowrun/text.h"

#include "engines.h"
#include "head_launch.h"
#include "node_reach.h"
#include "node_table.h"

namespace flowrun {

namespace asio = boost::asio;
using cluster::Admission;
using cluster::Joiner;
using cluster::NodeDoor;
using cluster::NodeLink;

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

struct GangLobby::Impl {
  // A gang's agent: how it joined, and its link while the lobby holds it.
  struct Member {
    Joiner joiner;
    std::shared_ptr<NodeLink> link;
  };

  // The door of one step: the lobby, seen from the step's head.
  class StepDoor final : public NodeDoor {
   public:
    explicit StepDoor(Impl& lobby) : lobby_(lobby) {}
    ~StepDoor() override {
      *alive_ = false;
      if (lobby_.step_ == this) lobby_.step_ = nullptr;
    }
    void start(Admit admit, Joined joined) override {
      admit_ = std::move(admit);
      joined_ = std::move(joined);
      open_ = true;
      lobby_.step_ = this;
      // The agents waiting join the step from the loop, once its head has
      // started (as a joiner through the listener would).
      asio::post(lobby_.sup_.io(), [this, alive = alive_] {
        if (*alive) lobby_.seat_waiting();
      });
    }
    void close_acceptors() override { open_ = false; }
    void close_pending() override {}
    const std::string& endpoint() const override { return lobby_.endpoint_; }
    std::string strangers_note() const override { return lobby_.door_->strangers_note(); }
    void say_fallback_addresses(const std::vector<std::pair<std::string, std::string>>&) const override {}
    bool keeps_stayers() const override { return true; }
    void take_back(const std::shared_ptr<NodeLink>& link) override { lobby_.take_back(link); }

    bool open() const { return open_; }
    Admission admit(const Joiner& j) { return admit_(j); }
    void joined(int rank, const Joiner& j, const std::shared_ptr<NodeLink>& link) { joined_(rank, j, link); }

   private:
    Impl& lobby_;
    Admit admit_;
    Joined joined_;
    bool open_ = false;
    std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  };

  Impl(Supervisor& supervisor, const Console& console, GangLobbyOptions options,
       std::unique_ptr<NodeDoor> door)
      : sup_(supervisor),
        console_(console),
        o_(std::move(options)),
        interval_s_(cluster::heartbeat_interval_s(o_.heartbeat_timeout_s)),
        door_(std::move(door)),
        heartbeat_(sup_.io()),
        start_ns_(monotonic_now_ns()) {
    endpoint_ = door_->endpoint();
    door_->start(
        [this](const Joiner& j) { return admit(j); },
        [this](int rank, const Joiner& j, const std::shared_ptr<NodeLink>& link) { joined(rank, j, link); });
    tick();
  }

  ~Impl() {
    if (!finished_) say_farewell(1);
    heartbeat_.cancel();
    door_->close_acceptors();
    door_->close_pending();
    for (auto& m : waiting_) m.link->close();
  }

  // ---- joiners ---------------------------------------------------------------

  Admission admit(const Joiner& j) {
    route_to_step_ = false;
    if (!j.stays) {
      // flowrun agent of this host's node 0, which the step's engine started.
      if (step_ != nullptr && step_->open()) {
        route_to_step_ = true;
        return step_->admit(j);
      }
      return {-1, "no parallel step of the flow is running; only the gang's own agents wait between steps"};
    }
    if (j.claim <= 0 || j.claim >= o_.nodes)
      return {-1, fmt::format("node {} is not one of the {}'s other nodes (1 to {})", j.claim, o_.platform,
                              o_.nodes - 1)};
    if (auto other = here(j.claim))
      return {-1, fmt::format("node {} of the {} is already here (from {}); two pods with one index?",
                              j.claim, o_.platform, printable(other->node))};
    if (finished_) return {j.claim, {}};
    if (step_ != nullptr && step_->open()) {
      const Admission a = step_->admit(j);
      if (a.refusal.empty()) {
        route_to_step_ = true;
        return a;
      }
    }
    return {j.claim, {}};  // it waits here
  }

  void joined(int rank, const Joiner& j, const std::shared_ptr<NodeLink>& link) {
    if (j.stays) known_[link.get()] = {j, link};
    if (route_to_step_) {
      step_->joined(rank, j, link);
      return;
    }
    if (finished_) {
      farewell(link);
      return;
    }
    wait_here(Member{j, link});
  }

  // The node of the gang that holds index `claim` now (waiting, or lent to
  // a step and still connected), if any.
  std::optional<Joiner> here(int claim) {
    std::erase_if(known_, [](const auto& entry) {
      const auto link = entry.second.second.lock();
      return !link || !link->is_open();
    });
    for (const auto& [raw, known] : known_)
      if (known.first.claim == claim) return known.first;
    return std::nullopt;
  }

  // ---- waiting between steps -------------------------------------------------

  void wait_here(Member m) {
    NodeLink* raw = m.link.get();
    m.link->set_handlers([this, raw](Frame& frame) { on_frame(raw, frame); },
                         [this, raw](const std::string& why) { gone(raw, why); });
    waiting_.push_back(std::move(m));
  }

  void on_frame(NodeLink* raw, Frame& frame) {
    std::string error;
    auto message = decode_message(frame, &error);
    if (!message) {
      drop(raw, "it sent a malformed " + std::string(message_type_name(frame.type)) + ": " + error);
      return;
    }
    // An agent stopped by a signal (its pod deleted) says why, then closes.
    if (const auto* stop = std::get_if<Stop>(&*message)) left_why_[raw] = stop->reason;
    // Heartbeats, and what a step's ranks still said after its bye: nothing
    // to act on between steps.
  }

  void gone(NodeLink* raw, const std::string& why) {
    const auto left = left_why_.find(raw);
    drop(raw, left != left_why_.end() ? left->second : "its connection closed (" + why + ")");
  }

  void drop(NodeLink* raw, const std::string& why) {
    const auto at = std::find_if(waiting_.begin(), waiting_.end(),
                                 [raw](const Member& m) { return m.link.get() == raw; });
    if (at == waiting_.end()) return;
    console_.message(fmt::format("flowrun: node {} of the {} ({}) left between steps: {}", at->joiner.claim,
                                 o_.platform, printable(at->joiner.node), why));
    at->link->close();
    waiting_.erase(at);
    known_.erase(raw);
    left_why_.erase(raw);
  }

  void tick() {
    heartbeat_.expires_after(steady_seconds(interval_s_));
    heartbeat_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || finished_) return;
      const std::int64_t now = monotonic_now_ns();
      std::vector<NodeLink*> silent;
      for (auto& m : waiting_) {
        if (cluster::heartbeat_silence(now, m.link->last_heard_ns(), o_.heartbeat_timeout_s)) {
          silent.push_back(m.link.get());
          continue;
        }
        if (m.link->queued() == 0) m.link->send(Heartbeat{});
      }
      for (NodeLink* raw : silent)
        drop(raw, *cluster::heartbeat_silence(now, raw->last_heard_ns(), o_.heartbeat_timeout_s));
      tick();
    });
  }

  // ---- steps -------------------------------------------------------------------

  // The agents waiting join the step now.
  void seat_waiting() {
    std::vector<Member> staying;
    for (auto& m : std::exchange(waiting_, {})) {
      if (step_ == nullptr || !step_->open() || !m.link->is_open()) {
        staying.push_back(std::move(m));
        continue;
      }
      const Admission a = step_->admit(m.joiner);
      if (!a.refusal.empty()) {
        staying.push_back(std::move(m));  // no seat for it in this step: it waits for the next
        continue;
      }
      step_->joined(a.rank, m.joiner, m.link);
    }
    for (auto& m : staying) waiting_.push_back(std::move(m));
  }

  void take_back(const std::shared_ptr<NodeLink>& link) {
    const auto known = known_.find(link.get());
    if (known == known_.end()) {
      link->close();
      return;
    }
    if (finished_) {
      farewell(link);
      return;
    }
    wait_here(Member{known->second.first, link});
  }

  // ---- the flow's end ----------------------------------------------------------

  void farewell(const std::shared_ptr<NodeLink>& link) {
    if (const auto known = known_.find(link.get()); known != known_.end())
      told_.insert(known->second.first.claim);
    if (!link->is_open()) return;
    link->send(Bye{exit_code_ == 0, false, exit_code_});
    link->close_after_send();
    leaving_.push_back(link);
  }

  void say_farewell(int exit_code) {
    finished_ = true;
    exit_code_ = exit_code;
    for (auto& m : std::exchange(waiting_, {})) farewell(m.link);
  }

  void finish(int exit_code) {
    say_farewell(exit_code);
    // Those not here yet are waited for, within the join timeout from the
    // lobby's start, so that they too exit with the flow's code rather than
    // dial a head that is gone; those told are given the time to hear it.
    const std::int64_t join_deadline = start_ns_ + static_cast<std::int64_t>(o_.join_timeout_s * 1e9);
    const std::int64_t flush_deadline =
        monotonic_now_ns() + static_cast<std::int64_t>(o_.heartbeat_timeout_s * 1e9);
    bool timed_out = false;
    asio::steady_timer deadline(sup_.io());
    const std::int64_t until = std::max(join_deadline, flush_deadline);
    deadline.expires_after(std::chrono::nanoseconds(until - monotonic_now_ns()));
    deadline.async_wait([&timed_out](const boost::system::error_code& ec) {
      if (!ec) timed_out = true;
    });
    // A flush that outlasts its own deadline while everyone was told ends it too.
    asio::steady_timer flush(sup_.io());
    bool flushed_late = false;
    flush.expires_after(
        std::chrono::nanoseconds(std::max<std::int64_t>(flush_deadline - monotonic_now_ns(), 0)));
    flush.async_wait([&flushed_late](const boost::system::error_code& ec) {
      if (!ec) flushed_late = true;
    });
    sup_.run_until([&] {
      if (timed_out) return true;
      const bool everyone = static_cast<int>(told_.size()) >= o_.nodes - 1;
      const bool sent = std::none_of(leaving_.begin(), leaving_.end(),
                                     [](const auto& link) { return link->is_open() && link->queued() > 0; });
      return everyone && (sent || flushed_late);
    });
    deadline.cancel();
    flush.cancel();
    if (static_cast<int>(told_.size()) < o_.nodes - 1) {
      std::vector<std::string> missing;
      for (int i = 1; i < o_.nodes && missing.size() < 8; ++i)
        if (!told_.contains(i)) missing.push_back(std::to_string(i));
      console_.message(
          fmt::format("flowrun: {} of the {} never heard the flow's end (nodes {}{}): {}",
                      plural(static_cast<std::size_t>(o_.nodes - 1) - told_.size(), "node", "nodes"),
                      o_.platform, join(missing, ", "),
                      static_cast<std::size_t>(o_.nodes - 1) - told_.size() > missing.size() ? ", ..." : "",
                      "their agents end when they find no head (cluster.join_timeout)"));
    }
    heartbeat_.cancel();
    door_->close_acceptors();
    door_->close_pending();
    sup_.io().poll();
  }

  Supervisor& sup_;
  const Console& console_;
  GangLobbyOptions o_;
  double interval_s_;
  std::unique_ptr<NodeDoor> door_;
  asio::steady_timer heartbeat_;
  std::int64_t start_ns_;
  std::string endpoint_;
  StepDoor* step_ = nullptr;
  bool route_to_step_ = false;  // the joiner admit() just saw goes to the step
  std::vector<Member> waiting_;
  // Every agent of the gang that joined, by link, whether it waits here or a
  // step holds it; an entry whose link closed is forgotten by here().
  std::map<NodeLink*, std::pair<Joiner, std::weak_ptr<NodeLink>>> known_;
  std::map<NodeLink*, std::string> left_why_;
  std::set<int> told_;  // indexes told the flow's end
  std::vector<std::shared_ptr<NodeLink>> leaving_;
  bool finished_ = false;
  int exit_code_ = 1;
};

namespace {

std::unique_ptr<NodeDoor> listen_for_gang(Supervisor& supervisor, const Console& console,
                                          const GangLobbyOptions& o) {
  const double interval = cluster::heartbeat_interval_s(o.heartbeat_timeout_s);
  auto listener = std::make_unique<cluster::Listener>(supervisor.io(), console, "gang", o.token, interval,
                                                      o.heartbeat_timeout_s);
  listener->expect(static_cast<std::size_t>(std::max(o.nodes, 0)));
  listener->listen("0.0.0.0", static_cast<std::uint16_t>(o.port));
  listener->set_endpoint((o.head_host.empty() ? std::string("0.0.0.0") : o.head_host) + ":" +
                         std::to_string(o.port));
  return listener;
}

}  // namespace

GangLobby::GangLobby(Supervisor& supervisor, const Console& console, GangLobbyOptions options)
    : GangLobby(supervisor, console, options, listen_for_gang(supervisor, console, options)) {}

GangLobby::GangLobby(Supervisor& supervisor, const Console& console, GangLobbyOptions options,
                     std::unique_ptr<cluster::NodeDoor> door)
    : impl_(std::make_unique<Impl>(supervisor, console, std::move(options), std::move(door))) {}

GangLobby::~GangLobby() = default;

std::unique_ptr<RemoteGroup> GangLobby::group(const NodeStep& step) {
  Impl& lobby = *impl_;
  cluster::NodeReach reach;
  reach.door = [this](const std::string&, const std::string&, double, double) { return step_door(); };
  reach.launch = [&lobby](const NodeStep& job, const std::string&, std::size_t nodes) {
    cluster::HeadLaunch launch;
    // This host's agent dials what the others dial (a name that means
    // loopback here is replaced by this host's address: RendezvousEngine).
    const std::string endpoint =
        (lobby.o_.head_host.empty() ? std::string("127.0.0.1") : lobby.o_.head_host) + ":" +
        std::to_string(lobby.o_.port);
    cluster::GangEngine engine(endpoint, lobby.o_.platform);
    launch_after_listen(
        lobby.console_, job, engine, endpoint,
        fmt::format("{} ({} node 0, every address of this host)", lobby.endpoint_, lobby.o_.platform),
        lobby.o_.token, nodes, launch);
    return launch;
  };
  // A gang's nodes share no file system unless someone mounted one: a node
  // that does not see the workdir gets the step's inputs shipped.
  NodeStep job = step;
  job.ship_when_not_shared = true;
  return std::make_unique<RemoteGroup>(lobby.sup_, lobby.console_, job, std::move(reach));
}

std::unique_ptr<NodeDoor> GangLobby::step_door() { return std::make_unique<Impl::StepDoor>(*impl_); }

void GangLobby::finish(int exit_code) { impl_->finish(exit_code); }

const std::string& GangLobby::endpoint() const { return impl_->endpoint_; }

std::size_t GangLobby::waiting() const { return impl_->waiting_.size(); }

}  // namespace flowrun
