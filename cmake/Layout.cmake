# What the flowrun binary maps at start-up, in an optimized build for this system (the .deb's, the
# bench's); both on by default in optimized builds without sanitizers.
#
# FLOWRUN_ORDER_FUNCTIONS: the functions a run on one node executes (cmake/startup.order, written by
# scripts/order-functions) placed next to each other in the binary, by lld's --symbol-ordering-file
# over -ffunction-sections. The kernel maps code 64 KiB at a time around each page first touched and
# counts it all as the process's memory: left where the compiler put them, the functions a run of 8
# workers executes are spread over some 48 such windows of the 4.7 MB text (about 3 MB mapped). Needs
# ld.lld (Debian's lld). Only where the functions lie changes: a function missing from the list links
# where it would have.
#
# FLOWRUN_STATIC_CXX: libstdc++, libgcc, yaml-cpp and fmt linked into the binary
# (cmake/Dependencies.cmake says how; libcrypto is still loaded at its first use). The binary then
# needs glibc alone; the dynamic loader no longer looks up a thousand libstdc++ symbols at each
# start, and the C++ code a run executes is ordered with flowrun's own instead of being spread over
# the 2 MB of libstdc++.so. The wheel turns it off (pyproject.toml): a static libstdc++ of GCC 12
# needs glibc 2.36, a newer floor than the wheel's.
include(CheckLinkerFlag)

set(FLOWRUN_ORDER_FILE ${PROJECT_SOURCE_DIR}/cmake/startup.order)
set(flowrun_layout_default OFF)
if(NOT FLOWRUN_SANITIZE AND NOT FLOWRUN_FUZZ AND CMAKE_BUILD_TYPE MATCHES "^(Release|RelWithDebInfo|MinSizeRel)$")
  set(flowrun_layout_default ON)
endif()
option(FLOWRUN_ORDER_FUNCTIONS "Place the functions a run executes together (cmake/startup.order; needs lld)"
       ${flowrun_layout_default})
option(FLOWRUN_STATIC_CXX "Link libstdc++, yaml-cpp and fmt into the binary" ${flowrun_layout_default})

if(FLOWRUN_ORDER_FUNCTIONS)
  check_linker_flag(CXX "-fuse-ld=lld" FLOWRUN_HAVE_LLD)
  if(FLOWRUN_HAVE_LLD)
    add_compile_options(-ffunction-sections)
    message(STATUS "flowrun: functions ordered by cmake/startup.order (lld)")
  else()
    message(STATUS "flowrun: no ld.lld (apt-get install lld): functions not ordered, the binary maps more "
                   "of its code at start-up; -DFLOWRUN_ORDER_FUNCTIONS=OFF silences this")
  endif()
endif()

# Links the executable `target` as the options above say.
function(flowrun_binary_layout target)
  if(FLOWRUN_ORDER_FUNCTIONS AND FLOWRUN_HAVE_LLD)
    target_link_options(${target} PRIVATE -fuse-ld=lld -Wl,--symbol-ordering-file=${FLOWRUN_ORDER_FILE}
                        -Wl,--no-warn-symbol-ordering)
    set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${FLOWRUN_ORDER_FILE})
  endif()
  if(FLOWRUN_STATIC_CXX)
    target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc)
  endif()
endfunction()
