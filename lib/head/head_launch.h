// What the head of a multi-node step prepares before the agents can join:
// where it listens (and the token file flowrun run's other nodes read), the
// marker every node must read at the same path, and what the engine
// (engines.h) brings up: its processes (srun, ssh), or what the user is
// told to run. Internal to lib/head.
#pragma once

#include <cstddef>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flowrun/listener.h"
#include "flowrun/remote_group.h"

#include "engines.h"

namespace flowrun::cluster {

struct HeadLaunch {
  std::string token_file;  // written for the agents to read (empty: none); removed at the step's end
  std::string marker_path, marker_text;
  std::vector<EngineLaunch> engines;   // what brings up the agents
  std::vector<WorkerLaunch> launches;  // the engines', for the supervisor's group
  // Every rank's directory, made on a thread of its own while the agents join;
  // get() before the first rank starts (it throws the Error of one that failed).
  std::future<void> rank_dirs;
  // What brings up one new node's agent in spare seat `seat`, on no host of
  // `exclude`, for a node left out with no spare (AgentEngine::replacement):
  // the engine's launch and its process, or nullopt. Empty where the engine
  // never can.
  struct Replacement {
    EngineLaunch engine;
    WorkerLaunch process;
  };
  std::function<std::optional<Replacement>(int seat, const std::vector<std::string>& exclude)> replacement;
};

// Listens (`listener`, for `nodes` nodes with `token`), writes the marker,
// asks the cluster's engine (make_engine) to bring up the agents
// (launch_agents) and starts making every rank's directory (rank_dirs). Throws Error when the
// step cannot even begin.
HeadLaunch prepare_launch(const Console& console, const NodeStep& job, Listener& listener,
                          const std::string& token, std::size_t nodes);

// prepare_launch once the head listens (`endpoint` is what the agents dial,
// `listening` the console's words for it): the marker, the console's line,
// the engine's processes and every rank's directory. A gang's head, whose
// lobby listens for the whole flow (gang_lobby.h), starts here.
void launch_after_listen(const Console& console, const NodeStep& job, const AgentEngine& engine,
                         const std::string& endpoint, const std::string& listening, const std::string& token,
                         std::size_t nodes, HeadLaunch& launch);

// What `engine` brings up for `wanted`, added to `launch`: its processes
// (none when the job starts its own agents, NodeStep::start_agents), each as
// the supervisor's group starts it (flowrun's environment, `token` on its
// stdin, its output in the step's directory); and for agents started by
// hand, the token file, written before the console says what to run.
void launch_agents(const Console& console, const NodeStep& job, const AgentEngine& engine,
                   const AgentsWanted& wanted, const std::string& token, HeadLaunch& launch);

// The supervisor's options for the engine's processes, whose agents stop
// the ranks and may be a heartbeat (`heartbeat_timeout_s`) late.
GroupOptions engine_group(const NodeStep& job, double heartbeat_timeout_s);

}  // namespace flowrun::cluster
