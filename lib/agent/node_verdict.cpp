#include "node_verdict.h"

#include <fmt/format.h>

#include "flowrun/text.h"

namespace flowrun::cluster {

namespace {

std::string mib(std::int64_t bytes) {
  if (bytes >= (std::int64_t(10) << 30)) return fmt::format("{:.1f} GiB", double(bytes) / double(1 << 30));
  return fmt::format("{} MiB", bytes >> 20);
}

NodeCheck gpu_count(const NodeFacts& f) {
  const int want = f.expected_gpus;
  if (f.gpus_seen == want)
    return {"gpu_count", true, fmt::format("{} as the plan expects", plural(want, "GPU", "GPUs"))};
  if (f.gpus_seen == 0 && !f.gpus_unavailable.empty())
    return {
        "gpu_count", false,
        fmt::format("no GPUs ({}) where the plan expects {}; check the node's NVIDIA driver (nvidia-smi), "
                    "or leave the node out",
                    f.gpus_unavailable, want)};
  const std::string fewer = f.gpus_seen < want ? "a GPU is missing (fell off the bus, or disabled): "
                                               : "the node has more GPUs than the plan's nodes: ";
  return {
      "gpu_count", false,
      fmt::format("NVML reports {} where the plan expects {}; {}check nvidia-smi on the node, or leave it "
                  "out",
                  plural(f.gpus_seen, "GPU", "GPUs"), want, fewer)};
}

NodeCheck gpu_health(const NodeFacts& f) {
  std::vector<std::string> problems;
  for (const GpuHealth& g : f.gpus.gpus) {
    if (!g.open_error.empty()) {
      problems.push_back(fmt::format(
          "GPU {} cannot be opened ({}): reset it (nvidia-smi -r) or drain the node", g.index, g.open_error));
      continue;
    }
    if (g.ecc_uncorrectable > 0)
      problems.push_back(fmt::format("GPU {} has {}: reset it (nvidia-smi -r) or drain the node", g.index,
                                     plural(static_cast<std::size_t>(g.ecc_uncorrectable),
                                            "uncorrectable ECC error", "uncorrectable ECC errors")));
    if (g.retired_pages_pending > 0)
      problems.push_back(fmt::format(
          "GPU {} has retired pages pending, which only a reset retires: reset it (nvidia-smi -r) or drain "
          "the node",
          g.index));
    if (g.processes > 0)
      problems.push_back(fmt::format(
          "GPU {} is busy: {} already {} on it (another job, or one left behind): end {}, or leave the node "
          "out",
          g.index, plural(static_cast<std::size_t>(g.processes), "process", "processes"),
          g.processes == 1 ? "runs" : "run", g.processes == 1 ? "it" : "them"));
  }
  if (problems.empty())
    return {"gpu_health", true,
            fmt::format("{} healthy{}", plural(static_cast<std::int64_t>(f.gpus.gpus.size()), "GPU", "GPUs"),
                        f.gpus.source == "fake" ? " (simulated)" : "")};
  std::string text;
  for (const auto& p : problems) text += (text.empty() ? "" : "; ") + p;
  return {"gpu_health", false, text};
}

NodeCheck space(const char* name, const char* what, const char* elsewhere, const FreeSpace& s,
                std::int64_t min) {
  if (!s.error.empty())
    return {name, false, fmt::format("cannot tell the free space of {} ({}): {}", s.path, what, s.error)};
  if (s.free_bytes < min)
    return {
        name, false,
        fmt::format("{} free in {} ({}), under the {} a node needs (FLOWRUN_NODE_CHECK_MIN_FREE_MB): free "
                    "space there{}",
                    mib(s.free_bytes), s.path, what, mib(min), elsewhere)};
  return {name, true, fmt::format("{} free in {}", mib(s.free_bytes), s.path)};
}

}  // namespace

std::vector<NodeCheck> judge_node(const NodeFacts& f) {
  std::vector<NodeCheck> checks;
  if (f.expected_gpus >= 0) {
    checks.push_back(gpu_count(f));
    checks.push_back(gpu_health(f));
  }
  checks.push_back(space("scratch_space", "the ranks' scratch", ", or point TMPDIR elsewhere", f.scratch,
                         f.min_free_bytes));
  checks.push_back(space("workdir_space", "the step's workdir", "", f.workdir, f.min_free_bytes));
  if (!f.torch.python.empty()) {
    if (f.torch.ok)
      checks.push_back({"torch_import", true, fmt::format("{} imports torch", f.torch.python)});
    else
      checks.push_back(
          {"torch_import", false,
           fmt::format("{} -c 'import torch' failed: {}; install torch for that Python on the node, "
                       "or give the spec's python: one that has it",
                       f.torch.python, f.torch.error)});
  }
  if (!f.node0.address.empty()) {
    const std::string at =
        fmt::format("node 0 ({}) at {}:{}", printable(f.node0.name), f.node0.address, f.node0.port);
    if (f.node0.ok)
      checks.push_back({"reach_node0", true, fmt::format("reaches {} in {:.1f} ms", at, f.node0.ms)});
    else
      checks.push_back(
          {"reach_node0", false,
           fmt::format("cannot reach {}: {}; its ranks could not reach MASTER_ADDR there either: check the "
                       "route and the firewall from this node to {} (ip route get {}), or leave the node out",
                       at, f.node0.error, f.node0.address, f.node0.address)});
  }
  return checks;
}

}  // namespace flowrun::cluster
