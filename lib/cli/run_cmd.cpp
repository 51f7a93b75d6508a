// flowrun run (torchrun's command line) and flowrun init.
#include <iostream>

#include "flowrun/error.h"

#include "commands.h"

namespace flowrun {

int cmd_torchrun(int, char**) {
  std::cerr << "flowrun: error: 'flowrun run' is not in this build yet\n";
  return kExitUsage;
}

int cmd_init(int, char**) {
  std::cerr << "flowrun: error: 'flowrun init' is not in this build yet\n";
  return kExitUsage;
}

}  // namespace flowrun
