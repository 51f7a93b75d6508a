// The real probe: NVML through dlopen, plus CUDA's own numbering on nodes
// where it can differ from NVML's.
//
// Nothing here links against the driver: one flowrun binary must run (and
// plan, and report "no GPUs") on hosts without one. NVML's C ABI is stable, so
// the few types and functions used are declared below and in nvml_session.h
// (which opens and initialises it) instead of including nvml.h, which many
// CUDA installs lack.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "flowrun/child.h"
#include "flowrun/gpu.h"
#include "flowrun/text.h"

#include "nvml_session.h"

namespace flowrun {

namespace {

// --- NVML's ABI (nvml.h), the parts this file uses --------------------------

using nvmlReturn_t = nvml::Return;
constexpr nvmlReturn_t kNvmlSuccess = nvml::kSuccess;
using nvmlDevice_t = nvml::Device;

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlPciInfo_t as nvmlDeviceGetPciInfo_v3 fills it.
struct nvmlPciInfo_t {
  char busIdLegacy[16];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE: "00000000:19:00.0"
};

constexpr unsigned kNameSize = 96;           // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kUuidSize = 96;           // NVML_DEVICE_UUID_V2_BUFFER_SIZE
constexpr unsigned kDriverVersionSize = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

// The topology calls; absent from old drivers, and then the topology is unknown.
struct NvmlTopologyApi {
  nvmlReturn_t (*common_ancestor)(nvmlDevice_t, nvmlDevice_t, int*) = nullptr;  // nvmlGpuTopologyLevel_t*
  nvmlReturn_t (*nvlink_state)(nvmlDevice_t, unsigned, int*) = nullptr;         // nvmlEnableState_t*
  nvmlReturn_t (*nvlink_remote_pci)(nvmlDevice_t, unsigned, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*nvlink_remote_type)(nvmlDevice_t, unsigned, int*) = nullptr;  // nvmlIntNvLinkDeviceType_t*
  nvmlReturn_t (*compute_capability)(nvmlDevice_t, int*, int*) = nullptr;
  nvmlReturn_t (*pcie_gen_max)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*pcie_width_max)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*pcie_width)(nvmlDevice_t, unsigned*) = nullptr;
};

constexpr unsigned kNvLinkMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS (Hopper and Blackwell have 18)
constexpr int kNvmlFeatureEnabled = 1;    // NVML_FEATURE_ENABLED

// The calls beyond the session's (nvml_session.h).
struct NvmlApi {
  nvmlReturn_t (*get_name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*get_uuid)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*get_memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*get_pci)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*driver_version)(char*, unsigned) = nullptr;
  nvmlReturn_t (*cuda_driver_version)(int*) = nullptr;
};

// --- CUDA driver API (cuda.h), for the child that asks CUDA's order ----------

using CUresult = int;  // CUDA_SUCCESS is 0
using CUdevice = int;
struct CUuuid {
  char bytes[16];
};

template <typename F>
bool resolve(void* library, const char* name, F& fn, std::string& missing) {
  return nvml::resolve(library, name, fn, &missing);
}

std::string c_string(const char* buffer, std::size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

SystemGpus unavailable(std::string reason) {
  SystemGpus system;
  system.source = "none";
  system.unavailable_reason = std::move(reason);
  return system;
}

// Details and links of every device; whatever NVML will not tell stays
// unknown (zero, or GpuPath::unknown), never an error.
void probe_topology(void* library, const std::vector<nvmlDevice_t>& handles, SystemGpus& system) {
  NvmlTopologyApi api;
  std::string missing;
  resolve(library, "nvmlDeviceGetCudaComputeCapability", api.compute_capability, missing);
  resolve(library, "nvmlDeviceGetMaxPcieLinkGeneration", api.pcie_gen_max, missing);
  resolve(library, "nvmlDeviceGetMaxPcieLinkWidth", api.pcie_width_max, missing);
  resolve(library, "nvmlDeviceGetCurrPcieLinkWidth", api.pcie_width, missing);
  resolve(library, "nvmlDeviceGetTopologyCommonAncestor", api.common_ancestor, missing);
  resolve(library, "nvmlDeviceGetNvLinkState", api.nvlink_state, missing);
  resolve(library, "nvmlDeviceGetNvLinkRemotePciInfo_v2", api.nvlink_remote_pci, missing);
  resolve(library, "nvmlDeviceGetNvLinkRemoteDeviceType", api.nvlink_remote_type, missing);

  const std::size_t n = handles.size();
  std::vector<std::vector<gpu_detail::NvLinkEnd>> active(n);
  for (std::size_t i = 0; i < n; ++i) {
    GpuDetails& details = system.devices[i].details;
    int major = 0, minor = 0;
    if (api.compute_capability != nullptr &&
        api.compute_capability(handles[i], &major, &minor) == kNvmlSuccess)
      details.compute_capability = std::to_string(major) + "." + std::to_string(minor);
    unsigned value = 0;
    if (api.pcie_gen_max != nullptr && api.pcie_gen_max(handles[i], &value) == kNvmlSuccess)
      details.pcie_gen_max = static_cast<int>(value);
    if (api.pcie_width_max != nullptr && api.pcie_width_max(handles[i], &value) == kNvmlSuccess)
      details.pcie_width_max = static_cast<int>(value);
    if (api.pcie_width != nullptr && api.pcie_width(handles[i], &value) == kNvmlSuccess)
      details.pcie_width = static_cast<int>(value);
    if (api.nvlink_state == nullptr || api.nvlink_remote_pci == nullptr) continue;
    // A GPU without NVLink, or a link index it does not have, answers an
    // error; a link that is down answers NVML_FEATURE_DISABLED. Neither counts.
    for (unsigned link = 0; link < kNvLinkMaxLinks; ++link) {
      int state = 0;
      if (api.nvlink_state(handles[i], link, &state) != kNvmlSuccess || state != kNvmlFeatureEnabled)
        continue;
      gpu_detail::NvLinkEnd end;
      nvmlPciInfo_t remote{};
      if (api.nvlink_remote_pci(handles[i], link, &remote) == kNvmlSuccess)
        end.remote_bus_id = c_string(remote.busId, sizeof remote.busId);
      int type = 0xff;
      if (api.nvlink_remote_type != nullptr &&
          api.nvlink_remote_type(handles[i], link, &type) == kNvmlSuccess)
        end.remote_type = type;
      active[i].push_back(std::move(end));
    }
  }
  std::vector<std::vector<int>> levels(n, std::vector<int>(n, -1));
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n && api.common_ancestor != nullptr; ++j) {
      int level = -1;
      if (api.common_ancestor(handles[i], handles[j], &level) != kNvmlSuccess) level = -1;
      levels[i][j] = levels[j][i] = level;
    }
  }
  system.links = gpu_detail::build_links(system.devices, levels, active);
  for (std::size_t i = 0; i < n; ++i) {
    system.devices[i].details.nvlinks = static_cast<int>(active[i].size());
    for (const auto& end : active[i]) {
      bool to_gpu = false;
      for (const GpuDevice& other : system.devices)
        to_gpu = to_gpu || gpu_detail::same_pci_device(end.remote_bus_id, other.pci_bus_id);
      if (!to_gpu && end.remote_type == 2) ++system.devices[i].details.nvswitch_links;
    }
    system.nvswitch = system.nvswitch || system.devices[i].details.nvswitch_links > 0;
  }
}

// Everything NVML reports, in NVML's order. Any failure that leaves the device
// list in doubt reports no GPUs and says why; memory and PCI id are details
// and stay empty when a device will not tell them.
SystemGpus probe_nvml_devices(const char* library, bool topology) {
  const nvml::Session session(library);
  if (!session.ok()) return unavailable(session.why());
  void* lib = session.library();
  NvmlApi api;
  std::string missing;
  resolve(lib, "nvmlDeviceGetName", api.get_name, missing);
  resolve(lib, "nvmlDeviceGetUUID", api.get_uuid, missing);
  resolve(lib, "nvmlDeviceGetMemoryInfo", api.get_memory, missing);
  resolve(lib, "nvmlDeviceGetPciInfo_v3", api.get_pci, missing);
  resolve(lib, "nvmlSystemGetDriverVersion", api.driver_version, missing);
  resolve(lib, "nvmlSystemGetCudaDriverVersion_v2", api.cuda_driver_version, missing);
  if (!missing.empty())
    return unavailable(std::string(library) + " has no " + missing + " (NVIDIA driver too old?)");
  auto error_text = [&](nvmlReturn_t rc) { return session.error_text(rc); };
  nvmlReturn_t rc = kNvmlSuccess;

  SystemGpus system;
  system.source = "nvml";
  char driver[kDriverVersionSize] = {};
  if (api.driver_version(driver, kDriverVersionSize) == kNvmlSuccess)
    system.driver_version = c_string(driver, kDriverVersionSize);
  int cuda_version = 0;
  if (api.cuda_driver_version(&cuda_version) == kNvmlSuccess)
    system.cuda_driver_version = gpu_detail::format_cuda_version(cuda_version);

  unsigned count = 0;
  rc = session.count(&count);
  if (rc != kNvmlSuccess) return unavailable("nvmlDeviceGetCount failed: " + error_text(rc));
  std::vector<nvmlDevice_t> handles;
  for (unsigned i = 0; i < count; ++i) {
    auto failed = [&](const char* call) {
      return unavailable(std::string(call) + " failed for GPU " + std::to_string(i) + ": " + error_text(rc));
    };
    nvmlDevice_t handle = nullptr;
    if ((rc = session.handle(i, &handle)) != kNvmlSuccess) return failed("nvmlDeviceGetHandleByIndex");
    GpuDevice device;
    device.nvml_index = static_cast<int>(i);
    char name[kNameSize] = {};
    if ((rc = api.get_name(handle, name, kNameSize)) != kNvmlSuccess) return failed("nvmlDeviceGetName");
    device.name = c_string(name, kNameSize);
    char uuid[kUuidSize] = {};
    if ((rc = api.get_uuid(handle, uuid, kUuidSize)) != kNvmlSuccess) return failed("nvmlDeviceGetUUID");
    device.uuid = c_string(uuid, kUuidSize);
    nvmlMemory_t memory{};
    if (api.get_memory(handle, &memory) == kNvmlSuccess) device.memory_bytes = memory.total;
    nvmlPciInfo_t pci{};
    if (api.get_pci(handle, &pci) == kNvmlSuccess) device.pci_bus_id = c_string(pci.busId, sizeof pci.busId);
    system.devices.push_back(std::move(device));
    handles.push_back(handle);
  }
  if (system.devices.empty()) system.unavailable_reason = "NVML reports no GPUs on this host";
  if (topology && !system.devices.empty()) probe_topology(lib, handles, system);
  return system;
}

// In the helper child: CUDA's UUIDs in CUDA's order, one a line, to `fd`.
// Returns the child's exit status.
int write_cuda_uuids(int fd) {
  // cuInit numbers only the GPUs CUDA_VISIBLE_DEVICES names; we need them all.
  unsetenv("CUDA_VISIBLE_DEVICES");
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) return 1;
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*get_count)(int*) = nullptr;
  CUresult (*get_device)(CUdevice*, int) = nullptr;
  CUresult (*get_uuid)(CUuuid*, CUdevice) = nullptr;
  std::string missing, missing_v2;
  resolve(cuda, "cuInit", init, missing);
  resolve(cuda, "cuDeviceGetCount", get_count, missing);
  resolve(cuda, "cuDeviceGet", get_device, missing);
  // cuda.h maps cuDeviceGetUuid to _v2 since CUDA 11.4; older drivers have only the plain one.
  if (!resolve(cuda, "cuDeviceGetUuid_v2", get_uuid, missing_v2))
    resolve(cuda, "cuDeviceGetUuid", get_uuid, missing);
  int count = 0;
  if (!missing.empty() || init(0) != 0 || get_count(&count) != 0) return 1;
  std::string out;
  for (int i = 0; i < count; ++i) {
    CUdevice device = 0;
    CUuuid uuid{};
    if (get_device(&device, i) != 0 || get_uuid(&uuid, device) != 0) return 1;
    unsigned char bytes[16];
    std::memcpy(bytes, uuid.bytes, sizeof bytes);
    out += gpu_detail::format_gpu_uuid(bytes) + "\n";
  }
  for (std::size_t done = 0; done < out.size();) {
    ssize_t n = write(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 1;
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

class NvmlProbe : public GpuProbe {
 public:
  explicit NvmlProbe(bool topology) : topology_(topology) {}
  SystemGpus probe() override { return gpu_detail::probe_nvml_library("libnvidia-ml.so.1", topology_); }

 private:
  bool topology_;
};

}  // namespace

namespace gpu_detail {

// A child because cuInit would give the launcher itself a CUDA context (memory
// on every GPU, and state its workers' fork would inherit), and because it
// must run with CUDA_VISIBLE_DEVICES unset. A forked child without exec
// (run_helper's child_main) is safe here because the probe runs before
// flowrun starts any thread. The child gets 30 s: cuInit on
// a large node without persistence mode takes seconds, never minutes.
std::string cuda_uuids_from_child() {
  HelperRequest request;
  request.child_main = [] { return write_cuda_uuids(STDOUT_FILENO); };
  request.deadline = std::chrono::seconds(30);
  const HelperOutcome child = run_helper(request);
  if (!child.ok() || child.output_cut) return {};
  return child.output;
}

std::string format_cuda_version(int version) {
  if (version <= 0) return {};
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string format_gpu_uuid(const unsigned char (&bytes)[16]) {
  // 8-4-4-4-12 digits, as nvidia-smi shows it.
  return "GPU-" + hex(bytes, 4) + "-" + hex(bytes + 4, 2) + "-" + hex(bytes + 6, 2) + "-" +
         hex(bytes + 8, 2) + "-" + hex(bytes + 10, 6);
}

bool cuda_order_may_differ(const std::vector<GpuDevice>& devices, const char* cuda_device_order) {
  if (cuda_device_order != nullptr && std::strcmp(cuda_device_order, "PCI_BUS_ID") == 0) return false;
  for (const GpuDevice& device : devices) {
    if (device.name != devices.front().name) return true;
  }
  return false;  // one model: FASTEST_FIRST breaks every tie by PCI bus id, which is NVML's order
}

std::vector<std::string> parse_cuda_order(const std::string& child_output,
                                          const std::vector<GpuDevice>& devices) {
  std::vector<std::string> order;
  std::size_t start = 0;
  while (start < child_output.size()) {
    std::size_t end = child_output.find('\n', start);
    if (end == std::string::npos) return {};  // cut short
    order.push_back(child_output.substr(start, end - start));
    start = end + 1;
  }
  if (order.size() != devices.size()) return {};
  bool differs = false;
  for (std::size_t i = 0; i < order.size(); ++i) {
    bool known = false;
    for (const GpuDevice& device : devices) known = known || device.uuid == order[i];
    for (std::size_t j = 0; j < i; ++j) {
      if (order[j] == order[i]) return {};
    }
    if (!known) return {};
    differs = differs || order[i] != devices[i].uuid;
  }
  if (!differs) return {};
  return order;
}

SystemGpus probe_nvml_library(const char* library, bool topology) {
  SystemGpus system = probe_nvml_devices(library, topology);  // NVML shut down and unloaded before any fork
  if (cuda_order_may_differ(system.devices, std::getenv("CUDA_DEVICE_ORDER")))
    system.cuda_order = parse_cuda_order(cuda_uuids_from_child(), system.devices);
  return system;
}

}  // namespace gpu_detail

std::unique_ptr<GpuProbe> make_nvml_probe(bool topology) { return std::make_unique<NvmlProbe>(topology); }

}  // namespace flowrun
