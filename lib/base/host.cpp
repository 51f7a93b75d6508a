#include "flowrun/host.h"

#include <climits>
#include <unistd.h>

namespace flowrun {

std::string kernel_host_name() {
  // gethostname may leave a name cut at the buffer's size unterminated: the
  // buffer's last byte stays NUL.
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

std::string host_name(const EnvMap& env) {
  if (auto name = env_get(env, "FLOWRUN_HOSTNAME"); name && !name->empty()) return *name;
  return kernel_host_name();
}

}  // namespace flowrun
