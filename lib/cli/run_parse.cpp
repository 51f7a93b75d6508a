// flowrun run's and flowrun init's command line read into a Request: CLI11
// declares the options of the table (run_options.cpp) and stops at the script;
// around it, what argparse does that CLI11 does not (an option's prefix, -r3,
// --opt=, PET_ defaults) and the refusals said as torchrun's users know them.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "flowrun/error.h"

#include "commands.h"
#include "run_detail.h"

namespace flowrun::run_detail {

namespace {

bool is_spec_file(const std::string& path) {
  auto ends = [&](std::string_view suffix) {
    return path.size() > suffix.size() &&
           path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends(".yaml") || ends(".yml");
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

}  // namespace

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
    set_option(r, command, Given{*def, parser.values[static_cast<std::size_t>(def - kOptions.data())]});
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

}  // namespace flowrun::run_detail
