// What happened to a step's workers, as data: how each one ended, which one
// failed first (the culprit) and which ones flowrun stopped because of it (the
// victims), written as the step's results.json and told to people as a
// root-cause report. Pure: formatting and parsing only, no I/O.
//
// The vocabulary follows torchrun's elastic agent: the root cause of a failed
// group is its earliest failure; every later end is a consequence.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flowrun {

// How a process ended.
struct ExitStatus {
  enum class Kind { not_started, running, exited, signaled, spawn_failed };
  Kind kind = Kind::not_started;
  int code = 0;           // exited: the exit code; signaled: the signal number
  std::string spawn_error;  // spawn_failed: why (e.g. "python4: No such file or directory")

  bool ok() const { return kind == Kind::exited && code == 0; }
  // The code a shell would report: code, 128+signal, 127 for a spawn failure.
  int shell_code() const;
  // "exited with code 3", "was killed by signal 9 (SIGKILL)", "could not start: ...".
  std::string describe() const;
};

// Why a worker is in the report.
enum class Role {
  ok,        // finished with code 0 before anything failed
  culprit,   // the first failure: the root cause
  victim,    // stopped by flowrun after the culprit failed (or on timeout/interrupt)
  failed_after,  // failed on its own after the culprit (e.g. a peer left the collective)
};

// Why a group ended (the step's outcome).
enum class Outcome { succeeded, failed, timed_out, interrupted };

struct WorkerRecord {
  int rank = -1;  // -1 for a plain (non-parallel) step
  int local_rank = 0;
  int pid = 0;
  ExitStatus status;
  Role role = Role::ok;
  std::int64_t start_unix_ns = 0;  // wall clock
  std::int64_t end_unix_ns = 0;
  std::int64_t peak_rss_kib = 0;  // from wait4's rusage
  std::string stdout_log;         // absolute paths
  std::string stderr_log;
  std::string error_file;         // TORCHELASTIC_ERROR_FILE (may not exist)
  std::string stderr_tail;        // the last lines of its stderr (report only; not in JSON)
};

struct AttemptRecord {
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT of this attempt
  int master_port = 0;
  Outcome outcome = Outcome::succeeded;
  std::optional<int> culprit;  // index into workers
  std::vector<WorkerRecord> workers;
  std::int64_t start_unix_ns = 0;
  std::int64_t end_unix_ns = 0;
};

struct StepRecord {
  std::string step;
  bool parallel = false;
  Outcome outcome = Outcome::succeeded;
  int exit_code = 0;                  // what flowrun exits with for this step
  std::optional<double> timeout_s;    // when the step had one
  std::vector<AttemptRecord> attempts;  // the last one decided the outcome
  std::vector<std::string> notes;       // e.g. "killed 2 leftover processes: 812 (sleep), ..."
};

// Marks roles in `attempt`: the culprit is the worker whose failure came
// first (by end time, ties by rank); workers that ended by the signal flowrun
// sent after it are victims; other failures after it are failed_after.
// `stopped` lists the worker indices flowrun sent a stop signal to.
void assign_roles(AttemptRecord& attempt, const std::vector<int>& stopped);

// The step's results.json (docs/spec.md, "Run directory").
std::string format_results_json(const StepRecord& record);

// The root-cause report printed when a step did not succeed: the culprit with
// its exit code or signal, the last lines of its stderr, the traceback from
// its error file when it wrote one (`error_file_text` is that file's content,
// or empty), the victims, and where the logs are. Several lines, each ending
// in '\n'.
std::string format_failure_report(const StepRecord& record, const std::string& error_file_text);

// The traceback a torch.distributed.elastic @record error file holds:
// {"message": {"message": "...", "extraInfo": {"py_callstack": "...", ...}}}
// (or a plain string message). nullopt when the text is not such a file.
std::optional<std::string> parse_error_file(const std::string& text);

// "SIGKILL" for 9.
std::string signal_name(int signal);

}  // namespace flowrun
