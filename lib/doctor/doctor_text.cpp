// The doctor's text report (the contracts are in doctor.h): one host's, as
// `flowrun doctor` prints it, the all-reduce's table and the checks with
// their verdict that the report across nodes (cluster_doctor.cpp) prints
// too, and the preflight's summary of either. The verdict itself is in
// doctor_report.cpp.
#include <algorithm>
#include <fmt/format.h>
#include <string>
#include <vector>

#include "flowrun/doctor.h"
#include "flowrun/text.h"

#include "doctor_report.h"

namespace flowrun {

namespace {

using doctor_detail::allreduce_table;
using doctor_detail::checks_and_verdict;

const char* status_word(CheckStatus status) {
  switch (status) {
    case CheckStatus::ok: return "ok";
    case CheckStatus::warn: return "warn";
    case CheckStatus::fail: return "FAIL";
    case CheckStatus::skip: return "skip";
  }
  return "?";
}

}  // namespace

namespace doctor_detail {

// The sweep's table, as nccl-tests prints one.
std::string allreduce_table(const AllReduceFacts& ar) {
  using Align = TextTable::Align;
  TextTable rows("  ", {Align::right, Align::right, Align::right, Align::right, Align::right});
  rows.add_row({"size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "wrong", "algorithm"});
  for (const AllReduceRow& row : ar.rows) {
    std::string algorithm = row.algorithm.empty() ? "n/a" : row.algorithm;
    if (!row.protocol.empty()) algorithm += "/" + row.protocol;
    rows.add_row({doctor_detail::format_size(row.bytes),
                  fmt::format("{:.2f}", static_cast<double>(row.time_ns) / 1000),
                  fmt::format("{:.2f}", algbw_gbps(row.bytes, row.time_ns)),
                  fmt::format("{:.2f}", busbw_gbps(row.bytes, row.time_ns, ar.gpus)),
                  std::to_string(row.wrong), algorithm});
  }
  return rows.render();
}

// "Checks:", a line each, and the verdict.
std::string checks_and_verdict(const DoctorReport& report) {
  std::string out = "\nChecks:\n";
  std::size_t name_width = 0;
  for (const DoctorCheck& check : report.checks) name_width = std::max(name_width, check.name.size());
  std::vector<std::string> failed;
  for (const DoctorCheck& check : report.checks) {
    out += fmt::format("  {:<4}  {:<{}}  {}\n", status_word(check.status), check.name, name_width,
                       check.message);
    if (!check.advice.empty())
      out += fmt::format("        {:<{}}  what to do: {}\n", "", name_width, check.advice);
    if (check.status == CheckStatus::fail) failed.push_back(check.name);
  }
  out += "\n";
  if (failed.empty()) {
    out += "Verdict: healthy";
    bool warned = false;
    for (const DoctorCheck& check : report.checks) warned = warned || check.status == CheckStatus::warn;
    out += warned ? ", with warnings above.\n" : ".\n";
  } else {
    out +=
        fmt::format("Verdict: {} failed ({}); exit 1.\n", plural(failed.size(), "check"), join(failed, ", "));
  }
  return out;
}

}  // namespace doctor_detail

std::string format_doctor_text(const DoctorFacts& facts, const DoctorReport& report) {
  const Inventory& inv = facts.inventory;
  std::string out =
      fmt::format("flowrun doctor: {}, {}", facts.hostname,
                  inv.gpus.empty() ? std::string("no GPUs")
                                   : fmt::format("{} ({})", plural(inv.gpus.size(), "GPU"), inv.summary()));
  if (!facts.gpu_support) out += "; built without GPU support";
  out += "\n";

  if (!inv.gpus.empty()) {
    out += "\n";
    TextTable rows("  ");
    rows.add_row({"index", "name", "memory", "uuid", "pci bus id", "arch", "pcie", "nvlinks"});
    for (const Gpu& gpu : inv.gpus) {
      const GpuDetails& d = gpu.details;
      std::string pcie = "?";
      if (d.pcie_gen_max > 0 && d.pcie_width > 0) {
        pcie = fmt::format("Gen{} x{}", d.pcie_gen_max, d.pcie_width);
        if (d.pcie_width_max > d.pcie_width) pcie += fmt::format(" of x{}", d.pcie_width_max);
      }
      std::string nvlinks = std::to_string(d.nvlinks);
      if (d.nvswitch_links > 0) nvlinks += " to NVSwitch";
      rows.add_row({std::to_string(gpu.index), gpu.name, format_bytes(gpu.memory_bytes), gpu.uuid,
                    gpu.pci_bus_id, d.compute_capability.empty() ? "?" : d.compute_capability, pcie,
                    nvlinks});
    }
    out += rows.render();
  }

  if (inv.gpus.size() >= 2 && inv.links.size() == inv.gpus.size()) {
    out += "\nTopology (as nvidia-smi topo -m shows it):\n";
    TextTable rows("  ");
    std::vector<std::string> heading{""};
    for (const Gpu& gpu : inv.gpus) heading.push_back("GPU" + std::to_string(gpu.index));
    rows.add_row(std::move(heading));
    for (std::size_t i = 0; i < inv.gpus.size(); ++i) {
      std::vector<std::string> row{"GPU" + std::to_string(inv.gpus[i].index)};
      for (std::size_t j = 0; j < inv.gpus.size(); ++j) row.push_back(gpu_link_name(inv.links[i][j]));
      rows.add_row(std::move(row));
    }
    out += rows.render();
    out += "  NV#: # NVLinks" + std::string(inv.nvswitch ? " (through NVSwitch)" : "") +
           ", PIX: one PCIe switch, PXB: several PCIe switches, PHB: a PCIe host bridge,\n"
           "  NODE: host bridges of one CPU socket, SYS: across CPU sockets\n";
  }

  const AllReduceFacts& ar = facts.allreduce;
  if (!ar.rows.empty()) {
    out +=
        fmt::format("\nNCCL all-reduce: {}, float sum, out of place, {} warmup + {} timed iterations each\n",
                    plural(ar.gpus, "GPU"), ar.warmup, ar.iters);
    out += allreduce_table(ar);
  }
  for (const auto& warning : ar.warnings) out += "NCCL: " + warning + "\n";
  out += checks_and_verdict(report);
  return out;
}

std::string preflight_summary(const DoctorReport& report) {
  std::string summary;
  for (const DoctorCheck& check : report.checks) {
    if (check.name == "all-reduce" && check.status == CheckStatus::skip) return check.message;
    if (check.name == "all-reduce" || check.name == "bandwidth")
      summary += (summary.empty() ? "passed: " : "; ") + check.message;
  }
  return summary;
}

}  // namespace flowrun
