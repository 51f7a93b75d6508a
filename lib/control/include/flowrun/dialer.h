// The agent's side of the control plane up to the head's welcome: its
// token, dialing the head's endpoints, the handshake (hello, challenge,
// auth, welcome), and trying again while the connect timeout lasts.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "flowrun/connection.h"
#include "flowrun/protocol.h"
#include "flowrun/supervisor.h"

namespace flowrun {

// How an agent reaches the head: `flowrun agent`'s options that the dialer
// reads (AgentOptions adds the rest).
struct DialOptions {
  std::string endpoint;    // HOST:PORT of the head, or several comma-separated (tried in turn)
  std::string token_file;  // --token-file; else the first line of stdin
  // The token itself, read already from where a gang's platform put it
  // (gang_token: a Secret's file, FLOWRUN_TOKEN); else token_file or stdin.
  std::string token;
  // Read token_file once the head's challenge came, waiting for it to
  // appear: `flowrun run`'s rendezvous, where the head writes it before it
  // accepts a connection.
  bool token_after_connect = false;
  double connect_timeout_s = 60;  // how long to keep trying to reach the head
};

}  // namespace flowrun

namespace flowrun::cluster {

// The run's token: the first line of --token-file (a private file), else
// of stdin. Throws Error when there is none or the file is readable by
// other users.
std::string read_token(const DialOptions& options);

// Who the agent says it is in its hello.
struct AgentHello {
  std::string node;          // its host name (FLOWRUN_HOSTNAME)
  int node_rank_claim = -1;  // -1: the head decides
  int gpus = 0;
  bool stays = false;  // a gang's agent, for the whole flow (Hello::stays)
  int reach_port = 0;  // Hello::reach_port
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
                                  const DialOptions& options, const AgentHello& hello, std::string token,
                                  const std::function<int()>& interrupted);

// The head's connection for the frames after welcome, sealed both ways
// (the head's already are) with the keys of `link`'s handshake as node
// `node`, holding what the handshake read past its last frame. Call
// start() on it.
std::shared_ptr<Connection> sealed_connection(HeadLink link, const std::string& node);

}  // namespace flowrun::cluster
