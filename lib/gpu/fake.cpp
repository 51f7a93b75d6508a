// The fake probe: simulated H200s whose every field is a pure function of the
// index, so tests and dry runs print the same text on every host.
#include <cstdio>
#include <memory>
#include <string>

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
  return system;
}

std::unique_ptr<GpuProbe> make_fake_probe(int count) { return std::make_unique<FakeProbe>(count); }

}  // namespace flowrun
