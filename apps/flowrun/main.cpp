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
  // SIGUSR1 and SIGUSR2 are for the workers: before any runs (a Slurm
  // --signal notice while flowrun reads its spec) they must not end flowrun.
  flowrun::hold_forward_signals();
  return flowrun::run_cli(argc, argv);
}
