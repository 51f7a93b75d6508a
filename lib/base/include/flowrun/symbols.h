// A function of a library loaded with dlopen, bound to a typed pointer: lib/doctor's CUDA and NCCL,
// lib/protocol's libcrypto.
#pragma once

#include <dlfcn.h>
#include <string>

namespace flowrun {

// dlsym(library, name) into `fn`; false when it is absent, and `name` is added to `missing`
// ("a, b": every absent name, for one message).
template <typename F>
bool bind_symbol(void* library, const char* name, F& fn, std::string& missing) {
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) {
    if (!missing.empty()) missing += ", ";
    missing += name;
    return false;
  }
  fn = reinterpret_cast<F>(symbol);
  return true;
}

}  // namespace flowrun
