// The subcommands that parse their own command line (`flowrun run` takes
// torchrun's options, `init`, `resume`, `doctor`, `runs`, `logs`, `status`,
// `manifest`), and the helpers every subcommand shares. run_cli() hands such a
// subcommand argv from its name on (argv[0] is "run", "init", ...); each
// returns flowrun's exit code (docs/cli.md) and reports its errors through
// report_errors().
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "flowrun/flow.h"
#include "flowrun/plan.h"
#include "flowrun/spec.h"
#include "flowrun/util.h"

namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace flowrun {

int cmd_torchrun(int argc, char** argv);  // flowrun run   (lib/cli/run_cmd.cpp)
int cmd_init(int argc, char** argv);      // flowrun init  (lib/cli/run_cmd.cpp)
int cmd_resume(int argc, char** argv);    // flowrun resume (lib/cli/resume_cmd.cpp)
int cmd_doctor(int argc, char** argv);    // flowrun doctor (lib/cli/doctor_cmd.cpp)
int cmd_runs(int argc, char** argv);      // flowrun runs   (lib/cli/runs_cmd.cpp)
int cmd_logs(int argc, char** argv);      // flowrun logs   (lib/cli/logs_cmd.cpp)
int cmd_status(int argc, char** argv);    // flowrun status (lib/cli/status_cmd.cpp)
int cmd_stacks(int argc, char** argv);    // flowrun stacks (lib/cli/stacks_cmd.cpp)
int cmd_report(int argc, char** argv);    // flowrun report (lib/cli/report_cmd.cpp)

// Writes the page of the run in `run_dir` (lib/run_page) to `output`, or to
// RUN_DIR/report.html when it is empty; returns the path written.
std::string write_run_report(const std::string& run_dir, const std::string& output);
int cmd_manifest(int argc, char** argv);  // flowrun manifest (lib/cli/manifest_cmd.cpp)

struct SummaryTarget;

// `flowrun SPEC` in a Slurm job that was requeued (SLURM_RESTART_COUNT above
// 0; lib/cli/resume_cmd.cpp): resumes the job's earlier run of the same spec
// file with the same arguments (pick_requeued_run, in the runs directory the
// new run goes to) as `flowrun resume` would, each parallel step that did not
// succeed there continuing its restart count, and returns the exit code: 0,
// running nothing, when that run succeeded. nullopt when the run starts
// afresh: not a requeue, no such run, or `enabled` false
// (--no-requeue-resume); each but the first said on stderr. Throws Error
// (exit code 2) when that run is still in progress, or SLURM_RESTART_COUNT is
// not a count. A --run-id or --run-dir in `run` gets "-requeueN" for the new
// run, since the earlier run has it; when that would pass a run id's
// kMaxNameLength or a file name's NAME_MAX, the id or the directory's last
// part is cut and a hash of it put before the suffix.
std::optional<int> resume_requeued_job(const Spec& spec, const HostFacts& host,
                                       const std::vector<StepPlan>& plans, const EnvMap& env, RunOptions& run,
                                       bool enabled, SummaryTarget& target);

// This host's GPUs (simulated when fake_gpus >= 0) and, inside a Slurm
// allocation, the allocation's nodes.
HostFacts probe_host(int fake_gpus, const EnvMap& env);

// This host as a run of a flow that uses no GPU knows it: its name and its
// Slurm allocation, its GPUs not looked for (inventory.source is
// kGpusNotProbed).
HostFacts host_without_gpus(const EnvMap& env);

// --fake-gpus when given (>= 0), else FLOWRUN_FAKE_GPUS when it is a count, else -1.
int fake_gpus_from_env(int fake_gpus, const EnvMap& env);

// The current directory; throws Error when it cannot be read.
std::string current_directory();

// --color's value (auto, always, never; checked by CLI11) as RunOptions wants it.
RunOptions::Color color_choice(const std::string& when);

// Splits argv at the first `--`: sets *ours to the count before it (argc
// when there is none) and returns what follows it, the steps' ${args}.
std::optional<std::vector<std::string>> args_after_dashes(int argc, char** argv, int* ours);

// load_spec(), with its diagnostics thrown as a DiagnosticError.
Spec load_or_throw(const std::string& path);

// Runs `command` and turns what it throws into flowrun's messages on stderr
// ("flowrun: error: ..." or FILE:LINE:COL diagnostics) and exit code. The
// message (without "flowrun: error: "; diagnostics one a line) goes to
// `message` too, when given, for the summary.
int report_errors(const std::function<int()>& command, std::string* message = nullptr);

// Parses subcommand `name`'s own command line with `app`: --help prints it
// (exit 0); a mistake says "flowrun: error: NAME: ..." and points at
// `flowrun NAME --help` (exit 2). nullopt: parsed, the command goes on.
std::optional<int> parse_subcommand(CLI::App& app, const std::string& name, int argc, char** argv);

// --run-id checked as run_dir_for checks it, and also when it is '', which
// would otherwise mean "make one" (flowrun SPEC and flowrun resume).
CLI::Validator run_id_check();

// The RUN argument of logs, status, stacks and report (locate_run finds it).
void add_run_argument(CLI::App& app, std::string& run);

// A number of seconds from `lo` to `hi` as a command line or a variable gives
// it ("10", "0.5", "1e3"); nullopt for anything else: NaN, an infinity, a
// number too large for a double, a sign, spaces or hex among them. The one
// parser of seconds on flowrun's command lines, so that none lets "nan" through
// as a comparison that is always false would.
std::optional<double> parse_seconds(const std::string& text, double lo, double hi);

// CLI11's check of a SECONDS option by parse_seconds: "expected seconds from
// LO to HI" for what it refuses.
CLI::Validator seconds_between(double lo, double hi);

// --console-wait SECONDS and --no-fold, on `flowrun SPEC` and `flowrun resume`.
void add_console_options(CLI::App& app, double& wait_s, bool& no_fold);

// The widest line of any --help (tests/test_cli.py checks every one).
inline constexpr std::size_t kHelpWidth = 100;

// Gives `app` (and the subcommands added to it afterwards) flowrun's --help
// layout (lib/cli/help.cpp): CLI11's sections, every line wrapped at
// kHelpWidth, one spelling of each option. `usage`, when given, replaces
// CLI11's one-line "Usage: ..." (flowrun run has four forms).
void use_help_format(CLI::App& app, std::string usage = {});

// What --version prints: "flowrun 0.1.0 (commit 1a2b3c4, protocol 7)"
// (lib/cli/version.cpp); "commit unknown" in a build from outside a git checkout.
std::string version_line();

}  // namespace flowrun
