#include "node_orders.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "flowrun/protocol.h"
#include "flowrun/start_wire.h"
#include "flowrun/text.h"
#include "flowrun/worker_env.h"

#include "head_launch.h"

namespace flowrun::cluster {

bool node_checks_on(const NodeStep& job) {
  return job.step != nullptr && job.step->parallel && job.step->parallel->node_checks;
}

Assign assign_of(const NodeStep& job, int attempt, int node_rank, int nodes, const std::string& marker_path,
                 const std::string& marker_text) {
  Assign m;
  m.step = job.plan->step;
  m.run_id = job.ctx.run_id;
  m.attempt = attempt;
  m.node_rank = node_rank;
  m.nodes = nodes;
  m.workdir = job.step->workdir;
  m.marker_path = marker_path;
  m.marker_text = marker_text;
  m.want_port = node_rank == 0;
  m.grace_ms = static_cast<std::int64_t>(job.group.grace_s * 1000);
  // stall_timeout is enforced by each node's agent, whose supervisor reads
  // its ranks' pipes: silence is measured where the ranks write, not from
  // output frames that the network, the connection's queue or a busy head
  // may hold back, and the agent can tell a stopped (SIGSTOP) rank by its
  // /proc state. The agent reports the stalled ranks (Stalled) and the
  // head names them and stops every node.
  if (job.group.stall_timeout_s) m.stall_ms = std::llround(*job.group.stall_timeout_s * 1000);
  if (job.group.forensics_stacks)
    m.forensics_ms = std::max<std::int64_t>(1, std::llround(job.group.forensics_timeout_s * 1000));
  if (job.group.sample_s > 0)
    m.sample_ms = std::max<std::int64_t>(1, std::llround(job.group.sample_s * 1000));
  m.node_checks = node_checks_on(job);
  if (m.node_checks) {
    const StepPlan& plan = *job.plan;
    // The node's GPUs: the plan's for the node (every node has as many).
    m.node_gpus = plan.cpu ? -1 : plan.nodes.front().gpus_available;
    // A step of Python GPU workers is a torch step: its Python must import torch.
    if (!plan.cpu && job.step->python_command && !job.argv.empty()) m.python = job.argv.front();
  }
  return m;
}

std::vector<std::string> start_frames(const NodeStep& job, std::size_t nodes, const LaunchContext& ctx) {
  std::vector<std::string> frames(nodes);
  for (std::size_t rank = 0; rank < nodes; ++rank) {
    Start m = start_of(node_work(*job.spec, *job.step, *job.plan, static_cast<int>(rank), ctx));
    m.workdir = job.step->workdir;
    m.argv = job.argv;
    for (auto& r : m.ranks) r.upload = job.step->collect == Collect::all || r.rank == 0;
    frames[rank] = to_wire(encode(m));
  }
  return frames;
}

std::string joined_message(const StepPlan& plan, const std::vector<std::string>& names,
                           const LaunchContext& ctx) {
  return fmt::format("flowrun: step '{}': {} joined ({}); MASTER_ADDR {}, MASTER_PORT {}", plan.step,
                     plural(names.size(), "node", "nodes"), fmt::join(names, ", "), master_addr(plan, ctx),
                     ctx.master_port);
}

}  // namespace flowrun::cluster
