// The GPU inventory: which GPUs this process may use, in the order CUDA will
// number them.
//
// Finding GPUs has two halves. A GpuProbe asks the system (NVML, loaded with
// dlopen so one binary runs on hosts with and without a driver) or a fake for
// every GPU it has. select_gpus() then applies what the environment says this
// process may use: CUDA_VISIBLE_DEVICES (indices or UUIDs), or inside a Slurm
// allocation SLURM_STEP_GPUS / SLURM_JOB_GPUS / SLURM_GPUS_ON_NODE. The second
// half is pure, so every rule is unit-tested with a fake probe.
//
// Only this module touches NVML.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flowrun/util.h"

namespace flowrun {

// One physical GPU as the system reports it.
struct GpuDevice {
  int nvml_index = 0;  // NVML's index (PCI bus order)
  std::string uuid;    // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::string name;    // "NVIDIA H200"
  std::uint64_t memory_bytes = 0;
  std::string pci_bus_id;  // "00000000:19:00.0"
};

// Everything a probe found on the system.
struct SystemGpus {
  std::string source;              // "nvml", "fake", or "none"
  std::vector<GpuDevice> devices;  // NVML order
  // UUIDs in CUDA's enumeration order when it differs from NVML's (CUDA's
  // default FASTEST_FIRST order on a node with mixed GPUs); empty = NVML order.
  std::vector<std::string> cuda_order;
  std::string driver_version;       // "560.35.03"; empty if unknown
  std::string cuda_driver_version;  // "12.6"; empty if unknown
  std::string unavailable_reason;   // why there are no GPUs, in words
};

// Asks the system what GPUs it has. An interface so tests can script one.
class GpuProbe {
 public:
  virtual ~GpuProbe() = default;
  virtual SystemGpus probe() = 0;
};

// NVML through dlopen("libnvidia-ml.so.1"). Never fails: a missing library or
// driver is reported in SystemGpus::unavailable_reason.
std::unique_ptr<GpuProbe> make_nvml_probe();

// `count` identical simulated GPUs (NVIDIA H200, 141 GiB), with stable UUIDs
// and PCI ids, for tests and dry runs (FLOWRUN_FAKE_GPUS, --fake-gpus).
std::unique_ptr<GpuProbe> make_fake_probe(int count);

// The fake probe's devices, for tests that compare against them.
SystemGpus fake_system_gpus(int count);

// A GPU this process may use.
struct Gpu {
  int index = 0;  // CUDA ordinal as this process sees it (cuda:index)
  std::string uuid;
  std::string name;
  std::uint64_t memory_bytes = 0;
  std::string pci_bus_id;
  // What names this GPU in a child's CUDA_VISIBLE_DEVICES: the entry of our
  // own CUDA_VISIBLE_DEVICES it came from, or its system ordinal when that
  // variable is unset.
  std::string select_token;
};

// The GPUs this process may use, and how that was decided.
struct Inventory {
  std::string source;            // "nvml", "fake", or "none"
  std::vector<Gpu> gpus;         // CUDA order, as this process sees them
  std::size_t system_count = 0;  // GPUs on the system before selection
  std::string driver_version;
  std::string cuda_driver_version;
  std::string unavailable_reason;         // when the probe found none: why
  std::string selected_by;                // "" (all), "CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", ...
  bool cuda_visible_devices_set = false;  // CUDA_VISIBLE_DEVICES was set for us
  std::vector<std::string> notes;         // what the selection did, in words (shown by plan/gpus)

  // "NVIDIA H200 x8" (or "NVIDIA H200 x4, NVIDIA A100 x2"); "no GPUs" when empty.
  std::string summary() const;
};

// Applies the environment's selection to what the probe found. Pure.
//
// Rules (CUDA's own, see docs/plan.md): CUDA_VISIBLE_DEVICES, when set, wins;
// it holds ordinals or UUIDs (a unique prefix such as "GPU-8f3a" suffices);
// CUDA stops at the first entry that names no GPU, and so does this function,
// recording a note. An empty value or "-1" hides every GPU. Without it, inside
// Slurm, SLURM_STEP_GPUS (or SLURM_JOB_GPUS) lists system ordinals, and
// SLURM_GPUS_ON_NODE alone limits the count.
Inventory select_gpus(const SystemGpus& system, const EnvMap& env);

// The probe the environment asks for: fake when FLOWRUN_FAKE_GPUS (or
// `fake_gpus` >= 0, from --fake-gpus) says so, NVML otherwise. Throws
// flowrun::Error for a malformed FLOWRUN_FAKE_GPUS.
std::unique_ptr<GpuProbe> make_probe(const EnvMap& env, int fake_gpus);

// The pure parts of the NVML probe, exposed for unit tests (the probe itself
// needs a driver, which test hosts rarely have).
namespace gpu_detail {

// NVML's CUDA driver version as "major.minor": 12060 -> "12.6"; "" when <= 0.
std::string format_cuda_version(int version);

// CUDA's 16-byte CUuuid as NVML spells it:
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", lowercase hex.
std::string format_gpu_uuid(const unsigned char (&bytes)[16]);

// Whether CUDA may number `devices` differently from NVML: only when they are
// not all the same model and CUDA_DEVICE_ORDER (nullptr = unset) is not
// PCI_BUS_ID. Otherwise CUDA's order is NVML's PCI bus order.
bool cuda_order_may_differ(const std::vector<GpuDevice>& devices, const char* cuda_device_order);

// CUDA's UUIDs in CUDA's order, one a line, asked of a short-lived child
// process (with CUDA_VISIBLE_DEVICES unset) so the launcher never creates a
// CUDA context; "" when libcuda.so.1 is missing or anything fails.
std::string cuda_uuids_from_child();

// SystemGpus::cuda_order from what the CUDA child wrote (one UUID a line):
// empty unless it is exactly a reordering of `devices`' UUIDs that differs
// from NVML's order.
std::vector<std::string> parse_cuda_order(const std::string& child_output,
                                          const std::vector<GpuDevice>& devices);

// The NVML probe with the library named `library` instead of
// "libnvidia-ml.so.1" (tests pass a library that is not NVML).
SystemGpus probe_nvml_library(const char* library);

}  // namespace gpu_detail

}  // namespace flowrun
