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
#include <string_view>
#include <utility>
#include <vector>

namespace flowrun {

// How a process ended.
struct ExitStatus {
  // lost: its node was lost (agent gone or silent); spawn_error says how.
  enum class Kind { not_started, running, exited, signaled, spawn_failed, lost };
  Kind kind = Kind::not_started;
  int code = 0;             // exited: the exit code; signaled: the signal number
  std::string spawn_error;  // spawn_failed: why (e.g. "python4: No such file or directory")

  bool ok() const { return kind == Kind::exited && code == 0; }
  // The code a shell would report: code, 128+signal, 127 for a spawn failure,
  // 1 for a process that never started or is still running.
  int shell_code() const;
  // "exited with code 3", "was killed by signal 9 (SIGKILL)" ("was killed by
  // signal 40" for a signal without a name), "could not start: ...", "did not
  // start", "is still running". Reads after a subject: "rank 1 exited ...".
  std::string describe() const;
};

// Why a worker is in the report.
enum class Role {
  ok,            // finished with code 0 before anything failed
  culprit,       // the first failure: the root cause
  victim,        // stopped by flowrun after the culprit failed (or on timeout/interrupt)
  failed_after,  // failed on its own after the culprit (e.g. a peer left the collective)
};

// Why a group ended (the step's outcome). stalled: a rank wrote nothing for
// the step's stall_timeout, and flowrun stopped the step as a timeout does.
enum class Outcome { succeeded, failed, timed_out, interrupted, stalled };

struct WorkerRecord {
  int rank = -1;  // -1 for a plain (non-parallel) step
  int local_rank = 0;
  int pid = 0;
  ExitStatus status;
  Role role = Role::ok;
  std::int64_t start_unix_ns = 0;  // wall clock
  std::int64_t end_unix_ns = 0;
  // When it recorded its own failure: the time its error file
  // (TORCHELASTIC_ERROR_FILE, torch's @record) was written in this attempt,
  // before it ended; 0 when it wrote none. A rank that raised writes it
  // before its exit, which can take longer than a peer's end that the raise
  // caused (the peer's collective fails as soon as the raiser's sockets close).
  std::int64_t error_file_unix_ns = 0;
  std::int64_t peak_rss_kib = 0;  // from wait4's rusage
  std::string stdout_log;         // absolute paths
  std::string stderr_log;
  std::string error_file;   // TORCHELASTIC_ERROR_FILE (may not exist)
  std::string stderr_tail;  // the last lines of its stderr (report only; not in JSON)
  std::string node;         // the host it ran on, for a step that ran on several nodes; else empty
  // What it ran (report only; not in JSON), for missing_module_hint: argv[0]
  // as the step's run gives it ("python3", "/bin/sh"), the file it exec'ed
  // (argv[0] found on the PATH of its own environment when it has no '/'),
  // and the python3 that PATH finds (looked up when the worker failed, for
  // the hint of a missing module). Empty when unknown or not found.
  std::string command;
  std::string program;
  std::string path_python;
  // When flowrun began to stop the step with this worker still running: how
  // long it had written nothing to stdout or stderr (since the step started,
  // if it never wrote), and whether it was in the stopped state (T: SIGSTOP,
  // Ctrl-Z, a debugger), it or a process under it. nullopt: flowrun did not
  // stop it.
  std::optional<double> silent_s;
  bool suspended = false;
  bool stalled = false;  // silent for the step's stall_timeout: why flowrun stopped the step
  // Its NCCL flight-recorder dump (forensics: nccl), absolute, when torch
  // wrote one in this attempt: <rank dir>/nccl_trace_rank_<R>, under
  // attemptN/ once a restart kept it. Empty: none.
  std::string nccl_trace;
};

// Where the step's live ranks were when flowrun stopped them (a stall, a
// timeout, a failure that stopped the others): their stacks, taken before any
// signal, grouped by identical frames. `where` names a group by its innermost
// frame of user code, "all_reduce (train.py:88)" (the call it waits in, at the
// user's line), or by what the kernel tells when py-spy is missing
// ("futex_wait_queue (state S, syscall 202)"); `missing` says why a rank's
// stack could not be taken (then `where` is empty).
struct StackGroup {
  std::vector<int> ranks;
  std::string where;
  std::string missing;
};

struct StackReport {
  std::string source;              // "py-spy" or "kernel"
  std::vector<StackGroup> groups;  // the largest first, then by lowest rank
  int ranks = 0;                   // how many ranks were taken
};

// Where each rank spent its time, from its Python stack sampled at a low
// rate while the step ran (forensics' sampler): how many samples found its
// main thread waiting in a collective, and where it was the other times.
// In data-parallel training every rank waits for the slowest in each
// all-reduce, so the slow rank is the one that seldom waits.
struct RankShare {
  int rank = -1;
  std::int64_t samples = 0;  // stacks taken
  std::int64_t waits = 0;    // of them, waiting in a collective
  // Where it was when it was not waiting ("load_batch (data.py:88)"), with
  // how many samples, the most first; at most kMaxShareFrames kept, the rest
  // counted under kOtherFrames.
  std::vector<std::pair<std::string, std::int64_t>> frames;
  std::int64_t idles = 0;  // of the samples, its main thread blocked (waiting or not)
  // The main thread's time blocked, as the kernel counts it, over the span
  // from the first sample counted to the last (microseconds; span 0: not
  // known, as where /proc has no schedstat).
  std::int64_t blocked_us = 0, span_us = 0;
  friend bool operator==(const RankShare&, const RankShare&) = default;
};
inline constexpr std::size_t kMaxShareFrames = 32;

// The share of its time `r` spent waiting in a collective. With the span
// known, the share of the span its main thread was blocked (exact) times the
// share of its blocked samples that found it in a collective (sampled): a
// rank's blocked time is counted by the kernel, and only where it was
// blocked is left to the samples. Else its waiting samples over all.
double waiting_share(const RankShare& r);
inline constexpr const char* kOtherFrames = "(elsewhere)";

// The ranks the samples name as slow (lowest first): each waits in a
// collective a share of its samples far below the other ranks' together
// (slow_share against others_share), beyond chance. `frame`: where the
// first of them spends the most time beyond what the others spend there.
struct SlowRanks {
  std::vector<int> ranks;
  double slow_share = 0, others_share = 0;
  std::string frame;
  friend bool operator==(const SlowRanks&, const SlowRanks&) = default;
};

struct WaitShares {
  double sample_s = 0;            // one sample per rank every sample_s seconds, on average
  std::vector<RankShare> ranks;   // by rank
  std::optional<SlowRanks> slow;  // when the evidence names them
  friend bool operator==(const WaitShares&, const WaitShares&) = default;
};

// The root cause of a failed attempt, as the step's restart policy weighs it
// (classify_failure): what the culprit, the attempt's first failure, died of.
enum class FailureCause {
  exception,  // it exited non-zero and left a Python traceback (error file or stderr)
  exit_code,  // it exited non-zero without one, or could not start (a shell's 127)
  signal,     // it was killed by a signal flowrun did not send: SIGKILL (OOM), SIGSEGV, ...
  node_lost,  // its node was lost (its agent gone or silent), or another node of the step was
};

// "exception", "exit_code", "signal", "node_lost": the words of a spec's
// restart.causes and of results.json.
const char* failure_cause_name(FailureCause cause);

// The exception a Python traceback ends with: its type ("ValueError",
// "torch.distributed.DistBackendError"), the first line of its message
// ("boom"; empty for `raise KeyError`), and the innermost frame's file as the
// traceback names it and line (file empty, line 0 when the text has no frame).
struct PythonException {
  std::string type;
  std::string message;
  std::string file;
  int line = 0;
  bool operator==(const PythonException&) const = default;
  // "ValueError: boom (train.py:3)": the file's last component; the message
  // cut to 200 bytes with "...".
  std::string describe() const;
};

// A spare node that took a lost node's place (parallel.spare_nodes) for an
// attempt: the node rank, and the two nodes' names.
// One node's verdict before a multi-node step's ranks start
// (parallel.node_checks): the node, the node rank it was checked for (a
// spare: the rank it was to take), each check and how long they took.
struct NodeVerdict {
  std::string node;
  int node_rank = 0;
  bool ok = true;  // every check passed; false: the node was left out
  double check_s = 0;
  struct Check {
    std::string name;
    bool ok = true;
    std::string detail;
    friend bool operator==(const Check&, const Check&) = default;
  };
  std::vector<Check> checks;
  friend bool operator==(const NodeVerdict&, const NodeVerdict&) = default;
};

struct NodeReplacement {
  int node_rank = 0;
  std::string lost;
  std::string spare;
  friend bool operator==(const NodeReplacement&, const NodeReplacement&) = default;
};

struct AttemptRecord {
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT of this attempt
  int master_port = 0;
  Outcome outcome = Outcome::succeeded;
  std::optional<int> culprit;  // index into workers
  std::vector<WorkerRecord> workers;
  std::int64_t start_unix_ns = 0;
  std::int64_t end_unix_ns = 0;
  // flowrun could not write a file of the run directory (a rank's log) and
  // stopped the attempt: what it could not write and why, "cannot write rank
  // 0's stdout.log in DIR: No space left on device". Empty otherwise.
  std::string write_error;
  std::optional<StackReport> stacks;  // when flowrun took the live ranks' stacks
  std::optional<WaitShares> shares;   // when flowrun sampled the ranks' stacks
  // A failed attempt's root cause (classify_failure); nullopt for one that
  // did not fail, or that failed with no rank to blame (a write error).
  std::optional<FailureCause> cause;
  std::optional<PythonException> exception;  // cause exception: the culprit's, when readable
  // What flowrun decided after this attempt (the step runner's restart
  // policy): whether another attempt followed, and why or why not ("a signal
  // restarts", "restart.causes leaves out exception"). The reason is empty
  // for an attempt that succeeded, and for a step without restarts
  // (max_restarts: 0), where there was nothing to decide.
  bool restarted = false;
  std::string restart_reason;
  // The spares that took lost nodes' places before this attempt started.
  std::vector<NodeReplacement> replacements;
  // An elastic step's (parallel.nodes: "MIN:MAX"): the nodes it went on
  // without before this attempt (gone), and those it took in (joined late).
  std::vector<std::string> dropped_nodes, added_nodes;
  // The nodes checked before this attempt (parallel.node_checks): every
  // node before the first, a spare that took a seat before a later one.
  std::vector<NodeVerdict> node_checks;
};

struct StepRecord {
  std::string step;
  bool parallel = false;
  Outcome outcome = Outcome::succeeded;
  int exit_code = 0;                      // what flowrun exits with for this step
  std::optional<double> timeout_s;        // when the step had one
  std::optional<double> stall_timeout_s;  // likewise
  std::vector<AttemptRecord> attempts;    // the last one decided the outcome
  std::vector<std::string> notes;         // e.g. "killed 2 leftover processes: 812 (sleep), ..."
  // The earlier run whose attempts of this step the attempts here continue
  // (a run resumed after its Slurm job was requeued), and the restart count
  // the first attempt here got from it.
  struct ContinuedFrom {
    std::string run_id, run_dir;
    int restart_count = 0;
    // How each of the step's attempts there ended (failure_signature), the
    // first first: what tells a failure that repeats across requeues.
    std::vector<std::string> failures;
  };
  std::optional<ContinuedFrom> continued_from;
};

// The exception at the end of the last Python traceback in `text` (a
// stderr tail, an error file's py_callstack): the innermost `  File "F",
// line N` frame, and the first line after it that is not indented, read as
// "Type: message" or "Type" (a dotted name). A traceback cut at its head
// (the 20-line stderr tail) is read from the frames it still has. nullopt
// when `text` has no such frame followed by such a line.
std::optional<PythonException> parse_python_exception(std::string_view text);

// The root cause of `attempt`, a failed one whose roles are assigned, and
// the culprit's exception (for cause exception, when one can be read):
//   - the culprit was lost with its node, or there is no culprit and
//     `node_gone` (a node can take no further attempt): node_lost;
//   - it was killed by a signal: signal, unless flowrun's stop killed it
//     after its error file recorded an error (below);
//   - it exited non-zero and its error file (`error_file_text`, the content of
//     TORCHELASTIC_ERROR_FILE as parse_error_file reads it) holds an error, or
//     it exited with 1 (Python's code for an uncaught exception) and its
//     stderr tail ends in a traceback: exception;
//   - it exited non-zero otherwise, or could not start: exit_code.
// nullopt for an attempt that did not fail, or failed with no culprit and no
// node gone (flowrun's own write error).
struct FailureFacts {
  std::optional<FailureCause> cause;
  std::optional<PythonException> exception;
};
FailureFacts classify_failure(const AttemptRecord& attempt, bool node_gone,
                              const std::string& error_file_text);

// Marks every worker's role in `attempt` and sets attempt.culprit.
// `stopped` lists the indices (into attempt.workers) of the workers flowrun
// sent a stop signal to; only workers still running at that moment belong in it.
//
// A worker failed when it exited with a code other than 0, was killed by a
// signal, or could not start. The culprit is the failed worker NOT in
// `stopped` that failed first (failure_time; ties: lowest rank, then lowest
// index): the first failure flowrun did not cause. When every failure is one flowrun caused (a
// timeout, Ctrl-C) there is no culprit and attempt.culprit is nullopt. Others:
//   - in `stopped`: victim, whatever it exited with (a worker that exits 0 on
//     SIGTERM was still cut short), unless it succeeded no later than the
//     culprit ended, which means it had finished before the stop: ok;
//   - not in `stopped` and failed: failed_after (it ended after the culprit,
//     on its own: flowrun found it ended before it signalled it, or its end is
//     not one flowrun's signal could cause; Supervisor::ended_by_stop);
//   - succeeded: ok;
//   - never started or still running, and not in `stopped`: victim (flowrun
//     gave up on it because of the others).
void assign_roles(AttemptRecord& attempt, const std::vector<int>& stopped);

// When `w` failed, for the order of failures: when its error file was
// written, for one that wrote it; else its end.
std::int64_t failure_time(const WorkerRecord& w);

// The step's results.json, written into the step's directory. Format version
// 1: keys appear in this order, a key is never left out (null instead), and
// later versions only add keys. Durations are whole milliseconds, times are
// UTC with milliseconds ("2026-11-29T17:10:53.123Z").
//
//   {
//     "format": 1,
//     "step": "train",             the step's name
//     "parallel": true,            false for a plain step
//     "outcome": "failed",         "succeeded" | "failed" | "timed_out" | "interrupted" | "stalled"
//     "exit_code": 3,              what flowrun exits with because of this step
//     "timeout_ms": 30000,         the step's timeout, or null
//     "stall_timeout_ms": null,    the step's stall_timeout, or null
//     "start": "...",              the first attempt's start (null without attempts)
//     "end": "...",                the last attempt's end
//     "duration_ms": 1333,         end - start
//     "restarts": 0,               attempts - 1
//     "culprit_rank": 1,           the last attempt's culprit_rank
//     "notes": ["..."],            what flowrun did besides (leftover processes stopped, ...)
//     "ranks": [WORKER, ...],      the workers of the last attempt, which decided the outcome
//     "attempts": [                every attempt, the first one first
//       {
//         "restart_count": 0,      TORCHELASTIC_RESTART_COUNT of the attempt
//         "master_port": 29500,    0 for a plain step
//         "outcome": "failed",     as above, for this attempt
//         "culprit_rank": 1,       the rank of the first failure flowrun did not cause; null
//                                  when there was none, and always for a plain step
//         "start": "...", "end": "...", "duration_ms": 1333,
//         "workers": [WORKER, ...] in the order flowrun started them
//         "stacks": {...},         where the live ranks were when flowrun stopped them, or null
//         "cause": "exception",    a failed attempt's root cause: "exception" | "exit_code" |
//                                  "signal" | "node_lost"; null when it did not fail, or no rank
//                                  is to blame
//         "exception": {"type": "ValueError", "message": "boom", "file": "/abs/train.py",
//                       "line": 3}  cause exception, when its traceback could be read; else null
//                                  (file null, line null when the traceback had no frame)
//         "restarted": false,      whether another attempt followed this one
//         "restart_reason": "..."  why flowrun restarted or gave up after it ("a signal
//                                  restarts", "restart.causes leaves out exception"); null
//                                  when it succeeded or the step has max_restarts 0
//       }
//     ],
//     "failure_class": "failure",  why it did not succeed (retry_advice.h): "usage" | "repeats" |
//                                  "infrastructure" | "timeout" | "interrupted" | "failure" |
//                                  "error"; null when it succeeded
//     "retry_may_help": true,      whether trying again may help; false when it succeeded
//     "retry_why": "...",          one sentence: what happened and why; null when it succeeded
//     "continued_from": null       or {"run_id": ..., "run_dir": ..., "restart_count": 2}: the
//                                  earlier run whose attempts of the step these continue (a
//                                  run resumed after its Slurm job was requeued); the first
//                                  attempt here got that TORCHELASTIC_RESTART_COUNT
//     "node_checks": [             each node's verdict before the ranks started
//                                  (parallel.node_checks), every attempt's, in the order given:
//       {"node": "gpu-a", "node_rank": 1, "ok": false, "check_s": 0.012,
//        "checks": [{"name": "gpu_health", "ok": false, "detail": "GPU 1 has ..."}, ...]}
//     ],
//     "excluded_nodes": ["gpu-a"]  the nodes left out because their check failed, each once
//   }
//
// WORKER:
//   {
//     "rank": 1,                   null for the one process of a plain step
//     "local_rank": 1,
//     "pid": 4242,                 null when it never started
//     "status": "exited",          "exited" | "signaled" | "spawn_failed" | "not_started" | "running"
//     "exit_code": 3,              exited: its code; else null
//     "signal": null,              signaled: the signal's name, "SIGTERM" ("signal 40" for one
//                                  without a name); else null
//     "spawn_error": null,         spawn_failed: why ("python4: No such file or directory"); else null
//     "shell_code": 3,             as a shell shows it: the code, 128+signal, 127 when it could not
//                                  start, 1 otherwise
//     "role": "culprit",           "ok" | "culprit" | "victim" | "failed_after" (see assign_roles)
//     "start": "...", "end": "...", "duration_ms": 310,   each null when unknown
//     "peak_rss_kib": 123456,      peak resident memory (0 when unknown)
//     "stdout_log": "/abs/.flowrun/runs/ID/train/rank1/stdout.log",
//     "stderr_log": "/abs/.flowrun/runs/ID/train/rank1/stderr.log",
//     "error_file": "/abs/.flowrun/runs/ID/train/rank1/error.json"
//                                  TORCHELASTIC_ERROR_FILE, which exists only if the worker wrote
//                                  it; the three paths are null when flowrun had none
//     "error_file_time": "...",    when it wrote its error file, the moment it recorded its failure
//                                  (failures are ordered by it, then by their ends); null if none
//     "node": "node2",             the host it ran on when the step ran on several nodes, else null
//     "silent_ms": 4900,           when flowrun began to stop the step with this worker running:
//                                  how long it had written nothing (silent_s); else null
//     "suspended": false,          it (or a process under it) was in the stopped state (T) then
//     "stalled": false,            it was silent for the step's stall_timeout, which stopped the step
//     "nccl_trace": "/abs/.flowrun/runs/ID/train/rank1/nccl_trace_rank_1"
//                                  its NCCL flight-recorder dump (forensics: nccl), or null
//   }
// "status" is also "lost" for a rank whose node was lost (its agent's
// connection closed, or it went silent); "spawn_error" then says how.
std::string format_results_json(const StepRecord& record);

// How a failed attempt ended, as one string equal for two attempts that
// failed the same way: the culprit's rank, status, exit code or signal and
// exception type ("rank 1 exited 3 - ValueError"); "" for an attempt that did
// not fail, or failed with no rank to blame.
std::string failure_signature(const AttemptRecord& attempt);

// failure_signature of each attempt a step's results.json (its text) holds,
// the first first; empty when it is not one.
std::vector<std::string> failure_signatures(std::string_view results_json);

// A rank's end.json, written to `path` the moment flowrun learns the rank
// ended (the step's other ranks may still run): {"format": 1, "worker":
// {...}}, the worker as results.json has it, but its "role" is not decided
// yet (only the step's end does): always "ok". `flowrun status` reads it.
// Nothing when `path` is empty. A file that cannot be written costs only that
// live view (results.json, written at the step's end, has it too): no error.
void write_rank_end(const std::string& path, const WorkerRecord& w);

// The root-cause report printed when a step did not succeed; "" for a step
// that succeeded. Plain text, no colour; every line starts with "flowrun:" or
// is indented under one, and ends in '\n'. A failed parallel step:
//
//   flowrun: step 'train' failed: rank 1 exited with code 3 after 0.31 s (pid 4242)
//   flowrun:   last 3 lines of its stderr (/abs/.flowrun/runs/ID/train/rank1/stderr.log):
//       Traceback (most recent call last):
//         File "train.py", line 3, in <module>
//       ValueError: boom
//   flowrun:   traceback from its error file (/abs/.flowrun/runs/ID/train/rank1/error.json):
//       ...
//   flowrun:   stopped by flowrun: ranks 0, 2-4, 6, 7
//   flowrun:   failed after it: rank 5 (SIGABRT)
//   flowrun:   rank 5 was killed by signal 6 (SIGABRT) after 0.32 s (pid 4246); traceback from its
//   error file (/abs/.flowrun/runs/ID/train/rank5/error.json):
//       Traceback (most recent call last):
//       ...
//   flowrun:   logs: /abs/.flowrun/runs/ID/train
//
// - The headline names the culprit; a plain step says "failed: exited with
//   code 2 after 0.31 s (pid 42)". After restarts it says "failed after 2
//   restarts:", and a line "before restart N: rank R exited with code 3"
//   follows for each earlier attempt.
// - A culprit killed by a SIGKILL flowrun did not send gets a line about the
//   kernel's out-of-memory killer, with its peak memory.
// - A culprit whose stderr tail or error file holds Lightning's devices *
//   num_nodes error gets lightning_devices_hint's line after them; one whose
//   stderr tail or error file holds a ModuleNotFoundError gets
//   missing_module_hint's line.
// - A last attempt whose restart_reason says why flowrun gave up gets
//   "flowrun:   not restarting: REASON" after the ranks (and the stacks).
// - The stderr tail is the culprit's stderr_tail, each line as a terminal
//   shows it (after its last '\r'), or "its stderr was empty".
// - The error file's traceback (`error_file_text` is that file's content, or
//   empty) is shown when parse_error_file finds one that the stderr tail does
//   not already hold.
// - Then the victims, the failures after the culprit grouped by how they
//   ended ("rank 5 (SIGABRT), ranks 6, 7 (exit code 1)"), and, as torchrun
//   lists every failed rank, each of those in rank order with what it left:
//   its headline (one line, as above), then the traceback of its error file
//   (`error_file_texts`: the last attempt's workers' error files, by index;
//   empty where none), or else the last line of its stderr tail; no line for
//   one that left neither. Then the workers that had already succeeded, each
//   of record.notes, and the log directory.
// - timed_out: "flowrun: step 'train' timed out after 30s; flowrun stopped
//   ranks 0-7" (the timeout written as in a spec: 90s, 1h30m, 1.5s), with no
//   per-rank output but the log directory. interrupted: "flowrun: step 'train'
//   was interrupted; flowrun stopped ranks 0-3". A plain step says "flowrun
//   stopped it (pid 42)" and shows its stderr tail. Should a worker have
//   failed on its own first, a line "before that, rank R exited with ..." says so.
//   A timeout names the ranks that look hung, from their silent_s: the ones
//   that wrote nothing the longest (and any within a second of it) and every
//   suspended one: "flowrun:   rank 1 (stopped) wrote nothing for the last
//   4.9 s, rank 3 for the last 4.8 s" ("it" for a plain step).
// - stalled: "flowrun: step 'train' stalled: " + the stalled ranks as
//   format_stall_message names them + "; flowrun stopped ranks 0-7".
// - After the stacks' line, the last attempt's NCCL flight-recorder dumps,
//   when there are any, as format_nccl_traces_line says them.
// - A failed attempt without a culprit that flowrun stopped because it could
//   not write the run directory says why in the headline: "failed: cannot
//   write rank 0's stdout.log in DIR: No space left on device".
// Rank lists are sorted, runs of three or more written as "2-7". The log
// directory is the step's directory, derived from the workers' log paths
// (<run_dir>/<step>/rank<R>/stderr.log, docs/spec.md "Run directory").
std::string format_failure_report(const StepRecord& record, const std::string& error_file_text,
                                  const std::vector<std::string>& error_file_texts = {});

// The line flowrun prints when a step's stall_timeout finds ranks that wrote
// nothing for that long (`stalled`: their records, with silent_s), grouped by
// node, state and silence, in rank order:
//   flowrun: step 'train' stalled: rank 1 (stopped) wrote nothing for 5.0 s, ranks 2, 3 on node2
//   for 5.1 s (stall_timeout: 5s); stopping the step
// (one line; "it" for a plain step's process).
// "flowrun:   ranks 0, 1, 3 (3 of 4) are in all_reduce (train.py:88); rank 2
// is in load_batch (data.py:41)": the stack groups, the largest first.
std::string format_stacks_line(const StackReport& stacks);

// The line before it when stacks are taken on demand (SIGQUIT, flowrun
// stacks): "flowrun: stacks of step 'train' (4 ranks, by py-spy); nothing
// was stopped", or "...: no rank is running".
std::string stacks_headline(const std::string& step, const StackReport& stacks);

// A step's stacks.json: stacks taken on demand, as results.json's "stacks"
// with the step, when they were asked for and when they were in:
//   {"step": "train", "requested_unix_ns": 1700000000000000000,
//    "taken_unix_ns": 1700000000300000000, "source": "py-spy", "ranks": 4,
//    "groups": [{"ranks": [0, 1, 3], "where": "all_reduce (train.py:88)", "missing": null}, ...]}
// A step's shares.json while it runs: the attempt's wait shares as
// results.json's "wait_shares", with the step, the attempt's restart count
// and when it was written; flowrun status reads it.
std::string wait_shares_document(const std::string& step, int restart_count, const WaitShares& shares,
                                 std::int64_t written_unix_ns);

std::string stacks_document(const std::string& step, const StackReport& stacks,
                            std::int64_t requested_unix_ns, std::int64_t taken_unix_ns);

std::string format_stall_message(const std::string& step, const std::vector<WorkerRecord>& stalled,
                                 double stall_timeout_s);

// The failure report's line about the NCCL flight-recorder dumps of
// `workers` (the last attempt's, in <step dir>/rank<R>/), and how to read
// them with PyTorch's fr_trace,
// whose --prefix picks the attempt's dumps in the step's directory:
//   flowrun:   NCCL flight recorder dumps of ranks 0, 1 (2 of 4): /abs/run/train/rank*/nccl_trace_rank_*;
//   read them with: python -m torch.distributed.flight_recorder.fr_trace -j -p nccl_trace_rank_
//   /abs/run/train
// (one line). -j prints each rank's entries; it is left out when every rank
// has a dump: then fr_trace matches the collectives across the ranks and
// names the ones some rank never joined. nullopt when no worker has a dump.
std::optional<std::string> format_nccl_traces_line(const std::vector<WorkerRecord>& workers);

// The traceback in an error file that torch.distributed.elastic's @record
// (ErrorHandler.record_exception) writes:
//   {"message": {"message": "ValueError: boom",
//                "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1700000000"}}}
// py_callstack when it is a non-empty string, else the inner message; for the
// older shape {"message": "text", "timestamp": N}, the text. nullopt for
// anything else: invalid JSON, other shapes, empty strings.
std::optional<std::string> parse_error_file(const std::string& text);

// The name of a Linux signal: "SIGKILL" for 9, "signal 40" for one without a name.
std::string signal_name(int signal);

// The one line the failure report adds after the culprit's stderr when `text`
// (its stderr tail or error file) holds Lightning's error for a Trainer whose
// devices * num_nodes differs from the launcher's WORLD_SIZE, as Lightning 2.1
// and later raise it (lightning/fabric/plugins/environments/torchelastic.py,
// TorchElasticEnvironment.validate_settings):
//   ValueError: You set `devices=3` and `num_nodes=1` in Lightning, but the
//   product (3 * 1) does not match the world size (2).
// It says which numbers match the step's workers (`workers`: one record per
// rank; their `node` tells the nodes apart, all empty for one node):
//   flowrun:   Lightning's Trainer(devices=3, num_nodes=1) must multiply to this step's
//   2 workers (1 node x 2 per node): set devices=2, num_nodes=1, or change the step's
//   parallel: to run 3 workers (1 node x 3 per node)
// (one line). Lightning 1.9 has no such check. nullopt when `text` does not
// hold the error.
std::optional<std::string> lightning_devices_hint(std::string_view text,
                                                  const std::vector<WorkerRecord>& workers);

// The one line the failure report adds after the culprit's stderr when
// `text` (its stderr tail or error file) holds Python's
//   ModuleNotFoundError: No module named 'torch'
// (the last one, for a module name of letters, digits, '_' and '.'): which
// Python the worker `w` ran, from its command, program and path_python, and
// how to choose another. A program whose file name starts with "python":
//   flowrun:   rank 1 ran /opt/conda/bin/python3 (python3 as found on its PATH), which has no
//   module 'torch': choose the Python that has it with --python PY (flowrun run, flowrun SPEC)
//   or python: PY in the spec
// ("(python3 ...)" only when the run named it without a '/'). Any other
// program (a shell: true script, a #! script):
//   flowrun:   rank 1 ran /bin/sh, not Python itself; python3 on its PATH is
//   /opt/conda/bin/python3: if that is the Python without module 'torch', write the full path
//   of the one that has it in the step's run: (--python and python: replace only a run that
//   starts with python or python3)
// ("and its PATH has no python3" when there is none). "rank 1 on node2" for
// a rank on another node, "it" for a plain step's process; without a
// program (it never started): "the Python rank 1 ran has no module ...".
// One line; nullopt when `text` holds no such error.
std::optional<std::string> missing_module_hint(std::string_view text, const WorkerRecord& w);

}  // namespace flowrun
