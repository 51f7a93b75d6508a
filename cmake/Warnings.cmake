# Warnings for every flowrun target; errors in developer builds.
function(flowrun_target_settings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Wold-style-cast -Wcast-align -Wunused -Woverloaded-virtual
                                           -Wimplicit-fallthrough)
  if(FLOWRUN_DEVELOPER)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
