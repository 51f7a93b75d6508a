// NVML opened through dlopen and initialised, as both of this module's
// probes use it: the inventory (nvml.cpp) and a node check's look at the
// GPUs' health (gpu_health.cpp). Nothing links against the driver: one
// flowrun binary must run on hosts without one. NVML's C ABI is stable, so
// the few types used are declared here instead of including nvml.h, which
// many CUDA installs lack. Internal to lib/gpu.
#pragma once

#include <dlfcn.h>
#include <string>

namespace flowrun::nvml {

using Return = int;  // nvmlReturn_t, an enum in nvml.h
inline constexpr Return kSuccess = 0;
struct nvmlDevice_st;
using Device = nvmlDevice_st*;

// dlsym into a typed function pointer; false (and `*missing` set to the first
// name absent) when it is not there.
template <typename F>
bool resolve(void* library, const char* name, F& fn, std::string* missing = nullptr) {
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) {
    if (missing != nullptr && missing->empty()) *missing = name;
    return false;
  }
  fn = reinterpret_cast<F>(symbol);
  return true;
}

class Session {
 public:
  // Opens `library` and calls nvmlInit_v2. When that fails, ok() is false and
  // why() says so as a probe reports it ("libnvidia-ml.so.1 not found: no
  // NVIDIA driver on this host", "... has no nvmlInit_v2 (NVIDIA driver too
  // old?)", "nvmlInit failed: ...").
  explicit Session(const char* library);
  ~Session();  // nvmlShutdown once initialised, then dlclose
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  // The library, for the calls a probe resolves itself (nullptr unless ok()).
  void* library() const { return ok() ? library_ : nullptr; }
  // NVML's text for `rc` ("Unknown Error"), or "NVML error N".
  std::string error_text(Return rc) const;

  // nvmlDeviceGetCount_v2 and nvmlDeviceGetHandleByIndex_v2 (only when ok()).
  Return count(unsigned* n) const { return count_(n); }
  Return handle(unsigned index, Device* device) const { return handle_(index, device); }

 private:
  void* library_ = nullptr;
  bool initialised_ = false;
  std::string why_;
  Return (*shutdown_)() = nullptr;
  const char* (*error_string_)(Return) = nullptr;
  Return (*count_)(unsigned*) = nullptr;
  Return (*handle_)(unsigned, Device*) = nullptr;
};

}  // namespace flowrun::nvml
