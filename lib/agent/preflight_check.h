// An agent's part of a multi-node preflight: flowrun doctor's NCCL check on
// this node's GPUs, as its part of one communicator across every node. The
// check child runs from a thread of its own, so the agent's loop (its
// heartbeats) goes on meanwhile. Internal to lib/agent.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <functional>
#include <string>
#include <thread>

#include "flowrun/messages.h"
#include "flowrun/util.h"

namespace flowrun::cluster {

class PreflightCheck {
 public:
  explicit PreflightCheck(boost::asio::io_context& io) : io_(io) {}
  ~PreflightCheck() { stop(); }
  PreflightCheck(const PreflightCheck&) = delete;
  PreflightCheck& operator=(const PreflightCheck&) = delete;

  // Starts the check `p` asks for, unless one runs (one check at a time).
  // On the loop's thread: `on_id` gets node 0's communicator id as soon as
  // its check child made it, `on_done` the facts (flowrun doctor's JSON)
  // once the check ended, however it ended.
  void start(const Preflight& p, int fake_gpus, const EnvMap& env, const std::string& node,
             std::function<void(std::string)> on_id, std::function<void(std::string)> on_done);
  // Asks a running check to end now (the head said stop or bye).
  void cancel() { cancel_ = true; }
  // Ends a check still running and waits for it (the head is gone).
  void stop();

 private:
  boost::asio::io_context& io_;
  std::thread thread_;
  std::atomic<bool> cancel_{false};
};

}  // namespace flowrun::cluster
