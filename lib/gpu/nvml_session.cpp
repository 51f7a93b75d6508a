#include "nvml_session.h"

namespace flowrun::nvml {

Session::Session(const char* library) {
  library_ = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) {
    const char* error = dlerror();
    const std::string detail = error != nullptr ? error : "";
    if (detail.find("No such file") != std::string::npos || detail.empty())
      why_ = std::string(library) + " not found: no NVIDIA driver on this host";
    else
      why_ = "cannot load " + std::string(library) + ": " + detail;
    return;
  }
  Return (*init)() = nullptr;
  std::string missing;
  resolve(library_, "nvmlInit_v2", init, &missing);
  resolve(library_, "nvmlShutdown", shutdown_, &missing);
  resolve(library_, "nvmlDeviceGetCount_v2", count_, &missing);
  resolve(library_, "nvmlDeviceGetHandleByIndex_v2", handle_, &missing);
  resolve(library_, "nvmlErrorString", error_string_);  // without it, errors go by number
  if (!missing.empty()) {
    why_ = std::string(library) + " has no " + missing + " (NVIDIA driver too old?)";
    return;
  }
  if (const Return rc = init(); rc != kSuccess) {
    why_ = "nvmlInit failed: " + error_text(rc);
    return;
  }
  initialised_ = true;
}

Session::~Session() {
  if (initialised_) shutdown_();
  if (library_ != nullptr) dlclose(library_);
}

std::string Session::error_text(Return rc) const {
  const char* text = error_string_ != nullptr ? error_string_(rc) : nullptr;
  return text != nullptr ? std::string(text) : "NVML error " + std::to_string(rc);
}

}  // namespace flowrun::nvml
