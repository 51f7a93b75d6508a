// The command line: `flowrun SPEC`, `flowrun validate|plan|gpus`. Errors from
// every module are caught here, once, and printed as "flowrun: error: ..."
// (or as FILE:LINE:COL diagnostics); the return value is the exit code
// (docs/cli.md).
#pragma once

namespace flowrun {

int run_cli(int argc, char** argv);

}  // namespace flowrun
