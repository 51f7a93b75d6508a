// flowrun resume RUN: re-runs a failed flow from its failed step.
#include <iostream>

#include "flowrun/error.h"

#include "commands.h"

namespace flowrun {

int cmd_resume(int, char**) {
  std::cerr << "flowrun: error: 'flowrun resume' is not in this build yet\n";
  return kExitUsage;
}

}  // namespace flowrun
