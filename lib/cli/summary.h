// The machine-readable end of a run, for CI: `--json` (the summary on
// stdout, every console line on stderr) and `--summary-json FILE` on
// `flowrun SPEC`, `flowrun run` and `flowrun resume`; and `flowrun validate
// --json`. The summary is read back from what the run wrote (run.json, each
// step's results.json), so it says nothing those files do not; docs/cli.md
// ("For CI") documents it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flowrun/error.h"

namespace flowrun {

// The format of the summary and of validate's findings.
inline constexpr const char* kSummaryFormat = "flowrun.summary/1";
inline constexpr const char* kValidateFormat = "flowrun.validate/1";

// What the command line asked for.
struct SummaryRequest {
  bool json = false;  // --json
  std::string file;   // --summary-json FILE; empty: none
  bool wanted() const { return json || !file.empty(); }
};

// --json and --summary-json FILE (or =FILE) among `words`, flowrun's own
// arguments. Used when the command line did not parse, so that a usage error
// still gets its summary; a --summary-json without its FILE is left out.
SummaryRequest scan_summary_request(const std::vector<std::string>& words);

// What a command that may start a run tells the summary: where the run's
// directory is, once it knows (empty until then, and for a command that
// starts no run).
struct SummaryTarget {
  std::string run_dir;
  std::int64_t since_unix_ns = 0;  // when the command began: an older run.json is not this run's
};

// Runs `command` as report_errors() does, then writes the summary as
// `request` asks: to FILE (whole or not at all), and with --json to stdout,
// which the command's own output does not reach (fd 1 is stderr while it
// runs). Stop signals are held while the summary is written. Returns the
// command's exit code; 1 instead of 0 when FILE cannot be written.
int report_with_summary(const SummaryRequest& request, const std::function<int(SummaryTarget&)>& command);

// The summary of the run in target.run_dir (its run.json and results.json
// files, when this process wrote them since target.since_unix_ns), given how
// flowrun ends: `exit_code`, and `error` when flowrun ended by an error of its
// own. A run that never started (no run directory, or no run.json of this
// process there) is summarised by the exit code alone: "succeeded",
// "usage_error" (2) or "error".
std::string format_summary_json(const SummaryTarget& target, int exit_code, const std::string& error);

// `flowrun validate --json`: the spec's findings (none when it is valid).
std::string format_validate_json(const std::string& spec_path, const std::vector<Diagnostic>& errors,
                                 const std::vector<std::string>& steps);

}  // namespace flowrun
