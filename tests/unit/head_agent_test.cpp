// The head (RemoteGroup) and its agents in one process, as ninja's
// FakeCommandRunner and torch elastic's TestAgent test theirs: each agent
// runs on a thread of its own over a fake NodeRanks that scripts its ranks'
// output and exits, so nothing is spawned, and the head starts those agents
// itself (NodeStep::start_agents) instead of srun or ssh.
//
// The agents reach the head through its own listener on 127.0.0.1, not a
// socketpair: the head admits a connection by its peer's address and the
// address it reached (accept's remote and local endpoints), and node 0's
// agent answers assign with its address on the connection, the MASTER_ADDR
// every rank dials, and a port it holds there; an AF_UNIX pair has neither.
#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "flowrun/agent.h"
#include "flowrun/gpu.h"
#include "flowrun/plan.h"
#include "flowrun/remote_group.h"
#include "flowrun/spec.h"
#include "flowrun/stacks.h"
#include "flowrun/supervisor.h"

#include "node_ranks.h"
#include "remote_step.h"
#include "testing.h"

using namespace flowrun;

namespace {

// What one rank does in one attempt.
struct Play {
  int code = 0;             // its exit code
  bool waits = false;       // runs until its node stops the group
  bool crashes = false;     // its agent dies meanwhile, as a killed process does
  bool signalled = false;   // its agent gets SIGTERM meanwhile, as a deleted pod's does
  std::string out, err;     // what it writes
  std::string output_file;  // a file it leaves in FLOWRUN_OUTPUT_DIR
  std::string error_json;   // what it writes to TORCHELASTIC_ERROR_FILE
  std::string stack;        // while it runs, its stack as py-spy prints it
};

// py-spy's dump of a process in `function` at train.py:`line`, called from <module>.
std::string py_spy_dump(const std::string& function, int line) {
  return "Process 4242: python3 train.py\nPython v3.11.2 (/usr/bin/python3.11)\n\n"
         "Thread 4242 (idle): \"MainThread\"\n    " +
         function + " (/work/train.py:" + std::to_string(line) + ")\n    <module> (/work/train.py:90)\n";
}

// The agent died (Play::crashes): thrown out of run_group through the agent.
struct AgentCrash {};

std::string env_value(const WorkerLaunch& launch, const std::string& name) {
  for (const auto& entry : launch.env)
    if (entry.rfind(name + "=", 0) == 0) return entry.substr(name.size() + 1);
  return {};
}

using testing::write_text;

using testing::read_text;

// A node's ranks as `play` says (by attempt and rank), on a loop of its own;
// nothing is spawned. Exits and output reach the agent as the supervisor's
// would: through its GroupObserver, while the loop runs. A rank that ends
// by itself (an exit, a crash) ends only once every node's group of the
// attempt runs (`entered` counts them), so that every node takes the stop
// that follows within its group.
class FakeRanks : public cluster::NodeRanks {
 public:
  FakeRanks(std::function<Play(int attempt, int rank)> play, std::atomic<int>& entered, int nodes)
      : play_(std::move(play)), entered_(entered), nodes_(nodes) {}
  ~FakeRanks() override {
    std::error_code ignored;
    for (const auto& dir : remove_) std::filesystem::remove_all(dir, ignored);
  }

  void begin(const std::string&) override {}
  boost::asio::io_context& io() override { return io_; }
  void remove_on_exit(const std::string& dir) override { remove_.push_back(dir); }
  void disarm() override {}

  AttemptRecord run_group(const std::vector<WorkerLaunch>& launches, const GroupOptions& options,
                          GroupObserver* observer) override {
    attempts.push_back(options.restart_count);
    observer_ = observer;
    in_group_ = true;
    stopping_ = false;
    outcome_ = Outcome::succeeded;
    std::vector<bool>& ended = ended_;
    std::vector<Play>& plays = plays_;
    ended.assign(launches.size(), false);
    plays.clear();
    launches_ = &launches;
    for (const auto& launch : launches) plays.push_back(play_(options.restart_count, launch.rank));
    AttemptRecord record;
    record.restart_count = options.restart_count;
    auto end = [&](std::size_t i, ExitStatus status) {
      WorkerRecord w;
      w.rank = launches[i].rank;
      w.local_rank = launches[i].local_rank;
      w.status = std::move(status);
      w.start_unix_ns = w.end_unix_ns = unix_now_ns();
      ended[i] = true;
      record.workers.push_back(w);
      if (observer_->on_exit(i, w) && !stopping_) stop_group(Outcome::failed, false);
      io_.poll();
    };
    for (std::size_t i = 0; i < launches.size(); ++i) {
      const Play& p = plays[i];
      if (!p.out.empty()) observer_->on_output(i, false, p.out);
      if (!p.err.empty()) observer_->on_output(i, true, p.err);
      if (!p.output_file.empty())
        write_text(env_value(launches[i], "FLOWRUN_OUTPUT_DIR") + "/" + p.output_file,
                   "from rank " + std::to_string(launches[i].rank));
      if (!p.error_json.empty()) write_text(env_value(launches[i], "TORCHELASTIC_ERROR_FILE"), p.error_json);
      io_.poll();
    }
    ++entered_;
    while (entered_ < nodes_ * (options.restart_count + 1)) io_.run_one_for(std::chrono::milliseconds(5));
    for (const Play& p : plays)
      if (p.crashes) throw AgentCrash{};
    for (const Play& p : plays) {
      if (p.signalled && !stopping_) {
        signal_ = SIGTERM;  // as the supervisor's handler: the stop it starts is an interrupt
        stop_group(Outcome::interrupted, false);
      }
    }
    for (std::size_t i = 0; i < launches.size(); ++i) {
      if (!plays[i].waits && !ended[i]) end(i, ExitStatus{ExitStatus::Kind::exited, plays[i].code, {}});
    }
    while (std::find(ended.begin(), ended.end(), false) != ended.end()) {
      while (!stopping_) io_.run_one();
      for (std::size_t i = 0; i < launches.size(); ++i)
        if (!ended[i]) end(i, ExitStatus{ExitStatus::Kind::signaled, SIGTERM, {}});
    }
    in_group_ = false;
    record.outcome = outcome_;
    return record;
  }

  void stop_group(Outcome why, bool stacks_first) override {
    if (!in_group_ || stopping_) return;
    stopping_ = true;
    outcome_ = why;
    // As the supervisor: the live ranks' stacks before the signals.
    if (why != Outcome::interrupted || stacks_first)
      observer_->on_stacks(kStacksBeforeStop, stacks(), "py-spy");
    observer_->on_stop(why);
  }
  void kill_group() override { stop_group(Outcome::interrupted, false); }
  void take_stacks(int request) override {
    observer_->on_stacks(request, in_group_ ? stacks() : std::vector<RankStack>{}, "py-spy");
  }
  void signal_workers(int) override {}
  void sample_faster(double) override {}
  void pause_output() override {}
  void resume_output() override {}
  bool stopping() const override { return stopping_; }
  // The fake's ranks that end while it stops end as its stop makes them.
  bool ended_by_stop(std::size_t) const override { return stopping_; }
  int interrupt_signal() override { return signal_; }
  int interrupt_received() const override { return signal_; }

  std::vector<int> attempts;  // each run_group's restart count

 private:
  std::function<Play(int, int)> play_;
  std::atomic<int>& entered_;
  const int nodes_;
  boost::asio::io_context io_;
  GroupObserver* observer_ = nullptr;
  bool in_group_ = false, stopping_ = false;
  int signal_ = 0;
  Outcome outcome_ = Outcome::succeeded;
  std::vector<std::string> remove_;
  const std::vector<WorkerLaunch>* launches_ = nullptr;
  std::vector<Play> plays_;
  std::vector<bool> ended_;

  // The stacks of the ranks still running, as the supervisor takes them.
  std::vector<RankStack> stacks() const {
    std::vector<RankStack> found;
    for (std::size_t i = 0; i < plays_.size(); ++i) {
      if (ended_[i]) continue;
      RankStack r;
      r.rank = (*launches_)[i].rank;
      if (plays_[i].stack.empty()) {
        r.missing = "py-spy: Permission denied";
      } else {
        r.dump = plays_[i].stack;
        r.stack = parse_py_spy_dump(r.dump);
      }
      found.push_back(std::move(r));
    }
    return found;
  }
};

const char* kSpec =
    "name: t\n"
    "cluster:\n  engine: manual\n  address: 127.0.0.1\n"
    "steps:\n  - name: train\n    run: [python3, train.py]\n    parallel:\n      cpus: 4\n      nodes: 2\n";

// A head for a step of 4 CPU ranks on 2 nodes (ranks 0 and 1 on node-a, 2
// and 3 on node-b), its agents on threads of their own, each over a
// FakeRanks that plays `play`; `stays`: a gang's agents.
class Cluster {
 public:
  explicit Cluster(std::function<Play(int attempt, int rank)> play, bool stays = false)
      : play_(std::move(play)), stays_(stays) {
    const int console = open((dir_.path() + "/console.txt").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    REQUIRE(console >= 0);
    console_ = Console{console, console};
    job_.fake_gpus = 0;
    job_.start_agents = [this](const std::string& endpoint, const std::string& token) {
      start_agents(endpoint, token);
    };
    supervisor_ = std::make_unique<Supervisor>(console_, -1);
    group_ = std::make_unique<RemoteGroup>(*supervisor_, console_, job_);
  }

  ~Cluster() {
    if (group_) group_->close();
    for (auto& t : threads_) t.join();
    group_.reset();
    ::close(console_.err_fd);
  }

  AttemptResult attempt(int restart) {
    Attempt a;
    a.restart = restart;
    a.first = restart == 0;
    if (restart > 0) a.keep_previous = [this] { ++kept_; };  // as the step runner gives it
    return group_->run_attempt(a);
  }

  // Bye to every node; waits for the agents to end.
  void close() {
    group_->close();
    for (auto& t : threads_) t.join();
    threads_.clear();
    group_.reset();
  }

  const RunLayout& layout() const { return job_.ctx.layout; }
  std::string console() const { return read_text(dir_.path() + "/console.txt"); }
  const std::vector<int>& attempts(int node) const { return attempts_[static_cast<std::size_t>(node)]; }
  // The agent's exit code; -1 when it threw (agent_error says what).
  int exit_code(int node) const { return codes_[static_cast<std::size_t>(node)]; }
  const std::string& agent_error(int node) const { return errors_[static_cast<std::size_t>(node)]; }
  bool crashed(int node) const { return crashed_[static_cast<std::size_t>(node)]; }
  int kept() const { return kept_; }

 private:
  void start_agents(const std::string& endpoint, const std::string& token) {
    const std::string token_file = dir_.path() + "/token";
    const int fd = open(token_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size()));
    ::close(fd);
    for (int node = 0; node < 2; ++node) {
      AgentOptions options;
      options.endpoint = endpoint;
      options.node_rank = node;
      options.token_file = token_file;
      options.fake_gpus = 0;
      options.connect_timeout_s = 30;
      options.stays = stays_;
      threads_.emplace_back([this, node, options] {
        const EnvMap env{{"PATH", "/usr/bin:/bin"}, {"FLOWRUN_HOSTNAME", node == 0 ? "node-a" : "node-b"}};
        auto ranks = std::make_unique<FakeRanks>(play_, entered_, 2);
        try {
          codes_[static_cast<std::size_t>(node)] = cluster::run_agent_on(options, env, *ranks);
        } catch (const AgentCrash&) {
          crashed_[static_cast<std::size_t>(node)] = true;
        } catch (const std::exception& e) {
          errors_[static_cast<std::size_t>(node)] = e.what();
        }
        attempts_[static_cast<std::size_t>(node)] = ranks->attempts;
        ranks.reset();  // its loop, and with it the agent's socket, goes as a dead process's would
      });
    }
  }

  std::function<Play(int, int)> play_;
  bool stays_ = false;
  flowrun::testing::ScopedTempDir dir_{"head-agent"};
  Console console_;
  flowrun::testing::RemoteStep step_{kSpec, dir_.path()};
  NodeStep& job_ = step_.job;
  std::unique_ptr<Supervisor> supervisor_;
  std::unique_ptr<RemoteGroup> group_;
  std::vector<std::thread> threads_;
  std::array<std::vector<int>, 2> attempts_;
  std::array<int, 2> codes_{-1, -1};
  std::array<bool, 2> crashed_{false, false};
  std::array<std::string, 2> errors_;  // what ended an agent that threw
  std::atomic<int> entered_{0};
  int kept_ = 0;
};

std::vector<std::string> nodes_of(const AttemptRecord& record) {
  std::vector<std::string> nodes;
  for (const auto& w : record.workers) nodes.push_back(w.node);
  return nodes;
}

}  // namespace

TEST_CASE("head and agents: every rank on both nodes succeeds", "[cluster]") {
  Cluster c([](int, int rank) {
    Play p;
    if (rank == 0) p.output_file = "model.txt";
    return p;
  });
  const AttemptResult result = c.attempt(0);
  CHECK(result.started);
  CHECK_FALSE(result.node_gone);
  CHECK(result.record.outcome == Outcome::succeeded);
  REQUIRE(result.record.workers.size() == 4);
  for (int rank = 0; rank < 4; ++rank) {
    const WorkerRecord& w = result.record.workers[static_cast<std::size_t>(rank)];
    CHECK(w.rank == rank);
    CHECK(w.status.kind == ExitStatus::Kind::exited);
    CHECK(w.status.code == 0);
  }
  CHECK(nodes_of(result.record) == std::vector<std::string>{"node-a", "node-a", "node-b", "node-b"});
  // Rank 0's FLOWRUN_OUTPUT_DIR came up from its node's scratch directory.
  CHECK(read_text(c.layout().output_dir("train", 0) + "/model.txt") == "from rank 0");
  c.close();
  INFO(c.agent_error(0) + c.agent_error(1));
  CHECK(c.exit_code(0) == 0);
  CHECK(c.exit_code(1) == 0);
  CHECK(c.attempts(0) == std::vector<int>{0});
  CHECK(c.attempts(1) == std::vector<int>{0});
}

TEST_CASE("head and agents: a remote rank's output reaches the head's log files", "[cluster]") {
  Cluster c([](int, int rank) {
    Play p;
    if (rank == 2) {
      p.out = "step 1 loss 0.5\nstep 2 loss 0.25\n";
      p.err = "warning from rank 2\n";
    }
    return p;
  });
  const AttemptResult result = c.attempt(0);
  REQUIRE(result.record.outcome == Outcome::succeeded);
  c.close();
  const std::string dir = c.layout().rank_dir("train", 2);
  CHECK(read_text(dir + "/stdout.log") == "step 1 loss 0.5\nstep 2 loss 0.25\n");
  CHECK(read_text(dir + "/stderr.log") == "warning from rank 2\n");
  CHECK(result.record.workers[2].stderr_tail.find("warning from rank 2") != std::string::npos);
  CHECK(read_text(c.layout().rank_dir("train", 1) + "/stdout.log").empty());
}

TEST_CASE("head and agents: rank 1 fails, the attempt fails naming rank 1 and its node", "[cluster]") {
  Cluster c([](int, int rank) {
    Play p;
    p.waits = rank != 1;
    if (rank == 1) {
      p.code = 3;
      p.error_json = R"({"message": "boom"})";
    }
    return p;
  });
  const AttemptResult result = c.attempt(0);
  CHECK(result.started);
  CHECK_FALSE(result.node_gone);
  CHECK(result.record.outcome == Outcome::failed);
  REQUIRE(result.record.culprit);
  CHECK(*result.record.culprit == 1);
  REQUIRE(result.record.workers.size() == 4);
  const WorkerRecord& culprit = result.record.workers[1];
  CHECK(culprit.node == "node-a");
  CHECK(culprit.status.kind == ExitStatus::Kind::exited);
  CHECK(culprit.status.code == 3);
  CHECK(culprit.role == Role::culprit);
  // The others were stopped for it, on both nodes.
  for (int rank : {0, 2, 3}) {
    const WorkerRecord& w = result.record.workers[static_cast<std::size_t>(rank)];
    CHECK(w.status.kind == ExitStatus::Kind::signaled);
    CHECK(w.role == Role::victim);
  }
  // Its error file came up with the node's done.
  CHECK(read_text(c.layout().error_file("train", 1)) == R"({"message": "boom"})");
}

TEST_CASE("head and agents: an agent whose connection drops mid-attempt is a lost node", "[cluster]") {
  Cluster c([](int, int rank) {
    Play p;
    p.waits = true;
    p.crashes = rank == 2;
    return p;
  });
  const AttemptResult result = c.attempt(0);
  CHECK(result.record.outcome == Outcome::failed);
  CHECK(result.node_gone);
  REQUIRE(result.record.workers.size() == 4);
  for (int rank : {2, 3}) {
    const WorkerRecord& w = result.record.workers[static_cast<std::size_t>(rank)];
    CHECK(w.node == "node-b");
    CHECK(w.status.kind == ExitStatus::Kind::lost);
  }
  CHECK(result.record.workers[0].status.kind == ExitStatus::Kind::signaled);
  bool said_lost = false;
  for (const auto& note : result.notes)
    said_lost = said_lost || note.find("node node-b (node rank 1 of 2) lost") != std::string::npos;
  CHECK(said_lost);
  c.close();
  CHECK(c.crashed(1));
  CHECK(c.exit_code(0) == 0);
}

TEST_CASE("head and agents: a gang's agent that gets SIGTERM leaves as a lost node and exits 143",
          "[cluster]") {
  // A pod deleted, evicted or preempted: its agent tells the head, which
  // takes the node as lost (a spare or an elastic range covers it) rather
  // than interrupting the flow, and lets it go.
  Cluster c(
      [](int, int rank) {
        Play p;
        p.waits = true;
        p.signalled = rank == 2;
        return p;
      },
      true);
  const AttemptResult result = c.attempt(0);
  CHECK(result.record.outcome == Outcome::failed);
  CHECK(result.node_gone);
  bool said_lost = false;
  for (const auto& note : result.notes)
    said_lost = said_lost || note.find("node node-b (node rank 1 of 2) lost: its agent received SIGTERM") !=
                                 std::string::npos;
  CHECK(said_lost);
  c.close();
  CHECK(c.agent_error(1).empty());
  CHECK(c.exit_code(1) == 128 + SIGTERM);
}

TEST_CASE("head and agents: a restart assigns every node again and starts the second attempt", "[cluster]") {
  Cluster c([](int attempt, int rank) {
    Play p;
    if (attempt == 0) {
      p.waits = rank != 3;
      p.code = rank == 3 ? 1 : 0;
    }
    return p;
  });
  const AttemptResult first = c.attempt(0);
  CHECK(first.record.outcome == Outcome::failed);
  REQUIRE(first.record.culprit);
  CHECK(*first.record.culprit == 3);
  CHECK(first.record.workers[3].node == "node-b");
  CHECK_FALSE(first.node_gone);
  const AttemptResult second = c.attempt(1);
  CHECK(second.record.outcome == Outcome::succeeded);
  CHECK(second.record.restart_count == 1);
  REQUIRE(second.record.workers.size() == 4);
  for (const auto& w : second.record.workers) CHECK(w.status.ok());
  CHECK(c.kept() == 1);
  c.close();
  CHECK(c.attempts(0) == std::vector<int>{0, 1});
  CHECK(c.attempts(1) == std::vector<int>{0, 1});
}

TEST_CASE("head and agents: a failure's stacks come from every node, grouped across them", "[cluster]") {
  // Rank 1 fails; ranks 0 and 3 wait in all_reduce, rank 2 in load_batch:
  // each agent takes its own live ranks' stacks before its stop's signals.
  Cluster c([](int, int rank) {
    Play p;
    if (rank == 1) {
      p.code = 3;
      return p;
    }
    p.waits = true;
    p.stack = rank == 2 ? py_spy_dump("load_batch", 41) : py_spy_dump("all_reduce", 88);
    return p;
  });
  const AttemptResult result = c.attempt(0);
  CHECK(result.record.outcome == Outcome::failed);
  REQUIRE(result.record.stacks.has_value());
  const StackReport& stacks = *result.record.stacks;
  CHECK(stacks.source == "py-spy");
  CHECK(stacks.ranks == 3);
  REQUIRE(stacks.groups.size() == 2);
  CHECK(stacks.groups[0].ranks == std::vector<int>{0, 3});
  CHECK(stacks.groups[0].where == "all_reduce (train.py:88)");
  CHECK(stacks.groups[1].ranks == std::vector<int>{2});
  CHECK(stacks.groups[1].where == "load_batch (train.py:41)");
  // Each rank's whole stack is in its rank directory at the head.
  CHECK(read_text(c.layout().rank_dir("train", 2) + "/stack.txt") == py_spy_dump("load_batch", 41));
  CHECK(read_text(c.layout().rank_dir("train", 3) + "/stack.txt") == py_spy_dump("all_reduce", 88));
  c.close();
}
