// The fake probe: simulated H200s whose every field is a pure function of the
// index, so tests and dry runs print the same text on every host.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "flowrun/gpu.h"

namespace flowrun {

namespace {

constexpr std::uint64_t kH200MemoryBytes = 143771ull * 1024 * 1024;  // what NVML reports for an H200

GpuDevice fake_device(int index) {
  GpuDevice device;
  device.nvml_index = index;
  device.name = "NVIDIA H200";
  device.memory_bytes = kH200MemoryBytes;
  char text[64];
  std::snprintf(text, sizeof text, "GPU-fa4e0000-0000-4000-8000-%012x", static_cast<unsigned>(index));
  device.uuid = text;
  // Eight GPUs a PCI domain, on buses 18, 28, ... 88 like an HGX board's;
  // further domains keep large fake hosts unique and well formed.
  std::snprintf(text, sizeof text, "%08X:%02X:00.0", static_cast<unsigned>(index / 8),
                static_cast<unsigned>(0x18 + 0x10 * (index % 8)));
  device.pci_bus_id = text;
  device.details.compute_capability = "9.0";
  device.details.pcie_gen_max = 5;
  device.details.pcie_width_max = 16;
  device.details.pcie_width = 16;
  device.details.nvlinks = 18;
  device.details.nvswitch_links = 18;
  return device;
}

class FakeProbe : public GpuProbe {
 public:
  explicit FakeProbe(int count) : count_(count) {}
  SystemGpus probe() override { return fake_system_gpus(count_); }

 private:
  int count_;
};

}  // namespace

SystemGpus fake_system_gpus(int count) {
  SystemGpus system;
  system.source = "fake";
  if (count <= 0) {
    // A GPU-less host has no driver either.
    system.unavailable_reason = "a simulated host without GPUs: --fake-gpus 0 or FLOWRUN_FAKE_GPUS=0";
    return system;
  }
  system.driver_version = "560.35.03";
  system.cuda_driver_version = "12.6";
  for (int i = 0; i < count; ++i) system.devices.push_back(fake_device(i));
  // An HGX board: every GPU's 18 NVLinks end at NVSwitches, so every pair is NV18.
  const auto n = static_cast<std::size_t>(count);
  system.links.assign(n, std::vector<GpuLink>(n, GpuLink{GpuPath::nvlink, 18}));
  for (std::size_t i = 0; i < n; ++i) system.links[i][i] = GpuLink{GpuPath::self, 0};
  system.nvswitch = true;
  return system;
}

std::unique_ptr<GpuProbe> make_fake_probe(int count) { return std::make_unique<FakeProbe>(count); }

}  // namespace flowrun
