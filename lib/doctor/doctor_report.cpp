// The doctor's verdict on one host: pure functions of DoctorFacts. Its text
// is in doctor_text.cpp, the verdict across nodes in cluster_doctor.cpp; the
// three share words and tables through doctor_report.h.
#include "doctor_report.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <optional>
#include <string>
#include <vector>

#include "flowrun/doctor.h"
#include "flowrun/text.h"

namespace flowrun {

namespace doctor_detail {

// "12.8" from cudaRuntimeGetVersion's 12080.
std::string cuda_version(int version) {
  if (version <= 0) return "none";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// "2.28.9" from ncclGetVersion's 22809 (NCCL_VERSION: major*10000 + minor*100 + patch since 2.9).
std::string nccl_version(int version) {
  if (version <= 0) return "unknown";
  if (version < 10000) return fmt::format("{}.{}.{}", version / 1000, version / 100 % 10, version % 100);
  return fmt::format("{}.{}.{}", version / 10000, version / 100 % 100, version % 100);
}

}  // namespace doctor_detail

namespace {

using doctor_detail::best_large_row;
using doctor_detail::cuda_version;
using doctor_detail::nccl_version;
using doctor_detail::wrong_sizes;

bool nvls_family(const std::string& algorithm) { return algorithm == "NVLS" || algorithm == "NVLS_TREE"; }

}  // namespace

namespace doctor_detail {

// The large-message figure: the best bus bandwidth among correct sizes of
// kLargeMessageBytes and more, and the row it came from.
const AllReduceRow* best_large_row(const AllReduceFacts& allreduce, int gpus) {
  const AllReduceRow* best = nullptr;
  for (const AllReduceRow& row : allreduce.rows) {
    if (row.bytes < kLargeMessageBytes || row.wrong > 0 || row.time_ns <= 0) continue;
    if (best == nullptr ||
        busbw_gbps(row.bytes, row.time_ns, gpus) > busbw_gbps(best->bytes, best->time_ns, gpus))
      best = &row;
  }
  return best;
}

}  // namespace doctor_detail

namespace {

const LinkCeiling& ceiling_row(const std::string& id) {
  for (const LinkCeiling& row : link_ceilings()) {
    if (row.id == id) return row;
  }
  return link_ceilings().front();  // unreachable: every id asked for is in the table
}

bool all_pairs(const Inventory& inventory, GpuPath path) {
  for (std::size_t i = 0; i < inventory.links.size(); ++i) {
    for (std::size_t j = 0; j < inventory.links.size(); ++j) {
      if (i != j && inventory.links[i][j].path != path) return false;
    }
  }
  return true;
}

bool any_pair(const Inventory& inventory, GpuPath path) {
  for (std::size_t i = 0; i < inventory.links.size(); ++i) {
    for (std::size_t j = 0; j < inventory.links.size(); ++j) {
      if (i != j && inventory.links[i][j].path == path) return true;
    }
  }
  return false;
}

// PCIe's raw rate a direction, GB/s, for one lane (after 8b/10b or 128b/130b).
double pcie_lane_gbps(int generation) {
  switch (generation) {
    case 1: return 0.25;
    case 2: return 0.5;
    case 3: return 0.985;
    case 4: return 1.969;
    case 5: return 3.938;
    case 6: return 7.563;
    default: return 0;
  }
}

// The ceiling the bandwidth is judged against, or why there is none.
std::optional<LinkCeiling> choose_ceiling(const Inventory& inventory, const std::string& algorithm,
                                          std::string& why_not) {
  const std::size_t n = inventory.gpus.size();
  if (inventory.links.size() != n || any_pair(inventory, GpuPath::unknown)) {
    why_not = "the links between the GPUs are unknown (NVML did not report them)";
    return std::nullopt;
  }
  if (all_pairs(inventory, GpuPath::nvlink)) {
    const int generation = nvlink_generation(inventory.gpus.front().details.compute_capability);
    if (!inventory.nvswitch) {
      why_not = "no ceiling is known for GPUs joined by direct NVLinks without NVSwitch";
      return std::nullopt;
    }
    if (generation == 4) {
      if (n == 8 && (algorithm.empty() || nvls_family(algorithm))) return ceiling_row("nvlink4-nvls");
      return ceiling_row("nvlink4");
    }
    if (generation == 3) return ceiling_row("nvlink3");
    why_not = generation > 0 ? fmt::format("no ceiling is known for NVLink {} through NVSwitch", generation)
                             : "no ceiling is known for these GPUs' NVLink generation";
    return std::nullopt;
  }
  if (any_pair(inventory, GpuPath::nvlink)) {
    why_not =
        "some pairs of GPUs are joined by NVLink and others by PCIe, and no ceiling is known for such a mix";
    return std::nullopt;
  }
  if (any_pair(inventory, GpuPath::sys)) {
    why_not =
        "the GPUs span CPU sockets (SYS), where the inter-socket link, which NVML does not report, sets the "
        "bandwidth";
    return std::nullopt;
  }
  int generation = 0, width = 0;
  for (const Gpu& gpu : inventory.gpus) {
    const int gpu_width = gpu.details.pcie_width > 0 ? gpu.details.pcie_width : gpu.details.pcie_width_max;
    if (generation == 0 || gpu.details.pcie_gen_max < generation) generation = gpu.details.pcie_gen_max;
    if (width == 0 || gpu_width < width) width = gpu_width;
  }
  if (pcie_lane_gbps(generation) <= 0 || width <= 0) {
    why_not = "the GPUs' PCIe generation or width is unknown";
    return std::nullopt;
  }
  LinkCeiling pcie = ceiling_row("pcie");
  const double raw = pcie_lane_gbps(generation) * width;
  pcie.link = fmt::format("PCIe Gen{} x{} within one CPU socket", generation, width);
  pcie.busbw_gbps = std::round(raw * 0.8 * 10) / 10;
  pcie.source = fmt::format("80% of the link's {:.1f} GB/s a direction; {}", raw, pcie.source);
  return pcie;
}

}  // namespace

namespace doctor_detail {

// "1 MiB (3 elements)" for each size whose sums were wrong.
std::vector<std::string> wrong_sizes(const AllReduceFacts& allreduce) {
  std::vector<std::string> wrong;
  for (const AllReduceRow& row : allreduce.rows) {
    if (row.wrong > 0)
      wrong.push_back(fmt::format("{} ({} elements)", doctor_detail::format_size(row.bytes), row.wrong));
  }
  return wrong;
}

}  // namespace doctor_detail

namespace {

// --- the checks, in report order -------------------------------------------

void check_driver(const DoctorFacts& facts, std::vector<DoctorCheck>& checks) {
  const Inventory& inv = facts.inventory;
  DoctorCheck check{"driver", CheckStatus::ok, "", ""};
  const std::string versions =
      fmt::format("driver {}, CUDA {}", inv.driver_version.empty() ? "unknown" : inv.driver_version,
                  inv.cuda_driver_version.empty() ? "unknown" : inv.cuda_driver_version);
  if (inv.source == "none" || (inv.system_count == 0 && !inv.unavailable_reason.empty())) {
    check.status = CheckStatus::fail;
    check.message = inv.unavailable_reason.empty() ? "no NVIDIA driver" : inv.unavailable_reason;
    check.advice =
        inv.source == "fake"
            ? "simulate GPUs with --fake-gpus N (N > 0)"
            : "install the NVIDIA driver ('nvidia-smi' must then list the GPUs); in a container, start "
              "it with the NVIDIA Container Toolkit (docker run --gpus all)";
  } else if (inv.source == "fake") {
    check.message = "simulated GPUs (--fake-gpus or FLOWRUN_FAKE_GPUS), " + versions;
  } else {
    check.message = "NVIDIA " + versions + " (NVML)";
  }
  checks.push_back(std::move(check));
}

void check_gpus(const DoctorFacts& facts, std::vector<DoctorCheck>& checks) {
  const Inventory& inv = facts.inventory;
  if (inv.system_count == 0) return;
  DoctorCheck check{"gpus", CheckStatus::ok, "", ""};
  if (inv.gpus.empty()) {
    check.status = CheckStatus::fail;
    check.message = fmt::format("none of the system's {} may be used", plural(inv.system_count, "GPU"));
    if (!inv.notes.empty()) check.message += ": " + join(inv.notes, "; ");
    check.advice =
        "check CUDA_VISIBLE_DEVICES and, inside Slurm, the job's --gpus ('flowrun gpus' shows both)";
  } else {
    check.message = fmt::format("{} ({})", plural(inv.gpus.size(), "GPU"), inv.summary());
    if (!inv.selected_by.empty())
      check.message +=
          fmt::format(", selected by {} from the system's {}", inv.selected_by, inv.system_count);
    for (const auto& note : inv.notes) check.message += "; " + note;
  }
  checks.push_back(std::move(check));
}

void check_links(const DoctorFacts& facts, std::vector<DoctorCheck>& checks) {
  const Inventory& inv = facts.inventory;
  const std::size_t n = inv.gpus.size();
  std::vector<std::string> degraded;
  for (const Gpu& gpu : inv.gpus) {
    if (gpu.details.pcie_width > 0 && gpu.details.pcie_width < gpu.details.pcie_width_max)
      degraded.push_back(fmt::format("GPU {} runs x{} of its x{}", gpu.index, gpu.details.pcie_width,
                                     gpu.details.pcie_width_max));
  }
  if (!degraded.empty()) {
    checks.push_back(
        {"pcie", CheckStatus::warn, "PCIe lanes missing: " + join(degraded, ", "),
         "reseat the card or check its slot and the BIOS's lane settings; copies between host and "
         "GPU run that much slower"});
  }
  if (n < 2 || inv.links.size() != n) return;
  int most = 0, fewest = 0;
  std::vector<std::string> weak;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j || inv.links[i][j].path != GpuPath::nvlink) continue;
      most = std::max(most, inv.links[i][j].nvlinks);
      fewest = fewest == 0 ? inv.links[i][j].nvlinks : std::min(fewest, inv.links[i][j].nvlinks);
    }
  }
  const bool nvlink = most > 0;
  const bool mixed = nvlink && !all_pairs(inv, GpuPath::nvlink);
  if (nvlink && (fewest < most || (mixed && inv.nvswitch))) {
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = i + 1; j < n; ++j) {
        const GpuLink& link = inv.links[i][j];
        if (link.path != GpuPath::nvlink || link.nvlinks < most)
          weak.push_back(fmt::format("{}-{} {}", inv.gpus[i].index, inv.gpus[j].index, gpu_link_name(link)));
      }
    }
    const std::size_t shown = std::min<std::size_t>(weak.size(), 6);
    std::string list =
        join(std::vector<std::string>(weak.begin(), weak.begin() + static_cast<long>(shown)), ", ");
    if (weak.size() > shown) list += fmt::format(" and {} more", weak.size() - shown);
    checks.push_back(
        {"links", CheckStatus::fail, fmt::format("NVLinks down: most pairs have NV{}, but {}", most, list),
         "'nvidia-smi nvlink --status' shows each link; a GPU reset or a reboot often brings them "
         "back, otherwise report the node to its administrators"});
    return;
  }
  if (any_pair(inv, GpuPath::sys)) {
    checks.push_back(
        {"links", CheckStatus::warn,
         "the GPUs span CPU sockets (SYS): NCCL's traffic between them crosses the CPU interconnect",
         "for a job that fits on one socket's GPUs, select those (CUDA_VISIBLE_DEVICES)"});
    return;
  }
  std::string what;
  if (all_pairs(inv, GpuPath::nvlink)) {
    const int generation = nvlink_generation(inv.gpus.front().details.compute_capability);
    what = fmt::format("every pair NV{}{}{}", most,
                       generation > 0 ? fmt::format(" (NVLink {})", generation) : "",
                       inv.nvswitch ? " through NVSwitch" : "");
  } else if (any_pair(inv, GpuPath::unknown)) {
    what = "unknown (NVML did not report how the GPUs are linked)";
  } else {
    std::vector<std::string> kinds;
    for (GpuPath path : {GpuPath::nvlink, GpuPath::pix, GpuPath::pxb, GpuPath::phb, GpuPath::node}) {
      if (!any_pair(inv, path)) continue;
      kinds.push_back(path == GpuPath::nvlink ? "NVLink" : gpu_link_name(GpuLink{path, 0}));
    }
    what = "PCIe within one CPU socket (" + join(kinds, ", ") + ")";
  }
  checks.push_back({"links", CheckStatus::ok, what, ""});
}

std::string cuda_advice(const DoctorFacts& facts) {
  const std::string& error = facts.cuda.error;
  const std::string runtime = cuda_version(facts.cuda.runtime_version);
  if (error.starts_with("cudaErrorInsufficientDriver")) {
    if (facts.cuda.driver_version <= 0)
      return "no NVIDIA driver is loaded: install it ('nvidia-smi' must then list the GPUs)";
    return fmt::format(
        "the driver supports CUDA {}, older than this runtime ({}): update the driver, or point "
        "FLOWRUN_CUDART_LIBRARY at a runtime no newer than the driver",
        cuda_version(facts.cuda.driver_version), runtime);
  }
  if (error.starts_with("cudaErrorNoDevice"))
    return "CUDA sees no GPU: check CUDA_VISIBLE_DEVICES and that /dev/nvidia* exist (in a container: "
           "--gpus all)";
  if (error.starts_with("cudaErrorSystemNotReady"))
    return "on an NVSwitch system this means nvidia-fabricmanager is not running: start it "
           "(systemctl start nvidia-fabricmanager)";
  if (error.starts_with("cudaErrorSystemDriverMismatch") || error.starts_with("cudaErrorCompatNotSupported"))
    return "the driver's kernel module and its user-space library differ in version: reboot, or reload the "
           "nvidia kernel module";
  return "'nvidia-smi' and 'dmesg' (Xid errors) usually say more";
}

void check_cuda(const DoctorFacts& facts, std::vector<DoctorCheck>& checks) {
  DoctorCheck check{"cuda", CheckStatus::ok, "", ""};
  const CudaFacts& cuda = facts.cuda;
  if (!facts.runtime_skipped.empty()) {
    check.status = CheckStatus::skip;
    check.message = "not checked: " + facts.runtime_skipped;
  } else if (!cuda.library.found) {
    check.status = CheckStatus::fail;
    check.message = "CUDA runtime not found: " + cuda.library.error;
    if (!cuda.library.tried.empty()) check.message += " (tried " + join(cuda.library.tried, ", ") + ")";
    check.advice =
        "install the CUDA runtime (NVIDIA's cuda-cudart package, or pip install nvidia-cuda-runtime-cu12 "
        "in the jobs' Python), or set FLOWRUN_CUDART_LIBRARY=/path/to/libcudart.so.12";
  } else if (cuda.device_count < 0) {
    check.status = CheckStatus::fail;
    check.message =
        fmt::format("cudaGetDeviceCount failed: {} (CUDA runtime {} from {}; {})", cuda.error,
                    cuda_version(cuda.runtime_version), cuda.library.path,
                    cuda.driver_version > 0 ? "the driver supports CUDA " + cuda_version(cuda.driver_version)
                                            : std::string("no CUDA driver answered"));
    check.advice = cuda_advice(facts);
  } else if (static_cast<std::size_t>(cuda.device_count) != facts.inventory.gpus.size()) {
    check.status = CheckStatus::fail;
    check.message = fmt::format("CUDA sees {} but NVML lists {} for this process (CUDA runtime {} from {})",
                                plural(cuda.device_count, "GPU"), facts.inventory.gpus.size(),
                                cuda_version(cuda.runtime_version), cuda.library.path);
    check.advice =
        "a GPU CUDA cannot use is often in a bad state: 'nvidia-smi -q' and 'dmesg' (Xid errors) say "
        "which; a GPU reset or a reboot usually clears it";
  } else {
    check.message = fmt::format("CUDA runtime {} ({}) sees {}; the driver supports CUDA {}",
                                cuda_version(cuda.runtime_version), cuda.library.path,
                                plural(cuda.device_count, "GPU"), cuda_version(cuda.driver_version));
  }
  checks.push_back(std::move(check));
}

void check_nccl(const DoctorFacts& facts, std::vector<DoctorCheck>& checks) {
  DoctorCheck check{"nccl", CheckStatus::ok, "", ""};
  const NcclFacts& nccl = facts.nccl;
  if (!facts.runtime_skipped.empty()) {
    check.status = CheckStatus::skip;
    check.message = "not checked: " + facts.runtime_skipped;
  } else if (!nccl.library.found) {
    check.status = CheckStatus::fail;
    check.message = "NCCL not found: " + nccl.library.error;
    if (!nccl.library.tried.empty()) check.message += " (tried " + join(nccl.library.tried, ", ") + ")";
    check.advice =
        "install NCCL (the libnccl2 package from NVIDIA's repository, or pip install nvidia-nccl-cu12 or "
        "nvidia-nccl-cu13 in the jobs' Python; PyTorch's CUDA wheels bring it), or set "
        "FLOWRUN_NCCL_LIBRARY=/path/to/libnccl.so.2";
  } else {
    check.message = fmt::format("NCCL {} ({})", nccl_version(nccl.version), nccl.library.path);
  }
  checks.push_back(std::move(check));
}

void check_allreduce(const DoctorFacts& facts, std::vector<DoctorCheck>& checks) {
  const AllReduceFacts& ar = facts.allreduce;
  DoctorCheck check{"all-reduce", CheckStatus::ok, "", ""};
  if (!facts.runtime_skipped.empty()) {
    check.status = CheckStatus::skip;
    check.message = "not run: " + facts.runtime_skipped;
  } else if (ar.status == "ok") {
    const std::vector<std::string> wrong = wrong_sizes(ar);
    if (ar.rows.empty()) {
      check.status = CheckStatus::fail;
      check.message = "no size was measured";
      check.advice = "run 'flowrun doctor' again with NCCL_DEBUG=WARN to see NCCL's own messages";
    } else if (!wrong.empty()) {
      check.status = CheckStatus::fail;
      check.message = "wrong sums at " + join(wrong, ", ");
      check.advice =
          "data is corrupted between GPUs: check 'nvidia-smi -q -d ECC' and run 'dcgmi diag -r 3'; "
          "report the node to its administrators";
    } else {
      check.message = fmt::format("{} sizes from {} to {} on {}, every sum correct", ar.rows.size(),
                                  doctor_detail::format_size(ar.rows.front().bytes),
                                  doctor_detail::format_size(ar.rows.back().bytes), plural(ar.gpus, "GPU"));
    }
  } else if (ar.status == "failed") {
    check.status = CheckStatus::fail;
    check.message = "NCCL all-reduce failed: " + ar.reason;
    check.advice =
        "NCCL_DEBUG=WARN flowrun doctor shows NCCL's own messages; in containers /dev/shm is often too small "
        "(docker run --shm-size=1g or --ipc=host)";
  } else if (ar.status == "hung") {
    check.status = CheckStatus::fail;
    check.message = "NCCL all-reduce hung: " + ar.reason;
    check.advice =
        "a hang usually means broken peer-to-peer paths: 'NCCL_P2P_DISABLE=1 flowrun doctor' passing "
        "confirms it "
        "(on PCIe, disable ACS on the switches or put the IOMMU in passthrough); 'dmesg' shows GPU faults "
        "(Xid)";
  } else {
    check.status = CheckStatus::skip;
    check.message = "not run" + (ar.reason.empty() ? std::string() : ": " + ar.reason);
  }
  for (const auto& note : ar.notes) check.message += "; " + note;
  checks.push_back(std::move(check));
}

// What to look at when the bandwidth is below its link's ceiling.
std::string bandwidth_advice(const LinkCeiling& ceiling) {
  return ceiling.id == "pcie"
             ? "check the PCIe links ('nvidia-smi -q -d PCIE'), that peer-to-peer is allowed (ACS off on "
               "PCIe "
               "switches, IOMMU off or passthrough), and that nothing else uses the GPUs ('nvidia-smi')"
             : "check that every NVLink is up ('nvidia-smi nvlink --status'), nothing else uses the GPUs "
               "('nvidia-smi'), clocks are not throttled ('nvidia-smi -q -d PERFORMANCE'), "
               "nvidia-fabricmanager "
               "runs, and NCCL_ALGO, NCCL_PROTO and NCCL_NVLS_ENABLE are unset";
}

void check_bandwidth(const DoctorFacts& facts, DoctorReport& report) {
  const AllReduceFacts& ar = facts.allreduce;
  if (!facts.runtime_skipped.empty() || ar.status != "ok" || ar.rows.empty()) return;
  DoctorCheck check{"bandwidth", CheckStatus::skip, "", ""};
  const AllReduceRow* best = best_large_row(ar, ar.gpus);
  std::string why_not;
  std::optional<LinkCeiling> ceiling;
  if (ar.gpus < 2) {
    check.message = "not judged on one GPU: an all-reduce of one GPU moves nothing between GPUs";
  } else if (best == nullptr && ar.stopped_slow && !ar.rows.empty() && ar.rows.back().wrong == 0 &&
             (ceiling = choose_ceiling(facts.inventory, ar.rows.back().algorithm, why_not))) {
    // So slow that the sweep stopped before the judged sizes: the largest
    // size measured, far below any ceiling, is verdict enough.
    const AllReduceRow& last = ar.rows.back();
    report.large_busbw_gbps = busbw_gbps(last.bytes, last.time_ns, ar.gpus);
    check.status = CheckStatus::fail;
    check.message = fmt::format(
        "the sweep stopped at {}, too slow to go on: bus bandwidth {:.2f} GB/s there, against the {:g} GB/s "
        "ceiling for {}",
        doctor_detail::format_size(last.bytes), report.large_busbw_gbps, ceiling->busbw_gbps, ceiling->link);
    check.advice = bandwidth_advice(*ceiling);
  } else if (best == nullptr && ar.stopped_slow && !ar.rows.empty()) {
    const AllReduceRow& last = ar.rows.back();
    check.message = fmt::format(
        "bus bandwidth {:.2f} GB/s at {}, where the sweep stopped (too slow to go on), "
        "not judged: {}",
        busbw_gbps(last.bytes, last.time_ns, ar.gpus), doctor_detail::format_size(last.bytes),
        why_not.empty() ? "its sums were wrong" : why_not);
  } else if (best == nullptr) {
    check.message = fmt::format("not judged: no size of {} or more was measured correctly (--sizes)",
                                doctor_detail::format_size(kLargeMessageBytes));
  } else {
    report.large_busbw_gbps = busbw_gbps(best->bytes, best->time_ns, ar.gpus);
    ceiling = choose_ceiling(facts.inventory, best->algorithm, why_not);
    if (!ceiling) {
      check.message = fmt::format("large-message bus bandwidth {:.1f} GB/s, not judged: {}",
                                  report.large_busbw_gbps, why_not);
    } else {
      const double share = report.large_busbw_gbps / ceiling->busbw_gbps;
      check.message =
          fmt::format("large-message bus bandwidth {:.1f} GB/s is {:.0f}% of the {:g} GB/s ceiling for {}",
                      report.large_busbw_gbps, share * 100, ceiling->busbw_gbps, ceiling->link);
      if (!best->algorithm.empty() && ceiling->id == "nvlink4" && ar.gpus == 8)
        check.message +=
            fmt::format(" (NCCL chose {}; with NVLS, NVLink SHARP, such a node reaches {:g} GB/s)",
                        best->algorithm, ceiling_row("nvlink4-nvls").busbw_gbps);
      if (share >= kCeilingShare) {
        check.status = CheckStatus::ok;
      } else {
        check.status = CheckStatus::fail;
        check.message += fmt::format(", below the {:.0f}% ({:.1f} GB/s) a healthy node reaches",
                                     kCeilingShare * 100, ceiling->busbw_gbps * kCeilingShare);
        check.advice = bandwidth_advice(*ceiling);
      }
    }
  }
  report.ceiling = ceiling;
  report.checks.push_back(std::move(check));
}

void check_memory(const DoctorFacts& facts, std::vector<DoctorCheck>& checks) {
  if (!facts.runtime_skipped.empty() || facts.memcpy.bytes == 0 || facts.memcpy.time_ns <= 0) return;
  // Read and write both cross the memory bus, as CUDA's bandwidthTest counts a device-to-device copy.
  const double gbps =
      2.0 * static_cast<double>(facts.memcpy.bytes) / static_cast<double>(facts.memcpy.time_ns);
  checks.push_back(
      {"memory", CheckStatus::ok,
       fmt::format("device-to-device copy {:.1f} GB/s on GPU 0 (cudaMemcpy of {}, read and write counted)",
                   gbps, doctor_detail::format_size(facts.memcpy.bytes)),
       ""});
}

}  // namespace

const std::vector<LinkCeiling>& link_ceilings() {
  static const std::vector<LinkCeiling> rows = {
      {"nvlink4-nvls", "NVLink 4 through NVSwitch, 8 GPUs, NVLS (H100/H200 SXM)", 475,
       "8x H200 all_reduce_perf peak, NVIDIA/nccl-tests#272; ~480 GB/s on 8 GPUs per NCCL's maintainers, "
       "NVIDIA/nccl-tests#212"},
      {"nvlink4", "NVLink 4 through NVSwitch without NVLS or with fewer than 8 GPUs (H100/H200 SXM)", 370,
       "NCCL's effective NVLink 4 bandwidth (450 GB/s line rate less protocol overhead), as Ring reaches it, "
       "NVIDIA/nccl-tests#212"},
      {"nvlink3", "NVLink 3 through NVSwitch (A100 SXM)", 230,
       "8x A100 all_reduce_perf, 232.5 GB/s, NVIDIA/nccl-tests#175"},
      {"pcie", "PCIe within one CPU socket", 0,
       "PCIe rate a direction per lane: Gen3 0.985, Gen4 1.969, Gen5 3.938 GB/s (PCI-SIG); x16 Gen4 GPUs "
       "measure about 25 GB/s, ZaidQureshi/bam#54"},
  };
  return rows;
}

double algbw_gbps(std::uint64_t bytes, std::int64_t time_ns) {
  if (time_ns <= 0) return 0;
  return static_cast<double>(bytes) / static_cast<double>(time_ns);  // bytes/ns is GB/s
}

double busbw_gbps(std::uint64_t bytes, std::int64_t time_ns, int gpus) {
  if (gpus <= 0) return 0;
  return algbw_gbps(bytes, time_ns) * (2.0 * (gpus - 1)) / gpus;
}

DoctorReport evaluate_doctor(const DoctorFacts& facts) {
  DoctorReport report;
  check_driver(facts, report.checks);
  check_gpus(facts, report.checks);
  check_links(facts, report.checks);
  const bool have_gpus = !facts.inventory.gpus.empty();
  if (have_gpus || facts.inventory.source != "fake") {
    check_cuda(facts, report.checks);
    check_nccl(facts, report.checks);
    check_allreduce(facts, report.checks);
    check_bandwidth(facts, report);
    check_memory(facts, report.checks);
  }
  for (const DoctorCheck& check : report.checks) {
    if (check.status == CheckStatus::fail) report.exit_code = 1;
  }
  return report;
}

}  // namespace flowrun
