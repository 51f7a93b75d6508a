# FLOWRUN_SANITIZE=address,undefined or thread: applies to every target, tests included.
if(FLOWRUN_SANITIZE)
  add_compile_options(-fsanitize=${FLOWRUN_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${FLOWRUN_SANITIZE})
endif()
# GCC 12's flow analysis reports false -Wmaybe-uninitialized warnings in
# <regex> (pulled in by Catch2) once sanitizers change inlining.
if(FLOWRUN_SANITIZE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options(-Wno-maybe-uninitialized)
endif()
