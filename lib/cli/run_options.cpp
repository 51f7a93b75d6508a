// flowrun run's and flowrun init's options: the table of torchrun's options
// and flowrun's own (both spellings, --help's order), and what each sets in
// a Request, from the command line or from torchrun's PET_ variables. Its
// own file, so that the table reads in one piece beside what applies it.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <fmt/format.h>

#include "flowrun/error.h"
#include "flowrun/flow.h"
#include "flowrun/supervisor.h"

#include "commands.h"
#include "run_detail.h"

namespace flowrun::run_detail {

namespace {

// The order is --help's.
constexpr OptionDef kOptionTable[] = {
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
    {"console-wait", Arg::value, "SECONDS",
     "How long a console reader that takes nothing holds the ranks up before lines are dropped (default 5)",
     For::run, 0, Own::flowrun},
    {"no-fold", Arg::flag, "", "Show each rank's lines apart, also those several ranks print alike", For::run,
     0, Own::flowrun},
    {"color", Arg::value, "WHEN", "auto, always or never", For::run, 0, Own::flowrun},
    {"run-id", Arg::value, "ID", "Use this run id", For::run, 0, Own::flowrun},
    {"run-dir", Arg::value, "DIR", "Run directory (default: .flowrun/runs/RUN_ID)", For::run, 0,
     Own::flowrun},
    {"fake-gpus", Arg::value, "N", "Pretend this host has N GPUs (dry runs, tests)", For::both, 0,
     Own::flowrun},
    {"cpus", Arg::value, "N", "N CPU workers in total instead of GPU workers", For::both, 0, Own::flowrun},
    {"no-node-checks", Arg::flag, "",
     "Start on several nodes without each node's check of itself (GPUs, free space, torch; "
     "parallel.node_checks: false)",
     For::both, 0, Own::flowrun},
    {"output", Arg::value, "FILE", "The spec to write (default: SCRIPT's name with .yaml)", For::init, 'o',
     Own::flowrun},
    {"force", Arg::flag, "", "Overwrite the spec if it exists", For::init, 0, Own::flowrun},
};

}  // namespace

const std::span<const OptionDef> kOptions = kOptionTable;

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

namespace {

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
  } else if (name == "no-fold") {
    r.no_fold = true;
  } else if (name == "json" || name == "summary-json") {
    // Read before the command line is parsed (summary_request), so that a
    // usage error gets its summary too.
    if (name == "summary-json" && value.empty()) usage_error(command, "--summary-json needs a FILE");
  } else if (name == "grace") {
    const auto g = parse_seconds(value, 0, 3600);
    if (!g) usage_error(command, "--grace " + value + ": expected seconds from 0 to 3600");
    r.grace_s = *g;
  } else if (name == "console-wait") {
    const auto w = parse_seconds(value, 0, 3600);
    if (!w) usage_error(command, "--console-wait " + value + ": expected seconds from 0 to 3600");
    r.console_wait_s = *w;
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

}  // namespace

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
  } else if (name == "no-node-checks") {
    r.no_node_checks = true;
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

}  // namespace flowrun::run_detail
