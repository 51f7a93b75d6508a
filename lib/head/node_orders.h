// What the head tells each node of a multi-node step to do: get ready for
// an attempt (Assign), then start its ranks (Start). Internal to
// lib/head.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "flowrun/messages.h"
#include "flowrun/remote_group.h"

namespace flowrun::cluster {

// Whether the step's agents check their nodes before its ranks start
// (parallel.node_checks, on unless the spec says false).
bool node_checks_on(const NodeStep& job);

// The Assign for node `node_rank` of `nodes`, attempt `attempt`: the step,
// its workdir, the marker every node must read at the same path (node 0
// picks the rendezvous port), and with node_checks_on, what each node's
// check needs: the plan's GPUs per node, and the Python of a torch step.
Assign assign_of(const NodeStep& job, int attempt, int node_rank, int nodes, const std::string& marker_path,
                 const std::string& marker_text);

// Every node's Start, on the wire, by node rank: each carries its node's
// part of the plan launched with `ctx`.
std::vector<std::string> start_frames(const NodeStep& job, std::size_t nodes, const LaunchContext& ctx);

// The console's line once every node joined, before the first attempt:
// the nodes (`names`) and the rendezvous of `ctx`.
std::string joined_message(const StepPlan& plan, const std::vector<std::string>& names,
                           const LaunchContext& ctx);

}  // namespace flowrun::cluster
