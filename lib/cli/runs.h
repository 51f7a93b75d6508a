// Finding past runs again: the pure parts of `flowrun runs`, `flowrun logs`
// and `flowrun status` (lib/cli/runs_cmd.cpp reads the disk). A run is found
// by its id, a prefix of it that names one run, or `latest`, the symlink
// flowrun points at the newest run when it starts (docs/cli.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flowrun/flow.h"

namespace flowrun {

// What `query` names among the run ids `ids` (the entries of a runs
// directory): the id itself, else the one id it is a prefix of. `ambiguous`
// holds every id it is a prefix of, sorted, when there is more than one; all
// empty when it names none.
struct RunMatch {
  std::string id;
  std::vector<std::string> ambiguous;
};
RunMatch match_run(const std::string& query, const std::vector<std::string>& ids);

// One line of `flowrun runs`, from a run's run.json.
struct RunRow {
  std::string id;  // the run directory's name
  std::string flow;
  // "running" (its lock is held), "succeeded", "failed", "killed" ("running"
  // in run.json but no flowrun holds the lock: it died without closing the
  // record), "damaged" (run.json unreadable; `problem` says why).
  std::string state;
  std::optional<int> exit_code;
  std::int64_t start_unix_ns = 0;  // 0: unknown
  std::int64_t end_unix_ns = 0;    // 0: not ended (or unknown)
  // The first step that failed; for a run in progress, the step it runs.
  std::string step;
  std::string problem;       // for "damaged": what is wrong, e.g. "no run.json", "not JSON"
  std::int64_t sort_ns = 0;  // start, or the directory's mtime when start is unknown
};

// "0.4s", "12s", "3m05s", "2h04m", "3d02h"; "-" for a negative span.
std::string format_span(std::int64_t ns);

// The table of `flowrun runs`, oldest first (rows sorted by sort_ns, then
// id), with a header line; columns id, flow, state, exit, start (local time,
// "YYYY-MM-DD HH:MM"), duration (now - start for a run in progress), step.
// A flow or step name too wide for its column is cut with "~"; a damaged
// run's problem stands in the flow column's place to the end of the line.
std::string format_runs_table(std::vector<RunRow> rows, std::int64_t now_unix_ns);

// --- on disk (runs_cmd.cpp) ---------------------------------------------------

// A file's modification time (0 when it cannot be read), as nanoseconds
// since the epoch (unix_now_ns() is the time now).
std::int64_t mtime_unix_ns(const std::string& path);

// The runs directories a command run in `cwd` looks in: .flowrun/runs of
// `cwd` and of each directory above it that has one, nearest first; only
// this user's (another user's /tmp/.flowrun/runs is passed over), and not
// above a directory FLOWRUN_CEILING_DIRS names (colon-separated, as git's
// GIT_CEILING_DIRECTORIES).
std::vector<std::string> runs_dirs_above(const std::string& cwd);

// The run ids in the runs directory `runs_dir`: its subdirectories, not
// `latest` nor hidden ones, sorted.
std::vector<std::string> run_ids_in(const std::string& runs_dir);

// The run directory `query` names, absolute, `latest` resolved to the run it
// points at: a path (it has a '/' or is a directory under `cwd`), else
// `latest`, a run id or a unique prefix of one, in runs_dirs_above(cwd) in
// turn (the first that has a match). Throws Error (exit code 2): for an
// ambiguous prefix listing the candidates, for none saying where it looked.
std::string locate_run(const std::string& query, const std::string& cwd);

// The row of the run in `run_dir` (its name is the id); never throws: a
// run.json that cannot be read makes a "damaged" row.
RunRow read_run_row(const std::string& run_dir);

// The record of the run in `run_dir`, for `logs` and `status`; throws Error
// (exit code 2) saying what is wrong with a damaged one.
RunRecord read_record_of(const std::string& run_dir);

// A step of the run as its plan.json has it: for a parallel step each rank
// and the host its node is (empty when the plan names none, as for a node
// that joins by hand); for a plain step no ranks. When plan.json cannot be
// read, a step's ranks are its rank<R> directories and its hosts unknown.
struct PlannedStep {
  std::string name;
  bool parallel = false;
  std::vector<int> ranks;
  std::vector<int> nodes;          // each rank's node rank
  std::vector<std::string> hosts;  // each rank's node's host
};
PlannedStep planned_step(const std::string& run_dir, const std::string& step);

// The step `flowrun logs` and `status` mean without --step: the first that
// failed, else the one running, else the last that ran, else the first.
std::string default_step(const std::vector<std::pair<std::string, std::string>>& steps);

}  // namespace flowrun
