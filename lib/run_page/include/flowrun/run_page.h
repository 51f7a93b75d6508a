// A picture of a run: one self-contained HTML page (`flowrun report RUN`)
// that shows a run's steps on one time axis, each parallel step's ranks as
// rows grouped by node with every attempt a bar coloured by how it ended,
// and the why of each end (restarts, stalls and their stacks, lost nodes and
// the spares seated in their place, node checks, outputs, the plan's why).
//
// Two halves: read_run_picture() gathers a RunPicture from a run directory
// (run.json, plan.json, each step's results.json, the ranks' end.json and
// the tails of their stderr.log), and format_run_page() turns one into HTML,
// pure: no disk, no clock. The page needs no network: inline CSS and SVG,
// a few lines of JavaScript (open the rank a link's #fragment names).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flowrun {

// How one rank's attempt ended, as the page colours it.
enum class BarEnd {
  ok,       // exited 0 (or a plain step that succeeded)
  culprit,  // the attempt's root cause
  failed,   // failed on its own after the culprit
  stopped,  // stopped by flowrun (after the culprit, a timeout, a stall, a signal)
  lost,     // its node was lost
  running,  // no end yet: the run is still going
};
const char* bar_end_name(BarEnd end);  // "ok", "culprit", "failed", "stopped", "lost", "running"

// One rank in one attempt: a bar from start to end.
struct RankBar {
  int rank = -1;              // -1: a plain step's one process
  std::string node;           // the host it ran on; "" when unknown
  std::int64_t start_ns = 0;  // unix ns; 0: unknown
  std::int64_t end_ns = 0;    // 0: not ended (running) or unknown
  BarEnd end = BarEnd::running;
  std::string how;       // "exited 3", "SIGTERM", "lost", "running", "could not start: ..."
  bool culprit = false;  // the attempt's root cause, whatever its end (a lost node's rank may be)
  bool stalled = false;  // its silence reached the step's stall_timeout
  std::string stdout_log, stderr_log;
  std::vector<std::string> last_stderr;  // its last lines, oldest first
};

// Ranks whose stacks were the same when flowrun stopped them.
struct StackPicture {
  std::vector<int> ranks;
  std::string where;    // innermost frame of user code, or the kernel's state
  std::string missing;  // why these ranks have no stack; "" when they have one
};

struct AttemptPicture {
  int restart_count = 0;
  std::string outcome;         // "succeeded", "failed", ..., "running"
  std::string cause;           // "exit_code", "signal", "exception", "node_lost"; "" when none
  std::string exception;       // "ValueError: bad batch (train.py:12)"; "" when none
  std::string restart_reason;  // why flowrun restarted or gave up; "" when none
  bool restarted = false;
  std::optional<int> culprit_rank;
  std::int64_t start_ns = 0, end_ns = 0;
  int world_size = 0;
  std::vector<std::string> replaced;  // "node 1: host-b lost, spare host-c seated"
  std::vector<std::string> dropped_nodes, added_nodes;
  std::string stacks_source;  // "py-spy", "kernel"; "" when no stacks were taken
  std::vector<StackPicture> stacks;
  // The ranks the samples of every rank's stack named slow (results.json's
  // wait_shares.slow), and what they found: "waits in collectives 3% of the
  // time, the other ranks 71%; hottest frame load_batch (data.py:88)".
  std::vector<int> slow_ranks;
  std::string slow_why;
  std::vector<RankBar> bars;  // one per rank, by rank
};

struct NodeCheckPicture {
  std::string node;
  bool ok = true;
  std::string detail;  // the failed checks' words; "" when ok
};

struct StepPicture {
  std::string name;
  std::string state;  // run.json's: "succeeded", "failed", "running", "skipped", ...
  bool parallel = false;
  std::string outcome;  // results.json's; "" when it has none yet
  std::optional<int> exit_code;
  std::int64_t start_ns = 0, end_ns = 0;
  std::vector<std::string> why;        // the plan's reasons
  std::vector<std::string> outputs;    // declared in the spec
  std::vector<std::string> collected;  // files in its outputs/ directory
  std::vector<std::string> notes;
  std::string retry;  // "a retry may help (failure): ..."; "" when none
  std::vector<NodeCheckPicture> node_checks;
  std::vector<std::string> excluded_nodes;
  std::vector<AttemptPicture> attempts;  // the last one is the step's end
  std::string dir;                       // the step's directory
};

struct RunPicture {
  std::string run_id, flow, run_dir, host;
  std::string state;  // "running", "succeeded", "failed", "killed"
  std::optional<int> exit_code;
  std::string error;
  std::int64_t start_ns = 0, end_ns = 0;
  std::int64_t taken_ns = 0;  // when the picture was read: the end of a running run's axis
  std::vector<StepPicture> steps;
};

// A step with more rank rows than this shows each node's ranks that ended
// like most of them as one folded row; the culprit, failed and lost ones
// stay rows of their own.
inline constexpr std::size_t kFoldAbove = 64;

// How many of a rank's last stderr lines the page keeps, and the longest.
inline constexpr std::size_t kStderrLines = 5;
inline constexpr std::size_t kStderrLineBytes = 300;

// The page's name in the run directory: `flowrun report` writes it there,
// and `status`, the failure report and the summary name it.
inline constexpr const char* kRunReportFile = "report.html";

// The page. Every string from the run (names, paths, output) is escaped, so
// no text a rank printed becomes markup.
std::string format_run_page(const RunPicture& run);

// Reads the run in `run_dir` as it is now (a running run's snapshot).
// `state` is the run's state as `flowrun runs` tells it (a lock held means
// running); `now_ns` ends a running run's axis. Throws Error naming the file
// when run.json cannot be read; a step's missing or unreadable results.json
// makes a step without attempts, not an error.
RunPicture read_run_picture(const std::string& run_dir, const std::string& state, std::int64_t now_ns);

// The last `lines` lines of `text`, each cut at kStderrLineBytes.
std::vector<std::string> last_lines(const std::string& text, std::size_t lines);

}  // namespace flowrun
