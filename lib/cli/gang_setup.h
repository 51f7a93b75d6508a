// What a gang (lib/gang) means for `flowrun SPEC` and `flowrun run`: whether
// the flow runs on it, and this node's part: the head (a GangLobby) or an
// agent that stays for the whole flow. Internal to lib/cli.
#pragma once

#include <optional>
#include <string>

#include "flowrun/agent.h"
#include "flowrun/gang.h"
#include "flowrun/gang_lobby.h"
#include "flowrun/plan.h"
#include "flowrun/spec.h"
#include "flowrun/util.h"

namespace flowrun {

// read_gang of `env`; nullopt for no gang. Throws Error (a usage error) for
// a contradiction, naming the variable and the fix.
std::optional<GangRead> read_gang_or_throw(const EnvMap& env);

// Decides whether the flow runs on `gang`: a spec whose cluster: names an
// engine other than gang keeps it (host.gang_ignored says so for the plan);
// a spec with no cluster: runs on the gang (spec.cluster becomes engine gang,
// with its defaults); engine: gang without a gang is an error at the spec's
// line. Sets host.gang when the flow runs on it; returns the platform's name
// then, else "".
std::string use_gang(Spec& spec, HostFacts& host, const std::optional<GangRead>& gang);

// The control plane's port: the platform's MASTER_PORT or PET_MASTER_PORT,
// else kGangDefaultPort.
int gang_port(const GangRead& gang);
// This node's rank counted from the head (node 0).
int gang_node_rank(const GangRead& gang);

// The run's token from FLOWRUN_TOKEN_FILE (not readable by every user) or
// FLOWRUN_TOKEN. Throws Error with the fix when there is none, both are set,
// or it is too short: a gang never runs unauthenticated.
std::string gang_token(const EnvMap& env);

// A node other than the head: its agent for the whole flow, dialing the head
// until cluster.join_timeout. Says on stderr what it does.
AgentOptions gang_agent(const GangRead& gang, const ClusterSpec& cluster, const EnvMap& env, int fake_gpus);

// The head: its lobby's options.
GangLobbyOptions gang_head(const GangRead& gang, const ClusterSpec& cluster, const EnvMap& env);

}  // namespace flowrun
