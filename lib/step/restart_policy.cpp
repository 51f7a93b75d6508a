#include "flowrun/restart_policy.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "flowrun/util.h"

namespace flowrun {

namespace {

const WorkerRecord* culprit_of(const AttemptRecord& a) {
  if (!a.culprit) return nullptr;
  return &a.workers.at(static_cast<std::size_t>(*a.culprit));
}

// "rank 1", "rank 1 on node2".
std::string who(const WorkerRecord& w) {
  return w.node.empty() ? fmt::format("rank {}", w.rank) : fmt::format("rank {} on {}", w.rank, w.node);
}

// "3.2 s", "12m5s": how long an attempt ran.
std::string ran_text(double seconds) {
  if (seconds < 59.95) return fmt::format("{:.1f} s", seconds);
  return format_duration(static_cast<double>(std::llround(seconds)));
}

std::string codes_text(const std::vector<int>& codes) {
  std::vector<std::string> parts;
  for (int c : codes) parts.push_back(std::to_string(c));
  return join(parts, ", ");
}

// Rules 2 and 3: flowrun's own reasons to stop, whatever the policy says.
std::optional<std::string> never_restarts(const RestartQuestion& q) {
  const AttemptRecord& a = *q.last;
  switch (a.outcome) {
    case Outcome::timed_out: return "a timeout does not restart";
    case Outcome::stalled: return "a stall does not restart";
    case Outcome::interrupted:
      return q.interrupt != 0 ? "flowrun received " + signal_name(q.interrupt) : "the step was interrupted";
    case Outcome::succeeded:
    case Outcome::failed: break;
  }
  if (q.interrupt != 0) return "flowrun received " + signal_name(q.interrupt);
  if (!a.write_error.empty()) return "flowrun could not write the run directory";
  if (q.errors) return "flowrun's own errors (above) fail the step";
  if (q.node_gone && !q.spare_ready && !q.elastic_nodes) {
    const WorkerRecord* w = culprit_of(a);
    std::string lost = "a node of the step is gone";
    if (w && w->status.kind == ExitStatus::Kind::lost)
      lost = w->node.empty() ? fmt::format("rank {}'s node was lost", w->rank)
                             : fmt::format("rank {}'s node, {}, was lost", w->rank, w->node);
    if (q.spares_planned) return lost + ", and no spare node is left to take its place";
    if (q.min_nodes > 0)
      return fmt::format("{}, and fewer than {} nodes are left (nodes: \"{}:{}\")", lost, q.min_nodes,
                         q.min_nodes, q.max_nodes);
    return lost + ", and a restart needs every node the step started with";
  }
  return std::nullopt;
}

// Rule 6: nullopt when the cause restarts, else why not; `why_yes` gets the
// reason to restart.
std::optional<std::string> cause_left_out(const RestartPolicy& p, const AttemptRecord& a,
                                          std::string& why_yes) {
  const WorkerRecord* w = culprit_of(a);
  if (!a.cause || !w) return std::string("no rank failed on its own");
  switch (*a.cause) {
    case FailureCause::exception:
      why_yes = "an exception restarts";
      if (p.on_exception) return std::nullopt;
      return fmt::format("{} raised {}, and restart.causes leaves out exception", who(*w),
                         a.exception ? a.exception->describe() : std::string("an exception"));
    case FailureCause::exit_code: {
      const bool exited = w->status.kind == ExitStatus::Kind::exited;
      if (!p.exit_codes.empty()) {
        if (exited &&
            std::find(p.exit_codes.begin(), p.exit_codes.end(), w->status.code) != p.exit_codes.end()) {
          why_yes = fmt::format("exit code {} is in restart.exit_codes", w->status.code);
          return std::nullopt;
        }
        return fmt::format("{} {}, which restart.exit_codes ({}) leaves out", who(*w), w->status.describe(),
                           codes_text(p.exit_codes));
      }
      why_yes = "an exit code restarts";
      if (p.on_exit_code) return std::nullopt;
      return fmt::format("{} {}, and restart.causes leaves out exit_code", who(*w), w->status.describe());
    }
    case FailureCause::signal:
      why_yes = "a signal restarts";
      if (p.on_signal) return std::nullopt;
      return fmt::format("{} {}, and restart.causes leaves out signal", who(*w), w->status.describe());
    case FailureCause::node_lost: break;
  }
  return fmt::format("{} {}, and a lost node is not replaced", who(*w), w->status.describe());
}

// Rule 7: nullopt when the attempt made progress, else why it did not.
std::optional<std::string> no_progress(const RestartPolicy& p, const RestartQuestion& q) {
  const AttemptRecord& a = *q.last;
  if (q.progress_file_changed && !*q.progress_file_changed)
    return fmt::format("progress_file {} did not change during attempt {}: no progress", p.progress_file_text,
                       a.restart_count);
  if (!q.previous) return std::nullopt;
  const AttemptRecord& before = *q.previous;
  if (p.min_attempt_s) {
    const double ran = static_cast<double>(a.end_unix_ns - a.start_unix_ns) / 1e9;
    if (ran < *p.min_attempt_s && failed_alike(a, before))
      return fmt::format(
          "attempt {} failed as attempt {} did, after {}, less than min_attempt {}: no progress",
          a.restart_count, before.restart_count, ran_text(ran), format_duration(*p.min_attempt_s));
  }
  if (p.min_attempt_s || !p.progress_file.empty()) return std::nullopt;
  if (a.cause == FailureCause::exception && before.cause == FailureCause::exception && a.exception &&
      before.exception && *a.exception == *before.exception)
    return fmt::format("{} raised {} again, as in attempt {}: no progress", who(*culprit_of(a)),
                       a.exception->describe(), before.restart_count);
  return std::nullopt;
}

}  // namespace

RestartDecision decide_restart(const RestartPolicy& policy, const RestartQuestion& q) {
  const AttemptRecord& a = *q.last;
  if (a.outcome == Outcome::succeeded) return {};
  const bool spare = q.node_gone && q.spare_ready;
  const bool elastic = q.node_gone && q.elastic_nodes.has_value();
  // With spares or a range, a lost node is worth a word even without max_restarts.
  if (q.max_restarts == 0 && !spare && !elastic && !(q.node_gone && (q.spares_planned || q.min_nodes > 0)))
    return {};
  if (auto never = never_restarts(q)) return {false, *never};
  // A node was lost and a spare takes its place: whatever its ranks' peers
  // failed of, the loss is the cause.
  if (spare) return {true, "a spare node takes the lost node's place"};
  if (elastic)
    return {true, fmt::format(
                      "the step goes on with the {} left (nodes: \"{}:{}\")",
                      *q.elastic_nodes == 1 ? std::string("node") : fmt::format("{} nodes", *q.elastic_nodes),
                      q.min_nodes, q.max_nodes)};
  if (a.restart_count - q.carried_restarts - q.spare_restarts - q.elastic_restarts >= q.max_restarts)
    return {false, fmt::format("its {} restart{} (max_restarts) {} run", q.max_restarts,
                               q.max_restarts == 1 ? "" : "s", q.max_restarts == 1 ? "has" : "have")};
  if (!policy.is_set) return {true, "every failure restarts"};
  std::string why_yes;
  if (auto left_out = cause_left_out(policy, a, why_yes)) return {false, *left_out};
  if (auto none = no_progress(policy, q)) return {false, *none};
  return {true, why_yes};
}

bool failed_alike(const AttemptRecord& a, const AttemptRecord& b) {
  if (!a.cause || a.cause != b.cause) return false;
  if (*a.cause == FailureCause::node_lost) return true;
  if (*a.cause == FailureCause::exception && a.exception && b.exception) return *a.exception == *b.exception;
  const WorkerRecord* x = culprit_of(a);
  const WorkerRecord* y = culprit_of(b);
  return x && y && x->status.kind == y->status.kind && x->status.code == y->status.code;
}

}  // namespace flowrun
