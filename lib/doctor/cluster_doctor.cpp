// The doctor's verdict across the nodes of a multi-node step's preflight:
// each node's own checks, then one verdict on the all-reduce they ran
// together, and its text report. One host's verdict is in doctor_report.cpp,
// its text and the preflight's summary of either in doctor_text.cpp.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <optional>
#include <string>
#include <vector>

#include "flowrun/doctor.h"
#include "flowrun/text.h"

#include "doctor_report.h"

namespace flowrun {

namespace {

using doctor_detail::allreduce_table;
using doctor_detail::best_large_row;
using doctor_detail::checks_and_verdict;
using doctor_detail::cuda_version;
using doctor_detail::nccl_version;
using doctor_detail::wrong_sizes;

std::string node_label(const NodeDoctorFacts& node) {
  return node.facts.hostname.empty() ? fmt::format("node rank {}", node.node_rank) : node.facts.hostname;
}

bool node_side(const std::string& name) {
  return name != "all-reduce" && name != "bandwidth" && name != "memory";
}

}  // namespace

AllReduceFacts combine_node_allreduce(const ClusterDoctorFacts& facts) {
  AllReduceFacts combined;
  bool first = true;
  for (const NodeDoctorFacts& node : facts.nodes) {
    if (!node.not_checked.empty()) continue;
    const AllReduceFacts& ar = node.facts.allreduce;
    if (first) {
      combined = ar;
      combined.gpus = facts.ranks;
      combined.warnings.clear();
      first = false;
    } else {
      if (ar.rows.size() != combined.rows.size()) {
        combined.rows.clear();
        return combined;
      }
      for (std::size_t i = 0; i < ar.rows.size(); ++i) {
        AllReduceRow& row = combined.rows[i];
        if (row.bytes != ar.rows[i].bytes) {
          combined.rows.clear();
          return combined;
        }
        row.time_ns = std::max(row.time_ns, ar.rows[i].time_ns);
        row.wrong += ar.rows[i].wrong;  // each node checks its own GPUs' results
      }
      for (const std::string& note : ar.notes) {
        if (std::find(combined.notes.begin(), combined.notes.end(), note) == combined.notes.end())
          combined.notes.push_back(note);
      }
    }
    if (combined.network.empty()) combined.network = ar.network;
    for (const std::string& warning : ar.warnings)
      combined.warnings.push_back(node_label(node) + ": " + warning);
  }
  return combined;
}

namespace {

// Each node's own checks: one line when all is well, one per problem otherwise.
void add_node_checks(DoctorReport& report, const ClusterDoctorFacts& facts) {
  for (const NodeDoctorFacts& node : facts.nodes) {
    const std::string name = fmt::format("node {}", node.node_rank);
    if (!node.not_checked.empty()) {
      report.checks.push_back(
          {name, CheckStatus::skip, node_label(node) + ": not checked: " + node.not_checked, ""});
      continue;
    }
    const DoctorReport own = evaluate_doctor(node.facts);
    bool problems = false;
    for (const DoctorCheck& check : own.checks) {
      if (!node_side(check.name) || check.status == CheckStatus::ok || check.status == CheckStatus::skip)
        continue;
      report.checks.push_back({name, check.status,
                               fmt::format("{}: {}: {}", node_label(node), check.name, check.message),
                               check.advice});
      problems = true;
    }
    if (problems) continue;
    const DoctorFacts& f = node.facts;
    std::string summary = fmt::format(
        "{}: {}", node_label(node),
        f.inventory.gpus.empty()
            ? std::string("no GPUs")
            : fmt::format("{} ({})", plural(f.inventory.gpus.size(), "GPU"), f.inventory.summary()));
    if (!f.runtime_skipped.empty()) {
      summary += "; CUDA and NCCL not checked: " + f.runtime_skipped;
    } else {
      summary += fmt::format(", driver {}, CUDA runtime {}, NCCL {}",
                             f.inventory.driver_version.empty() ? "unknown" : f.inventory.driver_version,
                             cuda_version(f.cuda.runtime_version), nccl_version(f.nccl.version));
    }
    report.checks.push_back({name, CheckStatus::ok, summary, ""});
  }
}

// The all-reduce that failed or hung on `culprit`, the first node where it did.
void say_failed_allreduce(DoctorCheck& check, const NodeDoctorFacts* culprit, std::size_t nodes) {
  const AllReduceFacts& ar = culprit->facts.allreduce;
  check.status = CheckStatus::fail;
  check.message = fmt::format("NCCL all-reduce across {} nodes {} on {}: {}", nodes, ar.status,
                              node_label(*culprit), ar.reason);
  for (const auto& note : ar.notes) check.message += "; " + note;
  check.advice = ar.status == "hung" ? "a hang across nodes usually means NCCL cannot reach the other "
                                       "nodes: set NCCL_SOCKET_IFNAME to the "
                                       "interface between them, open the ports between the nodes "
                                       "(firewalls, security groups), and run "
                                       "again with NCCL_DEBUG=INFO to see where it waits"
                                     : "NCCL_DEBUG=WARN on the step (env:) shows NCCL's own messages; in "
                                       "containers /dev/shm is often too "
                                       "small (--shm-size=1g or --ipc=host)";
}

// The all-reduce every node took part in: its sums, its sizes, and the
// bandwidth it measured (not judged).
void judge_measured_allreduce(DoctorReport& report, const ClusterDoctorFacts& facts, DoctorCheck& check,
                              std::optional<DoctorCheck>& bandwidth) {
  const std::size_t nodes = facts.nodes.size();
  const AllReduceFacts ar = combine_node_allreduce(facts);
  const std::vector<std::string> wrong = wrong_sizes(ar);
  if (ar.rows.empty()) {
    check.status = CheckStatus::fail;
    check.message = "the nodes measured no size in common";
    check.advice = "run the step again with NCCL_DEBUG=WARN in its env: to see NCCL's own messages";
  } else if (!wrong.empty()) {
    check.status = CheckStatus::fail;
    check.message = "wrong sums at " + join(wrong, ", ");
    check.advice =
        "data is corrupted between GPUs or nodes: check 'nvidia-smi -q -d ECC' on each node, run "
        "'dcgmi diag -r 3', and check the network's error counters; report the nodes to their "
        "administrators";
  } else {
    check.message =
        fmt::format("{} sizes from {} to {} on {} across {} nodes, every sum correct", ar.rows.size(),
                    doctor_detail::format_size(ar.rows.front().bytes),
                    doctor_detail::format_size(ar.rows.back().bytes), plural(ar.gpus, "GPU"), nodes);
    if (!ar.network.empty()) check.message += fmt::format(", NCCL's network between nodes: {}", ar.network);
  }
  for (const auto& note : ar.notes) check.message += "; " + note;
  if (wrong.empty() && !ar.rows.empty()) {
    if (const AllReduceRow* best = best_large_row(ar, ar.gpus)) {
      report.large_busbw_gbps = busbw_gbps(best->bytes, best->time_ns, ar.gpus);
      bandwidth = DoctorCheck(
          {"bandwidth", CheckStatus::skip,
           fmt::format(
               "large-message bus bandwidth {:.1f} GB/s across {} nodes, not judged: flowrun knows no "
               "ceiling for the network between nodes (all_reduce_perf from nccl-tests on these nodes "
               "gives one to compare with)",
               report.large_busbw_gbps, nodes),
           ""});
    }
  }
}

}  // namespace

DoctorReport evaluate_cluster_doctor(const ClusterDoctorFacts& facts) {
  DoctorReport report;
  add_node_checks(report, facts);
  // The communicator's all-reduce: the first node whose side failed or hung.
  DoctorCheck check{"all-reduce", CheckStatus::ok, "", ""};
  std::optional<DoctorCheck> bandwidth;
  const std::size_t nodes = facts.nodes.size();
  const NodeDoctorFacts* culprit = nullptr;
  const NodeDoctorFacts* skipped = nullptr;
  for (const NodeDoctorFacts& node : facts.nodes) {
    if (!node.not_checked.empty()) continue;
    const std::string& status = node.facts.allreduce.status;
    if ((status == "failed" || status == "hung") && culprit == nullptr) culprit = &node;
    // A node whose check was stopped because another's failed is not the reason.
    const bool stopped = node.facts.allreduce.reason.starts_with(kCheckStoppedReason);
    if (status != "ok" && status != "failed" && status != "hung" &&
        (skipped == nullptr ||
         (!stopped && skipped->facts.allreduce.reason.starts_with(kCheckStoppedReason))))
      skipped = &node;
  }
  // Simulated GPUs or a flowrun built without GPU support: node 0's check
  // did not run, and neither did anyone's (the reason is the same on every node).
  const bool all_simulated = !facts.nodes.empty() && facts.nodes.front().not_checked.empty() &&
                             !facts.nodes.front().facts.runtime_skipped.empty();
  if (culprit != nullptr) {
    say_failed_allreduce(check, culprit, nodes);
  } else if (all_simulated) {
    check.status = CheckStatus::skip;
    check.message = "not run: " + facts.nodes.front().facts.runtime_skipped;
  } else if (skipped != nullptr ||
             std::any_of(facts.nodes.begin(), facts.nodes.end(),
                         [](const NodeDoctorFacts& n) { return !n.not_checked.empty(); })) {
    // A node that could not take part (its CUDA or NCCL failed, said above) or never answered.
    check.status = CheckStatus::fail;
    if (skipped != nullptr) {
      const AllReduceFacts& ar = skipped->facts.allreduce;
      check.message = fmt::format("not run across the {} nodes: on {}: {}", nodes, node_label(*skipped),
                                  ar.reason.empty() ? std::string("it did not run") : ar.reason);
    } else {
      check.message = fmt::format("not run across the {} nodes: a node was not checked (above)", nodes);
    }
    check.advice = "fix what the node lines above name, then run the step again";
  } else {
    judge_measured_allreduce(report, facts, check, bandwidth);
  }
  report.checks.push_back(std::move(check));
  if (bandwidth) report.checks.push_back(std::move(*bandwidth));
  for (const DoctorCheck& c : report.checks) {
    if (c.status == CheckStatus::fail) report.exit_code = 1;
  }
  return report;
}

std::string format_cluster_doctor_text(const ClusterDoctorFacts& facts, const DoctorReport& report) {
  std::vector<std::string> per_node;
  for (const NodeDoctorFacts& node : facts.nodes)
    per_node.push_back(fmt::format("{}: {}", node_label(node), node.facts.inventory.gpus.size()));
  std::string out = fmt::format("flowrun doctor: {} nodes, {} ({})\n", facts.nodes.size(),
                                plural(facts.ranks, "GPU"), join(per_node, ", "));
  const AllReduceFacts ar = combine_node_allreduce(facts);
  const bool all_ok = std::all_of(facts.nodes.begin(), facts.nodes.end(), [](const NodeDoctorFacts& n) {
    return n.not_checked.empty() && n.facts.allreduce.status == "ok";
  });
  if (all_ok && !ar.rows.empty()) {
    out += fmt::format(
        "\nNCCL all-reduce across {} nodes: {}, float sum, out of place, {} warmup + {} timed iterations "
        "each; "
        "each time is the slowest node's\n",
        facts.nodes.size(), plural(ar.gpus, "GPU"), ar.warmup, ar.iters);
    out += allreduce_table(ar);
  }
  for (const NodeDoctorFacts& node : facts.nodes) {
    for (const auto& warning : node.facts.allreduce.warnings)
      out += "NCCL (" + node_label(node) + "): " + warning + "\n";
  }
  out += checks_and_verdict(report);
  return out;
}

}  // namespace flowrun
