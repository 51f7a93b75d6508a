# FLOWRUN_ORDER_FUNCTIONS: the functions a run on one node executes (cmake/startup.order, written by
# scripts/order-functions) placed next to each other in the binary, by lld's --symbol-ordering-file
# over -ffunction-sections. The kernel maps code 64 KiB at a time around each page first touched and
# counts it all as the process's memory: left where the compiler put them, the functions a run of 8
# workers executes are spread over some 45 such windows of the 4.7 MB text (about 3 MB mapped).
# On by default in optimized builds without sanitizers; needs ld.lld (Debian's lld). Only where the
# functions lie changes: a function missing from the list links where it would have.
include(CheckLinkerFlag)

set(FLOWRUN_ORDER_FILE ${PROJECT_SOURCE_DIR}/cmake/startup.order)
set(flowrun_order_default OFF)
if(NOT FLOWRUN_SANITIZE AND NOT FLOWRUN_FUZZ AND CMAKE_BUILD_TYPE MATCHES "^(Release|RelWithDebInfo|MinSizeRel)$")
  set(flowrun_order_default ON)
endif()
option(FLOWRUN_ORDER_FUNCTIONS "Place the functions a run executes together (cmake/startup.order; needs lld)"
       ${flowrun_order_default})

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

# Links `target` (an executable) with the order, when FLOWRUN_ORDER_FUNCTIONS is on and lld is there.
function(flowrun_order_functions target)
  if(FLOWRUN_ORDER_FUNCTIONS AND FLOWRUN_HAVE_LLD)
    target_link_options(${target} PRIVATE -fuse-ld=lld -Wl,--symbol-ordering-file=${FLOWRUN_ORDER_FILE}
                        -Wl,--no-warn-symbol-ordering)
    set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${FLOWRUN_ORDER_FILE})
  endif()
endfunction()
