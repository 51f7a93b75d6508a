// flowrun --version's line, the one file that includes commit.h (which
// changes with every commit: nothing else recompiles).
#include "flowrun/version.h"

#include "flowrun/protocol.h"

#include "commands.h"
#include "commit.h"

namespace flowrun {

std::string version_line() {
  return std::string("flowrun ") + FLOWRUN_VERSION + " (commit " + FLOWRUN_COMMIT + ", protocol " +
         std::to_string(kProtocolVersion) + ")";
}

}  // namespace flowrun
