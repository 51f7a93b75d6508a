# One folder of lib/ is one static library and one layer (docs/ARCHITECTURE.md):
#
#   flowrun_module(NAME SOURCES a.cpp ... [PUBLIC dep ...] [PRIVATE dep ...])
#
# makes flowrun_NAME from the folder's sources. Its public headers are the
# folder's include/flowrun/*.h, and only targets that link it see them, so a
# module that includes a header of one it does not link fails to compile.
# Link PUBLIC only what a type in the module's own headers needs; everything
# else is PRIVATE. tests/layers checks the resulting graph against the map.
function(flowrun_module name)
  cmake_parse_arguments(M "" "" "SOURCES;PUBLIC;PRIVATE" ${ARGN})
  if(M_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "flowrun_module(${name}): unexpected arguments ${M_UNPARSED_ARGUMENTS}")
  endif()
  add_library(flowrun_${name} STATIC ${M_SOURCES})
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/include)
    target_include_directories(flowrun_${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include)
  endif()
  target_link_libraries(flowrun_${name} PUBLIC ${M_PUBLIC} PRIVATE ${M_PRIVATE})
  flowrun_target_settings(flowrun_${name})
  if(FLOWRUN_UNITY)
    set_target_properties(flowrun_${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${FLOWRUN_UNITY_BATCH_SIZE})
  endif()
endfunction()
