// The head (RemoteGroup) driven through its seam, with no socket, no port
// and no thread: ninja's FakeCommandRunner is the model. The nodes are
// FakeLinks handed over by a FakeDoor (fake_node_link.h), each answering
// the head's orders as a scripted agent would (Assign: Ready; Start: its
// ranks' exits, then Done; Stop: the ranks it still runs, stopped, then
// Done), its answers posted to the head's own loop as a socket's reads
// would come. A test changes one node's script to lose it, seat a spare,
// shrink an elastic step, take in a late joiner, stall, fail an upload or
// send garbage, and reads what the head decided: the attempt's record, its
// notes and errors, the orders each node got, and the console.
#include <atomic>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "flowrun/files.h"
#include "flowrun/gpu.h"
#include "flowrun/plan.h"
#include "flowrun/remote_group.h"
#include "flowrun/spec.h"
#include "flowrun/supervisor.h"
#include "flowrun/util.h"

#include "fake_node_link.h"
#include "node_reach.h"
#include "remote_step.h"
#include "ship_sender.h"
#include "testing.h"

using namespace flowrun;
using flowrun::cluster::kShipChunk;
using flowrun::testing::FakeDoor;
using flowrun::testing::FakeLink;

namespace {

// One node's agent as a script.
struct ScriptedNode {
  std::string name;
  int gpus = 0;
  std::shared_ptr<FakeLink> link;  // nullptr: the head refused it
  std::map<int, int> codes;        // a rank's exit code (else 0)
  std::set<int> waits;             // ranks that run until the node is told to stop
  // Runs first for each order; true when it answered the order itself.
  std::function<bool(ScriptedNode&, const Message&)> script;

  // The attempt it runs, the ranks still running, and whether it said done.
  int attempt = -1;
  std::vector<int> running;
  bool done = false;
};

using testing::exited;

Exited stopped(int rank) {
  Exited m = exited(rank, SIGTERM);
  m.kind = Exited::Kind::signaled;
  m.stopped = true;
  return m;
}

// A head for one step of `cpus` CPU ranks whose parallel: section is
// `parallel` (indented as under parallel:), with cluster: `cluster` added.
class HeadBench {
 public:
  // `step`: more keys of the step (indented as its own).
  explicit HeadBench(const std::string& parallel, const std::string& cluster = "",
                     const std::string& step = "")
      : step_("name: t\ncluster:\n  engine: manual\n  address: 127.0.0.1\n" + cluster +
                  "steps:\n  - name: train\n    run: [python3, train.py]\n" + step + "    parallel:\n" +
                  parallel,
              dir_.path()) {
    console_fd_ = open((dir_.path() + "/console.txt").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    REQUIRE(console_fd_ >= 0);
    console_ = Console{console_fd_, console_fd_};
    job_.ctx.parent_env["FLOWRUN_HOSTNAME"] = "head";  // the node called "head" runs on the head's host
    supervisor_ = std::make_unique<Supervisor>(console_, -1);
    cluster::NodeReach reach;
    reach.door = [this](const std::string&, const std::string&, double, double) {
      auto door = std::make_unique<FakeDoor>();
      door_ = door.get();
      return std::unique_ptr<cluster::NodeDoor>(std::move(door));
    };
    reach.launch = [this](const NodeStep& job, const std::string&, std::size_t) {
      cluster::HeadLaunch launch;  // no engine: the test's nodes join by themselves
      launch.marker_path = dir_.path() + "/marker";
      launch.marker_text = "marker";
      for (const auto& rp : job.plan->ranks)
        std::filesystem::create_directories(job.ctx.layout.output_dir(job.plan->step, rp.rank));
      launch.replacement = [this](int seat, const std::vector<std::string>& exclude) {
        return replacement ? replacement(seat, exclude) : std::nullopt;
      };
      if (!rank_dirs_error.empty()) {
        std::promise<void> made;
        made.set_exception(std::make_exception_ptr(Error(rank_dirs_error)));
        launch.rank_dirs = made.get_future();
      }
      return launch;
    };
    group_ = std::make_unique<RemoteGroup>(*supervisor_, console_, job_, std::move(reach));
  }

  // What the launch's rank directories end with: an Error with this text (empty: they are made).
  inline static std::string rank_dirs_error;
  // The engine's new node for a seat (HeadLaunch::replacement); empty: it has none.
  decltype(cluster::HeadLaunch::replacement) replacement;

  // A process the engine starts for a new node: `script` under /bin/sh.
  cluster::HeadLaunch::Replacement engine_process(int seat, const std::string& script) const {
    cluster::HeadLaunch::Replacement r;
    r.engine.node = seat;
    r.engine.label = "srun seat " + std::to_string(seat);
    r.engine.what = "srun for a new node";
    r.engine.argv = {"srun", "--nodes=1", "--exclude=node-a", job_.flowrun_path, "agent"};
    r.process.argv = {"/bin/sh", "-c", script};
    r.process.env = {"PATH=/usr/bin:/bin"};
    r.process.workdir = dir_.path();
    r.process.stdout_log = dir_.path() + "/srun-seat.stdout.log";
    r.process.stderr_log = dir_.path() + "/srun-seat.stderr.log";
    return r;
  }

  ~HeadBench() {
    rank_dirs_error.clear();
    if (group_) group_->close();
    ::close(console_fd_);
  }

  // An agent on host `name` joins (asking for node rank `claim`, -1: any;
  // `stays`: a gang's agent, which serves every step of the flow).
  ScriptedNode& join(const std::string& name, int claim = -1,
                     std::function<bool(ScriptedNode&, const Message&)> script = {}, bool stays = false) {
    auto node = std::make_unique<ScriptedNode>();
    node->name = name;
    node->script = std::move(script);  // it answers the assign that joining may bring
    ScriptedNode& n = *node;
    nodes_.push_back(std::move(node));
    cluster::Joiner j;
    j.node = name;
    j.claim = claim;
    j.gpus = 0;
    j.ip = "10.0.0." + std::to_string(nodes_.size());
    j.via = "127.0.0.1";
    j.stays = stays;
    j.address = j.ip;
    j.reach_port = 40000 + static_cast<int>(nodes_.size());
    n.link = door_->join(j, [this, &n](const Message& m) { answer(n, m); });
    return n;
  }

  // Attempt `restart`, with `keep` as the step runner's keep_previous.
  AttemptResult attempt(int restart, std::function<void()> keep = {}) {
    Attempt a;
    a.restart = restart;
    a.first = restart == 0;
    a.keep_previous = std::move(keep);
    return group_->run_attempt(a);
  }

  AttemptResult close() {
    AttemptResult rest = group_->close();
    group_.reset();
    return rest;
  }

  // What the node sends, from the head's loop, as a socket's read would
  // (its link is read then: an answer to the Assign that joining it brought
  // is posted before the door handed the link over).
  template <class M>
  void send(ScriptedNode& n, const M& m) {
    boost::asio::post(supervisor_->io(), [&n, m] { n.link->deliver(m); });
  }
  void send_frame(ScriptedNode& n, Frame frame) {
    boost::asio::post(supervisor_->io(), [&n, frame]() mutable { n.link->deliver_frame(frame); });
  }
  void drop(ScriptedNode& n, const std::string& why) {
    boost::asio::post(supervisor_->io(), [&n, why] { n.link->drop(why); });
  }

  // `n`'s connection ends (`why`) when the head tells it to start its ranks
  // (lose_at_start) or to stop them (lose_at_stop).
  void lose_at_start(ScriptedNode& n, const std::string& why) { lose_at<Start>(n, why); }
  void lose_at_stop(ScriptedNode& n, const std::string& why) { lose_at<Stop>(n, why); }
  template <class M>
  void lose_at(ScriptedNode& n, const std::string& why) {
    n.script = [this, why](ScriptedNode& node, const Message& m) {
      if (!std::holds_alternative<M>(m)) return false;
      drop(node, why);
      return true;
    };
  }

  std::string console() const { return testing::read_file(dir_.path() + "/console.txt"); }
  const std::string& dir() const { return dir_.path(); }
  const RunLayout& layout() const { return job_.ctx.layout; }
  FakeDoor& door() { return *door_; }
  boost::asio::io_context& io() { return supervisor_->io(); }

 private:
  // The agent's answers to the head's orders, unless its script answered.
  void answer(ScriptedNode& n, const Message& m) {
    if (n.script && n.script(n, m)) return;
    if (const auto* a = std::get_if<Assign>(&m)) {
      Ready ready;
      ready.workdir_ok = true;
      ready.address = "10.0.0.1";
      ready.port = a->want_port ? 29500 : 0;
      ready.gpus = n.gpus;
      send(n, ready);
    } else if (const auto* s = std::get_if<Start>(&m)) {
      n.attempt = s->attempt;
      n.running.clear();
      n.done = false;
      for (const StartRank& r : s->ranks) {
        if (n.waits.count(r.rank) > 0) {
          n.running.push_back(r.rank);
        } else {
          send(n, exited(r.rank, n.codes.count(r.rank) > 0 ? n.codes.at(r.rank) : 0));
        }
      }
      if (n.running.empty()) say_done(n);
    } else if (std::get_if<Stop>(&m) != nullptr) {
      for (int rank : n.running) send(n, stopped(rank));
      n.running.clear();
      if (!n.done) say_done(n);
    } else if (std::get_if<Bye>(&m) != nullptr) {
      n.link->close();
    }
  }

  void say_done(ScriptedNode& n) {
    n.done = true;
    send(n, Done{n.attempt, {}});
  }

  flowrun::testing::ScopedTempDir dir_{"head"};
  int console_fd_ = -1;
  Console console_;
  flowrun::testing::RemoteStep step_;
  NodeStep& job_ = step_.job;
  std::unique_ptr<Supervisor> supervisor_;
  FakeDoor* door_ = nullptr;
  std::unique_ptr<RemoteGroup> group_;
  std::vector<std::unique_ptr<ScriptedNode>> nodes_;
};

const WorkerRecord& worker(const AttemptResult& r, int rank) {
  for (const auto& w : r.record.workers)
    if (w.rank == rank) return w;
  FAIL("no record of rank " << rank);
  throw;
}

bool has(const std::vector<std::string>& lines, const std::string& part) {
  for (const auto& l : lines)
    if (l.find(part) != std::string::npos) return true;
  return false;
}

constexpr const char* kTwoNodes = "      cpus: 4\n      nodes: 2\n";

}  // namespace

TEST_CASE("head: every rank on both nodes succeeds, and each node got its part of the plan", "[head]") {
  HeadBench h(kTwoNodes);
  ScriptedNode& a = h.join("node-a");
  ScriptedNode& b = h.join("node-b");
  const AttemptResult r = h.attempt(0);
  CHECK(r.started);
  CHECK_FALSE(r.node_gone);
  CHECK(r.record.outcome == Outcome::succeeded);
  REQUIRE(r.record.workers.size() == 4);
  CHECK(worker(r, 0).node == "node-a");
  CHECK(worker(r, 3).node == "node-b");
  REQUIRE(a.link->sent_of<Start>().size() == 1);
  const Start start = b.link->sent_of<Start>().front();
  CHECK(start.node_rank == 1);
  CHECK(start.world_size == 4);
  REQUIRE(start.ranks.size() == 2);
  CHECK(start.ranks[0].rank == 2);
  CHECK(a.link->sent_of<Assign>().front().want_port);  // node 0 picks MASTER_PORT
  CHECK_FALSE(b.link->sent_of<Assign>().front().want_port);
  CHECK(start.master_port == 29500);
  h.close();
  CHECK(a.link->sent_of<Bye>().size() == 1);
  CHECK(a.link->sent_of<Bye>().front().succeeded);
}

TEST_CASE("head: a third agent for a step of 2 nodes is refused, naming who holds the rank", "[head]") {
  HeadBench h(kTwoNodes);
  h.join("node-a", 0);
  h.join("node-b", 1);
  ScriptedNode& c = h.join("node-c", 1);
  CHECK(c.link == nullptr);
  REQUIRE(h.door().refusals.size() == 1);
  CHECK(h.door().refusals.front() == "all 2 nodes have joined step 'train'");
}

TEST_CASE("head: a node lost mid-attempt fails the attempt; the others are stopped for it", "[head]") {
  HeadBench h(kTwoNodes);
  ScriptedNode& a = h.join("node-a");
  ScriptedNode& b = h.join("node-b");
  a.waits = {0, 1};
  h.lose_at_start(b, "connection reset by peer");
  const AttemptResult r = h.attempt(0);
  CHECK(r.started);
  CHECK(r.node_gone);
  CHECK_FALSE(r.spare_ready);
  CHECK(r.record.outcome == Outcome::failed);
  CHECK(has(r.notes,
            "node node-b (node rank 1 of 2) lost: its agent's connection closed (connection reset by peer)"));
  REQUIRE(a.link->sent_of<Stop>().size() == 1);  // node-a's ranks stopped for it
  CHECK(worker(r, 0).role == Role::victim);
  CHECK(worker(r, 2).node == "node-b");
  CHECK(h.console().find("node node-b (node rank 1 of 2) lost") != std::string::npos);
}

TEST_CASE("head: a rank that fails on one node stops the others on every node", "[head]") {
  HeadBench h(kTwoNodes);
  ScriptedNode& a = h.join("node-a");
  ScriptedNode& b = h.join("node-b");
  a.waits = {0, 1};
  b.waits = {3};
  b.codes = {{2, 3}};
  const AttemptResult r = h.attempt(0);
  CHECK(r.record.outcome == Outcome::failed);
  REQUIRE(r.record.culprit);
  CHECK(*r.record.culprit == 2);
  CHECK(worker(r, 2).role == Role::culprit);
  CHECK(worker(r, 0).role == Role::victim);
  CHECK(worker(r, 3).role == Role::victim);
  CHECK(a.link->sent_of<Stop>().size() == 1);
  CHECK(b.link->sent_of<Stop>().size() == 1);
  CHECK(a.link->sent_of<Stop>().front().reason == "rank 2 on node-b exited with code 3");
}

TEST_CASE("head: a spare takes a lost node's rank at the restart", "[head]") {
  HeadBench h("      cpus: 4\n      nodes: 2\n      spare_nodes: 1\n");
  ScriptedNode& a = h.join("node-a");
  ScriptedNode& b = h.join("node-b");
  ScriptedNode& s = h.join("spare-c");
  REQUIRE(s.link != nullptr);
  CHECK(s.link->sent_of<Assign>().empty());  // it waits with no rank
  h.lose_at_start(b, "end of file");
  a.waits = {0, 1};
  const AttemptResult first = h.attempt(0);
  CHECK(first.node_gone);
  CHECK(first.spare_ready);

  a.waits.clear();
  const AttemptResult second = h.attempt(1);
  CHECK(second.record.outcome == Outcome::succeeded);
  REQUIRE(s.link->sent_of<Assign>().size() == 1);
  CHECK(s.link->sent_of<Assign>().front().node_rank == 1);  // node-b's rank
  REQUIRE(s.link->sent_of<Start>().size() == 1);
  CHECK(s.link->sent_of<Start>().front().attempt == 1);
  CHECK(worker(second, 2).node == "spare-c");
  REQUIRE(second.record.replacements.size() == 1);
  CHECK(second.record.replacements.front().node_rank == 1);
  CHECK(b.link->sent_of<Assign>().size() == 1);  // the lost node is never asked again
}

TEST_CASE(
    "head: a lost node's spare is told its seat at once, before the other nodes' stop, and its answer counts "
    "at the restart",
    "[head]") {
  HeadBench h("      cpus: 4\n      nodes: 2\n      spare_nodes: 1\n");
  ScriptedNode& a = h.join("node-a");
  ScriptedNode& b = h.join("node-b");
  ScriptedNode& s = h.join("spare-c");
  h.lose_at_start(b, "end of file");
  a.waits = {0, 1};
  std::vector<std::string> orders;
  bool answered = false;  // the spare's ready left it before the restart
  auto note = [&](ScriptedNode& n, const Message& m) {
    if (std::holds_alternative<Assign>(m)) orders.push_back(n.name + " assign");
    if (std::holds_alternative<Start>(m)) orders.push_back(n.name + " start");
    if (std::holds_alternative<Stop>(m)) orders.push_back(n.name + " stop");
    if (&n == &s && std::holds_alternative<Assign>(m)) answered = true;
    return false;  // answered as scripted
  };
  a.script = note;
  s.script = note;
  const AttemptResult first = h.attempt(0);
  REQUIRE(first.spare_ready);
  CHECK(orders == std::vector<std::string>{"node-a start", "spare-c assign", "node-a stop"});
  REQUIRE(s.link->sent_of<Assign>().size() == 1);
  CHECK(s.link->sent_of<Assign>().front().node_rank == 1);  // node-b's rank
  CHECK(s.link->sent_of<Assign>().front().attempt == 1);    // the restart's
  CHECK(answered);

  // The restart: the spare is not told again; the start waits for nothing
  // more from it (its ready came during the stop).
  orders.clear();
  a.waits.clear();
  const AttemptResult second = h.attempt(1);
  CHECK(second.record.outcome == Outcome::succeeded);
  CHECK(orders == std::vector<std::string>{"node-a assign", "node-a start", "spare-c start"});
  CHECK(s.link->sent_of<Assign>().size() == 1);
  REQUIRE(s.link->sent_of<Start>().size() == 1);
  CHECK(s.link->sent_of<Start>().front().node_rank == 1);
  CHECK(worker(second, 2).node == "spare-c");
  CHECK(h.console().find("spare node spare-c takes node rank 1 of lost node node-b") != std::string::npos);
}

TEST_CASE("head: spares told their seats early each take the rank they were told, whatever the losses' order",
          "[head]") {
  HeadBench h("      cpus: 6\n      nodes: 3\n      spare_nodes: 2\n");
  ScriptedNode& a = h.join("node-a");
  ScriptedNode& b = h.join("node-b");
  ScriptedNode& c = h.join("node-c");
  ScriptedNode& d = h.join("spare-d");
  ScriptedNode& e = h.join("spare-e");
  // Node rank 2 is lost first (at its start), node rank 1 next (at the stop
  // its loss brought): spare-d is told rank 2, spare-e rank 1.
  h.lose_at_start(c, "end of file");
  b.waits = {2, 3};
  h.lose_at_stop(b, "connection reset by peer");
  a.waits = {0, 1};
  const AttemptResult first = h.attempt(0);
  REQUIRE(first.spare_ready);
  REQUIRE(d.link->sent_of<Assign>().size() == 1);
  CHECK(d.link->sent_of<Assign>().front().node_rank == 2);
  REQUIRE(e.link->sent_of<Assign>().size() == 1);
  CHECK(e.link->sent_of<Assign>().front().node_rank == 1);

  // The restart seats them by rank (1, then 2): each takes the one it was told.
  a.waits.clear();
  const AttemptResult second = h.attempt(1);
  CHECK(second.record.outcome == Outcome::succeeded);
  CHECK(d.link->sent_of<Assign>().size() == 1);
  CHECK(e.link->sent_of<Assign>().size() == 1);
  CHECK(worker(second, 2).node == "spare-e");
  CHECK(worker(second, 4).node == "spare-d");
  REQUIRE(second.record.replacements.size() == 2);
}

TEST_CASE("head: at a restart the ranks start once the attempt before is kept", "[head]") {
  HeadBench h("      cpus: 4\n      nodes: 2\n      spare_nodes: 1\n");
  ScriptedNode& a = h.join("node-a");
  ScriptedNode& b = h.join("node-b");
  ScriptedNode& s = h.join("spare-c");
  h.lose_at_start(b, "end of file");
  a.waits = {0, 1};
  REQUIRE(h.attempt(0).spare_ready);

  // The order the nodes get their orders in, and whether the keep had ended
  // when each start left.
  std::vector<std::string> orders;
  std::atomic<bool> kept{false};
  auto note = [&](ScriptedNode& n, const Message& m) {
    if (std::holds_alternative<Assign>(m)) orders.push_back(n.name + " assign");
    if (std::holds_alternative<Start>(m))
      orders.push_back(n.name + (kept ? " start, kept" : " start, not kept"));
    return false;  // answered as scripted
  };
  a.script = note;
  s.script = note;
  a.waits.clear();
  // The keep runs on a thread of its own while the nodes get ready.
  std::thread::id kept_on;
  const AttemptResult second = h.attempt(1, [&] {
    kept_on = std::this_thread::get_id();
    kept = true;
  });
  CHECK(second.record.outcome == Outcome::succeeded);
  CHECK(kept_on != std::thread::id{});
  CHECK(kept_on != std::this_thread::get_id());
  // The spare had its assign at the loss (the test above); the starts in node-rank order.
  CHECK(orders == std::vector<std::string>{"node-a assign", "node-a start, kept", "spare-c start, kept"});
}

TEST_CASE("head: a gang's agent stopped by a signal is a lost node, which a spare covers", "[head]") {
  // Its pod deleted, evicted or preempted: the platform's SIGTERM to the
  // agent. Elsewhere (scancel, a Ctrl-C) the same Stop interrupts the step.
  for (const bool stays : {true, false}) {
    CAPTURE(stays);
    HeadBench h("      cpus: 4\n      nodes: 2\n      spare_nodes: 1\n");
    ScriptedNode& a = h.join("node-a", -1, {}, stays);
    ScriptedNode& b = h.join("node-b", -1, {}, stays);
    ScriptedNode& s = h.join("spare-c", -1, {}, stays);
    REQUIRE(s.link != nullptr);
    a.waits = {0, 1};
    b.script = [&h](ScriptedNode& node, const Message& m) {
      if (!std::holds_alternative<Start>(m)) return false;
      h.send(node, Stop{"its agent received SIGTERM", false, false});
      return true;
    };
    const AttemptResult first = h.attempt(0);
    CHECK(first.started);
    if (stays) {
      CHECK(first.record.outcome == Outcome::failed);
      CHECK(first.node_gone);
      CHECK(first.spare_ready);
      CHECK(has(first.notes, "node node-b (node rank 1 of 2) lost: its agent received SIGTERM"));
      CHECK_FALSE(b.link->is_open());  // the head let it go
      a.waits.clear();
      const AttemptResult second = h.attempt(1);
      CHECK(second.record.outcome == Outcome::succeeded);
      REQUIRE(s.link->sent_of<Assign>().size() == 1);
      CHECK(s.link->sent_of<Assign>().front().node_rank == 1);
    } else {
      CHECK(first.record.outcome == Outcome::interrupted);
      CHECK(has(first.notes, "node node-b: its agent received SIGTERM"));
    }
  }
}

TEST_CASE("head: an elastic step goes on with the nodes left, its world renumbered", "[head]") {
  HeadBench h("      cpus: 4\n      nodes: \"1:2\"\n");
  ScriptedNode& a = h.join("node-a");
  ScriptedNode& b = h.join("node-b");
  h.lose_at_start(b, "end of file");
  a.waits = {0, 1};
  const AttemptResult first = h.attempt(0);
  CHECK(first.node_gone);
  REQUIRE(first.elastic_nodes);
  CHECK(*first.elastic_nodes == 1);
  CHECK(first.next_world_size == 2);

  a.waits.clear();
  const AttemptResult second = h.attempt(1);
  CHECK(second.record.outcome == Outcome::succeeded);
  const Start start = a.link->sent_of<Start>().back();
  CHECK(start.world_size == 2);
  CHECK(start.nodes == 1);
  CHECK(second.record.workers.size() == 2);
}

TEST_CASE("head: a node that joins an elastic step late waits, and is taken in at the restart", "[head]") {
  HeadBench h("      cpus: 4\n      nodes: \"1:2\"\n", "  last_call_timeout: 0.001\n");
  ScriptedNode& a = h.join("node-a");
  a.codes = {{1, 1}};
  // MIN joined: once the last call (1 ms on the head's own timer) ran out,
  // it starts on node-a alone.
  AttemptResult first = h.attempt(0);
  CHECK(first.record.workers.size() == 2);
  CHECK(first.record.outcome == Outcome::failed);

  ScriptedNode& late = h.join("node-b");
  REQUIRE(late.link != nullptr);
  CHECK(h.console().find("another node node-b joined; it waits with no rank until the next restart") !=
        std::string::npos);
  a.codes.clear();
  const AttemptResult second = h.attempt(1);
  CHECK(second.record.outcome == Outcome::succeeded);
  REQUIRE(late.link->sent_of<Start>().size() == 1);
  CHECK(late.link->sent_of<Start>().front().world_size == 4);
  CHECK(second.record.workers.size() == 4);
}

TEST_CASE("head: ranks stalled on one node stop every node, the attempt stalled", "[head]") {
  HeadBench h("      cpus: 4\n      nodes: 2\n    stall_timeout: 30\n");
  ScriptedNode& a = h.join("node-a");
  ScriptedNode& b = h.join("node-b");
  a.waits = {0, 1};
  b.waits = {2, 3};
  b.script = [&h](ScriptedNode& n, const Message& m) {
    if (!std::holds_alternative<Start>(m)) return false;
    n.attempt = std::get<Start>(m).attempt;
    n.running = {2, 3};
    h.send(n, Stalled{{{3, 31000, false}}});
    return true;
  };
  const AttemptResult r = h.attempt(0);
  CHECK(r.record.outcome == Outcome::stalled);
  CHECK(a.link->sent_of<Stop>().size() == 1);
  CHECK(a.link->sent_of<Stop>().front().reason == "stalled");
  CHECK(h.console().find("step 'train' stalled: rank 3 on node-b wrote nothing for 31.0 s (stall_timeout: "
                         "30s); stopping the step") != std::string::npos);
}

TEST_CASE("head: an upload whose checksum is wrong fails the attempt and leaves no file", "[head]") {
  HeadBench h(kTwoNodes);
  ScriptedNode& a = h.join("node-a");
  ScriptedNode& b = h.join("node-b");
  b.waits = {2, 3};
  a.script = [&h](ScriptedNode& n, const Message& m) {
    if (!std::holds_alternative<Start>(m)) return false;
    n.attempt = std::get<Start>(m).attempt;
    h.send(n, UploadBegin{0, "out/model.txt", 5});
    h.send(n, UploadChunk{"hello"});
    h.send(n, UploadEnd{"out/model.txt", "00000000"});
    h.send(n, exited(0, 0));
    h.send(n, exited(1, 0));
    h.send(n, Done{n.attempt, {}});
    n.done = true;
    return true;
  };
  const AttemptResult r = h.attempt(0);
  CHECK(r.record.outcome == Outcome::failed);
  REQUIRE_FALSE(r.errors.empty());
  CHECK(has(r.errors, "node node-a:"));
  CHECK(has(r.errors, "out/model.txt"));
  CHECK(b.link->sent_of<Stop>().size() == 1);
  CHECK_FALSE(std::filesystem::exists(h.layout().output_dir("train", 0) + "/model.txt"));
}

TEST_CASE("head: a node that sends garbage is lost with what was wrong", "[head]") {
  HeadBench h(kTwoNodes);
  ScriptedNode& a = h.join("node-a");
  ScriptedNode& b = h.join("node-b");
  a.waits = {0, 1};
  b.script = [&h](ScriptedNode& n, const Message& m) {
    if (!std::holds_alternative<Start>(m)) return false;
    h.send_frame(n, Frame{MessageType::exited, "\xff\xff garbage"});
    return true;
  };
  const AttemptResult r = h.attempt(0);
  CHECK(r.node_gone);
  CHECK(r.record.outcome == Outcome::failed);
  CHECK(has(r.errors, "node node-b: malformed exited"));
  CHECK_FALSE(b.link->is_open());
  CHECK(a.link->sent_of<Stop>().size() == 1);
}

TEST_CASE("head: a node that speaks out of turn is lost", "[head]") {
  HeadBench h(kTwoNodes);
  ScriptedNode& a = h.join("node-a");
  ScriptedNode& b = h.join("node-b");
  a.waits = {0, 1};
  b.script = [&h](ScriptedNode& n, const Message& m) {
    if (!std::holds_alternative<Start>(m)) return false;
    h.send(n, Assign{});  // an order, from a node
    return true;
  };
  const AttemptResult r = h.attempt(0);
  CHECK(r.node_gone);
  CHECK(has(r.errors, "node node-b: unexpected assign"));
}

namespace {

// A node whose agent does not see the head's workdir, and answers a
// shipment as its receiver would (ok, or `error`).
std::function<bool(ScriptedNode&, const Message&)> without_workdir(HeadBench& h, std::string error = {}) {
  return [&h, error](ScriptedNode& node, const Message& m) {
    if (const auto* a = std::get_if<Assign>(&m)) {
      Ready ready;
      ready.workdir_ok = false;
      ready.workdir_error = a->marker_path + ": No such file or directory";
      ready.address = "10.0.0.2";
      node.waits.clear();
      h.send(node, ready);
      return true;
    }
    if (std::holds_alternative<ShipDone>(m)) {
      h.send(node, ShipAck{error.empty(), error});
      return true;
    }
    return false;
  };
}

using testing::crc32c_of;

constexpr const char* kNotShared = "  shared_workdir: false\n";

}  // namespace

TEST_CASE(
    "head: a node that does not share the workdir gets the step's inputs, each file whole, before its start",
    "[head][ship]") {
  HeadBench h(kTwoNodes, kNotShared, "    inputs: [data/*]\n");
  std::filesystem::create_directories(h.dir() + "/data/deeper");
  const std::string big(3 * kShipChunk / 2, 'x');  // two chunks
  flowrun::write_file(h.dir() + "/data/x.txt", "hello\n");
  flowrun::write_file(h.dir() + "/data/big.bin", big);
  flowrun::write_file(h.dir() + "/data/deeper/no.txt", "not matched");
  flowrun::write_file(h.dir() + "/train.py", "print('train')\n");
  ScriptedNode& a = h.join("head");  // the head's own host: it reads the workdir
  ScriptedNode& b = h.join("node-b", -1, without_workdir(h));
  const AttemptResult r = h.attempt(0);
  CHECK(r.record.outcome == Outcome::succeeded);
  CHECK(a.link->sent_of<ShipBegin>().empty());
  // Files in order of their path, each begun, its chunks, its CRC-32C; then done; then the start.
  std::vector<std::string> order;
  std::string data;
  for (const Message& m : b.link->sent) {
    if (const auto* begin = std::get_if<ShipBegin>(&m)) {
      order.push_back("begin " + begin->path + " " + std::to_string(begin->bytes));
      data.clear();
    } else if (const auto* chunk = std::get_if<ShipChunk>(&m)) {
      CHECK(chunk->data.size() <= kShipChunk);
      data += chunk->data;
    } else if (const auto* end = std::get_if<ShipEnd>(&m)) {
      order.push_back("end " + std::string(end->crc32c == crc32c_of(data) ? "crc ok" : "crc wrong"));
    } else if (const auto* done = std::get_if<ShipDone>(&m)) {
      order.push_back("done " + std::to_string(done->files) + " " + std::to_string(done->bytes));
    } else if (std::holds_alternative<Start>(m)) {
      order.push_back("start");
    }
  }
  CHECK(order == std::vector<std::string>{"begin data/big.bin " + std::to_string(big.size()), "end crc ok",
                                          "begin data/x.txt 6", "end crc ok", "begin train.py 15",
                                          "end crc ok", "done 3 " + std::to_string(big.size() + 6 + 15),
                                          "start"});
  CHECK(h.console().find("flowrun: step 'train': node1 (node-b) does not share the workdir " + h.dir() +
                         ": shipping 3 files (" + flowrun::format_bytes(big.size() + 6 + 15) + ") to it") !=
        std::string::npos);
}

TEST_CASE("head: the start waits for every shipment's ack; a restart ships nothing again", "[head][ship]") {
  HeadBench h(kTwoNodes, kNotShared, "    inputs: [data.txt]\n");
  flowrun::write_file(h.dir() + "/data.txt", "1 2 3\n");
  ScriptedNode& a = h.join("head");
  ScriptedNode& b = h.join("node-b", -1, without_workdir(h));
  // node-b answers the shipment only once node-a is seen to wait without a start.
  auto answer = b.script;
  b.script = [&h, &a, answer](ScriptedNode& node, const Message& m) {
    if (!std::holds_alternative<ShipDone>(m)) return answer(node, m);
    CHECK(a.link->sent_of<Start>().empty());
    h.send(node, ShipAck{true, ""});
    return true;
  };
  b.codes = {{2, 1}};
  const AttemptResult first = h.attempt(0);
  CHECK(first.record.outcome == Outcome::failed);
  REQUIRE(a.link->sent_of<Start>().size() == 1);
  b.codes.clear();
  const AttemptResult second = h.attempt(1);
  CHECK(second.record.outcome == Outcome::succeeded);
  CHECK(b.link->sent_of<ShipBegin>().size() == 1);  // shipped once for the step
  CHECK(b.link->sent_of<ShipDone>().size() == 1);
  CHECK(b.link->sent_of<Start>().size() == 2);
}

TEST_CASE(
    "head: a rank directory the launch could not make stops the ranks, which start without it; the step "
    "fails, saying why",
    "[head]") {
  // The ranks write into their agent's scratch directory: the starts do not wait for the head's rank
  // directories, but nothing a rank sends back could be kept without them.
  HeadBench::rank_dirs_error = "cannot create the directory /x/train/rank3/out: No space left on device";
  HeadBench h(kTwoNodes);
  ScriptedNode& a = h.join("node-a");
  ScriptedNode& b = h.join("node-b");
  const AttemptResult r = h.attempt(0);
  CHECK(r.started);
  CHECK(r.record.outcome == Outcome::failed);
  CHECK(r.record.write_error == "cannot create the directory /x/train/rank3/out: No space left on device");
  for (ScriptedNode* n : {&a, &b}) {
    CHECK(n->link->sent_of<Start>().size() == 1);
    CHECK(n->link->sent_of<Stop>().size() == 1);
  }
}

TEST_CASE("head: a shipment the node refuses fails the step with the file's name; nothing starts",
          "[head][ship]") {
  HeadBench h(kTwoNodes, kNotShared, "    inputs: [data.txt]\n");
  flowrun::write_file(h.dir() + "/data.txt", "1 2 3\n");
  ScriptedNode& a = h.join("head");
  ScriptedNode& b =
      h.join("node-b", -1, without_workdir(h, "data.txt: its checksum differs from the head's"));
  const AttemptResult r = h.attempt(0);
  CHECK_FALSE(r.started);
  CHECK(has(r.errors,
            "node node-b could not take the step's inputs: data.txt: its checksum differs from the head's"));
  CHECK(a.link->sent_of<Start>().empty());
  CHECK(b.link->sent_of<Start>().empty());
}

TEST_CASE(
    "head: without shared_workdir: false, a node that does not share the workdir is refused with the fix",
    "[head][ship]") {
  HeadBench h(kTwoNodes);
  h.join("node-a");
  ScriptedNode& b = h.join("node-b", -1, without_workdir(h));
  const AttemptResult r = h.attempt(0);
  CHECK_FALSE(r.started);
  CHECK(has(r.errors, "node node-b does not see the step's workdir " + h.dir() + " as this host does"));
  CHECK(has(r.errors,
            "or set cluster.shared_workdir: false and list the files the ranks read in the step's "
            "inputs: (the head then ships them to each node)"));
  CHECK(b.link->sent_of<ShipBegin>().empty());
}

TEST_CASE("head: a spare seated in a lost node's place gets its own shipment before the restart",
          "[head][ship]") {
  HeadBench h("      cpus: 4\n      nodes: 2\n      spare_nodes: 1\n", kNotShared,
              "    inputs: [data.txt]\n");
  flowrun::write_file(h.dir() + "/data.txt", "1 2 3\n");
  ScriptedNode& a = h.join("head");
  ScriptedNode& b = h.join("node-b", -1, without_workdir(h));
  ScriptedNode& s = h.join("spare-c", -1, without_workdir(h));
  CHECK(s.link->sent_of<ShipBegin>().empty());  // it waits with no rank, and nothing shipped
  auto shipped = b.script;
  b.script = [&h, shipped](ScriptedNode& node, const Message& m) {
    if (!std::holds_alternative<Start>(m)) return shipped(node, m);
    h.drop(node, "end of file");
    return true;
  };
  a.waits = {0, 1};
  const AttemptResult first = h.attempt(0);
  CHECK(first.spare_ready);
  a.waits.clear();
  const AttemptResult second = h.attempt(1);
  CHECK(second.record.outcome == Outcome::succeeded);
  REQUIRE(s.link->sent_of<ShipBegin>().size() == 1);
  CHECK(s.link->sent_of<ShipBegin>().front().path == "data.txt");
  CHECK(s.link->sent_of<ShipDone>().size() == 1);
  CHECK(s.link->sent_of<Start>().size() == 1);
  CHECK(b.link->sent_of<ShipDone>().size() == 1);
  CHECK(a.link->sent_of<ShipBegin>().empty());
  // The file was summed once, for both: each got its CRC-32C.
  REQUIRE(b.link->sent_of<ShipEnd>().size() == 1);
  CHECK(b.link->sent_of<ShipEnd>().front().crc32c == crc32c_of("1 2 3\n"));
  CHECK(s.link->sent_of<ShipEnd>() == b.link->sent_of<ShipEnd>());
}

namespace {

// A node's script: it answers the assign with a check that failed.
std::function<bool(ScriptedNode&, const Message&)> fails_check(HeadBench& h, const std::string& check,
                                                               const std::string& detail) {
  return [&h, check, detail](ScriptedNode& node, const Message& m) {
    const auto* assign = std::get_if<Assign>(&m);
    if (assign == nullptr) return false;
    CHECK(assign->node_checks);
    Ready ready;
    ready.workdir_ok = true;
    ready.address = "10.0.0.2";
    ready.port = assign->want_port ? 29500 : 0;
    ready.gpus = node.gpus;
    ready.checks = {NodeCheck{"workdir_space", true, "12.0 GiB free in /w"}, NodeCheck{check, false, detail}};
    ready.check_ms = 12;
    h.send(node, ready);
    return true;
  };
}

}  // namespace

TEST_CASE("head: a node that fails its check is left out before any rank starts; a spare takes its seat",
          "[head][node_checks]") {
  HeadBench h("      cpus: 4\n      nodes: 2\n      spare_nodes: 1\n");
  ScriptedNode& s = h.join("spare-c", 2);
  ScriptedNode& a = h.join("node-a", 0);
  ScriptedNode& b = h.join("node-b", 1, fails_check(h, "scratch_space", "10 MiB free in /tmp"));
  const AttemptResult r = h.attempt(0);
  CHECK(r.record.outcome == Outcome::succeeded);
  CHECK(b.link->sent_of<Start>().empty());
  CHECK(b.link->sent_of<Bye>().size() == 1);
  REQUIRE(s.link->sent_of<Assign>().size() == 1);
  CHECK(s.link->sent_of<Assign>().front().node_rank == 1);
  CHECK(worker(r, 2).node == "spare-c");
  CHECK(a.link->sent_of<Assign>().size() == 1);
  CHECK(r.record.replacements == std::vector<NodeReplacement>{{1, "node-b", "spare-c"}});
  REQUIRE(r.record.node_checks.size() == 3);
  const NodeVerdict& bad =
      r.record.node_checks[1].node == "node-b" ? r.record.node_checks[1] : r.record.node_checks[0];
  CHECK(bad == NodeVerdict{"node-b",
                           1,
                           false,
                           0.012,
                           {{"workdir_space", true, "12.0 GiB free in /w"},
                            {"scratch_space", false, "10 MiB free in /tmp"}}});
  CHECK(r.record.node_checks[2].node == "spare-c");
  CHECK(r.record.node_checks[2].ok);
  CHECK(testing::read_file(h.layout().run_dir + "/excluded_nodes") == "node-b\n");
  CHECK(h.console().find(
            "flowrun: step 'train': node node-b (node rank 1 of 2) failed its check, so it is left "
            "out: scratch_space: 10 MiB free in /tmp\n") != std::string::npos);
}

TEST_CASE("head: every node but node 0 is told where node 0's agent listens, to check that it reaches it",
          "[head][node_checks]") {
  HeadBench h("      cpus: 4\n      nodes: 2\n      spare_nodes: 1\n");
  ScriptedNode& s = h.join("spare-c", 2);  // 10.0.0.1, reach port 40001
  ScriptedNode& a = h.join("node-a", 0);   // 10.0.0.2, 40002
  ScriptedNode& b = h.join("node-b", 1, fails_check(h, "reach_node0", "cannot reach node 0"));
  const AttemptResult r = h.attempt(0);
  CHECK(r.record.outcome == Outcome::succeeded);
  REQUIRE(a.link->sent_of<Assign>().size() == 1);
  const Assign to_a = a.link->sent_of<Assign>().front();
  CHECK(to_a.node0_port == 0);
  CHECK(to_a.node0_address.empty());
  for (ScriptedNode* other : {&b, &s}) {
    REQUIRE(other->link->sent_of<Assign>().size() == 1);
    const Assign to = other->link->sent_of<Assign>().front();
    CHECK(to.node_rank == 1);
    CHECK(to.node0_name == "node-a");
    CHECK(to.node0_address == "10.0.0.2");
    CHECK(to.node0_port == 40002);
  }
  CHECK(b.link->sent_of<Start>().empty());  // left out for it
  CHECK(worker(r, 2).node == "spare-c");
}

TEST_CASE(
    "head: with no spare, a node that fails its check fails the step before it starts, saying what to do",
    "[head][node_checks]") {
  HeadBench h(kTwoNodes);
  h.join("node-a", 0);
  // Its kernel's full host name: the excluded_nodes file has Slurm's short one.
  ScriptedNode& b = h.join("node-b.cluster.example", 1,
                           fails_check(h, "gpu_health", "GPU 1 has 1 uncorrectable ECC error"));
  const AttemptResult r = h.attempt(0);
  CHECK_FALSE(r.started);
  CHECK(b.link->sent_of<Start>().empty());
  CHECK(r.errors ==
        std::vector<std::string>{
            "node node-b.cluster.example (node rank 1 of 2) failed its check, and no spare node waits to "
            "take its "
            "place (parallel.spare_nodes), so no rank starts; fix what the check names, or leave the "
            "node out (sbatch --exclude with the run directory's excluded_nodes file), add "
            "parallel.spare_nodes, or set parallel.node_checks: false to start on it anyway"});
  REQUIRE(r.record.node_checks.size() == 2);
  CHECK(testing::read_file(h.layout().run_dir + "/excluded_nodes") == "node-b\n");
}

TEST_CASE("head: with no spare, a new node is asked of the engine in the place of one that fails its check",
          "[head][node_checks]") {
  HeadBench h(kTwoNodes);
  std::vector<std::pair<int, std::vector<std::string>>> asked;
  h.replacement = [&h, &asked](int seat, const std::vector<std::string>& exclude) {
    asked.emplace_back(seat, exclude);
    // The engine's agent joins as a new node's does, claiming its seat.
    boost::asio::post(h.io(), [&h, seat] { h.join("node-c", seat); });
    return std::optional(h.engine_process(seat, "exit 0"));
  };
  ScriptedNode& a = h.join("node-a", 0);
  ScriptedNode& b = h.join("node-b", 1, fails_check(h, "gpu_health", "GPU 1 has 1 uncorrectable ECC error"));
  const AttemptResult r = h.attempt(0);
  CHECK(r.record.outcome == Outcome::succeeded);
  // A seat of its own after the step's two, on neither of their hosts.
  CHECK(asked == std::vector<std::pair<int, std::vector<std::string>>>{{2, {"node-a", "node-b"}}});
  CHECK(b.link->sent_of<Start>().empty());
  CHECK(a.link->sent_of<Start>().size() == 1);
  CHECK(worker(r, 2).node == "node-c");
  CHECK(worker(r, 3).node == "node-c");
  CHECK(r.record.replacements == std::vector<NodeReplacement>{{1, "node-b", "node-c"}});
  REQUIRE(r.record.node_checks.size() == 3);
  CHECK(r.record.node_checks[2].node == "node-c");
  CHECK(testing::read_file(h.layout().run_dir + "/excluded_nodes") == "node-b\n");
  CHECK(h.console().find(
            "flowrun: step 'train': no spare waits for node rank 1 of 2 (node-b): asking for a new "
            "node in its place: srun --nodes=1 --exclude=node-a\n") != std::string::npos);
}

TEST_CASE("head: a new node's engine process that ends before its agent joins fails the step with its words",
          "[head][node_checks]") {
  HeadBench h(kTwoNodes);
  h.replacement = [&h](int seat, const std::vector<std::string>&) {
    return std::optional(h.engine_process(
        seat,
        "echo 'srun: error: Unable to allocate resources: Requested node configuration is not "
        "available' >&2; exit 1"));
  };
  h.join("node-a", 0);
  ScriptedNode& b = h.join("node-b", 1, fails_check(h, "scratch_space", "10 MiB free in /tmp"));
  const AttemptResult r = h.attempt(0);
  CHECK_FALSE(r.started);
  CHECK(b.link->sent_of<Start>().empty());
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].find(
            "node node-b (node rank 1 of 2) failed its check, and no node came in its place, so no "
            "rank starts; fix what the check names") == 0);
  CHECK(r.errors[0].find("srun for a new node exited with code 1 before its agent joined; its last output:\n"
                         "    srun: error: Unable to allocate resources: Requested node configuration is not "
                         "available") != std::string::npos);
}

TEST_CASE("head: new nodes are asked for one per node of the step at most, however many fail their check",
          "[head][node_checks]") {
  HeadBench h(kTwoNodes);
  std::vector<std::vector<std::string>> asked;
  h.replacement = [&h, &asked](int seat, const std::vector<std::string>& exclude) {
    asked.push_back(exclude);
    // Every new node fails its check too (a shared file system full).
    const std::string name = "node-" + std::to_string(seat);
    boost::asio::post(
        h.io(), [&h, seat, name] { h.join(name, seat, fails_check(h, "workdir_space", "0 MiB free")); });
    return std::optional(h.engine_process(seat, "exit 0"));
  };
  h.join("node-a", 0);
  h.join("node-b", 1, fails_check(h, "workdir_space", "0 MiB free"));
  const AttemptResult r = h.attempt(0);
  CHECK_FALSE(r.started);
  // node-b's seat asked for node-2, which failed; node-2's for node-3, which failed: two asks, no third.
  CHECK(asked == std::vector<std::vector<std::string>>{{"node-a", "node-b"}, {"node-2", "node-a", "node-b"}});
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].find("node node-3 (node rank 1 of 2) failed its check, and no spare node waits") == 0);
  CHECK(testing::read_file(h.layout().run_dir + "/excluded_nodes") == "node-b,node-[2-3]\n");
}

TEST_CASE("head: a spare told its seat early is not held to the node 0 it checked, when node 0 is lost after",
          "[head][node_checks]") {
  HeadBench h("      cpus: 6\n      nodes: 3\n      spare_nodes: 2\n");
  ScriptedNode& a = h.join("node-a", 0);
  ScriptedNode& b = h.join("node-b", 1);
  ScriptedNode& c = h.join("node-c", 2);
  ScriptedNode& d = h.join("spare-d", 3, fails_check(h, "reach_node0", "cannot reach node-a"));
  ScriptedNode& e = h.join("spare-e", 4);
  // Node rank 2 is lost at its start (spare-d is told rank 2, and checks
  // node-a), node 0 at the stop that brought (spare-e is told rank 0).
  h.lose_at_start(c, "end of file");
  a.waits = {0, 1};
  h.lose_at_stop(a, "connection reset by peer");
  b.waits = {2, 3};
  const AttemptResult first = h.attempt(0);
  REQUIRE(first.spare_ready);
  REQUIRE(d.link->sent_of<Assign>().size() == 1);
  CHECK(d.link->sent_of<Assign>().front().node0_name == "node-a");
  REQUIRE(e.link->sent_of<Assign>().size() == 1);
  CHECK(e.link->sent_of<Assign>().front().node_rank == 0);

  b.waits.clear();
  const AttemptResult second = h.attempt(1);
  CHECK(second.record.outcome == Outcome::succeeded);
  REQUIRE(d.link->sent_of<Assign>().size() == 2);  // told again: node 0 is spare-e now
  CHECK(d.link->sent_of<Assign>().back().node0_name == "spare-e");
  CHECK(worker(second, 0).node == "spare-e");
  CHECK(worker(second, 4).node == "spare-d");
  bool judged = false;
  for (const NodeVerdict& v : second.record.node_checks) {
    if (v.node != "spare-d") continue;
    judged = true;
    CHECK(v.ok);
    for (const auto& check : v.checks)
      if (check.name == "reach_node0") CHECK(check.detail.find("not judged: node 0 was lost") == 0);
  }
  CHECK(judged);
}
