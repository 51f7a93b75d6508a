#include "flowrun/cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <iostream>
#include <unistd.h>

#include "flowrun/agent.h"
#include "flowrun/error.h"
#include "flowrun/flow.h"
#include "flowrun/gpu.h"
#include "flowrun/host.h"
#include "flowrun/plan.h"
#include "flowrun/process.h"
#include "flowrun/report.h"
#include "flowrun/slurm.h"
#include "flowrun/spec.h"

#include "commands.h"
#include "gang_setup.h"
#include "summary.h"

namespace flowrun {

// --- helpers the subcommands share (commands.h) --------------------------------

HostFacts host_without_gpus(const EnvMap& env) {
  HostFacts facts;
  facts.hostname = host_name(env);
  facts.inventory.source = kGpusNotProbed;
  // Inside a Slurm allocation the plan names its nodes. A malformed one is
  // reported when a step runs through Slurm.
  std::string ignored;
  if (auto job = read_slurm_job(env, &ignored)) facts.allocation = job->nodes;
  return facts;
}

HostFacts probe_host(int fake_gpus, const EnvMap& env) {
  auto probe = make_probe(env, fake_gpus);
  HostFacts facts = host_without_gpus(env);
  facts.inventory = select_gpus(probe->probe(), env);
  return facts;
}

std::optional<std::vector<std::string>> args_after_dashes(int argc, char** argv, int* ours) {
  *ours = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      *ours = i;
      return std::vector<std::string>(argv + i + 1, argv + argc);
    }
  }
  return std::nullopt;
}

std::string current_directory() {
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof cwd) == nullptr)
    throw Error(std::string("cannot read the current directory: ") + std::strerror(errno));
  return cwd;
}

std::optional<double> parse_seconds(const std::string& text, double lo, double hi) {
  // from_chars, unlike strtod, takes no sign, space or hex; like strtod it
  // takes "nan" and "inf", which are refused here with what overflows.
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) return std::nullopt;
  if (value < lo || value > hi) return std::nullopt;
  return value;
}

CLI::Validator seconds_between(double lo, double hi) {
  const std::string expected = fmt::format("expected seconds from {:g} to {:g}", lo, hi);
  return CLI::Validator(
      [=](std::string& text) {
        return parse_seconds(text, lo, hi) ? std::string() : "'" + text + "': " + expected;
      },
      "");
}

void add_console_options(CLI::App& app, double& wait_s, bool& no_fold) {
  app.add_option(
         "--console-wait", wait_s,
         "Seconds a console reader that takes nothing holds the ranks up before their lines past a 4 "
         "MiB backlog are dropped and counted (default 5; 0: drop at once); the log files get every line")
      ->check(seconds_between(0, 3600))
      ->type_name("SECONDS");
  app.add_flag("--no-fold", no_fold,
               "Show each rank's lines apart; by default a line several ranks of a step print alike is shown "
               "once, as [train r0-7] (the spec's logs: {fold: false})");
}

Spec load_or_throw(const std::string& path) {
  SpecParse parsed = load_spec(path);
  if (!parsed.diagnostics.empty()) throw DiagnosticError(std::move(parsed.diagnostics));
  return std::move(*parsed.spec);
}

RunOptions::Color color_choice(const std::string& when) {
  return when == "always"  ? RunOptions::Color::always
         : when == "never" ? RunOptions::Color::never
                           : RunOptions::Color::automatic;
}

int fake_gpus_from_env(int fake_gpus, const EnvMap& env) {
  if (fake_gpus >= 0) return fake_gpus;
  if (auto fake = env_get(env, "FLOWRUN_FAKE_GPUS");
      fake && !fake->empty() && fake->size() < 5 && std::all_of(fake->begin(), fake->end(), ::isdigit))
    return std::stoi(*fake);
  return -1;
}

void add_run_argument(CLI::App& app, std::string& run) {
  app.add_option("run", run, "The run: an id, a unique prefix of one, latest, or a run directory")
      ->required()
      ->type_name("RUN");
}

std::optional<int> parse_subcommand(CLI::App& app, const std::string& name, int argc, char** argv) {
  use_help_format(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "flowrun: error: " << name << ": " << e.what() << "\nRun 'flowrun " << name
              << " --help' for usage.\n";
    return kExitUsage;
  }
  return std::nullopt;
}

int report_errors(const std::function<int()>& command, std::string* message) {
  std::string said;
  int code = kExitFailure;
  try {
    return command();
  } catch (const DiagnosticError& e) {
    std::cout.flush();
    for (const auto& diagnostic : e.diagnostics()) {
      std::cerr << diagnostic.to_string() << "\n";
      said += (said.empty() ? "" : "\n") + diagnostic.to_string();
    }
    code = e.exit_code();
  } catch (const Error& e) {
    std::cout.flush();
    std::cerr << "flowrun: error: " << e.what() << "\n";
    said = e.what();
    code = e.exit_code();
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "flowrun: error: internal error: " << e.what() << "\n";
    said = std::string("internal error: ") + e.what();
  }
  if (message != nullptr) *message = std::move(said);
  return code;
}

CLI::Validator run_id_check() {
  return CLI::Validator([](std::string& id) { return run_id_problem(id).value_or(""); }, "");
}

namespace {

struct Options {
  std::string spec_path;
  std::vector<std::string> args;  // after `--`, for ${args}
  int fake_gpus = -1;
  int cpus = 0;
  bool json = false;
  bool show_env = false;
  std::string run_id;
  std::string run_dir;
  std::string ranks = "all";
  double grace_s = 10;
  double console_wait_s = kDefaultConsoleWaitS;
  bool no_fold = false;
  std::string color = "auto";
  std::string python;        // --python: overrides the spec's `python:`
  std::string summary_file;  // --summary-json
  bool no_requeue_resume = false;
  AgentOptions agent;
};

int cmd_validate(const Options& options) {
  if (!options.json) {
    Spec spec = load_or_throw(options.spec_path);
    std::cout << format_validate_ok(spec);
    return kExitOk;
  }
  // The findings on stdout, and for people on stderr as without --json.
  SpecParse parsed = load_spec(options.spec_path);
  std::vector<std::string> steps;
  if (parsed.spec) {
    for (std::size_t index : parsed.spec->order) steps.push_back(parsed.spec->steps[index].name);
  }
  std::cout << format_validate_json(options.spec_path, parsed.diagnostics, steps);
  std::cout.flush();
  for (const auto& diagnostic : parsed.diagnostics) std::cerr << diagnostic.to_string() << "\n";
  return parsed.diagnostics.empty() ? kExitOk : kExitUsage;
}

// What `flowrun plan` shows and `flowrun SPEC` runs: the spec, this host and
// the plan of every parallel step.
struct Planned {
  EnvMap env;
  Spec spec;
  HostFacts host;
  std::vector<StepPlan> plans;
};

// Whether a step of the flow asks for GPUs: a parallel step without cpus:
// (and no --cpus for them all).
bool flow_uses_gpus(const Spec& spec, const Options& options) {
  if (options.cpus > 0) return false;
  return std::any_of(spec.steps.begin(), spec.steps.end(),
                     [](const Step& step) { return step.parallel && !step.parallel->cpus; });
}

// `for_run`: a run of a flow whose steps all run on CPUs does not look for
// GPUs. On a GPU host that look is NVML's start-up (tens of milliseconds and
// more, the driver's own); on one without, loading a library that is not
// there. `flowrun plan` always looks: it shows the host it plans for.
Planned plan_spec(const Options& options, bool for_run) {
  Planned p{read_environ(), load_or_throw(options.spec_path), {}, {}};
  if (!options.python.empty()) use_python(p.spec, python_path(options.python, current_directory()));
  if (for_run && !flow_uses_gpus(p.spec, options))
    p.host = host_without_gpus(p.env);
  else
    p.host = probe_host(options.fake_gpus, p.env);
  use_gang(p.spec, p.host, read_gang_or_throw(p.env));
  PlanOptions plan_options;
  if (options.cpus > 0) plan_options.cpus = options.cpus;
  p.plans = plan_flow(p.spec, p.host, plan_options);
  return p;
}

int cmd_plan(const Options& options) {
  Planned p = plan_spec(options, /*for_run=*/false);
  LaunchContext ctx;
  ctx.run_id = options.run_id.empty() ? make_run_id(p.spec.name) : options.run_id;
  ctx.layout.run_dir = run_dir_for(p.spec, ctx.run_id, options.run_dir);
  ctx.parent_env = p.env;
  PlanView view{p.spec, p.host, p.plans, ctx, options.show_env};
  std::cout << (options.json ? format_plan_json(view) : format_plan_text(view));
  return kExitOk;
}

int cmd_gpus(const Options& options) {
  const EnvMap env = read_environ();
  HostFacts host = probe_host(options.fake_gpus, env);
  std::cout << (options.json ? format_gpus_json(host.inventory, host.hostname)
                             : format_gpus_text(host.inventory, host.hostname));
  return kExitOk;
}

int cmd_run(const Options& options, SummaryTarget& target) {
  RunOptions run;
  run.args = options.args;
  run.run_id = options.run_id;
  run.run_dir = options.run_dir;
  run.console_ranks = parse_rank_list(options.ranks);
  run.grace_s = options.grace_s;
  run.console_wait_s = options.console_wait_s;
  run.fold = !options.no_fold;
  run.color = color_choice(options.color);
  Planned p = plan_spec(options, /*for_run=*/true);
  // Every node simulates what this one does.
  run.fake_gpus = fake_gpus_from_env(options.fake_gpus, p.env);
  if (const auto& gang = p.host.gang) {
    // Every node of a gang runs this command: the head runs the flow, every
    // other node becomes its agent until the flow ends, and exits with its code.
    if (!gang->is_head()) return run_agent(gang_agent(*gang, *p.spec.cluster, p.env, run.fake_gpus), p.env);
    run.gang = gang_head(*gang, *p.spec.cluster, p.env);
  }
  // Recorded in run.json, so that `flowrun resume` plans the same way.
  if (options.cpus > 0) run.cpus = options.cpus;
  if (!options.python.empty()) run.python = python_path(options.python, current_directory());
  if (auto code =
          resume_requeued_job(p.spec, p.host, p.plans, p.env, run, !options.no_requeue_resume, target))
    return *code;
  // Made here rather than by the runner, so that the summary finds the run.
  if (run.run_id.empty()) run.run_id = make_run_id(p.spec.name);
  target.run_dir = run_dir_for(p.spec, run.run_id, run.run_dir);
  return run_flow(p.spec, p.host, p.plans, p.env, run);
}

int cmd_agent(Options& options) {
  options.agent.fake_gpus = options.fake_gpus;
  return run_agent(options.agent, read_environ());
}

void add_host_options(CLI::App& app, Options& options) {
  app.add_option(
         "--fake-gpus", options.fake_gpus,
         "Pretend this host has N GPUs (NVIDIA H200), for dry runs and tests; same as FLOWRUN_FAKE_GPUS=N")
      ->check(CLI::Range(0, 1024))
      ->type_name("N");
  app.add_option("--cpus", options.cpus,
                 "Run every parallel step on N CPU workers instead of GPUs (for hosts without GPUs)")
      ->check(CLI::Range(1, 4096))
      ->type_name("N");
}

// The first word of `words` that is not an option or an option's value.
std::string first_word(const std::vector<std::string>& words, const CLI::App& app) {
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& word = words[i];
    if (word.empty() || word[0] != '-') return word;
    const CLI::Option* option = word.find('=') == std::string::npos ? app.get_option_no_throw(word) : nullptr;
    if (option != nullptr && option->get_expected_min() > 0) ++i;  // its value
  }
  return {};
}

// The subcommand that the command line's first word is likely a typo of
// (flowrun rnu train.py), when that word cannot be the spec it would
// otherwise be read as: no file of that name, no '/', no .yaml or .yml.
std::optional<std::string> mistyped_command(const std::vector<std::string>& words, const CLI::App& app) {
  const std::string word = first_word(words, app);
  if (word.empty() || word.find('/') != std::string::npos || word.ends_with(".yaml") ||
      word.ends_with(".yml") || access(word.c_str(), F_OK) == 0)
    return std::nullopt;
  std::vector<std::string> names;
  for (const auto* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  if (std::find(names.begin(), names.end(), word) != names.end()) return std::nullopt;
  auto close = closest_match(word, names);
  if (close) *close = "unknown command '" + word + "'; did you mean '" + *close + "'?";
  return close;
}

const char* kFooter = R"(Examples:
  flowrun train.yaml                 run the flow: every step, the parallel ones on every GPU, then the join
  flowrun run --nproc-per-node 4 train.py   torchrun's command line (flowrun run --help)
  flowrun init train.py              write a starter spec for a script
  flowrun resume RUN_ID              re-run a failed flow from its failed step
  flowrun runs                       the runs kept here, newest last
  flowrun logs latest -f             follow the newest run's logs; RUN may be an id or a prefix of one
  flowrun status latest              each step's and rank's state, from another terminal
  flowrun doctor                     check the GPUs, driver, CUDA and NCCL
  flowrun plan train.yaml            where every rank of every step runs, and why
  flowrun plan train.yaml --json     the same for machines (world_size, nodes, ranks, env)
  flowrun validate train.yaml        check the spec; every problem as FILE:LINE:COL
  flowrun gpus                       the GPUs this host may use (CUDA_VISIBLE_DEVICES, Slurm)
  flowrun manifest train.yaml --image IMG | kubectl apply -f -   run it on Kubernetes, one pod a node
  flowrun plan train.yaml --cpus 2   plan on 2 CPU workers, for a host without GPUs
  flowrun train.yaml --summary-json s.json   for CI: how the run ended, the culprit rank, its log

Exit codes: 0 ok, 2 bad command line, bad spec or a plan this host cannot run; a failed step passes
on its culprit's code, which may be 2 as well: the summary's state tells which (docs/cli.md,
For CI).
Docs: docs/quickstart.md, docs/spec.md (the spec), docs/plan.md (how flowrun decides), docs/cli.md.)";

}  // namespace

int run_cli(int argc, char** argv) {
  raise_open_file_limit();  // before anything opens a descriptor
  // These parse their own command lines: `flowrun run` reads torchrun's
  // options up to the script, and everything after the script is the script's.
  if (argc >= 2) {
    const std::string_view command = argv[1];
    if (command == "run") return cmd_torchrun(argc - 1, argv + 1);
    if (command == "init") return cmd_init(argc - 1, argv + 1);
    if (command == "resume") return cmd_resume(argc - 1, argv + 1);
    if (command == "doctor") return cmd_doctor(argc - 1, argv + 1);
    if (command == "runs") return cmd_runs(argc - 1, argv + 1);
    if (command == "logs") return cmd_logs(argc - 1, argv + 1);
    if (command == "status") return cmd_status(argc - 1, argv + 1);
    if (command == "stacks") return cmd_stacks(argc - 1, argv + 1);
    if (command == "report") return cmd_report(argc - 1, argv + 1);
    if (command == "manifest") return cmd_manifest(argc - 1, argv + 1);
  }
  Options options;
  CLI::App app{
      "flowrun: run a flow of steps, some of them distributed PyTorch training, on one node with many\n"
      "GPUs or, when a step needs more, across nodes. Workers get torchrun's environment, so scripts\n"
      "run unchanged.",
      "flowrun"};
  use_help_format(app);
  app.footer(kFooter);
  app.set_version_flag("--version", version_line());
  app.require_subcommand(0, 1);
  app.fallthrough();
  add_host_options(app, options);
  app.add_option("spec", options.spec_path, "The flow spec to run (YAML); arguments after -- replace ${args}")
      ->type_name("SPEC");
  app.add_option("--ranks", options.ranks,
                 "Ranks whose output is shown on the console: all (default), 0, 0,2 or 0-3; every rank's "
                 "output always goes to its log files")
      ->type_name("LIST");
  app.add_option("--grace", options.grace_s,
                 "Seconds a stopped worker gets between SIGTERM and SIGKILL (default 10)")
      ->check(seconds_between(0, 3600))
      ->type_name("SECONDS");
  add_console_options(app, options.console_wait_s, options.no_fold);
  app.add_option("--color", options.color,
                 "Colour the rank prefixes: auto (on a terminal, unless NO_COLOR is set), always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->type_name("WHEN");
  app.add_option(
         "--python", options.python,
         "The Python for steps whose run starts with python or python3 (overrides the spec's python:)")
      ->type_name("PY");
  app.add_option("--run-id", options.run_id, "Use this run id instead of a new one")
      ->check(run_id_check())
      ->type_name("ID");
  app.add_option("--run-dir", options.run_dir, "Run directory (default: WORKDIR/.flowrun/runs/RUN_ID)")
      ->type_name("DIR");
  app.add_flag("--json", options.json,
               "Print the run's summary as JSON on stdout (the console's lines all go to stderr); "
               "docs/cli.md, For CI");
  app.add_option("--summary-json", options.summary_file,
                 "Write the run's summary as JSON to FILE when flowrun ends, also when the run fails, is "
                 "interrupted or never starts")
      ->type_name("FILE");
  app.add_flag(
      "--no-requeue-resume", options.no_requeue_resume,
      "In a requeued Slurm job (SLURM_RESTART_COUNT > 0), or on a gang's restarted head, start afresh "
      "instead of resuming the job's or gang's earlier run of SPEC");

  auto* validate = app.add_subcommand("validate", "Check a spec and report every problem at once");
  validate->add_option("spec", options.spec_path, "The flow spec")->required()->type_name("SPEC");
  validate->add_flag("--json", options.json, "Print the findings as JSON (file, line, column, message)");

  auto* plan = app.add_subcommand("plan", "Show where every rank of every step runs, and why");
  plan->add_option("spec", options.spec_path, "The flow spec")->required()->type_name("SPEC");
  plan->add_flag("--json", options.json, "Print the plan as JSON, with every worker's environment");
  plan->add_flag("--env", options.show_env, "List every worker's environment variables");
  plan->add_option("--python", options.python, "The Python for steps whose run starts with python or python3")
      ->type_name("PY");
  plan->add_option("--run-id", options.run_id, "Use this run id instead of a new one")
      ->check(run_id_check())
      ->type_name("ID");
  plan->add_option("--run-dir", options.run_dir, "Run directory (default: WORKDIR/.flowrun/runs/RUN_ID)")
      ->type_name("DIR");

  auto* agent = app.add_subcommand(
      "agent",
      "Run one node's ranks for a head on another host (started by the head; by hand for engine: manual)");
  agent
      ->add_option(
          "--rdzv-endpoint,--rdzv_endpoint", options.agent.endpoint,
          "The head's HOST:PORT, as the head printed it; several, comma-separated, are tried in turn")
      ->required()
      ->type_name("HOST:PORT[,...]");
  agent
      ->add_option(
          "--node-rank,--node_rank", options.agent.node_rank,
          "This node's rank (default: SLURM_NODEID under srun, else the head gives the next free one)")
      ->check(CLI::Range(0, 65535))
      ->type_name("N");
  agent
      ->add_option("--token-file", options.agent.token_file,
                   "The run's token (a private file the head wrote); default: the first line of stdin")
      ->type_name("FILE");
  agent
      ->add_option("--connect-timeout", options.agent.connect_timeout_s,
                   "Seconds to keep trying to reach the head (default 60)")
      ->check(seconds_between(0, 86400))
      ->type_name("SECONDS");
  agent->footer(
      "The head starts agents itself through srun or ssh; with `cluster: {engine: manual}` it prints the\n"
      "command to run on each node. An agent runs its node's ranks, streams their output to the head and\n"
      "ends when the head ends (docs/multinode.md). Exit codes: 0 after the head said bye, 1 otherwise.");

  auto* gpus = app.add_subcommand("gpus", "List the GPUs this host may use");
  // Parsed by their own code before this parser runs; listed here for --help.
  app.add_subcommand("run",
                     "torchrun's command line: flowrun run [--nproc-per-node N] SCRIPT.py ARGS, or a spec");
  app.add_subcommand("init", "Write a starter spec for a script: flowrun init SCRIPT.py [torchrun options]");
  app.add_subcommand("resume", "Re-run a failed flow from its failed step, reusing what completed");
  app.add_subcommand("doctor", "Check this host's GPUs, driver, CUDA and NCCL before a job spends GPU time");
  app.add_subcommand("runs", "List the runs kept in .flowrun/runs: id, flow, state, exit, start, duration");
  app.add_subcommand("logs", "Print (or follow, -f) a run's logs: flowrun logs latest --rank 1");
  app.add_subcommand("status",
                     "Each step's and rank's state of a run, live or finished: flowrun status latest");
  app.add_subcommand("stacks",
                     "Where every rank of a running step is, its Python stack: flowrun stacks latest");
  app.add_subcommand("report",
                     "A run as one HTML page, its ranks and attempts on a time axis: flowrun report latest");
  app.add_subcommand("manifest",
                     "Write the Kubernetes objects that run a spec on a gang of pods: flowrun manifest SPEC "
                     "--image IMAGE");
  gpus->add_flag("--json", options.json, "Print the inventory as JSON");

  validate->footer(
      "Exit codes: 0 valid; 2 with every problem printed as FILE:LINE:COL: key: message (with --json,\n"
      "also on stdout as JSON).\n"
      "The format: docs/spec.md.");
  plan->footer(
      "flowrun's own options work here too: --fake-gpus N (simulate N GPUs), --cpus N (CPU workers).\n"
      "Exit codes: 0 planned; 2 for a spec error or a plan this host cannot run, at the key that asks.\n"
      "How flowrun decides: docs/plan.md.");
  gpus->footer(
      "Honours CUDA_VISIBLE_DEVICES (ordinals or UUIDs) and Slurm's SLURM_STEP_GPUS, SLURM_JOB_GPUS and\n"
      "SLURM_GPUS_ON_NODE; --fake-gpus N simulates N GPUs. See docs/plan.md.");

  // Everything after the first `--` belongs to the steps (${args}), never to
  // flowrun, so it is split off before parsing.
  int ours = argc;
  if (auto after = args_after_dashes(argc, argv, &ours)) options.args = std::move(*after);
  // A usage error of `flowrun SPEC` still gets its summary: the options that
  // ask for one, found before CLI11 has parsed them (none for a subcommand).
  const std::vector<std::string> words(argv + 1, argv + ours);
  SummaryRequest early = scan_summary_request(words);
  for (const auto& word : words) {
    if (word == "validate" || word == "plan" || word == "gpus" || word == "agent") early = {};
  }
  auto usage = [&](const std::string& message) {
    return report_with_summary(early, [&](SummaryTarget&) -> int { throw Error(message, kExitUsage); });
  };
  if (auto mistyped = mistyped_command(words, app))
    return usage(*mistyped + "\nRun 'flowrun --help' for usage.");
  try {
    app.parse(ours, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ExtrasError&) {
    const auto extras = app.remaining();
    const std::string first = extras.empty() ? "" : extras.front();
    if (first.rfind('-', 0) == 0)
      return usage("unknown option '" + first + "'\nRun 'flowrun --help' for usage.");
    return usage("unexpected argument '" + first + "'\n" +
                 "Arguments for the steps go after --: flowrun SPEC -- ARGS (they replace ${args}).");
  } catch (const CLI::ParseError& e) {
    return usage(std::string(e.what()) + "\nRun 'flowrun --help' for usage.");
  }

  if (!validate->parsed() && !plan->parsed() && !gpus->parsed() && !agent->parsed()) {
    const SummaryRequest request{options.json, options.summary_file};
    if (options.spec_path.empty())
      return usage(
          "no spec given\nUsage: flowrun SPEC [-- ARGS], flowrun run SCRIPT.py, or flowrun "
          "validate|plan|gpus|...; run 'flowrun --help'.");
    return report_with_summary(request, [&](SummaryTarget& target) { return cmd_run(options, target); });
  }
  if (!options.summary_file.empty())
    return usage("--summary-json: only a run has a summary (flowrun SPEC, flowrun run, flowrun resume)");
  return report_errors([&]() -> int {
    if (validate->parsed()) return cmd_validate(options);
    if (plan->parsed()) return cmd_plan(options);
    if (gpus->parsed()) return cmd_gpus(options);
    return cmd_agent(options);
  });
}

}  // namespace flowrun
