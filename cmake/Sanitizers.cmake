# FLOWRUN_SANITIZE: sanitizers for every target, tests included, as a comma
# list: address, undefined, thread. 'address,undefined' and 'thread' (or
# 'thread,undefined') are the usual builds; ThreadSanitizer cannot be combined
# with AddressSanitizer, so they need separate build trees.
if(FLOWRUN_SANITIZE)
  string(REPLACE "," ";" FLOWRUN_SANITIZERS "${FLOWRUN_SANITIZE}")
  foreach(sanitizer IN LISTS FLOWRUN_SANITIZERS)
    if(NOT sanitizer MATCHES "^(address|undefined|thread)$")
      message(FATAL_ERROR "FLOWRUN_SANITIZE: unknown sanitizer '${sanitizer}'; "
                          "expected a comma list of address, undefined and thread")
    endif()
  endforeach()
  if("thread" IN_LIST FLOWRUN_SANITIZERS AND "address" IN_LIST FLOWRUN_SANITIZERS)
    message(FATAL_ERROR "FLOWRUN_SANITIZE: thread and address cannot be combined; "
                        "build them in separate trees (e.g. build/asan and build/tsan)")
  endif()
  add_compile_options(-fsanitize=${FLOWRUN_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${FLOWRUN_SANITIZE})
endif()
# GCC 12's flow analysis reports false -Wmaybe-uninitialized warnings in
# <regex> (pulled in by Catch2) once sanitizers change inlining.
if(FLOWRUN_SANITIZE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options(-Wno-maybe-uninitialized)
endif()
