# The libraries flowrun builds against. CLI11, Boost (Asio) and nlohmann-json are header-only;
# fmt and yaml-cpp are linked, shared unless FLOWRUN_STATIC_DEPS or FLOWRUN_STATIC_CXX; OpenSSL's
# libcrypto is loaded at its first use (lib/protocol/openssl_api.cpp), or linked in with
# FLOWRUN_STATIC_DEPS.
#
# With FLOWRUN_STATIC_DEPS=ON (the wheel, pyproject.toml) the binary needs
# only glibc and libstdc++ at run time, so that it runs on nodes that have none
# of the -dev packages, or other versions of the libraries:
#   * fmt: Debian ships no libfmt.a, so fmt::fmt is a static library of one
#     source, cmake/fmt.cpp, which compiles fmt's implementation (format-inl.h)
#     once; the sources that use fmt see only its declarations, as with libfmt.so;
#   * yaml-cpp: libyaml-cpp.a (libyaml-cpp-dev ships it);
#   * OpenSSL: libcrypto.a (libssl-dev ships it; FindOpenSSL's static mode).
# libstdc++ and libgcc_s stay shared. Built with Debian 12's GCC 12 the binary
# then needs glibc 2.34 and GLIBCXX_3.4.30 (the libstdc++ of GCC 12 or later,
# which Ubuntu 22.04 has too). Linked statically, GCC 12's libstdc++ and
# unwinder would call arc4random and _dl_find_object and so need glibc 2.36:
# a newer floor, not a lower one.
#
# With FLOWRUN_STATIC_CXX=ON (cmake/Layout.cmake: an optimized build for this
# system, the .deb's) fmt and yaml-cpp are linked in the same way, and so are
# libstdc++ and libgcc (-static-libstdc++ -static-libgcc), while libcrypto is
# still loaded at its first use: the binary needs glibc alone, nothing looks up
# a thousand libstdc++ symbols at start-up, and the C++ code a run executes is
# ordered with flowrun's own (cmake/startup.order).
# The names the modules link (fmt::fmt, yaml-cpp, OpenSSL::Crypto) are the
# same either way. NVML, CUDA and NCCL are never linked: lib/gpu and
# lib/doctor dlopen them at run time.
find_package(CLI11 CONFIG REQUIRED)
find_package(Boost REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)

if(NOT FLOWRUN_STATIC_DEPS AND NOT FLOWRUN_STATIC_CXX)
  find_package(fmt REQUIRED)
  find_package(yaml-cpp REQUIRED)
else()
  find_path(FLOWRUN_FMT_INCLUDE_DIR fmt/format-inl.h REQUIRED)
  add_library(fmt_compiled STATIC ${CMAKE_CURRENT_LIST_DIR}/fmt.cpp)
  target_include_directories(fmt_compiled SYSTEM PUBLIC "${FLOWRUN_FMT_INCLUDE_DIR}")
  add_library(fmt::fmt ALIAS fmt_compiled)

  find_path(FLOWRUN_YAML_CPP_INCLUDE_DIR yaml-cpp/yaml.h REQUIRED)
  find_library(FLOWRUN_YAML_CPP_ARCHIVE NAMES libyaml-cpp.a REQUIRED)
  add_library(yaml-cpp STATIC IMPORTED)
  set_target_properties(yaml-cpp PROPERTIES IMPORTED_LOCATION "${FLOWRUN_YAML_CPP_ARCHIVE}"
                                            INTERFACE_INCLUDE_DIRECTORIES "${FLOWRUN_YAML_CPP_INCLUDE_DIR}")
endif()

if(FLOWRUN_STATIC_DEPS)
  set(OPENSSL_USE_STATIC_LIBS TRUE)
endif()
find_package(OpenSSL REQUIRED)
