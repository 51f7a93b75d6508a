#include "openssl_api.h"

#include <string>

#include "flowrun/error.h"
#include "flowrun/symbols.h"

#ifdef FLOWRUN_OPENSSL_DLOPEN
#include <dlfcn.h>
#include <openssl/opensslv.h>
#endif

namespace flowrun::openssl {

namespace {

#ifdef FLOWRUN_OPENSSL_DLOPEN

#define FLOWRUN_STRINGIFY_(x) #x
#define FLOWRUN_STRINGIFY(x) FLOWRUN_STRINGIFY_(x)
constexpr const char* kLibrary = "libcrypto.so." FLOWRUN_STRINGIFY(OPENSSL_SHLIB_VERSION);

Api load() {
  dlerror();
  void* library = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    throw Error(std::string("cannot load OpenSSL's ") + kLibrary +
                ", which the connections between nodes need: " + (why != nullptr ? why : "dlopen failed") +
                " (install it: libssl3 on Debian and Ubuntu, openssl-libs on Fedora and RHEL)");
  }
  Api api;
  std::string missing;
#define FLOWRUN_OPENSSL_FIND(name) bind_symbol(library, #name, api.name, missing);
  FLOWRUN_OPENSSL_FUNCTIONS(FLOWRUN_OPENSSL_FIND)
#undef FLOWRUN_OPENSSL_FIND
  if (!missing.empty()) {
    dlclose(library);
    throw Error(std::string(kLibrary) + " lacks " + missing +
                ": it is not the OpenSSL flowrun was built for");
  }
  return api;  // the library stays loaded for the process's life
}

#else

Api load() {
  Api api;
#define FLOWRUN_OPENSSL_LINKED(name) api.name = &::name;
  FLOWRUN_OPENSSL_FUNCTIONS(FLOWRUN_OPENSSL_LINKED)
#undef FLOWRUN_OPENSSL_LINKED
  return api;
}

#endif

}  // namespace

const Api& api() {
  static const Api loaded = load();
  return loaded;
}

}  // namespace flowrun::openssl
