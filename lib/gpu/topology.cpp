// How GPUs are linked, in nvidia-smi's words, from what NVML reports. Pure,
// so the rules are unit-tested without a driver.
#include <algorithm>
#include <charconv>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flowrun/gpu.h"

namespace flowrun {

namespace {

// "00000000:19:00.0" -> {domain, bus, device}; nullopt when malformed.
struct PciAddress {
  unsigned long domain = 0, bus = 0, device = 0;
};

std::optional<PciAddress> parse_pci(std::string_view text) {
  auto hex = [](std::string_view part, unsigned long& out) {
    if (part.empty()) return false;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), out, 16);
    return ec == std::errc() && end == part.data() + part.size();
  };
  const std::size_t colon1 = text.find(':');
  const std::size_t colon2 = text.find(':', colon1 == std::string_view::npos ? colon1 : colon1 + 1);
  const std::size_t dot = text.rfind('.');
  if (colon1 == std::string_view::npos || colon2 == std::string_view::npos || dot == std::string_view::npos ||
      dot < colon2)
    return std::nullopt;
  PciAddress address;
  if (!hex(text.substr(0, colon1), address.domain) ||
      !hex(text.substr(colon1 + 1, colon2 - colon1 - 1), address.bus) ||
      !hex(text.substr(colon2 + 1, dot - colon2 - 1), address.device))
    return std::nullopt;
  return address;
}

}  // namespace

std::string gpu_link_name(const GpuLink& link) {
  switch (link.path) {
    case GpuPath::self: return "X";
    case GpuPath::nvlink: return "NV" + std::to_string(link.nvlinks);
    case GpuPath::pix: return "PIX";
    case GpuPath::pxb: return "PXB";
    case GpuPath::phb: return "PHB";
    case GpuPath::node: return "NODE";
    case GpuPath::sys: return "SYS";
    case GpuPath::unknown: break;
  }
  return "?";
}

std::optional<GpuLink> parse_gpu_link(std::string_view name) {
  static constexpr std::pair<std::string_view, GpuPath> kNames[] = {
      {"X", GpuPath::self},    {"PIX", GpuPath::pix}, {"PXB", GpuPath::pxb},  {"PHB", GpuPath::phb},
      {"NODE", GpuPath::node}, {"SYS", GpuPath::sys}, {"?", GpuPath::unknown}};
  for (const auto& [text, path] : kNames) {
    if (name == text) return GpuLink{path, 0};
  }
  if (name.starts_with("NV") && name.size() > 2 && name.size() <= 4) {
    int count = 0;
    auto [end, ec] = std::from_chars(name.data() + 2, name.data() + name.size(), count);
    if (ec == std::errc() && end == name.data() + name.size() && count > 0)
      return GpuLink{GpuPath::nvlink, count};
  }
  return std::nullopt;
}

int nvlink_generation(const std::string& compute_capability) {
  int major = 0;
  auto [end, ec] = std::from_chars(compute_capability.data(),
                                   compute_capability.data() + compute_capability.size(), major);
  if (ec != std::errc() || end == compute_capability.data()) return 0;
  switch (major) {
    case 6: return 1;   // Pascal (P100)
    case 7: return 2;   // Volta, Turing
    case 8: return 3;   // Ampere (A100, A40, RTX 3090)
    case 9: return 4;   // Hopper (H100, H200)
    case 10: return 5;  // Blackwell (B200, GB200, B300)
    default: return 0;
  }
}

namespace gpu_detail {

bool same_pci_device(std::string_view a, std::string_view b) {
  auto pa = parse_pci(a), pb = parse_pci(b);
  return pa && pb && pa->domain == pb->domain && pa->bus == pb->bus && pa->device == pb->device;
}

GpuPath path_from_nvml_level(int level) {
  switch (level) {
    case 0:   // NVML_TOPOLOGY_INTERNAL: two GPUs on one board, which nvidia-smi shows as PIX
    case 10:  // NVML_TOPOLOGY_SINGLE
      return GpuPath::pix;
    case 20: return GpuPath::pxb;   // NVML_TOPOLOGY_MULTIPLE
    case 30: return GpuPath::phb;   // NVML_TOPOLOGY_HOSTBRIDGE
    case 40: return GpuPath::node;  // NVML_TOPOLOGY_NODE
    case 50: return GpuPath::sys;   // NVML_TOPOLOGY_SYSTEM
    default: return GpuPath::unknown;
  }
}

std::vector<std::vector<GpuLink>> build_links(const std::vector<GpuDevice>& devices,
                                              const std::vector<std::vector<int>>& levels,
                                              const std::vector<std::vector<NvLinkEnd>>& active) {
  const std::size_t n = devices.size();
  std::vector<std::vector<int>> direct(n, std::vector<int>(n, 0));
  std::vector<int> to_switch(n, 0);
  for (std::size_t i = 0; i < n && i < active.size(); ++i) {
    for (const NvLinkEnd& end : active[i]) {
      bool found = false;
      for (std::size_t j = 0; j < n; ++j) {
        if (j != i && same_pci_device(end.remote_bus_id, devices[j].pci_bus_id)) {
          ++direct[i][j];
          found = true;
          break;
        }
      }
      if (!found && end.remote_type == 2) ++to_switch[i];  // NVML_NVLINK_DEVICE_TYPE_SWITCH
    }
  }
  std::vector<std::vector<GpuLink>> links(n, std::vector<GpuLink>(n));
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      GpuLink& link = links[i][j];
      if (i == j) {
        link.path = GpuPath::self;
        continue;
      }
      // Each end counts the links it sees; they agree unless NVML is odd, and
      // then the smaller count is the one both can use.
      int nvlinks = std::min(direct[i][j], direct[j][i]) + std::min(to_switch[i], to_switch[j]);
      if (nvlinks > 0) {
        link = {GpuPath::nvlink, nvlinks};
      } else {
        const int level = i < levels.size() && j < levels[i].size() ? levels[i][j] : -1;
        link.path = path_from_nvml_level(level);
      }
    }
  }
  return links;
}

}  // namespace gpu_detail

}  // namespace flowrun
