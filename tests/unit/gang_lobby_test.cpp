// A gang's lobby (lib/head/gang_lobby.cpp) driven through the head's seam,
// with no socket: the gang's agents come in by a FakeDoor in place of the
// listener, wait in the lobby, join a step's head (a RemoteGroup over the
// lobby's step door) at once, come back to the lobby at the step's end with
// a bye that keeps them, and hear the flow's exit code at its end.
#include "flowrun/gang_lobby.h"

#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "flowrun/clock.h"
#include "flowrun/remote_group.h"
#include "flowrun/supervisor.h"

#include "fake_node_link.h"
#include "node_reach.h"
#include "remote_step.h"
#include "testing.h"

using namespace flowrun;
using flowrun::testing::FakeDoor;
using flowrun::testing::FakeLink;

namespace {

using testing::exited;

// A lobby of a gang of `nodes`, its agents coming in by a FakeDoor, and
// the steps' heads over its step door.
class LobbyBench {
 public:
  explicit LobbyBench(int nodes, double heartbeat_timeout_s = 10) {
    console_fd_ = open((dir_.path() + "/console.txt").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    REQUIRE(console_fd_ >= 0);
    console_ = Console{console_fd_, console_fd_};
    supervisor_ = std::make_unique<Supervisor>(console_, -1);
    auto door = std::make_unique<FakeDoor>();
    door_ = door.get();
    GangLobbyOptions o;
    o.platform = "Kubernetes Indexed Job";
    o.nodes = nodes;
    o.head_host = "train-0.train";
    o.port = 29400;
    o.token = "0123456789abcdef0123";
    o.heartbeat_timeout_s = heartbeat_timeout_s;
    o.join_timeout_s = 0;  // finish() waits for no one not here
    lobby_ = std::make_unique<GangLobby>(*supervisor_, console_, o, std::move(door));
  }
  ~LobbyBench() {
    group_.reset();
    lobby_.reset();
    ::close(console_fd_);
  }

  // An agent of the gang (index `claim`) dials in; nullptr when refused.
  // It answers a step's orders as an agent whose ranks all succeed.
  std::shared_ptr<FakeLink> agent(int claim, bool stays = true) {
    cluster::Joiner j;
    j.node = "pod-" + std::to_string(claim);
    j.claim = claim;
    j.gpus = 0;
    j.ip = "10.0.0." + std::to_string(claim + 1);
    j.stays = stays;
    auto holder = std::make_shared<std::weak_ptr<FakeLink>>();
    auto link = door_->join(j, [this, holder](const Message& m) {
      if (auto l = holder->lock()) answer(*l, m);
    });
    *holder = link;
    return link;
  }

  // The head of a step of `cpus` CPU ranks on `nodes` nodes, its door the
  // lobby's, with no engine.
  void step(int nodes) {
    step_ = std::make_unique<flowrun::testing::RemoteStep>(
        "name: t\ncluster:\n  engine: gang\nsteps:\n  - name: train\n    run: [python3, train.py]\n"
        "    parallel:\n      cpus: " +
            std::to_string(nodes) + "\n      nodes: " + std::to_string(nodes) + "\n",
        dir_.path());
    cluster::NodeReach reach;
    reach.door = [this](const std::string&, const std::string&, double, double) {
      return lobby_->step_door();
    };
    reach.launch = [this](const NodeStep& job, const std::string&, std::size_t) {
      cluster::HeadLaunch launch;
      launch.marker_path = dir_.path() + "/marker";
      launch.marker_text = "marker";
      for (const auto& rp : job.plan->ranks)
        std::filesystem::create_directories(job.ctx.layout.output_dir(job.plan->step, rp.rank));
      return launch;
    };
    group_ = std::make_unique<RemoteGroup>(*supervisor_, console_, step_->job, std::move(reach));
  }

  AttemptResult attempt() {
    Attempt a;
    a.first = true;
    return group_->run_attempt(a);
  }
  void end_step() {
    group_->close();
    group_.reset();
  }

  GangLobby& lobby() { return *lobby_; }
  FakeDoor& door() { return *door_; }
  Supervisor& supervisor() { return *supervisor_; }
  std::string console() const { return flowrun::testing::read_file(dir_.path() + "/console.txt"); }

 private:
  template <class M>
  void send(FakeLink& link, const M& m) {
    boost::asio::post(supervisor_->io(), [&link, m] { link.deliver(m); });
  }

  void answer(FakeLink& link, const Message& m) {
    if (const auto* a = std::get_if<Assign>(&m)) {
      attempt_ = a->attempt;
      Ready ready;
      ready.workdir_ok = true;
      ready.address = "10.0.0.1";
      ready.port = a->want_port ? 29500 : 0;
      send(link, ready);
    } else if (const auto* s = std::get_if<Start>(&m)) {
      for (const StartRank& r : s->ranks) send(link, exited(r.rank, 0));
      send(link, Done{s->attempt, {}});
    }
  }

  flowrun::testing::ScopedTempDir dir_{"gang-lobby"};
  int console_fd_ = -1;
  Console console_;
  std::unique_ptr<Supervisor> supervisor_;
  FakeDoor* door_ = nullptr;
  std::unique_ptr<GangLobby> lobby_;
  std::unique_ptr<flowrun::testing::RemoteStep> step_;
  std::unique_ptr<RemoteGroup> group_;
  int attempt_ = 0;
};

}  // namespace

TEST_CASE("gang lobby: the agents wait, run every step, come back after each and exit with the flow's code",
          "[gang][head]") {
  LobbyBench b(3);
  auto one = b.agent(1);
  auto two = b.agent(2);
  REQUIRE(one);
  REQUIRE(two);
  CHECK(b.lobby().waiting() == 2);
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    b.step(3);
    auto zero = b.agent(0, false);  // this host's agent, which the step's engine starts
    REQUIRE(zero);
    const AttemptResult r = b.attempt();
    CHECK(r.record.outcome == Outcome::succeeded);
    CHECK(r.record.workers.size() == 3);
    b.end_step();
    // The gang's agents are kept for the next step; this host's is not.
    REQUIRE(one->sent_of<Bye>().size() == static_cast<std::size_t>(step + 1));
    CHECK(one->sent_of<Bye>().back().keep);
    CHECK(one->sent_of<Bye>().back().flow_exit == -1);
    CHECK(one->is_open());
    REQUIRE(zero->sent_of<Bye>().size() == 1);
    CHECK_FALSE(zero->sent_of<Bye>().front().keep);
    CHECK_FALSE(zero->is_open());
    CHECK(b.lobby().waiting() == 2);
  }
  CHECK(one->sent_of<Assign>().size() == 2);  // one per step, on the link it joined with once
  b.lobby().finish(3);
  for (const auto& link : {one, two}) {
    const Bye last = link->sent_of<Bye>().back();
    CHECK_FALSE(last.keep);
    CHECK(last.flow_exit == 3);
    CHECK_FALSE(last.succeeded);
    CHECK_FALSE(link->is_open());
  }
  CHECK(b.lobby().waiting() == 0);
}

TEST_CASE("gang lobby: who may wait, and a late pod that joins a running step", "[gang][head]") {
  LobbyBench b(3);
  CHECK(b.agent(0) == nullptr);         // the head's own index
  CHECK(b.agent(3) == nullptr);         // past the gang
  CHECK(b.agent(1, false) == nullptr);  // not the gang's, and no step runs
  auto one = b.agent(1);
  REQUIRE(one);
  CHECK(b.agent(1) == nullptr);  // a second pod with index 1
  REQUIRE(b.door().refusals.size() == 4);
  CHECK(b.door().refusals[0] == "node 0 is not one of the Kubernetes Indexed Job's other nodes (1 to 2)");
  CHECK(b.door().refusals[1] == "node 3 is not one of the Kubernetes Indexed Job's other nodes (1 to 2)");
  CHECK(b.door().refusals[2] ==
        "no parallel step of the flow is running; only the gang's own agents wait between steps");
  CHECK(b.door().refusals[3] ==
        "node 1 of the Kubernetes Indexed Job is already here (from pod-1); two pods with one index?");
  // Index 2's pod comes up while a step waits for it: it joins the step.
  b.step(3);
  auto zero = b.agent(0, false);
  auto two = b.agent(2);
  REQUIRE(two);
  CHECK(b.attempt().record.outcome == Outcome::succeeded);
  CHECK(two->sent_of<Start>().size() == 1);
  b.end_step();
  CHECK(b.lobby().waiting() == 2);
  // Once its link is gone, the index may join again (the Job made a new pod).
  two->drop("end of file");
  CHECK(b.lobby().waiting() == 1);
  CHECK(b.console().find("flowrun: node 2 of the Kubernetes Indexed Job (pod-2) left between steps: its "
                         "connection closed (end of file)") != std::string::npos);
  CHECK(b.agent(2) != nullptr);
}

TEST_CASE("gang lobby: heartbeats go to the waiting agents, and a silent one is dropped", "[gang][head]") {
  LobbyBench b(3, 0.4);
  auto one = b.agent(1);
  auto two = b.agent(2);
  one->heard_at(monotonic_now_ns() + std::int64_t{3600} * 1'000'000'000);  // never silent
  // two was last heard at 0 on the monotonic clock: silent for long.
  b.supervisor().run_until([&] { return b.lobby().waiting() == 1 && !one->sent_of<Heartbeat>().empty(); });
  CHECK(two->is_open() == false);
  CHECK(b.console().find(
            "flowrun: node 2 of the Kubernetes Indexed Job (pod-2) left between steps: no heartbeat") !=
        std::string::npos);
  // An agent stopped by a signal says why before it closes.
  one->deliver(Stop{"its agent received SIGTERM", false, false});
  one->drop("end of file");
  CHECK(b.console().find("(pod-1) left between steps: its agent received SIGTERM") != std::string::npos);
}
