// What the check child's two files share: its line to the parent, and the
// CUDA runtime and NCCL bound through dlopen (cuda_nccl_libs.cpp finds and
// loads them; cuda_nccl.cpp runs the check with them). No other module sees it.
#pragma once

#include <cerrno>
#include <dlfcn.h>
#include <initializer_list>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

#include "flowrun/symbols.h"

#ifdef FLOWRUN_HAVE_CUDA_HEADERS
#undef CUDA_API_PER_THREAD_DEFAULT_STREAM
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace flowrun::doctor_detail {

// Findings to the parent, a line each; the watchdog thread writes too.
class Out {
 public:
  explicit Out(int fd) : fd_(fd) {}
  void line(std::initializer_list<std::string> fields) {
    std::string text;
    for (const std::string& f : fields) {
      if (!text.empty()) text += '\t';
      for (char c : f) text += (c == '\t' || c == '\n' || c == '\r') ? ' ' : c;
    }
    text += '\n';
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::size_t done = 0; done < text.size();) {
      const ssize_t n = write(fd_, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // the parent is gone; nothing left to tell
      done += static_cast<std::size_t>(n);
    }
  }

 private:
  int fd_;
  std::mutex mutex_;
};

#ifdef FLOWRUN_HAVE_CUDA_HEADERS

// NCCL's unique id as kNcclIdHexChars lowercase hex digits, and back (false
// for text that is not one).
std::string id_to_hex(const ncclUniqueId& id);
bool id_from_hex(const std::string& hex, ncclUniqueId& id);

// The first candidate dlopen can load (null when none can); each one tried,
// the one loaded and the first error are told to the parent.
void* load_first(const std::vector<std::string>& candidates, const std::string& kind, Out& out);

struct Cudart {
  decltype(&::cudaGetDeviceCount) get_device_count = nullptr;
  decltype(&::cudaGetErrorName) error_name = nullptr;
  decltype(&::cudaGetErrorString) error_string = nullptr;
  decltype(&::cudaRuntimeGetVersion) runtime_version = nullptr;
  decltype(&::cudaDriverGetVersion) driver_version = nullptr;
  decltype(&::cudaSetDevice) set_device = nullptr;
  decltype(&::cudaMemGetInfo) mem_get_info = nullptr;
  cudaError_t (*malloc)(void**, std::size_t) = nullptr;  // cudaMalloc (C++ adds a template overload)
  decltype(&::cudaFree) free = nullptr;
  decltype(&::cudaMemset) memset = nullptr;
  decltype(&::cudaMemcpy) memcpy = nullptr;
  decltype(&::cudaMemcpyAsync) memcpy_async = nullptr;
  decltype(&::cudaStreamCreateWithFlags) stream_create = nullptr;
  decltype(&::cudaStreamDestroy) stream_destroy = nullptr;
  decltype(&::cudaStreamQuery) stream_query = nullptr;

  bool bind_all(void* lib, std::string& missing) {
    bind_symbol(lib, "cudaGetDeviceCount", get_device_count, missing);
    bind_symbol(lib, "cudaGetErrorName", error_name, missing);
    bind_symbol(lib, "cudaGetErrorString", error_string, missing);
    bind_symbol(lib, "cudaRuntimeGetVersion", runtime_version, missing);
    bind_symbol(lib, "cudaDriverGetVersion", driver_version, missing);
    bind_symbol(lib, "cudaSetDevice", set_device, missing);
    bind_symbol(lib, "cudaMemGetInfo", mem_get_info, missing);
    bind_symbol(lib, "cudaMalloc", malloc, missing);
    bind_symbol(lib, "cudaFree", free, missing);
    bind_symbol(lib, "cudaMemset", memset, missing);
    bind_symbol(lib, "cudaMemcpy", memcpy, missing);
    bind_symbol(lib, "cudaMemcpyAsync", memcpy_async, missing);
    bind_symbol(lib, "cudaStreamCreateWithFlags", stream_create, missing);
    bind_symbol(lib, "cudaStreamDestroy", stream_destroy, missing);
    bind_symbol(lib, "cudaStreamQuery", stream_query, missing);
    return missing.empty();
  }

  // "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version"
  std::string describe(cudaError_t error) const {
    const char* name = error_name(error);
    const char* text = error_string(error);
    return std::string(name != nullptr ? name : "cudaError " + std::to_string(static_cast<int>(error))) +
           ": " + (text != nullptr ? text : "");
  }
};

struct Nccl {
  decltype(&::ncclGetVersion) get_version = nullptr;
  decltype(&::ncclCommInitAll) init_all = nullptr;
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRank) init_rank = nullptr;
  decltype(&::ncclCommDestroy) destroy = nullptr;
  decltype(&::ncclCommAbort) abort = nullptr;
  decltype(&::ncclCommGetAsyncError) async_error = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclGroupStart) group_start = nullptr;
  decltype(&::ncclGroupEnd) group_end = nullptr;
  decltype(&::ncclGetLastError) last_error = nullptr;  // NCCL 2.13+; optional

  bool bind_all(void* lib, std::string& missing) {
    bind_symbol(lib, "ncclGetVersion", get_version, missing);
    bind_symbol(lib, "ncclCommInitAll", init_all, missing);
    bind_symbol(lib, "ncclGetUniqueId", get_unique_id, missing);
    bind_symbol(lib, "ncclCommInitRank", init_rank, missing);
    bind_symbol(lib, "ncclCommDestroy", destroy, missing);
    bind_symbol(lib, "ncclCommAbort", abort, missing);
    bind_symbol(lib, "ncclCommGetAsyncError", async_error, missing);
    bind_symbol(lib, "ncclGetErrorString", error_string, missing);
    bind_symbol(lib, "ncclAllReduce", all_reduce, missing);
    bind_symbol(lib, "ncclGroupStart", group_start, missing);
    bind_symbol(lib, "ncclGroupEnd", group_end, missing);
    const bool all = missing.empty();
    std::string optional;
    bind_symbol(lib, "ncclGetLastError", last_error, optional);
    return all;
  }

  std::string describe(ncclResult_t result, ncclComm_t comm = nullptr) const {
    const char* text = error_string(result);
    std::string out = text != nullptr ? text : "NCCL error " + std::to_string(static_cast<int>(result));
    const char* last = last_error != nullptr ? last_error(comm) : nullptr;
    if (last != nullptr && last[0] != '\0') out += std::string(" (") + last + ")";
    return out;
  }
};

#endif  // FLOWRUN_HAVE_CUDA_HEADERS

}  // namespace flowrun::doctor_detail
