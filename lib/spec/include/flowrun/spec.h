// The flow spec: what a user writes in train.yaml, as plain data.
//
// parse_spec() reads YAML text and checks everything that can be checked
// without looking at the machine: types, unknown and duplicate keys, step
// names, dependencies and cycles, joins, templates, globs. It reports every
// problem it finds at once, each with file, line and column; it never throws
// on bad input. The format is documented in docs/spec.md; the JSON Schema in
// specs/schema/flowrun.schema.json mirrors it for editors.
//
// Only this module includes yaml-cpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flowrun/error.h"

namespace flowrun {

// An ordered list of NAME=VALUE pairs (spec order is kept, later wins on use).
using EnvList = std::vector<std::pair<std::string, std::string>>;

// `gpus:` of a parallel step.
struct GpuRequest {
  enum class Kind { all, count, ids };
  Kind kind = Kind::all;
  int count = 0;                 // Kind::count: the step's total over all nodes
  std::vector<std::string> ids;  // Kind::ids: CUDA ordinals ("0") or UUIDs ("GPU-8f3a...")
  bool is_set = false;           // written in the spec (false: the default `all`)
  Location loc;                  // of the value, or of `parallel:` when defaulted
};

// `nodes:` and `procs_per_node:`: `auto` or a positive count.
struct AutoCount {
  std::optional<int> value;  // nullopt = auto
  Location loc;
  bool is_auto() const { return !value.has_value(); }
};

// Which GPUs a worker's CUDA_VISIBLE_DEVICES shows.
enum class Visibility {
  node,     // all of the node's selected GPUs, as torchrun does (default)
  process,  // only the worker's own GPUs (breaks scripts that index cuda:LOCAL_RANK)
};

// `restart:` of a parallel step: which failures are worth a restart and what
// counts as progress (docs/spec.md, "restart"). Without it, torchrun's rule:
// every failure restarts while max_restarts allows.
struct RestartPolicy {
  bool is_set = false;  // the spec has `restart:`
  // restart.causes: the root causes that restart (result.h's FailureCause by
  // name; node_lost is refused: a step restarts only on every node it had).
  bool on_exception = true;
  bool on_exit_code = true;
  bool on_signal = true;
  // restart.exit_codes: these exit codes restart even when causes leaves
  // exit_code out (1-255, each at most once, in the order written).
  std::vector<int> exit_codes;
  // restart.min_attempt: an attempt shorter than this that fails the way the
  // one before did made no progress.
  std::optional<double> min_attempt_s;
  // restart.progress_file: a file the script writes (its checkpoint): an
  // attempt during which it did not change made no progress. `progress_file`
  // is absolute (against the step's workdir), `progress_file_text` as written.
  std::string progress_file;
  std::string progress_file_text;
  Location loc;  // of the `restart:` key
};

struct ParallelSpec {
  GpuRequest gpus;
  AutoCount nodes;  // with a range (`nodes: "MIN:MAX"`), MAX
  // `nodes: "MIN:MAX"`, torchrun's elastic --nnodes: the step starts on as
  // many nodes as join (at most MAX) and goes on after a lost node while
  // MIN remain (docs/recovery.md). 0: a fixed count.
  int min_nodes = 0;
  AutoCount procs_per_node;
  std::optional<int> cpus;  // CPU workers in total; only when asked for
  Location cpus_loc;
  int max_restarts = 0;
  RestartPolicy restart;
  // Nodes beyond `nodes` whose agents join and wait with no rank: one takes
  // the place of a lost node, and the step restarts on it (docs/recovery.md).
  int spare_nodes = 0;
  Location spare_nodes_loc;
  Visibility visible_devices = Visibility::node;
  // `preflight: true`: before the workers start, flowrun doctor's NCCL check
  // runs on the step's GPUs, and a failure refuses the step (docs/gpu.md).
  bool preflight = false;
  // `node_checks: false`: a step across nodes starts without each agent's
  // check of its node (GPUs, free space, torch; docs/reliability.md).
  bool node_checks = true;
  // torchrun's --role and --rdzv-id: the workers' ROLE_NAME (default
  // "default") and TORCHELASTIC_RUN_ID (empty: the run id).
  std::string role = "default";
  std::string job_id;
  Location loc;  // of the `parallel:` key
};

enum class Collect { rank0, all };

// The default time between two samples of a rank's stack (forensics'
// `sample`).
inline constexpr double kDefaultSampleS = 1;
inline constexpr double kMinSampleS = 0.1;

// `forensics:` of a parallel step: what flowrun gathers about a hang or a
// failure for the report. `forensics: nccl` is the defaults with `nccl`,
// `forensics: off` the defaults without `stacks` and without samples.
struct Forensics {
  // Every live rank's Python stack (py-spy) before flowrun signals the ranks
  // on a stall, a timeout or a failure, within `timeout_s` for all of them.
  bool stacks = true;
  double timeout_s = 3;
  // NCCL's flight recorder: ProcessGroupNCCL records its collectives and
  // dumps them into each rank's directory on a timeout (worker_env).
  bool nccl = false;
  // One sample of each rank's Python stack every sample_s seconds on
  // average while the step runs (py-spy, without pausing the rank), to name
  // the slow rank; 0: none (`sample: off`, or `forensics: off`).
  double sample_s = kDefaultSampleS;
  Location loc;  // of the value; line 0 when the step has no `forensics:`
  bool is_default() const { return stacks && timeout_s == 3 && !nccl && sample_s == kDefaultSampleS; }
};

struct Step {
  std::string name;
  Location loc;  // of the step's list item

  // What to run. Without `shell`, `argv` is the command (a YAML list as is, a
  // string split as sh splits words). With `shell: true`, `script` is handed
  // to /bin/sh -c and `argv` is empty.
  std::vector<std::string> argv;
  std::string script;
  bool shell = false;
  // `run` starts with `python` or `python3` (not a shell script): the word
  // the spec's `python:` (or --python) replaces.
  bool python_command = false;
  Location run_loc;

  EnvList env;
  std::string workdir;              // absolute; defaults to the spec's workdir
  std::vector<std::string> needs;   // step names; defaults to the previous step
  std::optional<double> timeout_s;  // seconds
  // A worker that writes nothing to stdout or stderr for this long (seconds)
  // stops the step as a timeout does.
  std::optional<double> stall_timeout_s;

  std::optional<ParallelSpec> parallel;
  std::vector<std::string> outputs;  // globs relative to workdir (parallel steps)
  // Files the ranks read, as globs relative to workdir (parallel steps): what
  // the head ships to a node that does not share the workdir.
  std::vector<std::string> inputs;
  Collect collect = Collect::rank0;
  // logs.console: the ranks whose output the console shows (all when unset);
  // every rank's output always goes to its log files. --ranks overrides it.
  std::optional<std::vector<int>> console_ranks;
  // logs.fold: how long a rank's console line waits for the other ranks to
  // print it too, to be shown once with their ranks; 0: not folded; unset:
  // kDefaultFoldS. --no-fold overrides it.
  std::optional<double> fold_s;
  Forensics forensics;  // parallel steps

  std::string join;  // name of the parallel step this step joins; empty if none
  Location join_loc;

  bool is_parallel() const { return parallel.has_value(); }
};

// gang: nodes a scheduler other than flowrun started (a Kubernetes Indexed
// Job, ... : lib/gang), every one running the same command; node 0 is the
// head and the others join it by themselves.
enum class Engine { slurm, ssh, manual, gang };

// cluster.shared_workdir: whether every node sees the head's workdir.
//   yes   a node that does not is an error (the check's marker file)
//   no    the head ships each step's inputs to every node but the one on
//         its own host, and their ranks run in the agent's scratch copy
//   detect  ship to a node that does not, where the engine allows it
//         (NodeStep::ship_when_not_shared); elsewhere as yes
enum class SharedWorkdir { detect, yes, no };

struct ClusterSpec {
  Engine engine = Engine::slurm;
  // ssh: the nodes, in node-rank order. From `hosts:`, or read from `hostfile:`
  // by load_spec (parse_spec does no I/O and leaves it empty then).
  std::vector<std::string> hosts;
  // ssh: `hostfile:` as an absolute path (a relative one is resolved against
  // the spec's directory); empty when the spec has none.
  std::string hostfile;
  std::optional<int> gpus_per_node;  // for a head that has no GPUs itself
  // ssh: the argv prefix, as written; empty when the spec does not set it (the
  // runner then uses FLOWRUN_SSH, else "ssh").
  std::vector<std::string> ssh_command;
  std::vector<std::string> srun_args;  // slurm: extra srun arguments
  // The address the head listens on and agents dial; nullopt: flowrun chooses.
  std::optional<std::string> address;
  double heartbeat_timeout_s = 10;  // an agent and the head give up on each other after this silence
  double join_timeout_s = 300;      // how long the head waits for every agent to connect
  // An elastic step (nodes: "MIN:MAX"): once MIN nodes joined, how long the
  // head waits for more before it starts with those (torchrun's rendezvous
  // last_call_timeout).
  double last_call_timeout_s = 30;
  SharedWorkdir shared_workdir = SharedWorkdir::detect;  // auto, true, false
  // Set by `flowrun run` for a torchrun-style rendezvous (not a spec key):
  // every node runs the same command and node 0's flowrun is the head. It
  // listens on the port of `rendezvous` (HOST:PORT) on every address, starts
  // node 0's agent itself, and leaves the run's token in
  // `rendezvous_token_file` (under the shared workdir) for the others.
  std::string rendezvous;
  std::string rendezvous_token_file;
  // A socket that listens on the port of `rendezvous` already, or -1: flowrun
  // run without --node-rank bound it, and became the head by getting it
  // (another flowrun there first makes this one join instead). The head's
  // listener takes it over.
  int rendezvous_fd = -1;
  Location loc;        // of the `cluster:` key
  Location hosts_loc;  // of the `hosts:` or `hostfile:` value, else of `cluster:`
};

struct Spec {
  std::string file;  // as the user named it
  std::string dir;   // absolute directory of the file
  std::string name;  // defaults to the file's stem
  EnvList env;
  std::string workdir;  // absolute; defaults to `dir`
  // `python:`: the interpreter for steps whose run starts with python or
  // python3 (a path, absolute once parsed, or a name looked up on PATH);
  // empty: those words are looked up on PATH as written.
  std::string python;
  std::vector<Step> steps;         // in file order
  std::vector<std::size_t> order;  // indices into `steps`, dependencies first
  std::optional<ClusterSpec> cluster;
  // The text it was parsed from: what the run keeps as its spec.yaml. The
  // file is read once (it may be a FIFO, `flowrun <(make-spec)`, or change
  // on disk while the run goes on).
  std::string text;

  const Step* find_step(std::string_view name) const;
};

struct SpecParse {
  std::optional<Spec> spec;             // set when there are no diagnostics
  std::vector<Diagnostic> diagnostics;  // sorted by position
};

// Parses and validates spec text. `file` is used in diagnostics; `dir` is the
// absolute directory relative paths are resolved against. Never throws on bad
// input (only on out-of-memory).
SpecParse parse_spec(std::string_view text, const std::string& file, const std::string& dir);

// Reads `path` and parses it. An unreadable file is one diagnostic.
SpecParse load_spec(const std::string& path);

// The largest spec file accepted, in bytes.
inline constexpr std::size_t kMaxSpecBytes = 1 << 20;

// logs.fold: a line waits this long by default for the other ranks to print
// it too (a fraction of a second: ranks that print together do so within
// milliseconds), and at most kMaxFoldS.
inline constexpr double kDefaultFoldS = 0.2;
inline constexpr double kMaxFoldS = 60;

// A `${...}` template found in a step's run.
struct Placeholder {
  enum class Kind { step_outputs, args };
  Kind kind;
  std::string step;  // step_outputs: the parallel step named
};

// The flowrun templates in `text`, in order. Other `${...}` (shell variables)
// are not flowrun's and are left alone. Returns nullopt with *error set for a
// malformed flowrun template such as `${steps.train}`.
std::optional<std::vector<Placeholder>> find_placeholders(std::string_view text, std::string* error);

// `text` with every `${` written `$${`, the escape for a literal `${`: no
// template is read in the result, and a run word expands to `text` again.
std::string escape_templates(std::string_view text);

// Writing a spec that reads back as given (flowrun init, flowrun run):
// `text`, valid UTF-8, as a YAML double-quoted scalar that yaml-cpp reads
// back byte for byte, whatever it holds (`null`, `~`, `- x`, `#`, a newline,
// an empty string, controls).
std::string yaml_quoted(std::string_view text);

// One word of a `run:` list that parse_spec() and expand_command() make
// `word` again, byte for byte: its templates escaped, then quoted; a word
// that is not UTF-8 (a spec is UTF-8 text) as `!!binary` base64.
std::string spec_word(std::string_view word);

// Makes `python` the interpreter of every step whose run starts with python
// or python3 (Step::python_command), as `python:` or --python ask.
void use_python(Spec& spec, const std::string& python);

// `python:` as the runner uses it: a value with a '/' is a path, made
// absolute against `dir`; a bare name is left to PATH.
std::string python_path(const std::string& python, const std::string& dir);

// The name of an engine as written in a spec ("slurm", "ssh", "manual").
std::string_view engine_name(Engine engine);

}  // namespace flowrun
