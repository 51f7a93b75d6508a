// An agent's check of its own node before a multi-node step's ranks start
// (Assign::node_checks): its GPUs against the plan's count and their health
// (NVML), the free space of its scratch and of the workdir, that the
// step's Python imports torch, and that it reaches node 0. The facts are
// gathered on a thread of their own, so the agent's loop (its heartbeats)
// goes on meanwhile; judge_node (node_verdict.h) makes the verdict.
// Internal to lib/agent.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "flowrun/messages.h"
#include "flowrun/util.h"

#include "node_verdict.h"

namespace flowrun::cluster {

// The facts of this node for `a`: the GPUs the agent found when it started
// (`inventory`) and their health from NVML (`fake_gpus` >= 0, or
// FLOWRUN_FAKE_GPUS in `env`: that many healthy ones), statvfs of $TMPDIR's
// scratch parent and of the workdir, `python -c "import torch"` (within
// 120 s, or until `*cancel`), a connection to node 0's reach port (within
// 5 s; Assign::node0_port); FLOWRUN_NODE_CHECK_MIN_FREE_MB sets the free
// space needed. Blocking; safe on any thread.
NodeFacts gather_node_facts(const Assign& a, const Inventory& inventory, int fake_gpus, const EnvMap& env,
                            const std::atomic<bool>* cancel = nullptr);

class NodeChecker {
 public:
  // Checks a node whose agent found `inventory` (with --fake-gpus
  // `fake_gpus`) and has the environment `env`, which must outlive this.
  NodeChecker(boost::asio::io_context& io, Inventory inventory, int fake_gpus, const EnvMap& env)
      : io_(io), inventory_(std::move(inventory)), fake_gpus_(fake_gpus), env_(env) {}
  ~NodeChecker() { stop(); }
  NodeChecker(const NodeChecker&) = delete;
  NodeChecker& operator=(const NodeChecker&) = delete;

  // Checks the node for `a`, unless a check runs (one at a time); on the
  // loop's thread, `on_done` gets each check's outcome and the time taken.
  void start(const Assign& a, const Inventory& inventory, int fake_gpus, const EnvMap& env,
             std::function<void(std::vector<flowrun::NodeCheck>, std::int64_t ms)> on_done);
  // The answer to `a`: `ready` goes to `send`, with the node's checks when
  // `a` asks for them: at once when they were made for this step before (a
  // restart's assign, an elastic step's new one), else once they are (start).
  void answer(const Assign& a, Ready ready, std::function<void(const Ready&)> send);
  bool running() const { return thread_.joinable(); }
  // Ends a check still running and waits for it, 2 s at most: a check that
  // hangs is left running, and ends with the process (the agent is ending).
  void stop();

 private:
  boost::asio::io_context& io_;
  const Inventory inventory_;
  const int fake_gpus_;
  const EnvMap& env_;
  // What the checking thread shares with this: it may outlive this (stop).
  struct Shared {
    std::atomic<bool> cancel{false};
    std::atomic<bool> done{false};
    std::mutex mutex;
    bool abandoned = false;  // under mutex
  };
  std::shared_ptr<Shared> shared_;
  std::thread thread_;
  std::string checked_for_;  // the run id and step of the checks made
  std::vector<flowrun::NodeCheck> checks_;
  std::int64_t check_ms_ = 0;
};

}  // namespace flowrun::cluster
