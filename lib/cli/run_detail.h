// What `flowrun run` and `flowrun init` (run_cmd.cpp) share among their
// files, private to lib/cli: the Request a command line asks for, the table of
// torchrun's options, and the one-step spec built from a request.
//   run_options.cpp  the option table, and what each option sets in a Request
//   run_parse.cpp    the command line read into a Request (CLI11, argparse's ways)
//   run_spec.cpp     from a Request to the one-step spec: its name, argv, shape
//                    (pure: what it knows of the host comes in a RunHost)
//   run_meeting.cpp  how several nodes meet: node 0's endpoint, head or agent
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flowrun/gang.h"
#include "flowrun/plan.h"
#include "flowrun/spec.h"
#include "flowrun/util.h"

#include "summary.h"

namespace flowrun::run_detail {

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
  bool no_fold = false;
  std::optional<double> grace_s;
  std::optional<double> console_wait_s;
  std::string ranks;
  std::string color = "auto";
  std::string run_id;
  std::string run_dir;
  int fake_gpus = -1;
  int cpus = 0;
  bool no_node_checks = false;  // the step's parallel.node_checks: false
  std::string output;           // init: -o
  bool force = false;           // init: --force
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
// every option of torchrun's parser is in the table (run_options.cpp).
struct OptionDef {
  std::string_view name;  // with dashes: "nproc-per-node"
  Arg arg;
  std::string_view meta;
  std::string_view help;
  For where = For::both;
  char short_name = 0;  // 'm' for -m
  Own own = Own::torchrun;
};

// Every option of both commands, in --help's order (run_options.cpp).
extern const std::span<const OptionDef> kOptions;

bool takes(const OptionDef& def, bool init);
const OptionDef* find_option(std::string_view name);

// A usage error (exit 2), followed by where --help is.
[[noreturn]] void usage_error(const std::string& command, const std::string& message);
// `said` is how the value was given ("--node-rank x", "PET_NODE_RANK=x").
int whole(const std::string& command, const std::string& said, const std::string& text, int lo, int hi);
int parse_int(const std::string& command, const std::string& option, const std::string& text, int lo, int hi);

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
std::string pet_name(const OptionDef& def);
void set_option(Request& r, const std::string& command, const Given& given);

// The PET_ variables of torchrun's options that the command line left out,
// as torchrun's argparse actions read them: a value option's is its value
// (empty: not set); a flag's is a number, set unless 0 (or true / false).
std::vector<Given> environment_defaults(const std::vector<const OptionDef*>& typed, bool init,
                                        const std::string& command);

// Reads options up to the first word that is not one; that word and
// everything after it are what to run (or a spec and its ${args}).
// Returns nullopt when --help or --version was asked for (and printed).
std::optional<Request> parse_request(int original_argc, char** original_argv, const std::string& command);

// --json and --summary-json among flowrun run's options, read as
// parse_request reads them but without its refusals; none with --help.
SummaryRequest summary_request(int argc, char** argv);

// The shape of the step: what goes under `parallel:`, with a comment saying why.
struct Shape {
  std::vector<std::pair<std::string, std::string>> parallel;  // key, value
  std::string why;
  int nodes = 1;      // with --nnodes MIN:MAX, MAX
  int min_nodes = 0;  // --nnodes MIN:MAX (MIN < MAX): MIN, an elastic step
};

// How the nodes meet.
struct Meeting {
  enum class Kind { one_node, slurm, head, agent } kind = Kind::one_node;
  std::string endpoint;  // HOST:PORT (head, agent)
  int node_rank = 0;     // agent: -1, the next free one
  // No --node-rank on the endpoint's host: head or agent is whether this
  // flowrun run binds the port first, which claim_rendezvous finds out.
  bool claim = false;
  int listen_fd = -1;  // head: the rendezvous port, bound by claim_rendezvous
  std::string joins;   // agent: why, when another flowrun run holds the port
};

// What the one-step spec reads of the host it is built on, filled by the
// caller (run_cmd.cpp, from the machine) or by a test: build_spec itself
// reads nothing of the machine, so a request and a RunHost give one text.
struct RunHost {
  HostFacts facts;  // the GPUs this process may use (or why none)
  int cpus = 1;     // the CPU cores this process may use
  EnvMap env;       // PYTHON_EXEC, SLURM_JOB_ID, SLURM_NODEID
  // Whether a directory of PATH has an executable `name` (python3, python,
  // --no-python's program).
  std::function<bool(const std::string& name)> on_path;
  // Whether the working directory has an executable `name`.
  std::function<bool(const std::string& name)> in_workdir;
  // Whether `host`, a name or an address, is this host (node 0's endpoint);
  // asked only when no node rank is given, since it may resolve a name.
  std::function<bool(const std::string& host)> is_this_host;
};

struct Built {
  std::string text;  // the spec
  Shape shape;
  Meeting meeting;
  std::vector<std::string> notes;  // what the request passes over, for stderr
};

// A name for files and run ids made of `text`: letters, digits, . _ and -.
std::string slug(std::string text);
// The step's name: the script's, the module's or the program's, without directories or suffix.
std::string step_name(const Request& r);

// The one-step spec of a request, with its shape, (flowrun run) how its
// nodes meet and the notes of what it passes over; a request it cannot run
// is a usage error. Pure: no file, socket or variable of this process is read.
Built build_spec(const Request& r, const RunHost& host, const std::string& command, bool for_init);

// How the nodes of the step meet, decided from the request and the host's
// answers (run_meeting.cpp); `notes` gets what it passes over. Pure: with
// Meeting::claim, claim_rendezvous then binds the port.
Meeting meeting_for(const Request& r, const Shape& shape, const RunHost& host, const std::string& command,
                    std::vector<std::string>& notes);

// The first flowrun run on the endpoint's host to bind its port is the head
// (m.listen_fd); one that finds another flowrun run there joins it as an
// agent. Anything else on the port is an error (run_meeting.cpp).
void claim_rendezvous(Meeting& m, const Request& r);

// `r` as a node of `gang` runs it: --nnodes (unless given), --node-rank and
// --rdzv-endpoint as the gang says, with a note saying so.
void as_gang_node(Request& r, const GangRead& gang);

// Where the head leaves the run's token for the nodes that join it: in the
// working directory, which every node must share (docs/multinode.md).
std::string token_path(const std::string& workdir, const std::string& endpoint);

// This host joins node 0's flowrun (`flowrun run` on a node other than 0),
// which runs the command it was given.
// It keeps trying to reach node 0 for the cluster's join_timeout: node 0 may
// start later.
int join_node0(const Request& r, const Built& built, const ClusterSpec& cluster, const std::string& cwd,
               int fake, const EnvMap& env);

}  // namespace flowrun::run_detail
