// The flow runner: the policy above the supervisor. It runs a planned flow's
// steps in dependency order, each parallel step as a group of workers (with
// restarts), each plain step as one process; after a parallel step it gathers
// the outputs for the join; it writes the run directory (the spec as run,
// plan.json, per-rank logs, each step's results.json, run.json) and decides
// flowrun's exit code (docs/cli.md).
//
// `flowrun resume` is a new run that takes the steps an earlier run already
// did from that run's directory instead of running them again; the second
// half of this header is what it reads and decides. `flowrun SPEC` in a Slurm
// job that was requeued resumes the job's earlier run the same way (the last
// part: which run that is, and the restart counts it carries on).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "flowrun/console_streams.h"
#include "flowrun/gang_lobby.h"
#include "flowrun/plan.h"

namespace flowrun {

// Set by `flowrun resume`, and by `flowrun SPEC` in a requeued Slurm job: the
// earlier run this one resumes and what happens to each step.
struct ResumeFrom {
  std::string run_id;  // the run resumed
  std::string run_dir;
  // Steps taken from it as they are: results.json is copied (marked
  // "reused_from" the run that ran the step) and a parallel step's gathered
  // outputs are hard-linked (copied across file systems) into this run's
  // directory, so ${steps.NAME.outputs} and the join find them.
  std::set<std::string> reuse;
  // For each step that runs, why it runs (again), for the console.
  std::map<std::string, std::string> why;
  // A resume after the Slurm job was requeued (`flowrun SPEC`), not `flowrun
  // resume`: run.json's resumed_from says "by": "requeue".
  bool requeue = false;
  // A requeue's parallel steps that continue the earlier run's attempts: the
  // attempts started there, which the first attempt here gets as its
  // TORCHELASTIC_RESTART_COUNT (carried_restart_counts).
  std::map<std::string, int> restart_from;
};

struct RunOptions {
  std::vector<std::string> args;                  // after `--`, for ${args}
  std::string run_id;                             // empty: a new one
  std::string run_dir;                            // empty: <workdir>/.flowrun/runs/<run-id>
  std::optional<std::vector<int>> console_ranks;  // --ranks: ranks shown on the console
  bool fold = true;                               // false: --no-fold, each rank's lines as it wrote them
  // flowrun run's --redirects, --tee, --local-ranks-filter: which streams of
  // the ranks --ranks shows the console shows; nullopt: both.
  std::optional<ConsoleStreams> console_streams;
  bool virtual_local_rank = false;               // --virtual-local-rank (LaunchContext's)
  std::vector<std::vector<int>> worker_cpus;     // --numa-binding: each local rank's CPUs (LaunchContext's)
  double grace_s = 10;                           // --grace: SIGTERM .. SIGKILL
  double console_wait_s = kDefaultConsoleWaitS;  // --console-wait (Console::reader_wait_s)
  enum class Color { automatic, always, never } color = Color::automatic;
  int fake_gpus = -1;       // --fake-gpus (or FLOWRUN_FAKE_GPUS): every node's agent simulates as many
  std::optional<int> cpus;  // --cpus, recorded in run.json so that a resume plans the same way
  std::string python;       // --python (as use_python() got it), recorded in run.json likewise
  // The spec file run.json names (absolute); empty: the spec's own file. A
  // resume that runs from a saved copy names the file the copy came from.
  std::string spec_file;
  // The spec's text when it is not a file (`flowrun run` builds one): saved
  // as spec.yaml, and run.json names no spec file.
  std::string spec_text;
  std::optional<ResumeFrom> resume;
  // --signals-to-handle: which of SIGTERM, SIGINT, SIGHUP and SIGQUIT stop
  // the run (the others are ignored; SIGQUIT unlisted takes the ranks'
  // stacks); nullopt: kStopSignals, the first three.
  std::optional<std::vector<int>> stop_signals;
  // This host is node 0 of a gang (engine gang, docs/kubernetes.md): the
  // lobby its other nodes' agents wait in holds the control plane's port for
  // the whole flow, and they hear the flow's exit code at its end.
  std::optional<GangLobbyOptions> gang;
};

// Runs the flow and returns flowrun's exit code: 0 when every step
// succeeded; the culprit's code (128+N for a signal) for the first step that
// failed; 124 for a timeout; 128+N when flowrun got signal N; 1 when a parallel
// step's declared outputs are missing. Throws Error for flowrun's own failures
// (a run directory that cannot be written).
int run_flow(const Spec& spec, const HostFacts& host, const std::vector<StepPlan>& plans, const EnvMap& env,
             const RunOptions& options);

// --- run.json and flowrun resume --------------------------------------------

// The run.json format this flowrun writes and reads; later formats only add
// keys, but a run directory of another format is refused by resume.
inline constexpr int kRunFormat = 1;

// What a run records about itself in <run_dir>/run.json: written when it
// starts, after every step and when it ends. `flowrun resume` reads it.
//
//   {
//     "format": 1,
//     "run_id": "flow-20261129-171053-3fa2c1",
//     "run_dir": "/abs/.flowrun/runs/flow-20261129-171053-3fa2c1",
//     "flow": "flow",                the spec's name
//     "spec": "/abs/flow.yaml",      the spec file it ran (null when it had none)
//     "spec_dir": "/abs",            what the spec's relative paths are relative to
//     "args": ["--lr", "0.1"],       the arguments after --, for ${args}
//     "cpus": 2,                     --cpus, or null
//     "fake_gpus": null,             --fake-gpus or FLOWRUN_FAKE_GPUS, or null
//     "python": null,                --python, or null
//     "host": "host-a",              where flowrun ran
//     "pid": 4242,                   flowrun's pid
//     "state": "running",            "running" until it ends, then "finished"
//     "exit_code": null,             flowrun's exit code once finished
//     "start": "...", "end": null,   UTC with milliseconds; end once finished
//     "steps": {"prepare": "succeeded", "train": "running", "evaluate": "pending"},
//                                    "pending" | "running" | "succeeded" | "reused" |
//                                    "failed" | "skipped" (a step it needs failed) |
//                                    "not_run" (flowrun was interrupted first)
//     "resumed_from": null,          or {"run_id": ..., "run_dir": ..., "by": "resume"}: the run it
//                                    resumed, by `flowrun resume` or after a Slurm "requeue"
//     "error": null,                 why flowrun itself stopped (an error it could not go on
//                                    after: the step then reads "failed"), or null
//     "slurm": null,                 or {"job_id": "4242", "restart_count": 0}: the Slurm job
//                                    flowrun ran in (SLURM_JOB_ID, SLURM_RESTART_COUNT), by
//                                    which a requeue of the job finds the run again
//     "attempts_started": {"train": 2}
//                                    for each parallel step that started an attempt: how many,
//                                    counting those of the runs a requeue continued; written as
//                                    each attempt starts, so that a requeue after SIGKILL knows
//   }
//
// Every way flowrun ends but SIGKILL closes the record: "finished", with the
// exit code (1, or the error's, for an error that ends flowrun).
//
// A run in progress also holds a lock (flock) on <run_dir>/run.lock, which
// the kernel lets go of however flowrun ends, so "running" in a run.json
// whose lock is free means flowrun was killed before it could say otherwise.
struct RunRecord {
  std::string run_id;
  std::string run_dir;
  std::string flow;
  std::string spec_file;  // empty: null
  std::string spec_dir;
  std::vector<std::string> args;
  std::optional<int> cpus;
  std::optional<int> fake_gpus;
  std::string python;  // empty: null
  std::string host;
  int pid = 0;
  bool finished = false;
  std::optional<int> exit_code;
  std::int64_t start_unix_ns = 0;
  std::int64_t end_unix_ns = 0;                            // 0: null
  std::vector<std::pair<std::string, std::string>> steps;  // name, state; in run order
  std::string resumed_from_id;                             // empty: resumed_from is null
  std::string resumed_from_dir;
  std::string resumed_by = "resume";  // "resume" or "requeue"
  std::string error;                  // empty: null
  std::string slurm_job_id;           // empty: "slurm" is null
  int slurm_restart_count = 0;
  std::string gang_id;  // empty: "gang" is null; read_gang_identity's
  std::optional<int> gang_attempt;
  std::vector<std::pair<std::string, int>> attempts_started;  // step, attempts; in the order they started
};

std::string format_run_json(const RunRecord& record);

// Reads `text`, the run.json at `path`. Throws Error (exit code 2) that names
// `path` for text that is not JSON, not a run record, or of another format.
RunRecord parse_run_json(const std::string& text, const std::string& path);

// Reads <run_dir>/run.json. Throws Error (exit code 2) saying what is wrong:
// no such directory, a run directory of an older flowrun (no run.json), not a
// run directory at all, or parse_run_json's refusals.
RunRecord read_run_record(const std::string& run_dir);

// A run directory's lock, <run_dir>/run.lock: held (flock) for as long as
// this lives; closed on exec, so no worker inherits it. The file's one line
// names its holder: "PID HOST run RUN_ID" or "PID HOST resume -" (HOST as
// run.json has it).
class RunLock {
 public:
  // For a new run: creates `run_dir` (its parents as needed) and holds its
  // run.lock. A run directory holds one run, so `run_dir` must not exist or be
  // empty, and run.lock is created exclusively (with its line already in it):
  // of two flowruns given the same directory at once, one gets it. Throws
  // Error (exit code 2) naming the run the directory holds and what to do.
  // `run_dir`, and each directory above it up to `workdir` (the directory
  // above it alone when it is not under `workdir`), must be safe from other
  // users (require_private_directory): the run directory this user's own,
  // the others this user's or root's, none that another user may write
  // unless it is sticky. The run directory is then anchored
  // (anchor_directory): flowrun's writes into it never follow a link.
  static RunLock create(const std::string& run_dir, const std::string& run_id, const std::string& host,
                        const std::string& workdir = "");
  // For `flowrun resume`: holds the run.lock of the earlier run in `run_dir`
  // (created when missing), so that no resume of it starts while the run is in
  // progress or another resume of it runs. Throws Error (exit code 2) naming
  // the flowrun that holds it, or refusing a run directory of another user
  // (as create does).
  static RunLock resume(const std::string& run_dir, const std::string& run_id, const std::string& host);
  RunLock(RunLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  RunLock& operator=(RunLock&&) = delete;

 private:
  explicit RunLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Whether a flowrun holds <run_dir>/run.lock right now.
bool run_in_progress(const std::string& run_dir);

// Who holds <run_dir>/run.lock right now, as its line names it: "flowrun pid
// 4242 on host-a" ("another flowrun" for a lock without its line); nullopt
// when no flowrun holds it.
std::optional<std::string> run_lock_holder(const std::string& run_dir);

// The run directory `run` names on the command line of `flowrun resume`: a
// path (it has a '/', or names a directory under `cwd`), else a run id, looked
// up as .flowrun/runs/<id> in `cwd` and then in each of its parents (a run
// started from a parent directory, or with `workdir:` there). Returns an
// absolute path. Throws Error (exit code 2) saying where it looked.
std::string find_run_dir(const std::string& run, const std::string& cwd);

// How one step ended in an earlier run, from <run_dir>/<step>/results.json.
struct PriorStep {
  // "succeeded", "failed", "timed_out", "interrupted"; "" when there is no
  // results.json (it did not run, or flowrun was killed while it ran: see
  // `state`); "unreadable" for one that does not parse.
  std::string outcome;
  std::string end;       // its "end" time, as results.json writes it
  std::string ran_in;    // the run that ran it: its "reused_from" run, else that run
  bool outputs = false;  // <run_dir>/<step>/outputs exists
  std::string state;     // its state in the run's run.json ("running": flowrun was killed as it ran)
};

// Reads the results of the steps `names` of the run `record`.
std::map<std::string, PriorStep> read_prior_steps(const RunRecord& record,
                                                  const std::vector<std::string>& names);

// What `flowrun resume` asks about a run.
struct ResumeQuestion {
  const Spec* now = nullptr;     // the spec the new run runs
  const Spec* before = nullptr;  // the spec the earlier run ran (its saved copy)
  std::string run_id;            // the earlier run, for messages
  std::string run_dir;
  std::map<std::string, PriorStep> prior;  // the earlier run's steps, by name
  std::vector<std::string> args_now;       // ${args} of each run
  std::vector<std::string> args_before;
  std::optional<std::string> from;  // --from: a step of `now`
};

struct ResumeDecision {
  std::string step;
  bool reuse = false;
  std::string why;  // when it runs: why, e.g. "it failed in run X" (empty when reused)
};

// Pure. For every step of `now`, in run order: a step is reused when it
// succeeded in the earlier run, its definition is what that run ran (see
// changed_parts), its gathered outputs are still there, every step it needs
// is reused, and it is not --from's step. Everything else runs.
std::vector<ResumeDecision> decide_resume(const ResumeQuestion& question);

// The parts of a step's definition that differ between two specs, in this
// order: "run", "env", "top-level env", "workdir", "needs", "join",
// "parallel", "outputs", "collect", "${args}" (the arguments after --, for a
// step whose run uses them). Not compared, since they cannot change what a
// step that succeeded produced: timeout, stall_timeout, parallel.max_restarts,
// parallel.restart, logs, the cluster section, and the plan (this host's GPUs).
std::vector<std::string> changed_parts(const Spec& now, const Step& step_now,
                                       const std::vector<std::string>& args_now, const Spec& before,
                                       const Step& step_before, const std::vector<std::string>& args_before);

// Takes `step` from the run `from` into the run directory `layout`:
// results.json copied and marked, a parallel step's outputs/ hard-linked (or
// copied). Returns the console line. Throws Error when the files cannot be
// read or written.
std::string reuse_step(const Step& step, const ResumeFrom& from, const RunLayout& layout);

// --- a requeued Slurm job ------------------------------------------------------

// The spec file run.json names for `spec`: its file as an absolute path;
// empty when the spec is not a file.
std::string absolute_spec_file(const Spec& spec);

// What `flowrun SPEC` in a requeued Slurm job (SLURM_RESTART_COUNT > 0) asks
// to find the run it resumes.
struct RequeueQuestion {
  std::string job_id;             // SLURM_JOB_ID; a gang's id (gang.id in run.json)
  int restart_count = 0;          // SLURM_RESTART_COUNT
  std::string spec_file;          // absolute_spec_file of the spec given
  std::vector<std::string> args;  // the arguments after --
  // A gang's head that started again, rather than a Slurm job: its id is
  // job_id, its attempt where the platform numbers them, and `said` the
  // variables read, for the console's line.
  bool gang = false;
  std::optional<int> attempt;
  std::string said;
};

// Pure. Among `runs` (the records of a runs directory), the run of this job
// that the requeued `flowrun SPEC` resumes: one that ran in the same Slurm
// job (slurm.job_id) before this restart (its slurm.restart_count below
// this one), the same spec file with the same arguments after --; of several,
// the one that started last. For a gang's head (question.gang): a run of the
// same gang (gang.id), of an earlier attempt where both were numbered, else of
// any: a platform that numbers no attempts starts a head only once a gang
// unless its pod was lost. nullptr when there is none.
const RunRecord* pick_requeued_run(const RequeueQuestion& question, const std::vector<RunRecord>& runs);

// The records of the runs in `runs_dir`: each subdirectory's run.json that
// can be read (`latest`, hidden entries and damaged runs passed over).
std::vector<RunRecord> read_run_records(const std::string& runs_dir);

// What flowrun reads of a record of an earlier run (run.json, results.json).
inline constexpr std::size_t kMaxRecordBytes = 16 << 20;

// Pure. The restart counts a requeue carries on: for each parallel step of
// `now` that runs again (not reused in `decisions`) and did not succeed in the
// earlier run `record` (`prior`), the attempts of it started there
// (attempts_started), when there were any. A step that succeeded there and runs
// again for a change starts from 0, as any resume's does.
std::map<std::string, int> carried_restart_counts(const Spec& now,
                                                  const std::vector<ResumeDecision>& decisions,
                                                  const std::map<std::string, PriorStep>& prior,
                                                  const RunRecord& record);

// The console's line for a requeue that resumes `record`: "flowrun: resuming
// run A: Slurm job 4242 was requeued (SLURM_RESTART_COUNT=1); kept 'prepare';
// 'train' restarts at TORCHELASTIC_RESTART_COUNT=2". A step that runs again
// without a carried count (a plain step) "runs again"; steps the earlier run
// never reached are not named.
std::string requeue_line(const RequeueQuestion& question, const RunRecord& record,
                         const std::vector<ResumeDecision>& decisions,
                         const std::map<std::string, PriorStep>& prior,
                         const std::map<std::string, int>& carried);

// Parses --ranks: "0", "0,2", "0-3,6", "all" (nullopt). Throws Error with a
// message for anything else.
std::optional<std::vector<int>> parse_rank_list(const std::string& text);

}  // namespace flowrun
