#include "node_preflight.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/preflight_wire.h"
#include "flowrun/text.h"

namespace flowrun::cluster {

namespace {}  // namespace

NodePreflight::NodePreflight(const Console& console, const StepPlan& plan, std::string report_path,
                             Links links)
    : console_(console), plan_(plan), report_path_(std::move(report_path)), links_(std::move(links)) {}

void NodePreflight::start(const std::vector<std::string>& names) {
  names_ = names;
  facts_ = ClusterDoctorFacts{};
  answered_.assign(names_.size(), false);
  started_.assign(names_.size(), false);
  std::vector<std::string> where;
  for (std::size_t rank = 0; rank < names_.size(); ++rank) {
    NodeDoctorFacts node;
    node.node_rank = static_cast<int>(rank);
    node.first_rank = facts_.ranks;
    node.facts.hostname = names_[rank];
    facts_.ranks += static_cast<int>(plan_.nodes[rank].gpus.size());
    facts_.nodes.push_back(std::move(node));
    where.push_back(fmt::format("{} GPUs {}", names_[rank], devices(static_cast<int>(rank))));
  }
  console_.message(fmt::format("flowrun: step '{}': preflight: checking NCCL across {}, {} ({})", plan_.step,
                               plural(names_.size(), "node", "nodes"),
                               plural(static_cast<std::size_t>(facts_.ranks), "GPU", "GPUs"),
                               fmt::join(where, "; ")));
  send(0, "make");
}

std::string NodePreflight::devices(int node_rank) const {
  std::vector<std::string> devices;
  for (const Gpu& gpu : plan_.nodes[static_cast<std::size_t>(node_rank)].gpus)
    devices.push_back(std::to_string(gpu.index));
  return fmt::format("{}", fmt::join(devices, ","));
}

void NodePreflight::send(int node_rank, const std::string& nccl_id) {
  started_[static_cast<std::size_t>(node_rank)] = true;
  std::vector<int> devices;
  for (const Gpu& gpu : plan_.nodes[static_cast<std::size_t>(node_rank)].gpus) devices.push_back(gpu.index);
  const NcclPart part{facts_.ranks, facts_.nodes[static_cast<std::size_t>(node_rank)].first_rank, nccl_id};
  const Preflight m = preflight_message(std::move(devices), preflight_sweep(), part);
  links_.send(node_rank, m);
}

bool NodePreflight::on_id(int node, const PreflightId& m) {
  const std::string& id = m.nccl_id;
  if (node != 0 || started_.size() < 2 || started_[1]) return true;
  if (id.size() != kNcclIdHexChars || id.find_first_not_of("0123456789abcdef") != std::string::npos)
    return false;
  for (std::size_t other = 1; other < names_.size(); ++other) {
    if (!links_.lost(static_cast<int>(other))) send(static_cast<int>(other), id);
  }
  return true;
}

NodePreflight::State NodePreflight::on_done(int node_rank, const PreflightDone& m) {
  const auto index = static_cast<std::size_t>(node_rank);
  if (answered_[index]) return State::checking;
  answered_[index] = true;
  const std::string& name = names_[index];
  NodeDoctorFacts& node = facts_.nodes[index];
  try {
    node.facts = parse_doctor_facts(m.facts, "node " + name + "'s preflight report");
    node.facts.hostname = name;
  } catch (const Error& e) {
    node.not_checked = std::string("its report could not be read: ") + e.what();
  }
  const bool ok = node.not_checked.empty() && node.facts.allreduce.status == "ok";
  if (node_rank == 0 && !started_[std::min<std::size_t>(1, names_.size() - 1)]) {
    // Node 0 ended without an id: the others never began. Where the check
    // does not run at all (simulated GPUs, a flowrun built without GPU
    // support: the same on every node), that is the reason for them too.
    const std::string& skipped = node.facts.runtime_skipped;
    for (std::size_t i = 1; i < names_.size(); ++i) {
      answered_[i] = true;
      facts_.nodes[i].not_checked =
          node.not_checked.empty() && !skipped.empty()
              ? skipped
              : "its check never started: node 0's ended before it made the NCCL communicator";
    }
  } else if (!ok && !stopping_) {
    // The communicator cannot complete without this node: stop the others' checks.
    stopping_ = true;
    for (std::size_t other = 0; other < names_.size(); ++other) {
      if (!answered_[other])
        links_.stop(static_cast<int>(other), "the preflight check failed on node " + name);
    }
  }
  if (std::find(answered_.begin(), answered_.end(), false) != answered_.end()) return State::checking;
  const DoctorReport report = evaluate_cluster_doctor(facts_);
  const std::string text = format_cluster_doctor_text(facts_, report);
  // The whole report stays with the run, passed or not (the console shows it on failure).
  const int err = try_write_file(report_path_, text);
  if (report.exit_code != 0) {
    console_.message(text);
    return State::failed;
  }
  console_.message(fmt::format(
      "flowrun: step '{}': preflight {} ({})", plan_.step, preflight_summary(report),
      err == 0 ? "report: " + report_path_ : "cannot write " + report_path_ + ": " + std::strerror(err)));
  return State::passed;
}

}  // namespace flowrun::cluster
