// A node check's look at its GPUs through NVML: the count, and for each one
// whether it opens, its uncorrectable ECC errors, retired pages pending and
// the compute processes already on it. Declared here as in nvml.cpp: nothing
// links against the driver.
#include <cstring>
#include <dlfcn.h>
#include <string>

#include "flowrun/gpu.h"

namespace flowrun {

namespace {

using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlInsufficientSize = 7;  // NVML_ERROR_INSUFFICIENT_SIZE
constexpr int kMemoryErrorUncorrected = 1;         // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kVolatileEcc = 0;                    // NVML_VOLATILE_ECC
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;

struct HealthApi {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*get_count)(unsigned*) = nullptr;
  nvmlReturn_t (*get_handle)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*get_uuid)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*ecc)(nvmlDevice_t, int, int, unsigned long long*) = nullptr;
  nvmlReturn_t (*pending)(nvmlDevice_t, int*) = nullptr;  // nvmlEnableState_t*
  // Asked with a count of 0 and no buffer: NVML answers how many there are.
  nvmlReturn_t (*processes)(nvmlDevice_t, unsigned*, void*) = nullptr;
};

template <typename F>
void resolve(void* library, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(library, name));
}

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
  void* lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return none(std::string(library) + " not found: no NVIDIA driver on this host");
  struct Close {
    void* lib;
    ~Close() { dlclose(lib); }
  } close{lib};
  HealthApi api;
  resolve(lib, "nvmlInit_v2", api.init);
  resolve(lib, "nvmlShutdown", api.shutdown);
  resolve(lib, "nvmlErrorString", api.error_string);
  resolve(lib, "nvmlDeviceGetCount_v2", api.get_count);
  resolve(lib, "nvmlDeviceGetHandleByIndex_v2", api.get_handle);
  resolve(lib, "nvmlDeviceGetUUID", api.get_uuid);
  resolve(lib, "nvmlDeviceGetTotalEccErrors", api.ecc);
  resolve(lib, "nvmlDeviceGetRetiredPagesPendingStatus", api.pending);
  resolve(lib, "nvmlDeviceGetComputeRunningProcesses_v3", api.processes);
  if (api.processes == nullptr) resolve(lib, "nvmlDeviceGetComputeRunningProcesses_v2", api.processes);
  if (api.processes == nullptr) resolve(lib, "nvmlDeviceGetComputeRunningProcesses", api.processes);
  if (api.init == nullptr || api.shutdown == nullptr || api.get_count == nullptr || api.get_handle == nullptr)
    return none(std::string(library) + " lacks nvmlInit_v2 or the device calls (NVIDIA driver too old?)");
  auto error_text = [&](nvmlReturn_t rc) {
    const char* text = api.error_string != nullptr ? api.error_string(rc) : nullptr;
    return text != nullptr ? std::string(text) : "NVML error " + std::to_string(rc);
  };
  if (nvmlReturn_t rc = api.init(); rc != kNvmlSuccess) return none("nvmlInit failed: " + error_text(rc));
  NodeGpuHealth health;
  health.source = "nvml";
  unsigned count = 0;
  if (nvmlReturn_t rc = api.get_count(&count); rc != kNvmlSuccess) {
    api.shutdown();
    return none("nvmlDeviceGetCount failed: " + error_text(rc));
  }
  health.count = static_cast<int>(count);
  for (unsigned i = 0; i < count; ++i) {
    GpuHealth gpu;
    gpu.index = static_cast<int>(i);
    nvmlDevice_t handle = nullptr;
    if (nvmlReturn_t rc = api.get_handle(i, &handle); rc != kNvmlSuccess) {
      gpu.open_error = error_text(rc);
      health.gpus.push_back(std::move(gpu));
      continue;
    }
    char uuid[96] = {};  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
    if (api.get_uuid != nullptr && api.get_uuid(handle, uuid, sizeof uuid) == kNvmlSuccess)
      gpu.uuid = std::string(uuid, strnlen(uuid, sizeof uuid));
    unsigned long long errors = 0;
    if (api.ecc != nullptr && api.ecc(handle, kMemoryErrorUncorrected, kVolatileEcc, &errors) == kNvmlSuccess)
      gpu.ecc_uncorrectable = static_cast<long long>(errors);
    int pending = 0;
    if (api.pending != nullptr && api.pending(handle, &pending) == kNvmlSuccess)
      gpu.retired_pages_pending = pending != 0 ? 1 : 0;
    unsigned processes = 0;
    if (api.processes != nullptr) {
      const nvmlReturn_t rc = api.processes(handle, &processes, nullptr);
      if (rc == kNvmlSuccess || rc == kNvmlInsufficientSize) gpu.processes = static_cast<int>(processes);
    }
    health.gpus.push_back(std::move(gpu));
  }
  api.shutdown();
  return health;
}

}  // namespace flowrun
