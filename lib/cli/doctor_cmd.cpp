// flowrun doctor: checks the GPUs, driver, CUDA and NCCL.
#include <iostream>

#include "flowrun/error.h"

#include "commands.h"

namespace flowrun {

int cmd_doctor(int, char**) {
  std::cerr << "flowrun: error: 'flowrun doctor' is not in this build yet\n";
  return kExitUsage;
}

}  // namespace flowrun
