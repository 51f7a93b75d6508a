// flowrun run: torchrun's command line, so that `torchrun ARGS` becomes
// `flowrun run ARGS`; and flowrun init, which writes the same thing as a spec.
//
// Both read torchrun's options up to the script (every option in both
// spellings, --nproc-per-node and --nproc_per_node; --opt VALUE or
// --opt=VALUE), then turn them into a one-step flow: a spec text that goes
// through the same parser, planner and runner as a spec the user wrote. What
// `flowrun run` does is therefore exactly what `flowrun init` writes, and
// `--dry-run` shows its plan.
//
// Several nodes meet the way torchrun's do: inside a Slurm allocation this
// flowrun starts the other nodes itself (srun); with --rdzv-endpoint or
// --master-addr every node runs the same command, node 0's flowrun is the head
// (--node-rank 0, or the first on the endpoint's host to bind its port) and
// the others join it as agents (docs/migrating.md).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <iostream>
#include <netdb.h>
#include <netinet/in.h>
#include <optional>
#include <set>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>

#include "flowrun/cluster.h"
#include "flowrun/error.h"
#include "flowrun/flow.h"
#include "flowrun/gpu.h"
#include "flowrun/process.h"
#include "flowrun/report.h"
#include "flowrun/slurm.h"
#include "flowrun/supervisor.h"

#include "commands.h"
#include "one_step.h"
#include "summary.h"

namespace flowrun {

namespace {

constexpr int kDefaultMasterPort = 29500;  // torchrun's

// What the command line asked for.
struct Request {
  // torchrun's options
  std::string nproc;  // empty: not given
  std::string nnodes;
  std::optional<int> node_rank;
  std::string master_addr;
  std::optional<int> master_port;
  std::string rdzv_endpoint;
  std::string rdzv_id;
  std::string role;  // empty: not given (torchrun's "default")
  std::string rdzv_backend;
  std::string rdzv_conf;
  std::optional<int> max_restarts;
  // the step's timeout and stall_timeout (flowrun's own, written into the spec)
  std::string timeout;
  std::string stall_timeout;
  bool standalone = false;
  std::string log_dir;
  std::string redirects;  // torchrun's Std values or maps ("3", "0:1,1:2")
  std::string tee;
  std::string local_ranks_filter;
  std::string numa_binding;  // empty: none
  bool virtual_local_rank = false;
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  std::string python;
  std::string local_addr;
  std::optional<std::vector<int>> stop_signals;  // --signals-to-handle
  // flowrun's own
  bool dry_run = false;
  std::optional<double> grace_s;
  std::string ranks;
  std::string color = "auto";
  std::string run_id;
  std::string run_dir;
  int fake_gpus = -1;
  int cpus = 0;
  std::string output;  // init: -o
  bool force = false;  // init: --force
  // What to run: a script and its arguments, a module, a program, or a spec.
  std::vector<std::string> command;
  std::string spec_path;
  std::vector<std::string> spec_args;
  std::vector<std::string> notes;     // options accepted with no effect, said once on stderr
  std::vector<std::string> from_env;  // the options whose value came from a PET_ variable
};

enum class Arg { value, flag };

// Which of the two commands take an option.
enum class For { both, run, init };

// Whose option it is: torchrun's read a PET_<NAME> variable when the command
// line leaves them out, as torchrun's `env` and `check_env` argparse actions
// do (PET_NPROC_PER_NODE, PET_NO_PYTHON=1); flowrun's own read none.
enum class Own { torchrun, flowrun };

// One row per option: Parser declares them to CLI11 in this order (the
// order of --help), every long name also in torchrun's underscore spelling;
// set_option() applies what was given. tests/e2e/test_torchrun.py checks that
// every option of torchrun's parser is here.
struct OptionDef {
  std::string_view name;  // with dashes: "nproc-per-node"
  Arg arg;
  std::string_view meta;
  std::string_view help;
  For where = For::both;
  char short_name = 0;  // 'm' for -m
  Own own = Own::torchrun;
};

// The order is --help's.
constexpr OptionDef kOptions[] = {
    {"nproc-per-node", Arg::value, "N|auto|gpu|cpu",
     "Workers per node: a number; gpu (one per GPU), cpu (one per CPU core), auto (gpu when the host has "
     "GPUs, else cpu). Default: one per GPU of this node, or 1 on a host without GPUs"},
    {"nnodes", Arg::value, "N|MIN:MAX",
     "Nodes: N, or an elastic range MIN:MAX (starts with as many as join, goes on after a loss while MIN "
     "remain). Default 1"},
    {"node-rank", Arg::value, "N",
     "This node's rank, with --master-addr or --rdzv-endpoint (0 runs the head). Without it, the first "
     "flowrun run on the endpoint's host to bind its port is node 0, and the others take the next free "
     "rank as they join (several on one host too)"},
    {"master-addr", Arg::value, "HOST",
     "Node 0's address, where the other nodes meet it (static rendezvous)"},
    {"master-port", Arg::value, "PORT", "The port node 0 listens on for the other nodes (default 29500)"},
    {"rdzv-endpoint", Arg::value, "HOST[:PORT]",
     "Where the nodes meet: node 0's HOST:PORT (default port 29500)"},
    {"rdzv-id", Arg::value, "ID",
     "The job's id: every worker's TORCHELASTIC_RUN_ID (flowrun's own run id, FLOWRUN_RUN_ID, is made "
     "from it)"},
    {"rdzv-backend", Arg::value, "c10d|static",
     "Accepted for torchrun's sake; flowrun has its own rendezvous"},
    {"rdzv-conf", Arg::value, "K=V,...",
     "join_timeout=SECONDS and last_call_timeout=SECONDS are used; other keys are not"},
    {"max-restarts", Arg::value, "N", "Restart every worker this many times at most when one fails"},
    {"standalone", Arg::flag, "", "One node, rendezvous on this host (the default for one node)"},
    {"log-dir", Arg::value, "DIR", "Put the run directory (every rank's logs, results.json) under DIR"},
    {"tee", Arg::value, "N|MAP",
     "Show these streams on the console although redirected: 1 stdout, 2 stderr, 3 both; per local rank "
     "0:3,1:2",
     For::both, 't'},
    {"redirects", Arg::value, "N|MAP",
     "Keep these streams off the console (the log files always have both): 0 none, 1 stdout, 2 stderr, "
     "3 both; per local rank 0:1,1:2",
     For::both, 'r'},
    {"local-ranks-filter", Arg::value, "LIST", "Show only these local ranks on the console (0,2 or 0-3)"},
    {"duplicate-stdout-filters", Arg::value, "S,...",
     "Accepted: grep the ranks' stdout.log in the run directory instead"},
    {"duplicate-stderr-filters", Arg::value, "S,...",
     "Accepted: grep the ranks' stderr.log in the run directory instead"},
    {"numa-binding", Arg::value, "MODE",
     "Bind each worker to CPUs near its GPU: node (its NUMA node's), socket, exclusive (cores split per "
     "GPU)"},
    {"virtual-local-rank", Arg::flag, "",
     "Every worker sees its own GPU alone, as cuda:0, with LOCAL_RANK=0 (one node)"},
    {"module", Arg::flag, "", "Run the script as a Python module (python -m MODULE)", For::both, 'm'},
    {"no-python", Arg::flag, "", "Run the program itself, not through Python"},
    {"run-path", Arg::flag, "",
     "Run the script through Python (torchrun: runpy.run_path in its own interpreter); wins over -m and "
     "--no-python"},
    {"local-addr", Arg::value, "ADDR", "The address node 0 listens on (default: every address)"},
    {"monitor-interval", Arg::value, "S", "Accepted: flowrun learns of every exit at once, it does not poll"},
    {"start-method", Arg::value, "M", "Accepted: workers are always new processes (fork and exec)"},
    {"event-log-handler", Arg::value, "NAME",
     "Accepted: flowrun records every rank's start and end in the run directory, not as torchelastic events"},
    {"logs-specs", Arg::value, "NAME",
     "Accepted: every rank's logs go to the run directory; torchrun's LogsSpecs plugins are not loaded"},
    {"role", Arg::value, "R", "The workers' role: their ROLE_NAME (default: default)"},
    {"signals-to-handle", Arg::value, "LIST",
     "Stop signals flowrun handles (default SIGTERM,SIGINT,SIGHUP); one left out is ignored. SIGQUIT "
     "stops too when listed; unlisted, it takes every rank's stack (flowrun stacks). SIGUSR1 and SIGUSR2 "
     "always go on to the workers",
     For::run},
    {"shutdown-timeout", Arg::value, "SECONDS",
     "torchrun's name for --grace (its default is 30; TORCH_ELASTIC_SHUTDOWN_TIMEOUT is read as well)",
     For::run},
    {"python", Arg::value, "PY",
     "The Python to run the script with (default: PYTHON_EXEC, else python3 on PATH)", For::both, 0,
     Own::flowrun},
    {"dry-run", Arg::flag, "", "Show the plan (where every rank runs, and why) and run nothing", For::run, 0,
     Own::flowrun},
    {"json", Arg::flag, "", "Print the run's summary as JSON on stdout; the console's lines all go to stderr",
     For::run, 0, Own::flowrun},
    {"summary-json", Arg::value, "FILE",
     "Write the run's summary as JSON to FILE when flowrun ends, whatever the outcome (docs/cli.md)",
     For::run, 0, Own::flowrun},
    {"grace", Arg::value, "SECONDS", "Between SIGTERM and SIGKILL when workers are stopped (default 10)",
     For::run, 0, Own::flowrun},
    {"timeout", Arg::value, "DURATION",
     "Stop the workers when the step runs longer than this (90, 90s, 30m, 1h30m); exit 124", For::both, 0,
     Own::flowrun},
    {"stall-timeout", Arg::value, "DURATION",
     "Stop the workers when a rank has written nothing for this long (a hang); the report names the "
     "silent ranks; exit 124",
     For::both, 0, Own::flowrun},
    {"ranks", Arg::value, "LIST", "Ranks shown on the console (all, 0, 0,2, 0-3)", For::run, 0, Own::flowrun},
    {"color", Arg::value, "WHEN", "auto, always or never", For::run, 0, Own::flowrun},
    {"run-id", Arg::value, "ID", "Use this run id", For::run, 0, Own::flowrun},
    {"run-dir", Arg::value, "DIR", "Run directory (default: .flowrun/runs/RUN_ID)", For::run, 0,
     Own::flowrun},
    {"fake-gpus", Arg::value, "N", "Pretend this host has N GPUs (dry runs, tests)", For::both, 0,
     Own::flowrun},
    {"cpus", Arg::value, "N", "N CPU workers in total instead of GPU workers", For::both, 0, Own::flowrun},
    {"output", Arg::value, "FILE", "The spec to write (default: SCRIPT's name with .yaml)", For::init, 'o',
     Own::flowrun},
    {"force", Arg::flag, "", "Overwrite the spec if it exists", For::init, 0, Own::flowrun},
};

bool takes(const OptionDef& def, bool init) {
  return def.where == For::both || (def.where == For::init) == init;
}

const OptionDef* find_option(std::string_view name) {
  for (const auto& def : kOptions) {
    if (def.name == name) return &def;
  }
  return nullptr;
}

[[noreturn]] void usage_error(const std::string& command, const std::string& message) {
  throw Error(message + "\nRun 'flowrun " + command + " --help' for usage.", kExitUsage);
}

// `said` is how the value was given ("--node-rank x", "PET_NODE_RANK=x").
int whole(const std::string& command, const std::string& said, const std::string& text, int lo, int hi) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < lo || value > hi)
    usage_error(command, fmt::format("{}: expected a whole number from {} to {}", said, lo, hi));
  return value;
}

int parse_int(const std::string& command, const std::string& option, const std::string& text, int lo,
              int hi) {
  return whole(command, "--" + option + " " + text, text, lo, hi);
}

bool is_spec_file(const std::string& path) {
  auto ends = [&](std::string_view suffix) {
    return path.size() > suffix.size() &&
           path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends(".yaml") || ends(".yml");
}

// torchrun's --duplicate-stdout-filters copies the console's matching lines
// to one file under its log directory; flowrun's log files have every line.
std::string duplicate_filters_note(const std::string& name) {
  const std::string stream = name == "duplicate-stdout-filters" ? "stdout" : "stderr";
  return "--" + name + " has no effect: every rank's " + stream +
         " is whole in its own log file; grep them (grep -h WORD RUN_DIR/STEP/rank*/" + stream + ".log)";
}

// torchrun's --numa-binding policies: flowrun implements all but core-complex.
std::string numa_binding(const std::string& command, const std::string& value) {
  if (value == "core-complex")
    usage_error(command,
                "--numa-binding core-complex: flowrun does not read the CPUs' cache topology, which it "
                "needs (torchrun binds each worker to a group of cores sharing an L3 cache); use node, "
                "socket or exclusive");
  if (value != "node" && value != "socket" && value != "exclusive")
    usage_error(command, "--numa-binding " + value +
                             ": expected node, socket or exclusive (torchrun's core-complex "
                             "is not implemented)");
  return value;
}

// flowrun's own options (Own::flowrun), which no PET_ variable gives.
void set_own_option(Request& r, const std::string& command, const std::string& name,
                    const std::string& value) {
  if (name == "python") {
    r.python = value;
  } else if (name == "timeout") {
    r.timeout = value;
  } else if (name == "stall-timeout") {
    r.stall_timeout = value;
  } else if (name == "dry-run") {
    r.dry_run = true;
  } else if (name == "json" || name == "summary-json") {
    // Read before the command line is parsed (summary_request), so that a
    // usage error gets its summary too.
    if (name == "summary-json" && value.empty()) usage_error(command, "--summary-json needs a FILE");
  } else if (name == "grace") {
    const auto g = parse_seconds(value, 0, 3600);
    if (!g) usage_error(command, "--grace " + value + ": expected seconds from 0 to 3600");
    r.grace_s = *g;
  } else if (name == "ranks") {
    r.ranks = value;
  } else if (name == "color") {
    if (value != "auto" && value != "always" && value != "never")
      usage_error(command, "--color " + value + ": expected auto, always or never");
    r.color = value;
  } else if (name == "run-id") {
    if (auto problem = run_id_problem(value)) usage_error(command, "--run-id: " + *problem);
    r.run_id = value;
  } else if (name == "run-dir") {
    r.run_dir = value;
  } else if (name == "fake-gpus") {
    r.fake_gpus = parse_int(command, name, value, 0, 1024);
  } else if (name == "cpus") {
    r.cpus = parse_int(command, name, value, 1, 4096);
  } else if (name == "output") {
    r.output = value;
  } else if (name == "force") {
    r.force = true;
  }
}

// Where a value came from: the command line, or a PET_ variable (a torchrun
// option's default).
struct Given {
  const OptionDef& def;
  std::string value;
  bool from_env = false;
  // How the user gave it, for messages: "--node-rank x" or "PET_NODE_RANK=x".
  std::string said() const;
};

// torchrun's variable for an option: PET_ and argparse's dest in upper case.
std::string pet_name(const OptionDef& def) {
  std::string name = "PET_" + std::string(def.name);
  for (char& c : name) c = c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

std::string Given::said() const {
  if (from_env) return pet_name(def) + "=" + value;
  return "--" + std::string(def.name) + (def.arg == Arg::value ? " " + value : std::string());
}

void set_option(Request& r, const std::string& command, const Given& given) {
  const OptionDef& def = given.def;
  const std::string& value = given.value;
  const std::string name(def.name);
  const std::string said = given.said();
  // An option with no effect says so when typed, not when a PET_ variable
  // of the environment sets it on every run.
  auto note = [&](const std::string& text) {
    if (!given.from_env) r.notes.push_back(text);
  };
  if (given.from_env) r.from_env.push_back(name);
  if (name == "nproc-per-node") {
    r.nproc = value;
  } else if (name == "nnodes") {
    r.nnodes = value;
  } else if (name == "node-rank") {
    r.node_rank = whole(command, said, value, 0, 65535);
  } else if (name == "master-addr") {
    r.master_addr = value;
  } else if (name == "master-port") {
    r.master_port = whole(command, said, value, 1, 65535);
  } else if (name == "rdzv-endpoint") {
    r.rdzv_endpoint = value;
  } else if (name == "rdzv-id") {
    r.rdzv_id = value;
  } else if (name == "rdzv-backend") {
    if (value != "c10d" && value != "static")
      usage_error(command, said +
                               ": flowrun meets the nodes itself, as torchrun's c10d and static backends do; "
                               "use c10d or static (or leave it out)");
    r.rdzv_backend = value;
  } else if (name == "rdzv-conf") {
    r.rdzv_conf = value;
  } else if (name == "max-restarts") {
    r.max_restarts = whole(command, said, value, 0, 1000);
  } else if (name == "standalone") {
    r.standalone = true;
  } else if (name == "log-dir") {
    r.log_dir = value;
  } else if (name == "tee") {
    r.tee = value;
  } else if (name == "redirects") {
    r.redirects = value;
  } else if (name == "local-ranks-filter") {
    r.local_ranks_filter = value;
  } else if (name == "duplicate-stdout-filters" || name == "duplicate-stderr-filters") {
    if (!value.empty()) note(duplicate_filters_note(name));
  } else if (name == "numa-binding") {
    r.numa_binding = numa_binding(command, value);
  } else if (name == "virtual-local-rank") {
    r.virtual_local_rank = true;
  } else if (name == "module") {
    r.module = true;
  } else if (name == "no-python") {
    r.no_python = true;
  } else if (name == "run-path") {
    r.run_path = true;
  } else if (name == "local-addr") {
    r.local_addr = value;
  } else if (name == "monitor-interval") {
    note("--monitor-interval has no effect: flowrun learns of every worker's exit at once");
  } else if (name == "start-method") {
    if (value != "spawn" && value != "fork" && value != "forkserver")
      usage_error(command, said + ": torchrun's start methods are spawn, fork and forkserver");
    note("--start-method has no effect: every worker is a new process (fork and exec)");
  } else if (name == "event-log-handler") {
    note(
        "--event-log-handler has no effect: flowrun records every rank's start and end in the run "
        "directory (results.json), not as torchelastic events");
  } else if (name == "logs-specs") {
    note(
        "--logs-specs has no effect: every rank's logs go to the run directory (rankR/stdout.log, "
        "stderr.log); torchrun's LogsSpecs plugins are not loaded");
  } else if (name == "role") {
    if (value.empty() || value.find('\n') != std::string::npos)
      usage_error(command, said + ": expected a name on one line (the workers' ROLE_NAME)");
    r.role = value;
  } else if (name == "signals-to-handle") {
    std::string error;
    r.stop_signals = parse_signals_to_handle(value, &error);
    if (!r.stop_signals) usage_error(command, said + ": " + error);
  } else if (name == "shutdown-timeout") {
    r.grace_s = whole(command, said, value, 0, 3600);
  } else {
    set_own_option(r, command, name, value);
  }
}

// The PET_ variables of torchrun's options that the command line left out,
// as torchrun's argparse actions read them: a value option's is its value
// (empty: not set); a flag's is a number, set unless 0 (or true / false).
std::vector<Given> environment_defaults(const std::vector<const OptionDef*>& typed, bool init,
                                        const std::string& command) {
  std::vector<Given> out;
  for (const auto& def : kOptions) {
    if (def.own != Own::torchrun || !takes(def, init)) continue;
    if (std::find(typed.begin(), typed.end(), &def) != typed.end()) continue;
    const std::string var = pet_name(def);
    const char* raw = std::getenv(var.c_str());
    if (raw == nullptr || *raw == '\0') continue;
    std::string value = raw;
    if (def.arg == Arg::flag) {
      std::string lower = value;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      long number = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), number);
      const bool numeric = ec == std::errc() && end == value.data() + value.size();
      if (!numeric && lower != "true" && lower != "false")
        usage_error(command, var + "=" + value + ": expected 1 (set --" + std::string(def.name) +
                                 ") or 0, as torchrun reads it; true and false work too");
      if ((numeric && number == 0) || lower == "false") continue;
    }
    out.push_back({def, value, true});
  }
  return out;
}

// A spec decides its own steps: an option that would shape the step is
// refused rather than ignored, with where the spec says the same. One that a
// PET_ variable of the environment gives is passed over, said in a note.
void refuse_step_options(Request& r, const std::string& spec_path) {
  std::vector<std::pair<std::string, std::string>> given;  // option, where the spec has it
  auto cluster = [](const std::string& key) {
    return "the spec's cluster: (" + (key.empty() ? "" : key + ", ") + "docs/multinode.md)";
  };
  if (!r.nproc.empty()) given.emplace_back("nproc-per-node", "the step's parallel: (gpus:, cpus:)");
  if (!r.nnodes.empty()) given.emplace_back("nnodes", "the step's parallel: (nodes:)");
  if (r.node_rank) given.emplace_back("node-rank", cluster(""));
  if (!r.master_addr.empty()) given.emplace_back("master-addr", cluster(""));
  if (r.master_port) given.emplace_back("master-port", cluster(""));
  if (!r.rdzv_endpoint.empty()) given.emplace_back("rdzv-endpoint", cluster(""));
  if (!r.rdzv_backend.empty()) given.emplace_back("rdzv-backend", cluster(""));
  if (!r.rdzv_conf.empty()) given.emplace_back("rdzv-conf", cluster("join_timeout:"));
  if (!r.rdzv_id.empty()) given.emplace_back("rdzv-id", "the step's parallel: (job_id:)");
  if (r.standalone) given.emplace_back("standalone", "the step's parallel: (one node unless nodes:)");
  if (!r.local_addr.empty()) given.emplace_back("local-addr", cluster("address:"));
  if (r.max_restarts) given.emplace_back("max-restarts", "the step's parallel: (max_restarts:)");
  if (!r.role.empty()) given.emplace_back("role", "the step's parallel: (role:)");
  if (!r.timeout.empty()) given.emplace_back("timeout", "the step's timeout:");
  if (!r.stall_timeout.empty()) given.emplace_back("stall-timeout", "the step's stall_timeout:");
  if (!r.numa_binding.empty() || r.virtual_local_rank)
    usage_error("run", std::string(r.virtual_local_rank ? "--virtual-local-rank" : "--numa-binding") +
                           " shapes the workers of a step that flowrun run builds; a spec (" + spec_path +
                           ") has no key for it yet: run the script itself with flowrun run");
  std::string message;
  for (const auto& [option, where] : given) {
    const OptionDef& def = *find_option(option);
    if (std::find(r.from_env.begin(), r.from_env.end(), option) != r.from_env.end()) {
      r.notes.push_back(pet_name(def) + " is passed over: " + spec_path + " shapes its own steps (" + where +
                        ")");
      continue;
    }
    message += "\n  --" + option + ": write it in " + where;
  }
  if (message.empty()) return;
  message = spec_path + " is a spec, and a spec shapes its own steps:" + message;
  message +=
      "\nWith a spec, flowrun run takes flowrun's own options (--python, --cpus, --fake-gpus, --grace, "
      "--run-id, --run-dir, --log-dir, --ranks, --signals-to-handle, --dry-run); docs/spec.md has every key.";
  usage_error("run", message);
}

const char* kRunUsage = R"(Usage:
  flowrun run [OPTIONS] SCRIPT.py [ARGS]      python3 SCRIPT.py ARGS on every worker
  flowrun run [OPTIONS] -m MODULE [ARGS]      python3 -m MODULE ARGS
  flowrun run [OPTIONS] --no-python PROG ARGS any program; also: flowrun run [OPTIONS] -- PROG ARGS
  flowrun run [OPTIONS] SPEC.yaml [-- ARGS]   a flow spec, as `flowrun SPEC` runs it

Every option has both spellings: --nproc-per-node and --nproc_per_node; --opt VALUE or --opt=VALUE;
and, as torchrun's argparse, any unambiguous prefix (--nproc 2). A torchrun option left out is read
from PET_<NAME> (PET_NPROC_PER_NODE=2, PET_NO_PYTHON=1), as torchrun does; the command line wins.
Options come before the script; everything after it is the script's.)";

const char* kRunFooter = R"(Several nodes (--nnodes N):
  inside a Slurm allocation (salloc, sbatch): run it once; flowrun starts the other nodes with srun.
  anywhere else: run the same command on every node with --rdzv-endpoint HOST:PORT (or --master-addr
  and --master-port); node 0 is the head: with --node-rank 0, or else the first on HOST to bind
  PORT, and the others take node ranks as they join. The run directory must be on a filesystem
  that every node shares: the other nodes read the run's token from it.

Examples:
  flowrun run --nproc-per-node 4 train.py --epochs 3
  flowrun run --nproc_per_node=gpu -m mypkg.train
  flowrun run --dry-run --nnodes 2 train.py        the plan, inside salloc -N2
  flowrun init train.py                            the same as a spec, to add steps and a join

Exit codes: as `flowrun SPEC`: 0, the failing worker's code, 124 timeout, 130/143 interrupted,
2 bad command line (docs/cli.md). How it maps to torchrun: docs/migrating.md.)";

const char* kInitUsage = R"(Usage: flowrun init [OPTIONS] SCRIPT.py [ARGS]

Writes SCRIPT.yaml (or -o FILE): the one-step flow that `flowrun run` with the same options would
run, with a join step to fill in. Refuses to overwrite a file unless --force. Every option has both
spellings: --nproc-per-node and --nproc_per_node; --opt VALUE or --opt=VALUE; any unambiguous prefix.
A torchrun option left out is read from PET_<NAME>, as torchrun does.)";

// CLI11's parser of `flowrun run` or `flowrun init`, from kOptions. A prefix
// command: parsing stops at the first word that is not an option (the script,
// -m's module, --no-python's program, `--`, a spec), and that word and the
// rest are left in remaining(), untouched.
struct Parser {
  explicit Parser(bool init)
      : app(init ? "flowrun init: write a starter spec for a script."
                 : "flowrun run: torchrun's command line. Replace `torchrun` by `flowrun run` and keep the "
                   "rest.",
            init ? "flowrun init" : "flowrun run"),
        values(std::size(kOptions)),
        options(std::size(kOptions), nullptr) {
    use_help_format(app, init ? kInitUsage : kRunUsage);
    app.prefix_command();
    app.set_version_flag("--version", version_line());
    if (!init) app.footer(kRunFooter);
    for (std::size_t i = 0; i < std::size(kOptions); ++i) {
      const OptionDef& def = kOptions[i];
      if (!takes(def, init)) continue;
      std::string names = def.short_name ? std::string("-") + def.short_name + "," : std::string();
      names += "--" + std::string(def.name);
      if (def.name.find('-') != std::string_view::npos) {
        std::string underscored(def.name);
        std::replace(underscored.begin(), underscored.end(), '-', '_');
        names += ",--" + underscored;
      }
      if (def.arg == Arg::flag) {
        options[i] = app.add_flag(names)->description(std::string(def.help))->disable_flag_override();
      } else {
        options[i] = app.add_option(names, values[i], std::string(def.help))
                         ->type_name(std::string(def.meta))
                         ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
      }
    }
  }

  CLI::App app;
  std::vector<std::string> values;    // kOptions' values, by index
  std::vector<CLI::Option*> options;  // kOptions' by index; nullptr for another command's
};

// The first of the words CLI11 left, when it is an option it does not know
// (CLI11 goes on past one): refused, with the closest of this command's.
void refuse_unknown_option(const std::string& command, bool init, const std::string& word) {
  if (word == "--" || word.size() < 2 || word[0] != '-') return;
  if (word[1] != '-') usage_error(command, "unknown option '" + word + "'");
  std::string name = word.substr(2, word.find('=') - 2);
  std::replace(name.begin(), name.end(), '_', '-');  // torchrun's two spellings
  std::vector<std::string> names;
  for (const auto& def : kOptions) {
    if (takes(def, init)) names.emplace_back(def.name);
  }
  std::string message = "unknown option '--" + name + "'";
  if (auto close = closest_match(name, names)) message += "; did you mean --" + *close + "?";
  usage_error(command, message);
}

// The option of kOptions that `word` names ("--nproc_per_node=2", "-m",
// "-r3"), or nullptr; a long name only in full (canonical_words() has made
// the prefixes whole).
const OptionDef* named_option(std::string_view word) {
  if (word.size() >= 2 && word[0] == '-' && word[1] != '-') {
    for (const auto& def : kOptions) {
      if (def.short_name == word[1]) return &def;
    }
    return nullptr;
  }
  if (word.substr(0, 2) != "--") return nullptr;
  std::string name(word.substr(2, word.find('=') - 2));
  std::replace(name.begin(), name.end(), '_', '-');
  return find_option(name);
}

// What a long option's name (without "--" and "=VALUE", either spelling)
// names among this command's options: itself, or as argparse reads a
// prefix, the one option it begins; "help" and "version" too. Several: an
// error that names them, as argparse's "ambiguous option". None: nullopt.
std::vector<std::string> long_candidates(std::string name, bool init) {
  std::replace(name.begin(), name.end(), '_', '-');
  std::vector<std::string> names = {"help", "version"};
  for (const auto& def : kOptions) {
    if (takes(def, init)) names.emplace_back(def.name);
  }
  if (std::find(names.begin(), names.end(), name) != names.end()) return {name};
  std::vector<std::string> candidates;
  for (const auto& candidate : names) {
    if (!name.empty() && candidate.rfind(name, 0) == 0) candidates.push_back(candidate);
  }
  return candidates;
}

std::optional<std::string> resolve_long(const std::string& name, bool init, const std::string& command) {
  const std::vector<std::string> candidates = long_candidates(name, init);
  if (candidates.empty()) return std::nullopt;
  if (candidates.size() == 1) return candidates.front();
  std::string list;
  for (const auto& c : candidates) list += (list.empty() ? "--" : ", --") + c;
  usage_error(command, "ambiguous option '--" + name + "': it could be " + list);
}

// CLI11's ArgumentMismatch said as flowrun says it: "--nproc-per-node needs
// a value (...)" for a value option that ends the command line (where CLI11
// finds one missing), "--standalone takes no value" for --flag=VALUE.
[[noreturn]] void mismatch(const std::string& command, int argc, char** argv, const std::string& said) {
  auto named = [](const OptionDef& def, const std::string& word) { return named_option(word) == &def; };
  const std::string last = argv[argc - 1];
  for (const auto& def : kOptions) {
    if (def.arg == Arg::value && last.find('=') == std::string::npos && named(def, last))
      usage_error(command, "--" + std::string(def.name) + " needs a value (" + std::string(def.meta) + ")");
  }
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    for (const auto& def : kOptions) {
      if (def.arg == Arg::flag && word.find('=') != std::string::npos && named(def, word))
        usage_error(command, "--" + std::string(def.name) + " takes no value");
    }
  }
  usage_error(command, said);
}

// The command line as CLI11 should see it, up to the script: every long
// option by its whole name (argparse's prefixes: --nproc 2 is
// --nproc-per-node 2); a short option's value a word of its own (-r3 and
// -r=3 are -r 3, as argparse reads them); and `--opt=` (an empty value,
// which argparse gives torchrun as "") as `--opt ""`, since CLI11 would take
// the next word, the script, as its value.
std::vector<std::string> canonical_words(int argc, char** argv, bool init, const std::string& command) {
  std::vector<std::string> words(argv, argv + argc);
  for (std::size_t i = 1; i < words.size(); ++i) {
    const std::string word = words[i];
    if (word == "--" || word.size() < 2 || word[0] != '-') break;
    const auto at = static_cast<std::ptrdiff_t>(i);
    if (word[1] != '-') {
      const OptionDef* def = named_option(word);
      if (def == nullptr || !takes(*def, init)) break;  // CLI11 refuses it, or -h
      if (def->arg == Arg::flag) continue;
      if (word.size() == 2) {
        ++i;  // its value, whatever it looks like
        continue;
      }
      words[i] = word.substr(0, 2);
      words.insert(words.begin() + at + 1, word.substr(word[2] == '=' ? 3 : 2));
      ++i;
      continue;
    }
    const std::size_t eq = word.find('=');
    const auto name = resolve_long(word.substr(2, eq - 2), init, command);
    if (!name) break;  // refuse_unknown_option says so
    words[i] = "--" + *name + (eq == std::string::npos ? "" : word.substr(eq));
    const OptionDef* def = find_option(*name);
    if (def == nullptr || def->arg == Arg::flag) continue;
    if (eq == std::string::npos) {
      ++i;
    } else if (eq + 1 == word.size()) {
      words[i].pop_back();
      words.insert(words.begin() + at + 1, std::string());
      ++i;
    }
  }
  return words;
}

// Reads options up to the first word that is not one; that word and
// everything after it are what to run (or a spec and its ${args}).
// Returns nullopt when --help or --version was asked for (and printed).
std::optional<Request> parse_request(int original_argc, char** original_argv, const std::string& command) {
  const bool init = command == "init";
  std::vector<std::string> words = canonical_words(original_argc, original_argv, init, command);
  std::vector<char*> pointers;
  for (auto& word : words) pointers.push_back(word.data());
  const int argc = static_cast<int>(pointers.size());
  char** argv = pointers.data();
  Parser parser(init);
  try {
    parser.app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << parser.app.help();
    return std::nullopt;
  } catch (const CLI::CallForVersion&) {
    std::cout << version_line() << "\n";
    return std::nullopt;
  } catch (const CLI::ArgumentMismatch& e) {
    mismatch(command, argc, argv, e.what());
  } catch (const CLI::ParseError& e) {
    usage_error(command, e.what());
  }
  std::vector<std::string> rest = parser.app.remaining();
  if (!rest.empty()) refuse_unknown_option(command, init, rest.front());
  std::vector<const OptionDef*> typed;
  for (std::size_t i = 0; i < std::size(kOptions); ++i) {
    if (parser.options[i] != nullptr && parser.options[i]->count() > 0) typed.push_back(&kOptions[i]);
  }
  auto was_typed = [&](std::string_view name) {
    return std::any_of(typed.begin(), typed.end(), [&](const OptionDef* def) { return def->name == name; });
  };
  if (was_typed("grace") && was_typed("shutdown-timeout"))
    usage_error(
        command,
        "--grace and --shutdown-timeout are one setting (seconds between SIGTERM and SIGKILL); give one");
  // The environment's defaults first, then the command line over them.
  Request r;
  for (const Given& given : environment_defaults(typed, init, command)) set_option(r, command, given);
  for (const OptionDef* def : typed)
    set_option(r, command, Given{*def, parser.values[static_cast<std::size_t>(def - kOptions)]});
  // torchrun's shutdown timeout when neither option nor PET_ gives one.
  if (const char* shutdown = std::getenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
      !init && !r.grace_s && shutdown != nullptr && *shutdown != '\0')
    r.grace_s = whole(command, std::string("TORCH_ELASTIC_SHUTDOWN_TIMEOUT=") + shutdown, shutdown, 0, 3600);
  // torchrun's --run-path runs the script with Python whatever -m and
  // --no-python say.
  if (r.run_path) r.module = r.no_python = false;
  if (!rest.empty() && rest.front() == "--") {
    r.no_python = true;
    rest.erase(rest.begin());
  }
  if (rest.empty())
    usage_error(command, init ? "no script given: flowrun init SCRIPT.py [torchrun options]"
                              : "nothing to run: flowrun run [options] SCRIPT.py [ARGS], -m MODULE, "
                                "--no-python PROGRAM, -- PROGRAM, or a spec (flowrun run train.yaml)");
  const std::string first = rest.front();
  if (!init && !r.module && !r.no_python && is_spec_file(first)) {
    refuse_step_options(r, first);
    r.spec_path = first;
    for (std::size_t j = 1; j < rest.size(); ++j) {
      if (rest[j] == "--" && j == 1) continue;
      r.spec_args.push_back(rest[j]);
    }
    return r;
  }
  r.command = std::move(rest);
  if (r.module && r.no_python) usage_error(command, "-m and --no-python do not go together");
  return r;
}

// --- from a request to a spec --------------------------------------------------

std::string slug(std::string text) {
  for (char& c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) c = '-';
  }
  while (!text.empty() && !std::isalnum(static_cast<unsigned char>(text.front()))) text.erase(0, 1);
  if (text.empty()) text = "train";
  if (text.size() > 40) text.resize(40);
  return text;
}

// The step's name: the script's, the module's or the program's, without directories or suffix.
std::string step_name(const Request& r) {
  std::string word = r.command.front();
  if (r.module) {
    if (auto dot = word.rfind('.'); dot != std::string::npos) word = word.substr(dot + 1);
    return slug(word);
  }
  if (auto slash = word.rfind('/'); slash != std::string::npos) word = word.substr(slash + 1);
  if (auto dot = word.rfind('.'); dot != std::string::npos && dot > 0) word.resize(dot);
  return slug(word);
}

bool on_path(const std::string& name, const EnvMap& env) {
  const std::string path = env_get(env, "PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (dir.empty()) dir = ".";
    if (access((dir + "/" + name).c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

// --python, else torchrun's PYTHON_EXEC (not with --run-path: torchrun then
// runs the script in its own interpreter), else what PATH has.
std::string python_for(const Request& r, const EnvMap& env) {
  if (!r.python.empty()) return r.python;
  if (auto exec = env_get(env, "PYTHON_EXEC"); exec && !exec->empty() && !r.run_path) return *exec;
  if (on_path("python3", env)) return "python3";
  if (on_path("python", env)) return "python";
  throw Error("no python3 or python on PATH: activate the environment that has torch, or give --python PATH",
              kExitUsage);
}

std::vector<std::string> worker_argv(Request& r, const EnvMap& env) {
  std::vector<std::string> argv;
  if (!r.no_python) {
    argv.push_back(python_for(r, env));
    if (r.module) argv.emplace_back("-m");
  }
  argv.insert(argv.end(), r.command.begin(), r.command.end());
  // A program named without a directory is looked up on PATH, where torchrun
  // would not find one in the working directory either; flowrun runs that one.
  std::string& program = argv.front();
  if (r.no_python && program.find('/') == std::string::npos && !on_path(program, env) &&
      access(program.c_str(), X_OK) == 0) {
    r.notes.push_back(program + " is not on PATH: running ./" + program + " from the working directory");
    program = "./" + program;
  }
  return argv;
}

// HOST:PORT where the nodes meet, empty for none.
std::string rendezvous_endpoint(const Request& r, const std::string& command) {
  std::string host = r.master_addr;
  int port = r.master_port.value_or(kDefaultMasterPort);
  if (!r.rdzv_endpoint.empty()) {
    host = r.rdzv_endpoint;
    const auto colon = host.rfind(':');
    // [v6]:PORT, or HOST:PORT; a bare HOST keeps the default port.
    if (colon != std::string::npos && (host.front() != '[' || host.find(']') < colon)) {
      port = parse_int(command, "rdzv-endpoint port", host.substr(colon + 1), 1, 65535);
      host.resize(colon);
    }
  }
  if (host.empty()) return {};
  return host + ":" + std::to_string(port);
}

// The addresses of this host's interfaces, and its names.
bool is_this_host(const std::string& host, const EnvMap& env) {
  if (host == "localhost" || host == local_hostname(env)) return true;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  ifaddrs* ifs = nullptr;
  bool local = false;
  if (getifaddrs(&ifs) == 0) {
    for (addrinfo* a = found; a && !local; a = a->ai_next) {
      if (a->ai_family == AF_INET) {
        const auto want = reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr.s_addr;
        if ((ntohl(want) >> 24) == 127) local = true;
        for (ifaddrs* i = ifs; i && !local; i = i->ifa_next) {
          if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
              reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == want)
            local = true;
        }
      }
    }
    freeifaddrs(ifs);
  }
  freeaddrinfo(found);
  return local;
}

// How many CPU cores this process may use.
int cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

// The shape of the step: what goes under `parallel:`, with a comment saying why.
struct Shape {
  std::vector<std::pair<std::string, std::string>> parallel;  // key, value
  std::string why;
  int nodes = 1;      // with --nnodes MIN:MAX, MAX
  int min_nodes = 0;  // --nnodes MIN:MAX (MIN < MAX): MIN, an elastic step
};

Shape shape_for(const Request& r, const HostFacts& host, const std::string& command) {
  Shape s;
  if (!r.nnodes.empty()) {
    std::string text = r.nnodes;
    if (auto colon = text.find(':'); colon != std::string::npos) {
      // torchrun's elastic MIN:MAX: the step's nodes: "MIN:MAX" (docs/recovery.md).
      const int lo = parse_int(command, "nnodes", text.substr(0, colon), 1, 65535);
      text = text.substr(colon + 1);
      s.nodes = parse_int(command, "nnodes", text, 1, 65535);
      if (lo > s.nodes)
        usage_error(command,
                    fmt::format("--nnodes {}: the minimum is above the maximum; write --nnodes {}:{}",
                                r.nnodes, s.nodes, lo));
      if (lo < s.nodes) s.min_nodes = lo;
    } else {
      s.nodes = parse_int(command, "nnodes", text, 1, 65535);
    }
  }
  if (r.standalone && s.nodes > 1)
    usage_error(command,
                "--standalone runs on one node; leave it out for --nnodes " + std::to_string(s.nodes));
  const int gpus = static_cast<int>(host.inventory.gpus.size());
  const std::string nodes_text = std::to_string(s.nodes);
  auto cpus = [&](int per_node, const std::string& why) {
    s.parallel.emplace_back("cpus", std::to_string(per_node * s.nodes));
    s.why = why;
  };
  const std::string nproc = r.nproc;
  if (r.cpus > 0) {
    s.parallel.emplace_back("cpus", std::to_string(r.cpus));
    s.why = "--cpus " + std::to_string(r.cpus);
  } else if (nproc.empty()) {
    if (gpus > 0) {
      s.why = "one worker per GPU (the default)";
    } else {
      cpus(1, "this host has no GPUs, so 1 CPU worker per node (torchrun's default)");
    }
  } else if (nproc == "gpu" || nproc == "auto") {
    if (gpus > 0) {
      s.why = "--nproc-per-node " + nproc + ": one worker per GPU";
    } else if (nproc == "auto") {
      cpus(cpu_count(), "--nproc-per-node auto on a host without GPUs: one worker per CPU core");
    } else {
      usage_error(command,
                  "--nproc-per-node gpu: this host has no GPUs (" +
                      (host.inventory.unavailable_reason.empty() ? std::string("none found")
                                                                 : host.inventory.unavailable_reason) +
                      "); use --nproc-per-node cpu or a number for CPU workers");
    }
  } else if (nproc == "cpu") {
    cpus(cpu_count(), "--nproc-per-node cpu: one worker per CPU core");
  } else {
    const int n = parse_int(command, "nproc-per-node", nproc, 1, 4096);
    if (gpus == 0) {
      cpus(n, "--nproc-per-node " + nproc + " on a host without GPUs: CPU workers");
    } else if (n == gpus) {
      s.why = "--nproc-per-node " + nproc + ": one worker per GPU";
    } else if (n < gpus && gpus % n == 0) {
      s.parallel.emplace_back("procs_per_node", std::to_string(n));
      s.why = fmt::format(
          "--nproc-per-node {}: {} GPUs per worker, every worker sees the node's {} (as torchrun)", n,
          gpus / n, gpus);
    } else if (n < gpus) {
      s.parallel.emplace_back("gpus", std::to_string(n * s.nodes));
      s.why =
          fmt::format("--nproc-per-node {}: the first {} of the node's {} GPUs, one per worker", n, n, gpus);
    } else {
      usage_error(command,
                  fmt::format("--nproc-per-node {}: this host has {} GPUs; ask for at most {}, or use "
                              "--cpus {} for CPU workers",
                              n, gpus, gpus, n * s.nodes));
    }
  }
  if (s.nodes > 1)
    s.parallel.emplace_back("nodes",
                            s.min_nodes > 0 ? fmt::format("\"{}:{}\"", s.min_nodes, s.nodes) : nodes_text);
  if (r.max_restarts) s.parallel.emplace_back("max_restarts", std::to_string(*r.max_restarts));
  return s;
}

// How the nodes meet.
struct Meeting {
  enum class Kind { one_node, slurm, head, agent } kind = Kind::one_node;
  std::string endpoint;  // HOST:PORT (head, agent)
  int node_rank = 0;     // agent: -1, the next free one
  int listen_fd = -1;    // head: the rendezvous port, bound by claim_rendezvous
  std::string joins;     // agent: why, when another flowrun run holds the port
};

// No --node-rank on the endpoint's host: the first flowrun run to bind the
// port is the head, as the first torchrun to host the c10d store is; one
// that finds it taken by another flowrun run (of this user) joins that
// one. Anything else holding the port is an error, said at once: joining it
// would only wait out the join timeout.
void claim_rendezvous(Meeting& m, const Request& r, int port) {
  const std::string where = "--rdzv-endpoint " + m.endpoint;
  for (int round = 0;; ++round) {
    int err = 0;
    m.listen_fd = listen_on_port(r.local_addr, port, &err);
    if (m.listen_fd >= 0) {
      m.kind = Meeting::Kind::head;
      return;
    }
    if (err != EADDRINUSE)
      throw Error(fmt::format("{}: cannot listen on {}:{}: {}", where,
                              r.local_addr.empty() ? "0.0.0.0" : r.local_addr, port, std::strerror(err)));
    const auto holder = port_listener(port);
    if (!holder && round < 3) continue;  // it closed meanwhile: try again
    if (!holder)
      throw Error(
          fmt::format("{}: port {} of this host is in use by a socket that does not listen (a "
                      "connection, or a port held by another program); choose another port",
                      where, port));
    if (holder->uid != getuid())
      throw Error(
          fmt::format("{}: port {} of this host is taken by a process of another user (uid {}), "
                      "not by a flowrun run to join; choose another port",
                      where, port, holder->uid));
    if (holder->pid != 0 && holder->name != process_name(getpid()))
      throw Error(
          fmt::format("{}: port {} of this host is taken by {} (pid {}), not by a flowrun run to "
                      "join; choose another port, or stop it",
                      where, port, holder->name.empty() ? "a process" : holder->name, holder->pid));
    m.kind = Meeting::Kind::agent;
    m.node_rank = -1;
    m.joins = holder->pid != 0
                  ? fmt::format("port {} of this host is held by flowrun (pid {})", port, holder->pid)
                  : fmt::format("port {} of this host is taken", port);
    return;
  }
}

Meeting meeting_for(Request& r, const Shape& shape, const EnvMap& env, const std::string& command) {
  Meeting m;
  const std::string endpoint = rendezvous_endpoint(r, command);
  if (shape.nodes == 1) {
    if (!endpoint.empty() && !r.standalone)
      r.notes.push_back("one node: its workers meet on this host (MASTER_ADDR=127.0.0.1, a free port); " +
                        endpoint + " is used only with --nnodes above 1");
    return m;
  }
  if (endpoint.empty()) {
    if (env_get(env, "SLURM_JOB_ID")) {
      m.kind = Meeting::Kind::slurm;
      return m;
    }
    usage_error(command,
                "--nnodes " + std::to_string(shape.nodes) +
                    " needs a way to reach the other nodes: run inside a Slurm allocation (salloc -N" +
                    std::to_string(shape.nodes) +
                    ", sbatch), where flowrun starts them with srun; or run this command on every node with "
                    "--rdzv-endpoint NODE0:PORT and --node-rank N; or write a spec with cluster: "
                    "(docs/multinode.md)");
  }
  m.endpoint = endpoint;
  const std::string host = endpoint.substr(0, endpoint.rfind(':'));
  int rank = -1;
  if (r.node_rank) {
    rank = *r.node_rank;
  } else if (auto id = env_get(env, "SLURM_NODEID");
             id && !id->empty() && id->size() < 6 && std::all_of(id->begin(), id->end(), ::isdigit)) {
    rank = std::stoi(*id);
  }
  if (rank >= shape.nodes)
    usage_error(command, fmt::format("--node-rank {}: --nnodes {} has node ranks 0 to {}", rank, shape.nodes,
                                     shape.nodes - 1));
  const bool here = rank < 0 && is_this_host(host, env);
  in_addr ipv4{};
  if (here && !r.dry_run && (r.local_addr.empty() || inet_pton(AF_INET, r.local_addr.c_str(), &ipv4) == 1)) {
    claim_rendezvous(m, r, std::stoi(endpoint.substr(endpoint.rfind(':') + 1)));
    return m;
  }
  const bool head = rank == 0 || here;
  m.kind = head ? Meeting::Kind::head : Meeting::Kind::agent;
  m.node_rank = head ? 0 : rank;
  return m;
}

// Where the head leaves the run's token for the nodes that join it: in the
// working directory, which every node must share (docs/multinode.md).
std::string token_path(const std::string& workdir, const std::string& endpoint) {
  std::string key = endpoint;
  for (char& c : key) {
    if (c == ':' || c == '/' || c == '[' || c == ']') c = '_';
  }
  return workdir + "/.flowrun/rendezvous/" + key + ".token";
}

std::string yaml_string(const std::string& text) { return yaml_quoted(text); }

struct Built {
  std::string text;  // the spec
  Shape shape;
  Meeting meeting;
};

Built build_spec(Request& r, const HostFacts& host, const EnvMap& env, const std::string& command,
                 bool for_init) {
  Built b;
  b.shape = shape_for(r, host, command);
  if (!for_init) b.meeting = meeting_for(r, b.shape, env, command);
  // torchrun's --role and --rdzv-id reach the workers as ROLE_NAME and
  // TORCHELASTIC_RUN_ID; with --standalone torchrun makes up a run id
  // whatever --rdzv-id says, and flowrun's is that.
  if (!r.role.empty()) b.shape.parallel.emplace_back("role", yaml_string(r.role));
  if (!r.rdzv_id.empty() && r.standalone &&
      std::find(r.from_env.begin(), r.from_env.end(), "rdzv-id") == r.from_env.end())
    r.notes.push_back(
        "--rdzv-id is passed over with --standalone, as torchrun does: TORCHELASTIC_RUN_ID is the run id");
  if (!r.rdzv_id.empty() && !r.standalone) b.shape.parallel.emplace_back("job_id", yaml_string(r.rdzv_id));
  OneStepSpec one;
  one.name = step_name(r);
  one.argv = worker_argv(r, env);
  one.timeout = r.timeout;
  one.stall_timeout = r.stall_timeout;
  one.why = b.shape.why;
  one.parallel = b.shape.parallel;
  one.collect_all = !for_init;
  std::string& t = b.text;
  t = one_step_spec_text(one);
  if (b.shape.nodes > 1) {
    t += "cluster:\n";
    if (for_init) {
      t += "  engine: slurm   # or ssh (with hosts:), or manual\n";
    } else {
      t += std::string("  engine: ") + (b.meeting.kind == Meeting::Kind::slurm ? "slurm" : "manual") + "\n";
      if (!r.local_addr.empty()) t += "  address: " + yaml_string(r.local_addr) + "\n";
    }
    std::size_t start = 0;
    while (start < r.rdzv_conf.size()) {
      std::size_t end = r.rdzv_conf.find(',', start);
      if (end == std::string::npos) end = r.rdzv_conf.size();
      const std::string item = r.rdzv_conf.substr(start, end - start);
      if (item.rfind("join_timeout=", 0) == 0)
        t += "  join_timeout: " + yaml_string(item.substr(13)) + "\n";
      else if (item.rfind("last_call_timeout=", 0) == 0)
        t += "  last_call_timeout: " + yaml_string(item.substr(18)) + "\n";
      else if (!item.empty())
        r.notes.push_back(
            "--rdzv-conf " + item +
            " has no effect (only join_timeout=SECONDS and last_call_timeout=SECONDS are used)");
      start = end + 1;
    }
  }
  return b;
}

void note(const Request& r) {
  for (const auto& n : r.notes) std::cerr << "flowrun run: " << n << "\n";
}

// The spec's diagnostics point into text the user never wrote: say them
// against the options instead.
[[noreturn]] void rethrow_for_options(const DiagnosticError& e, const std::string& spec_text) {
  std::string message;
  for (const auto& d : e.diagnostics()) {
    std::string option = "the command line";
    if (d.path.find("parallel") != std::string::npos) option = "--nproc-per-node / --nnodes / --cpus";
    if (d.path.find("cluster") != std::string::npos) option = "--nnodes / --rdzv-endpoint";
    if (d.path.ends_with("stall_timeout"))
      option = "--stall-timeout";
    else if (d.path.ends_with("timeout") && d.path.find("cluster") == std::string::npos)
      option = "--timeout";
    message += (message.empty() ? "" : "\nflowrun: error: ") + option + ": " + d.message;
  }
  message += "\nflowrun run builds this one-step spec (flowrun init writes it to a file):\n" + spec_text;
  throw Error(message, kExitUsage);
}

// This host joins node 0's flowrun (`flowrun run` on a node other than 0),
// which runs the command it was given.
// It keeps trying to reach node 0 for the cluster's join_timeout: node 0 may
// start later.
int join_node0(const Request& r, const Built& built, const ClusterSpec& cluster, const std::string& cwd,
               int fake, const EnvMap& env) {
  AgentOptions agent;
  agent.endpoint = built.meeting.endpoint;
  if (built.meeting.node_rank > 0) agent.node_rank = built.meeting.node_rank;
  agent.token_file = token_path(cwd, built.meeting.endpoint);
  agent.token_after_connect = true;
  agent.exit_with_step = true;
  agent.fake_gpus = fake;
  agent.connect_timeout_s = cluster.join_timeout_s;
  const std::string& joins = built.meeting.joins;
  std::cerr << "flowrun run: " << (joins.empty() ? "" : joins + "; ") << "joining node 0 at "
            << agent.endpoint << " as node "
            << (agent.node_rank ? std::to_string(*agent.node_rank) : std::string("(the next free rank)"))
            << "; node 0 runs the command it was given\n";
  if (r.dry_run) {
    std::cout << "This host joins node 0 at " << agent.endpoint << "; `flowrun run --dry-run` there shows "
              << "the plan.\n";
    return kExitOk;
  }
  return run_agent(agent, env);
}

// --redirects, --tee and --local-ranks-filter as torchrun reads them;
// nullopt when none is given (every stream of every rank is shown).
std::optional<ConsoleStreams> console_streams(const Request& r) {
  if (r.redirects.empty() && r.tee.empty() && r.local_ranks_filter.empty()) return std::nullopt;
  ConsoleStreams streams;
  std::string error;
  for (auto [option, text, map] : {std::tuple{"--redirects", &r.redirects, &streams.redirects},
                                   std::tuple{"--tee", &r.tee, &streams.tee}}) {
    if (text->empty()) continue;
    auto parsed = parse_std_map(*text, &error);
    if (!parsed) usage_error("run", std::string(option) + " " + *text + ": " + error);
    *map = std::move(*parsed);
  }
  if (r.local_ranks_filter == "none") {
    streams.local_ranks = std::set<int>{};
  } else if (!r.local_ranks_filter.empty()) {
    try {
      if (auto ranks = parse_rank_list(r.local_ranks_filter))
        streams.local_ranks.emplace(ranks->begin(), ranks->end());
    } catch (const Error&) {
      usage_error("run", "--local-ranks-filter " + r.local_ranks_filter +
                             ": expected local ranks such as 0, 0,2 or 0-3 (or all, none)");
    }
  }
  return streams;
}

// --numa-binding node: each local rank's CPUs, those of the NUMA node of the
// GPU torchrun gives it (cuda:LOCAL_RANK of this host's), that flowrun may
// itself run on; `why` gets a line per worker for the console.
std::vector<std::vector<int>> numa_cpus(const std::string& policy, const StepPlan& plan,
                                        const HostFacts& host, const EnvMap& env,
                                        std::vector<std::string>& why) {
  const std::string option = "--numa-binding " + policy;
  if (plan.cpu)
    usage_error("run", option + " binds GPU workers to CPUs near their GPU; these are CPU workers");
  const NumaPolicy mode = policy == "socket"      ? NumaPolicy::socket
                          : policy == "exclusive" ? NumaPolicy::exclusive
                                                  : NumaPolicy::node;
  // The GPUs as torch numbers them in the launcher, which binds local rank
  // R to cuda:R's node.
  std::vector<std::string> gpus;
  for (const Gpu& gpu : host.inventory.gpus) gpus.push_back(gpu.pci_bus_id);
  const std::string sysfs = sysfs_root(env);
  const std::vector<int> allowed = allowed_cpus();
  std::vector<std::vector<int>> cpus;
  for (const RankPlan& rank : plan.ranks) {
    if (rank.node != 0) continue;
    const auto local = static_cast<std::size_t>(rank.local_rank);
    if (local >= gpus.size())
      usage_error("run",
                  fmt::format("{}: local rank {} has no GPU of its own (cuda:{})", option, local, local));
    const Gpu& gpu = host.inventory.gpus[local];
    int node = 0;
    std::vector<int> mine;
    try {
      mine = numa_binding_cpus(mode, gpus, local, allowed, sysfs, &node);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: GPU {} ({}): {}", option, gpu.select_token, gpu.pci_bus_id, e.what()),
                  kExitUsage);
    }
    if (mine.empty())
      usage_error("run", fmt::format("{}: NUMA node {} of GPU {} has no CPU that flowrun may run on (its "
                                     "affinity: {})",
                                     option, node, gpu.select_token, cpu_list_text(allowed)));
    if (local >= cpus.size()) cpus.resize(local + 1);
    why.push_back(fmt::format("local rank {}: GPU {} on NUMA node {}: CPUs {}", local, gpu.select_token, node,
                              cpu_list_text(mine)));
    cpus[local] = std::move(mine);
  }
  return cpus;
}

// The run's options from the command line.
RunOptions run_options(const Request& r, const Spec& spec, const std::string& cwd, int fake,
                       const std::vector<std::string>& args, const std::string& spec_text) {
  RunOptions run;
  run.args = args;
  run.run_id = r.run_id;
  if (run.run_id.empty() && !r.rdzv_id.empty()) run.run_id = make_run_id(slug(spec.name + "-" + r.rdzv_id));
  run.run_dir = r.run_dir;
  if (run.run_dir.empty() && !r.log_dir.empty()) {
    if (run.run_id.empty()) run.run_id = make_run_id(spec.name);
    run.run_dir = (r.log_dir.front() == '/' ? r.log_dir : cwd + "/" + r.log_dir) + "/" + run.run_id;
  }
  if (r.ranks == "none") {
    run.console_ranks = std::vector<int>{};
  } else if (!r.ranks.empty()) {
    run.console_ranks = parse_rank_list(r.ranks);
  }
  run.console_streams = console_streams(r);
  run.virtual_local_rank = r.virtual_local_rank;
  if (r.grace_s) run.grace_s = *r.grace_s;
  run.stop_signals = r.stop_signals;
  run.color = color_choice(r.color);
  run.fake_gpus = fake;
  // Recorded in the run directory for `flowrun resume`: the spec flowrun run
  // built (there is no file), or a spec file's --cpus and --python.
  run.spec_text = spec_text;
  if (!r.spec_path.empty() && r.cpus > 0) run.cpus = r.cpus;
  if (!r.spec_path.empty() && !r.python.empty()) run.python = python_path(r.python, cwd);
  return run;
}

// --dry-run: the one-step spec flowrun run built, if it built one, and the plan.
int show_dry_run(const Spec& spec, const HostFacts& host, const std::vector<StepPlan>& plans,
                 const EnvMap& env, const RunOptions& run, const std::string& spec_text) {
  LaunchContext ctx;
  ctx.run_id = run.run_id.empty() ? make_run_id(spec.name) : run.run_id;
  ctx.layout.run_dir = run_dir_for(spec, ctx.run_id, run.run_dir);
  ctx.parent_env = env;
  ctx.virtual_local_rank = run.virtual_local_rank;
  PlanView view{spec, host, plans, ctx, false};
  if (!spec_text.empty())
    std::cout << "flowrun run runs this one-step spec (flowrun init writes it to a file):\n\n"
              << spec_text << "\n";
  std::cout << format_plan_text(view);
  return kExitOk;
}

// --json and --summary-json among flowrun run's options, read as
// parse_request reads them but without its refusals; none with --help.
SummaryRequest summary_request(int argc, char** argv) {
  SummaryRequest request;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") return {};
    if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-') {  // -m, -r 3, -r3
      const OptionDef* def = named_option(arg);
      if (def == nullptr) break;
      if (def->arg == Arg::value && arg.size() == 2) ++i;
      continue;
    }
    if (arg == "--" || arg.size() < 3 || arg.rfind("--", 0) != 0) break;
    std::string name = arg.substr(2);
    const std::size_t eq = name.find('=');
    std::string value = eq == std::string::npos ? "" : name.substr(eq + 1);
    if (eq != std::string::npos) name.resize(eq);
    if (const auto candidates = long_candidates(name, false); candidates.size() == 1)
      name = candidates.front();
    const OptionDef* def = find_option(name);
    if (eq == std::string::npos && def != nullptr && def->arg == Arg::value && i + 1 < argc)
      value = argv[++i];
    if (name == "json") request.json = true;
    if (name == "summary-json" && !value.empty()) request.file = value;
  }
  return request;
}

int run_request(Request& r, SummaryTarget& target) {
  const EnvMap env = read_environ();
  const int fake = fake_gpus_from_env(r.fake_gpus, env);
  HostFacts host = probe_host(fake, env);
  console_streams(r);  // its usage errors before anything runs

  const std::string cwd = current_directory();
  Spec spec;
  std::string spec_text;
  std::vector<std::string> args;
  Built built;
  if (!r.spec_path.empty()) {
    spec = load_or_throw(r.spec_path);
    args = r.spec_args;
    note(r);
  } else {
    built = build_spec(r, host, env, "run", false);
    spec_text = built.text;
    if ((!r.numa_binding.empty() || r.virtual_local_rank) && built.shape.nodes > 1)
      usage_error("run", std::string(r.virtual_local_rank ? "--virtual-local-rank" : "--numa-binding") +
                             " is not supported with --nnodes above 1 yet: flowrun applies it to one node's "
                             "workers");
    note(r);
    SpecParse parsed = parse_spec(spec_text, "flowrun run", cwd);
    if (!parsed.diagnostics.empty())
      rethrow_for_options(DiagnosticError(std::move(parsed.diagnostics)), spec_text);
    spec = std::move(*parsed.spec);
    if (built.meeting.kind == Meeting::Kind::agent)
      return join_node0(r, built, *spec.cluster, cwd, fake, env);
    if (built.meeting.kind == Meeting::Kind::head) {
      ClusterSpec& cluster = *spec.cluster;
      cluster.rendezvous = built.meeting.endpoint;
      cluster.rendezvous_token_file = token_path(cwd, built.meeting.endpoint);
      cluster.rendezvous_fd = built.meeting.listen_fd;
    }
  }
  if (!r.python.empty() && !r.spec_path.empty()) use_python(spec, python_path(r.python, cwd));

  PlanOptions plan_options;
  if (r.cpus > 0 && !r.spec_path.empty()) plan_options.cpus = r.cpus;
  std::vector<StepPlan> plans;
  try {
    plans = plan_flow(spec, host, plan_options);
  } catch (const DiagnosticError& e) {
    if (spec_text.empty()) throw;
    rethrow_for_options(e, spec_text);
  }

  RunOptions run = run_options(r, spec, cwd, fake, args, spec_text);
  std::vector<std::string> numa_lines;
  if (!r.numa_binding.empty())
    run.worker_cpus = numa_cpus(r.numa_binding, plans.front(), host, env, numa_lines);
  for (const auto& line : numa_lines)
    (r.dry_run ? std::cout : std::cerr)
        << "flowrun run: --numa-binding " << r.numa_binding << ": " << line << "\n";
  if (r.dry_run) return show_dry_run(spec, host, plans, env, run, spec_text);
  // Made here rather than by the runner, so that the summary finds the run.
  if (run.run_id.empty()) run.run_id = make_run_id(spec.name);
  target.run_dir = run_dir_for(spec, run.run_id, run.run_dir);
  return run_flow(spec, host, plans, env, run);
}

int init_request(Request& r) {
  const EnvMap env = read_environ();
  const HostFacts host = probe_host(fake_gpus_from_env(r.fake_gpus, env), env);
  Built built = build_spec(r, host, env, "init", true);
  for (auto [given, option] :
       {std::pair{!r.redirects.empty(), "--redirects"}, std::pair{!r.tee.empty(), "--tee"},
        std::pair{!r.local_ranks_filter.empty(), "--local-ranks-filter"},
        std::pair{!r.numa_binding.empty(), "--numa-binding"},
        std::pair{r.virtual_local_rank, "--virtual-local-rank"}}) {
    if (given)
      r.notes.push_back(std::string(option) +
                        " is not written to the spec (a spec has no key for it); give it to flowrun run");
  }
  note(r);
  const std::string name = step_name(r);
  std::string text = built.text;
  text.erase(0, text.find('\n') + 1);  // the "# flowrun run:" line
  std::string out = "# Written by `flowrun init`. Check it with `flowrun plan " +
                    (r.output.empty() ? name + ".yaml" : r.output) + "`; the format is in docs/spec.md.\n" +
                    text;
  out +=
      "    # Files the workers write that later steps need (a glob, or a list of them); each rank also\n"
      "    # has its own FLOWRUN_OUTPUT_DIR. rank 0's are collected unless collect: all.\n"
      "    # outputs: [model.pt]\n"
      "  # A step that runs once, after every worker has finished, with their files:\n"
      "  # - name: evaluate\n"
      "  #   join: " +
      name +
      "\n"
      "  #   run: python3 evaluate.py ${steps." +
      name + ".outputs}\n";
  const std::string path = r.output.empty() ? name + ".yaml" : r.output;
  SpecParse check = parse_spec(out, path, current_directory());
  if (!check.diagnostics.empty()) {
    std::string message = "the spec flowrun init made does not validate (a bug; please report it):";
    for (const auto& d : check.diagnostics) message += "\n  " + d.to_string();
    throw Error(message);
  }
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (r.force ? O_TRUNC : O_EXCL), 0644);
  if (fd < 0) {
    if (errno == EEXIST)
      throw Error(path + " already exists; choose another name with -o FILE, or --force to overwrite it",
                  kExitUsage);
    throw Error("cannot write " + path + ": " + std::strerror(errno));
  }
  const bool ok = write_all(fd, out.data(), out.size());
  close(fd);
  if (!ok) throw Error("cannot write " + path + ": " + std::strerror(errno));
  std::cout << "Wrote " << path << ": one parallel step, " << name << " (" << built.shape.why << ").\n"
            << "Next: flowrun plan " << path << "   (where every rank runs), then flowrun " << path << "\n";
  return kExitOk;
}

}  // namespace

int cmd_torchrun(int argc, char** argv) {
  return report_with_summary(summary_request(argc, argv), [&](SummaryTarget& target) -> int {
    auto request = parse_request(argc, argv, "run");
    return request ? run_request(*request, target) : kExitOk;
  });
}

int cmd_init(int argc, char** argv) {
  return report_errors([&]() -> int {
    auto request = parse_request(argc, argv, "init");
    return request ? init_request(*request) : kExitOk;
  });
}

}  // namespace flowrun
