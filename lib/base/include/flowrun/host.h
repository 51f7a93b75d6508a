// The name of the host flowrun runs on.
#pragma once

#include <string>

#include "flowrun/util.h"

namespace flowrun {

// The kernel's name for this host (gethostname(2)); "localhost" when it
// has none. For what must be resolved to this host's own addresses.
std::string kernel_host_name();

// The name this host goes by: FLOWRUN_HOSTNAME in `env` when it is set and
// not empty (a stable name for scripts and tests, or the one other hosts
// know it by), else kernel_host_name().
std::string host_name(const EnvMap& env);

}  // namespace flowrun
