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
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flowrun/util.h"

namespace flowrun {

// What NVML says about a GPU beyond its identity, asked only by the topology
// probe (`flowrun doctor`); zero or empty when not asked or not reported.
struct GpuDetails {
  std::string compute_capability;  // "9.0"
  int pcie_gen_max = 0;            // the PCIe generation the GPU and its slot support
  int pcie_width_max = 0;          // lanes the GPU supports (16)
  int pcie_width = 0;              // lanes in use now: fewer than the maximum is a degraded link
  int nvlinks = 0;                 // active NVLinks
  int nvswitch_links = 0;          // of which end at an NVSwitch
};

// One physical GPU as the system reports it.
struct GpuDevice {
  int nvml_index = 0;  // NVML's index (PCI bus order)
  std::string uuid;    // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::string name;    // "NVIDIA H200"
  std::uint64_t memory_bytes = 0;
  std::string pci_bus_id;  // "00000000:19:00.0"
  GpuDetails details;
};

// How data moves between two GPUs, in the words of `nvidia-smi topo -m`:
// through NVLink, or over PCIe through at most one switch (PIX), several
// switches (PXB), a host bridge (PHB), host bridges of one CPU socket (NODE),
// or across CPU sockets (SYS).
enum class GpuPath { self, nvlink, pix, pxb, phb, node, sys, unknown };

struct GpuLink {
  GpuPath path = GpuPath::unknown;
  // Active NVLinks joining the two: direct links, or through NVSwitch the
  // smaller of the two GPUs' switch links (as nvidia-smi counts them).
  int nvlinks = 0;
  bool operator==(const GpuLink&) const = default;
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
  // links[i][j] between devices i and j (NVML order); empty unless the probe
  // was asked for the topology.
  std::vector<std::vector<GpuLink>> links;
  bool nvswitch = false;  // some GPU's NVLinks end at an NVSwitch
};

// Asks the system what GPUs it has. An interface so tests can script one.
class GpuProbe {
 public:
  virtual ~GpuProbe() = default;
  virtual SystemGpus probe() = 0;
};

// NVML through dlopen("libnvidia-ml.so.1"). Never fails: a missing library or
// driver is reported in SystemGpus::unavailable_reason. With `topology`, it
// also asks every GPU's details and how each pair is linked (NVLink state,
// PCIe common ancestor): a few hundred NVML calls on an 8-GPU node, which
// only `flowrun doctor` needs.
std::unique_ptr<GpuProbe> make_nvml_probe(bool topology = false);

// `count` identical simulated GPUs (NVIDIA H200, 141 GiB), with stable UUIDs
// and PCI ids, for tests and dry runs (FLOWRUN_FAKE_GPUS, --fake-gpus). Their
// topology is an HGX board's: PCIe Gen5 x16, 18 NVLinks each to NVSwitches,
// so every pair is NV18.
std::unique_ptr<GpuProbe> make_fake_probe(int count);

// The fake probe's devices, for tests that compare against them.
SystemGpus fake_system_gpus(int count);

// One GPU's health as NVML reports it, for a node's check before a step's
// ranks start (docs/reliability.md). Unknown values stay -1: a GPU without
// ECC, or a driver without the call, is not a fault.
struct GpuHealth {
  int index = 0;                     // NVML's index
  std::string uuid;                  // empty when it did not open
  std::string open_error;            // nvmlDeviceGetHandleByIndex failed: why; empty: it opened
  long long ecc_uncorrectable = -1;  // uncorrectable ECC errors since the driver loaded (volatile)
  int retired_pages_pending = -1;    // 1: pages wait to be retired at the GPU's next reset
  int processes = -1;                // compute processes running on it (someone else's job)
};

// The node's GPUs as a node check sees them: how many NVML counts, and each
// one's health. `source` is "nvml", "fake" (all healthy) or "none" (no
// driver: `unavailable_reason` says why).
struct NodeGpuHealth {
  std::string source;
  std::string unavailable_reason;
  int count = 0;
  std::vector<GpuHealth> gpus;
};

// The health of every GPU on this host: NVML through dlopen (`library`,
// libnvidia-ml.so.1 by default), or `fake_count` >= 0 healthy GPUs (the
// fake probe's, --fake-gpus or FLOWRUN_FAKE_GPUS). Never throws: a missing
// driver is NodeGpuHealth::unavailable_reason. Thread-safe (NVML is).
NodeGpuHealth probe_gpu_health(int fake_count, const char* library = "libnvidia-ml.so.1");

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
  GpuDetails details;
};

// Inventory::source of a run whose steps all run on CPUs: its GPUs were not
// looked for (lib/cli's plan_spec), so none is known, not none found.
inline constexpr const char* kGpusNotProbed = "not_probed";

// The GPUs this process may use, and how that was decided.
struct Inventory {
  std::string source;            // "nvml", "fake", "none", or kGpusNotProbed
  std::vector<Gpu> gpus;         // CUDA order, as this process sees them
  std::size_t system_count = 0;  // GPUs on the system before selection
  std::string driver_version;
  std::string cuda_driver_version;
  std::string unavailable_reason;         // when the probe found none: why
  std::string selected_by;                // "" (all), "CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", ...
  bool cuda_visible_devices_set = false;  // CUDA_VISIBLE_DEVICES was set for us
  std::vector<std::string> notes;         // what the selection did, in words (shown by plan/gpus)
  // links[i][j] between gpus[i] and gpus[j]; empty when the probe did not ask.
  std::vector<std::vector<GpuLink>> links;
  bool nvswitch = false;

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
// `fake_gpus` >= 0, from --fake-gpus) says so, NVML otherwise (with the
// topology when `topology`). Throws flowrun::Error for a malformed
// FLOWRUN_FAKE_GPUS.
std::unique_ptr<GpuProbe> make_probe(const EnvMap& env, int fake_gpus, bool topology = false);

// "X", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS" as nvidia-smi prints them; "?" unknown.
std::string gpu_link_name(const GpuLink& link);

// The fields that name a GPU, in every JSON flowrun prints about one
// (`flowrun gpus --json`, the doctor's facts): index, name, uuid,
// memory_bytes, pci_bus_id. An object the caller adds its own to.
nlohmann::ordered_json gpu_identity(const Gpu& gpu);

// The inverse of gpu_link_name(); nullopt for anything else.
std::optional<GpuLink> parse_gpu_link(std::string_view name);

// The NVLink generation of a GPU architecture ("9.0" -> 4: Pascal 1, Volta
// and Turing 2, Ampere 3, Hopper 4, Blackwell 5); 0 when unknown or none.
int nvlink_generation(const std::string& compute_capability);

// --- NUMA (torchrun's --numa-binding) ---------------------------------------

// The NUMA node a GPU is attached to and that node's CPUs, from sysfs as
// torchrun reads them: <sysfs>/bus/pci/devices/<PCI id>/numa_node (-1, which
// a host of one node reports, counts as node 0), then
// <sysfs>/devices/system/node/node<N>/cpulist. Throws Error naming the file
// that could not be read or parsed.
struct NumaNode {
  int node = 0;
  std::vector<int> cpus;  // ascending
};
NumaNode gpu_numa_node(const std::string& pci_bus_id, const std::string& sysfs);

// torchrun's --numa-binding policies that flowrun implements (its
// core-complex, which reads the CPUs' cache topology, it does not).
enum class NumaPolicy {
  node,       // the CPUs of the GPU's NUMA node
  socket,     // the CPUs of every NUMA node on that node's socket
  exclusive,  // the node's physical cores split among the GPUs on the node, the lowest GPUs one more
};

// The CPUs that `policy` gives the worker of GPU `gpu` among `gpus` (every GPU
// this process sees, by PCI bus id, in CUDA's order), within `allowed` (this
// process's CPUs), as torch/numa/binding.py computes them; `node` (when
// given) gets the GPU's NUMA node. Throws Error naming what it could not read.
std::vector<int> numa_binding_cpus(NumaPolicy policy, const std::vector<std::string>& gpus, std::size_t gpu,
                                   const std::vector<int>& allowed, const std::string& sysfs,
                                   int* node = nullptr);

// sysfs's root: FLOWRUN_FAKE_SYSFS when set (a directory laid out like /sys,
// giving simulated GPUs their NUMA nodes in tests), else "/sys".
std::string sysfs_root(const EnvMap& env);

// NVML's PCI bus id as sysfs names the device: "00000000:18:00.0" -> "0000:18:00.0".
std::string sysfs_pci_address(std::string_view bus_id);

// A kernel CPU list ("0-3,8,10-11\n") as ascending CPUs; nullopt when malformed.
std::optional<std::vector<int>> parse_cpu_list(std::string_view text);

// Ascending CPUs as a kernel CPU list: {0,1,2,3,8} -> "0-3,8".
std::string cpu_list_text(const std::vector<int>& cpus);

// The CPUs this process may run on (sched_getaffinity), ascending.
std::vector<int> allowed_cpus();

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
SystemGpus probe_nvml_library(const char* library, bool topology = false);

// NVML's nvmlGpuTopologyLevel_t as a path: 10 PIX, 20 PXB, 30 PHB, 40 NODE,
// 50 SYS, 0 the same board (PIX); anything else unknown.
GpuPath path_from_nvml_level(int level);

// One NVLink of a GPU as NVML reports it.
struct NvLinkEnd {
  int remote_type = 0xff;     // nvmlIntNvLinkDeviceType_t: 0 GPU, 2 NVSwitch, 0xff unknown
  std::string remote_bus_id;  // the other end's PCI bus id
};

// The link matrix from what NVML said: `levels[i][j]` the PCIe common
// ancestor level (-1 when NVML would not say), `active[i]` GPU i's active
// NVLinks. A link whose far end is another GPU's bus id joins those two; links
// to NVSwitches join every pair of switch-connected GPUs with the smaller of
// their counts, like nvidia-smi and PyTorch's NVLink detection.
std::vector<std::vector<GpuLink>> build_links(const std::vector<GpuDevice>& devices,
                                              const std::vector<std::vector<int>>& levels,
                                              const std::vector<std::vector<NvLinkEnd>>& active);

// PCI bus ids compared by value: "0000:19:00.0" and "00000000:19:00.0" are the same device.
bool same_pci_device(std::string_view a, std::string_view b);

}  // namespace gpu_detail

}  // namespace flowrun
