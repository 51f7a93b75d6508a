// A node check's look at its GPUs through NVML: the count, and for each one
// whether it opens, its uncorrectable ECC errors, retired pages pending and
// the compute processes already on it, through the NVML session the
// inventory opens too (nvml_session.h).
#include <cstring>
#include <string>

#include "flowrun/gpu.h"

#include "nvml_session.h"

namespace flowrun {

namespace {

constexpr nvml::Return kNvmlInsufficientSize = 7;  // NVML_ERROR_INSUFFICIENT_SIZE
constexpr int kMemoryErrorUncorrected = 1;         // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kVolatileEcc = 0;                    // NVML_VOLATILE_ECC

// The calls beyond the session's; each may be absent from an old driver, and
// then what it tells stays unknown.
struct HealthApi {
  nvml::Return (*get_uuid)(nvml::Device, char*, unsigned) = nullptr;
  nvml::Return (*ecc)(nvml::Device, int, int, unsigned long long*) = nullptr;
  nvml::Return (*pending)(nvml::Device, int*) = nullptr;  // nvmlEnableState_t*
  // Asked with a count of 0 and no buffer: NVML answers how many there are.
  nvml::Return (*processes)(nvml::Device, unsigned*, void*) = nullptr;
};

NodeGpuHealth none(std::string why) {
  NodeGpuHealth health;
  health.source = "none";
  health.unavailable_reason = std::move(why);
  return health;
}

}  // namespace

NodeGpuHealth probe_gpu_health(int fake_count, const char* library) {
  if (fake_count >= 0) {
    NodeGpuHealth health;
    health.source = "fake";
    health.count = fake_count;
    const SystemGpus system = fake_system_gpus(fake_count);
    for (const GpuDevice& d : system.devices) health.gpus.push_back({d.nvml_index, d.uuid, {}, 0, 0, 0});
    return health;
  }
  const nvml::Session session(library);
  if (!session.ok()) return none(session.why());
  void* lib = session.library();
  HealthApi api;
  nvml::resolve(lib, "nvmlDeviceGetUUID", api.get_uuid);
  nvml::resolve(lib, "nvmlDeviceGetTotalEccErrors", api.ecc);
  nvml::resolve(lib, "nvmlDeviceGetRetiredPagesPendingStatus", api.pending);
  if (!nvml::resolve(lib, "nvmlDeviceGetComputeRunningProcesses_v3", api.processes) &&
      !nvml::resolve(lib, "nvmlDeviceGetComputeRunningProcesses_v2", api.processes))
    nvml::resolve(lib, "nvmlDeviceGetComputeRunningProcesses", api.processes);
  NodeGpuHealth health;
  health.source = "nvml";
  unsigned count = 0;
  if (const nvml::Return rc = session.count(&count); rc != nvml::kSuccess)
    return none("nvmlDeviceGetCount failed: " + session.error_text(rc));
  health.count = static_cast<int>(count);
  for (unsigned i = 0; i < count; ++i) {
    GpuHealth gpu;
    gpu.index = static_cast<int>(i);
    nvml::Device handle = nullptr;
    if (const nvml::Return rc = session.handle(i, &handle); rc != nvml::kSuccess) {
      gpu.open_error = session.error_text(rc);
      health.gpus.push_back(std::move(gpu));
      continue;
    }
    char uuid[96] = {};  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
    if (api.get_uuid != nullptr && api.get_uuid(handle, uuid, sizeof uuid) == nvml::kSuccess)
      gpu.uuid = std::string(uuid, strnlen(uuid, sizeof uuid));
    unsigned long long errors = 0;
    if (api.ecc != nullptr &&
        api.ecc(handle, kMemoryErrorUncorrected, kVolatileEcc, &errors) == nvml::kSuccess)
      gpu.ecc_uncorrectable = static_cast<long long>(errors);
    int pending = 0;
    if (api.pending != nullptr && api.pending(handle, &pending) == nvml::kSuccess)
      gpu.retired_pages_pending = pending != 0 ? 1 : 0;
    unsigned processes = 0;
    if (api.processes != nullptr) {
      const nvml::Return rc = api.processes(handle, &processes, nullptr);
      if (rc == nvml::kSuccess || rc == kNvmlInsufficientSize) gpu.processes = static_cast<int>(processes);
    }
    health.gpus.push_back(std::move(gpu));
  }
  return health;
}

}  // namespace flowrun
