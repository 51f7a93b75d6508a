// Finding the CUDA runtime and NCCL for the check child (cuda_nccl.cpp):
// each candidate dlopen'ed in turn and the path it loaded told to the parent,
// and NCCL's unique id as hex, as it travels to the other nodes' children.
// Without the CUDA headers at build time this file is empty.

#include "cuda_nccl_libs.h"

#include <dlfcn.h>
#include <link.h>

#include "flowrun/doctor.h"
#include "flowrun/text.h"

#ifdef FLOWRUN_HAVE_CUDA_HEADERS

namespace flowrun::doctor_detail {

std::string id_to_hex(const ncclUniqueId& id) { return hex({id.internal, sizeof id.internal}); }

bool id_from_hex(const std::string& hex, ncclUniqueId& id) {
  static_assert(sizeof id.internal * 2 == kNcclIdHexChars);
  if (hex.size() != kNcclIdHexChars) return false;
  auto digit = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  for (std::size_t i = 0; i < sizeof id.internal; ++i) {
    const int high = digit(hex[2 * i]), low = digit(hex[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    id.internal[i] = static_cast<char>(high << 4 | low);
  }
  return true;
}

namespace {

// The path dlopen actually loaded.
std::string loaded_path(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      map->l_name[0] != '\0')
    return map->l_name;
  return fallback;
}

}  // namespace

// The first candidate dlopen can load; each one tried is reported.
void* load_first(const std::vector<std::string>& candidates, const std::string& kind, Out& out) {
  std::string first_error;
  for (const std::string& candidate : candidates) {
    out.line({kind + "_tried", candidate});
    dlerror();
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      out.line({kind, loaded_path(handle, candidate)});
      return handle;
    }
    const char* error = dlerror();
    if (first_error.empty()) first_error = error != nullptr ? error : candidate + ": cannot be loaded";
  }
  out.line({kind + "_missing", first_error});
  return nullptr;
}

}  // namespace flowrun::doctor_detail

#endif  // FLOWRUN_HAVE_CUDA_HEADERS
