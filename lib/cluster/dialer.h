// The agent's side of the control plane up to the head's welcome: its
// token, dialing the head's endpoints, the handshake (hello, challenge,
// auth, welcome), and trying again while the connect timeout lasts.
// Internal to lib/cluster.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <functional>
#include <optional>
#include <string>

#include "flowrun/cluster.h"
#include "flowrun/protocol.h"
#include "flowrun/supervisor.h"

namespace flowrun::cluster {

// The run's token: the first line of --token-file (a private file), else
// of stdin. Throws Error when there is none or the file is readable by
// other users.
std::string read_token(const AgentOptions& options);

// Who the agent says it is in its hello.
struct AgentHello {
  std::string node;          // its host name (FLOWRUN_HOSTNAME)
  int node_rank_claim = -1;  // -1: the head decides
  int gpus = 0;
};

// A connection the head welcomed: what the sealed frames that follow need.
struct HeadLink {
  boost::asio::ip::tcp::socket socket;
  FrameReader reader{"head"};  // may hold frames the head sent right after welcome
  std::string head_at;         // the --rdzv-endpoint entry it reached the head at
  std::string token;
  std::string agent_nonce, head_nonce;  // the handshake's, for the frame keys
  int node_rank = 0;
  double heartbeat_s = 2.5, timeout_s = 10;
};

// Connects and shakes hands until the head welcomes or refuses this agent.
// A connection the head drops before either (it was full of connections
// that never authenticated, and dropped the idlest, or the network cut it)
// is tried again until options.connect_timeout_s. `token` is read_token's,
// or empty under token_after_connect (then read once the head challenged).
// `interrupted` is the agent's first stop signal (0: none). Returns nullopt
// when the head refused the agent (the console says why); throws Error when
// it cannot be reached or its frames make no sense.
std::optional<HeadLink> join_head(boost::asio::io_context& io, const Console& console,
                                  const AgentOptions& options, const AgentHello& hello, std::string token,
                                  const std::function<int()>& interrupted);

}  // namespace flowrun::cluster
