# FLOWRUN_SANITIZE=address,undefined or thread: applies to every target, tests included.
if(FLOWRUN_SANITIZE)
  add_compile_options(-fsanitize=${FLOWRUN_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${FLOWRUN_SANITIZE})
endif()
