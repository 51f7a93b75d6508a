// How the head reaches its nodes: the door the agents come in by and what
// brings them up. The seam of the head's tests: in a run, the control
// layer's Listener and prepare_launch (the addresses it listens on, the
// marker, and the cluster's engine, engines.h: srun, ssh or the user by
// hand); in tests/unit/head_test.cpp, a
// door whose links are scripted, with no port and no thread. Internal to
// lib/head.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "flowrun/node_link.h"
#include "flowrun/remote_group.h"

#include "head_launch.h"

namespace flowrun::cluster {

struct NodeReach {
  // The door of step `step`, made once the head has the run's token;
  // `interval_s` and `timeout_s` are the heartbeat's, which a joiner has to
  // authenticate in.
  std::function<std::unique_ptr<NodeDoor>(const std::string& step, const std::string& token,
                                          double interval_s, double timeout_s)>
      door;
  // Called once, after door(): where the agents dial, the marker, and the
  // processes that start them, for `nodes` nodes of `job`.
  std::function<HeadLaunch(const NodeStep& job, const std::string& token, std::size_t nodes)> launch;
};

// The reach of a run: a Listener on `io`, and prepare_launch over it.
NodeReach listener_reach(boost::asio::io_context& io, const Console& console);

}  // namespace flowrun::cluster
