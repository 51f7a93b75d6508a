// What the head does with the engine it is given (lib/head/head_launch.cpp's
// launch_agents), over a FakeEngine that says what to start and what to tell
// the user, and notes what it was asked: its processes as the supervisor's
// group starts them, the token file and the command for agents started by
// hand, and no process when the job starts its own agents. Nothing is
// started: the launches are data.
#include "head_launch.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "flowrun/remote_group.h"

#include "engines.h"
#include "testing.h"

using namespace flowrun;
using namespace flowrun::cluster;

namespace {

using Words = std::vector<std::string>;

// An engine whose processes and words to the user are the test's, and which
// counts what the head asks of it.
class FakeEngine final : public AgentEngine {
 public:
  std::vector<EngineLaunch> to_start;
  JoinByHand hand;
  mutable int launches_asked = 0;
  mutable std::vector<AgentsWanted> asked;

  std::vector<EngineLaunch> launches(const AgentsWanted& wanted) const override {
    ++launches_asked;
    asked.push_back(wanted);
    return to_start;
  }
  JoinByHand by_hand(const AgentsWanted& wanted) const override {
    asked.push_back(wanted);
    return hand;
  }
};

EngineLaunch engine_launch(int node, const std::string& label, const std::string& log) {
  EngineLaunch e;
  e.argv = {"fake-engine", "--node", std::to_string(node)};
  e.label = label;
  e.node = node;
  e.what = label;
  e.log = log;
  return e;
}

// One multi-node step of two nodes in `dir`, whose console is a file there.
class LaunchBench {
 public:
  LaunchBench() {
    console_fd_ = open(console_path().c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    REQUIRE(console_fd_ >= 0);
    console = Console{console_fd_, console_fd_};
    step_.name = "train";
    step_.workdir = dir_.path() + "/work";
    plan_.step = "train";
    plan_.mode = PlanMode::multi_node;
    plan_.nodes.resize(2);
    job.step = &step_;
    job.plan = &plan_;
    job.ctx.run_id = "r-1";
    job.ctx.layout.run_dir = dir_.path() + "/run";
    job.ctx.parent_env = {{"PATH", "/usr/bin:/bin"}, {"FLOWRUN_RUN_ID", "stale"}};
    wanted = AgentsWanted{&plan_, 2, AgentCommand{"/opt/flowrun", "10.0.0.1:4000", -1, ""}, step_dir()};
  }
  ~LaunchBench() { ::close(console_fd_); }

  std::string step_dir() const { return dir_.path() + "/run/train"; }
  std::string console_path() const { return dir_.path() + "/console.txt"; }
  std::string console_text() const { return testing::read_file(console_path()); }

  Console console;
  NodeStep job;
  AgentsWanted wanted;

 private:
  testing::ScopedTempDir dir_{"head-launch"};
  int console_fd_ = -1;
  Step step_;
  StepPlan plan_;
};

}  // namespace

TEST_CASE("launch_agents: each of the engine's processes as the supervisor's group starts it", "[cluster]") {
  LaunchBench bench;
  FakeEngine engine;
  engine.to_start = {engine_launch(-1, "fake", "fake-all"), engine_launch(1, "node1 fake", "fake-node1")};
  HeadLaunch launch;
  launch_agents(bench.console, bench.job, engine, bench.wanted, "c0ffee", launch);

  // The engine was asked once, for the head's agents.
  CHECK(engine.launches_asked == 1);
  REQUIRE(!engine.asked.empty());
  CHECK(engine.asked.front().plan == bench.job.plan);
  CHECK(engine.asked.front().agent.endpoint == "10.0.0.1:4000");
  // Its launches are the head's to watch (EngineWatch: the node each serves).
  REQUIRE(launch.engines.size() == 2);
  CHECK(launch.engines[1].node == 1);
  REQUIRE(launch.launches.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const WorkerLaunch& w = launch.launches[i];
    INFO(i);
    CHECK(w.argv == engine.to_start[i].argv);
    CHECK(w.label == engine.to_start[i].label);
    CHECK(w.workdir == bench.job.step->workdir);
    // The token on its stdin, never on a command line.
    CHECK(w.stdin_text == "c0ffee\n");
    // flowrun's environment, with this run's id in place of the one it had.
    CHECK(w.env == Words{"FLOWRUN_RUN_ID=r-1", "PATH=/usr/bin:/bin"});
  }
  CHECK(launch.launches[0].stdout_log == bench.step_dir() + "/fake-all.stdout.log");
  CHECK(launch.launches[0].stderr_log == bench.step_dir() + "/fake-all.stderr.log");
  CHECK(launch.launches[1].stdout_log == bench.step_dir() + "/fake-node1.stdout.log");
  // An engine that starts its agents tells the user nothing, and no token
  // file is written for them.
  CHECK(launch.token_file.empty());
  CHECK(bench.console_text().empty());
}

TEST_CASE("launch_agents: agents started by hand get the token file, private, and the command on the console",
          "[cluster]") {
  LaunchBench bench;
  FakeEngine engine;
  engine.hand.token_file = bench.step_dir() + "/agent.token";
  engine.hand.message = "flowrun: run the agents by hand";
  HeadLaunch launch;
  launch.token_file = "/the/listener's/token";
  launch_agents(bench.console, bench.job, engine, bench.wanted, "c0ffee", launch);

  CHECK(launch.engines.empty());
  CHECK(launch.launches.empty());
  CHECK(launch.token_file == engine.hand.token_file);
  CHECK(testing::read_file(engine.hand.token_file) == "c0ffee\n");
  struct stat st {};
  REQUIRE(stat(engine.hand.token_file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(bench.console_text() == "flowrun: run the agents by hand\n");
}

TEST_CASE("launch_agents: no token file of the engine's keeps the one the listener wrote", "[cluster]") {
  LaunchBench bench;
  FakeEngine engine;
  engine.hand.message = "flowrun: run the same command on the other nodes";
  HeadLaunch launch;
  launch.token_file = "/the/listener's/token";
  launch_agents(bench.console, bench.job, engine, bench.wanted, "c0ffee", launch);
  CHECK(launch.token_file == "/the/listener's/token");
  CHECK(bench.console_text() == "flowrun: run the same command on the other nodes\n");
}

TEST_CASE("launch_agents: a job that starts its own agents gets none of the engine's processes",
          "[cluster]") {
  LaunchBench bench;
  bench.job.start_agents = [](const std::string&, const std::string&) {};
  FakeEngine engine;
  engine.to_start = {engine_launch(0, "node0 fake", "fake-node0")};
  engine.hand.message = "flowrun: run the agents by hand";
  HeadLaunch launch;
  launch_agents(bench.console, bench.job, engine, bench.wanted, "c0ffee", launch);
  CHECK(engine.launches_asked == 0);
  CHECK(launch.engines.empty());
  CHECK(launch.launches.empty());
  // The user is told as in a run: the test's agents take the user's place.
  CHECK(bench.console_text() == "flowrun: run the agents by hand\n");
}
