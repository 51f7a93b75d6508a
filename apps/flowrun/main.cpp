#include <cerrno>
#include <cstring>
#include <unistd.h>

#include "flowrun/cli.h"
#include "flowrun/process.h"

int main(int argc, char** argv) {
  // Before anything opens a file: fds 0-2 closed by whoever started flowrun
  // would be taken by run.lock or a guardian's pipe.
  if (!flowrun::sanitize_standard_fds()) {
    const char* why = std::strerror(errno);
    [[maybe_unused]] ssize_t n = write(STDERR_FILENO, "flowrun: error: cannot open /dev/null: ", 39);
    n = write(STDERR_FILENO, why, std::strlen(why));
    n = write(STDERR_FILENO, "\n", 1);
    return 1;
  }
  return flowrun::run_cli(argc, argv);
}
