// flowrun resume RUN: a new run of a failed flow that takes the steps the
// earlier run already did from its run directory and runs the rest; and the
// same for `flowrun SPEC` in a Slurm job that was requeued, which resumes
// the job's earlier run of SPEC (resume_requeued_job).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <climits>
#include <cstdint>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>

#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/flow.h"
#include "flowrun/gang.h"
#include "flowrun/host.h"
#include "flowrun/slurm.h"

#include "commands.h"
#include "summary.h"

namespace flowrun {

namespace {

struct ResumeOptions {
  std::string run;
  std::string from;
  std::optional<std::vector<std::string>> args;  // given after `--`
  int fake_gpus = -1;
  int cpus = 0;
  std::string run_id;
  std::string run_dir;
  std::string ranks = "all";
  double grace_s = 10;
  double console_wait_s = kDefaultConsoleWaitS;
  bool no_fold = false;
  std::string color = "auto";
  std::string python;
  bool json = false;         // --json
  std::string summary_file;  // --summary-json
};

const char* kResumeFooter =
    R"(RUN is a run id (looked up in ./.flowrun/runs and the same place in the directories above),
latest (the newest run there) or a run directory. The new run has its own id and directory. A
step is taken from RUN, not run, when it succeeded there, its definition in the spec is unchanged,
and every step it needs is taken too; the others run. The spec is the file RUN ran, as it is now
(so a fix to it counts), or the copy saved in RUN's directory when that file is gone. Without
-- ARGS, ${args} are RUN's. --cpus and --fake-gpus default to what RUN used.

Exit codes: as for flowrun SPEC; 2 when RUN cannot be resumed (not found, still running, of
another format, nothing left to run, an unknown --from step). See docs/cli.md.)";

std::vector<std::string> step_names(const Spec& spec) {
  std::vector<std::string> names;
  for (std::size_t index : spec.order) names.push_back(spec.steps[index].name);
  return names;
}

// The spec the earlier run ran, from the copy in its run directory, read as if
// it were still where it came from (relative paths, the default workdir).
Spec saved_spec(const RunRecord& record, const std::string& spec_dir, std::string& text) {
  const std::string copy = record.run_dir + "/spec.yaml";
  // One byte past the limit: parse_spec tells a file that is too large.
  auto read = try_read_file(copy, kMaxSpecBytes + 1);
  if (!read) throw Error("cannot read " + copy + ", the spec run " + record.run_id + " ran", kExitUsage);
  text = std::move(*read);
  SpecParse parsed = parse_spec(text, copy, spec_dir);
  if (!parsed.diagnostics.empty()) {
    std::vector<Diagnostic> diagnostics = std::move(parsed.diagnostics);
    diagnostics.push_back({copy,
                           {},
                           "",
                           "this flowrun cannot read the spec run " + record.run_id +
                               " ran, so it cannot tell which steps changed; run the spec again instead"});
    throw DiagnosticError(std::move(diagnostics));
  }
  return std::move(*parsed.spec);
}

// The run's spec as it ran (`before`, its saved copy) and as it is now (the
// file it ran, a fix to it counting, else the copy), each with its --python.
struct ResumedSpecs {
  Spec before, now;
  std::string saved_text;  // the saved copy's text
  std::string python;      // --python for the new run
};

ResumedSpecs load_specs(const ResumeOptions& options, const RunRecord& record, const std::string& old_dir,
                        const std::string& cwd) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string spec_dir = !record.spec_dir.empty()    ? record.spec_dir
                               : !record.spec_file.empty() ? fs::path(record.spec_file).parent_path().string()
                                                           : cwd;
  ResumedSpecs specs;
  specs.before = saved_spec(record, spec_dir, specs.saved_text);
  if (!record.spec_file.empty() && fs::exists(record.spec_file, ec)) {
    specs.now = load_or_throw(record.spec_file);
    std::cerr << "flowrun: spec " << record.spec_file << " (the file as it is now)\n";
  } else {
    specs.now = specs.before;
    std::cerr << "flowrun: spec " << old_dir << "/spec.yaml, the copy saved with run " << record.run_id
              << " ("
              << (record.spec_file.empty() ? "it was started without a spec file"
                                           : record.spec_file + " no longer exists")
              << ")\n";
  }
  // --python as the earlier run had it, unless given again.
  specs.python = options.python.empty() ? record.python : python_path(options.python, cwd);
  if (!record.python.empty()) use_python(specs.before, record.python);
  if (!specs.python.empty()) use_python(specs.now, specs.python);
  return specs;
}

// The decisions as the run that resumes `record` takes them.
ResumeFrom resume_from(const RunRecord& record, const std::string& old_dir,
                       const std::vector<ResumeDecision>& decisions) {
  ResumeFrom from;
  from.run_id = record.run_id;
  from.run_dir = old_dir;
  for (const auto& d : decisions) {
    if (d.reuse)
      from.reuse.insert(d.step);
    else
      from.why[d.step] = d.why;
  }
  return from;
}

// Which steps are reused and why each other one runs again; throws when
// --from names no step or nothing is left to run.
ResumeFrom what_to_rerun(const ResumeOptions& options, const RunRecord& record, const std::string& old_dir,
                         const ResumedSpecs& specs, const std::vector<std::string>& args_now) {
  const Spec& now = specs.now;
  const std::vector<std::string> names = step_names(now);
  if (!options.from.empty() && now.find_step(options.from) == nullptr) {
    std::string message = "--from " + options.from + ": no step named '" + options.from + "' in " + now.file;
    if (auto match = closest_match(options.from, names)) message += "; did you mean '" + *match + "'?";
    throw Error(message + "\nIts steps: " + join(names, ", "), kExitUsage);
  }

  ResumeQuestion question;
  question.now = &now;
  question.before = &specs.before;
  question.run_id = record.run_id;
  question.run_dir = old_dir;
  question.prior = read_prior_steps(record, step_names(specs.before));
  question.args_before = record.args;
  question.args_now = args_now;
  if (!options.from.empty()) question.from = options.from;
  ResumeFrom from = resume_from(record, old_dir, decide_resume(question));
  if (from.why.empty()) {
    const bool all_succeeded = record.finished && record.exit_code == 0;
    throw Error(
        fmt::format("nothing to resume: {}, and no step changed since; to run steps again, name the "
                    "first of them: flowrun resume {} --from STEP (steps: {})",
                    all_succeeded ? "run " + record.run_id + " succeeded"
                                  : "every step of " + now.file + " succeeded in run " + record.run_id,
                    options.run, join(names, ", ")),
        kExitUsage);
  }
  return from;
}

// The new run's options: the command line's, and what it does not say
// planned as the earlier run was (each such choice named in `inherited`).
RunOptions inherited_run_options(const ResumeOptions& options, const RunRecord& record, const EnvMap& env,
                                 std::vector<std::string>& inherited) {
  RunOptions run;
  run.args = options.args ? *options.args : record.args;
  run.run_id = options.run_id;
  run.run_dir = options.run_dir;
  run.console_ranks = parse_rank_list(options.ranks);
  run.grace_s = options.grace_s;
  run.console_wait_s = options.console_wait_s;
  run.fold = !options.no_fold;
  run.color = color_choice(options.color);
  run.fake_gpus = fake_gpus_from_env(options.fake_gpus, env);
  if (run.fake_gpus < 0 && record.fake_gpus) {
    run.fake_gpus = *record.fake_gpus;
    inherited.push_back(fmt::format("--fake-gpus {}", run.fake_gpus));
  }
  if (options.cpus > 0) {
    run.cpus = options.cpus;
  } else if (record.cpus) {
    run.cpus = record.cpus;
    inherited.push_back(fmt::format("--cpus {}", *run.cpus));
  }
  return run;
}

int resume(const ResumeOptions& options, SummaryTarget& target) {
  const EnvMap env = read_environ();
  const std::string cwd = current_directory();
  const std::string old_dir = find_run_dir(options.run, cwd);
  const RunRecord record = read_run_record(old_dir);
  // Held until the new run ends: one resume of a run at a time, and none
  // while the run itself is in progress.
  const RunLock lock = RunLock::resume(old_dir, record.run_id, host_name(env));

  const ResumedSpecs specs = load_specs(options, record, old_dir, cwd);
  ResumeFrom from =
      what_to_rerun(options, record, old_dir, specs, options.args ? *options.args : record.args);
  std::vector<std::string> inherited;
  RunOptions run = inherited_run_options(options, record, env, inherited);
  run.resume = std::move(from);
  const Spec& now = specs.now;
  if (now.file != record.spec_file) run.spec_file = record.spec_file;
  if (record.spec_file.empty()) run.spec_text = specs.saved_text;  // a spec `flowrun run` built
  run.python = specs.python;

  const HostFacts host = probe_host(run.fake_gpus, env);
  PlanOptions plan_options;
  plan_options.cpus = run.cpus;
  const std::vector<StepPlan> plans = plan_flow(now, host, plan_options);

  if (!options.args && !record.args.empty()) {
    std::vector<std::string> words{"--"};
    for (const auto& arg : record.args) words.push_back(shell_quote(arg));
    inherited.push_back(join(words, " "));
  }
  std::string line = fmt::format("flowrun: resuming run {} ({})", record.run_id, old_dir);
  if (!inherited.empty()) line += " with its " + join(inherited, " ");
  std::cerr << line << "\n";
  std::cerr.flush();
  // Made here rather than by the runner, so that the summary finds the run.
  if (run.run_id.empty()) run.run_id = make_run_id(now.name);
  target.run_dir = run_dir_for(now, run.run_id, run.run_dir);
  return run_flow(now, host, plans, env, run);
}

}  // namespace

int cmd_resume(int argc, char** argv) {
  ResumeOptions options;
  CLI::App app{"flowrun resume: re-run a failed flow from its failed step, reusing the steps that completed",
               "flowrun resume"};
  use_help_format(app);
  app.footer(kResumeFooter);
  app.add_option("run", options.run, "The run to resume: a run id or a run directory")
      ->required()
      ->type_name("RUN");
  app.add_option("--from", options.from,
                 "Run STEP and every step that needs it again, even if they succeeded and are unchanged")
      ->type_name("STEP");
  app.add_option("--fake-gpus", options.fake_gpus,
                 "Pretend this host has N GPUs (default: as RUN did); same as FLOWRUN_FAKE_GPUS=N")
      ->check(CLI::Range(0, 1024))
      ->type_name("N");
  app.add_option("--cpus", options.cpus, "Run every parallel step on N CPU workers (default: as RUN did)")
      ->check(CLI::Range(1, 4096))
      ->type_name("N");
  app.add_option("--ranks", options.ranks,
                 "Ranks whose output is shown on the console: all (default), 0, 0,2 or 0-3")
      ->type_name("LIST");
  app.add_option("--grace", options.grace_s,
                 "Seconds a stopped worker gets between SIGTERM and SIGKILL (default 10)")
      ->check(seconds_between(0, 3600))
      ->type_name("SECONDS");
  add_console_options(app, options.console_wait_s, options.no_fold);
  app.add_option("--color", options.color, "Colour the rank prefixes: auto, always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->type_name("WHEN");
  app.add_option("--python", options.python,
                 "The Python for steps whose run starts with python or python3 (default: as RUN did)")
      ->type_name("PY");
  app.add_option("--run-id", options.run_id, "The new run's id instead of a new one")
      ->check(run_id_check())
      ->type_name("ID");
  app.add_option("--run-dir", options.run_dir,
                 "The new run's directory (default: WORKDIR/.flowrun/runs/RUN_ID)")
      ->type_name("DIR");
  app.add_flag("--json", options.json,
               "Print the new run's summary as JSON on stdout (the console's lines all go to stderr)");
  app.add_option("--summary-json", options.summary_file,
                 "Write the new run's summary as JSON to FILE when flowrun ends, whatever the outcome")
      ->type_name("FILE");

  // After `--`: the steps' ${args}, replacing RUN's.
  int ours = argc;
  options.args = args_after_dashes(argc, argv, &ours);
  // A usage error gets its summary too (docs/cli.md, For CI).
  const SummaryRequest early = scan_summary_request(std::vector<std::string>(argv + 1, argv + ours));
  auto usage = [&](const std::string& message) {
    return report_with_summary(early, [&](SummaryTarget&) -> int { throw Error(message, kExitUsage); });
  };
  try {
    app.parse(ours, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ExtrasError&) {
    const auto extras = app.remaining();
    const std::string first = extras.empty() ? "" : extras.front();
    if (first.rfind('-', 0) == 0)
      return usage("unknown option '" + first + "'\nRun 'flowrun resume --help' for usage.");
    return usage(
        "unexpected argument '" + first +
        "'\nArguments for the steps go after --: flowrun resume RUN -- ARGS (they replace ${args}).");
  } catch (const CLI::ParseError& e) {
    return usage(std::string(e.what()) + "\nRun 'flowrun resume --help' for usage.");
  }
  const SummaryRequest request{options.json, options.summary_file};
  return report_with_summary(request, [&](SummaryTarget& target) { return resume(options, target); });
}

}  // namespace flowrun

namespace flowrun {

namespace {

// "Slurm job 4242 was requeued (SLURM_RESTART_COUNT=1)".
std::string requeued(const SlurmRestart& job) {
  return fmt::format("Slurm job {} was requeued (SLURM_RESTART_COUNT={})", job.job_id, job.restart_count);
}

// Where the runs of `spec` are kept, and so the earlier one: the default
// .flowrun/runs, or the directory --run-dir is in.
std::string runs_dir_of(const Spec& spec, const RunOptions& run) {
  if (run.run_dir.empty()) return spec.workdir + "/.flowrun/runs";
  return std::filesystem::path(run_dir_for(spec, "requeue", run.run_dir)).parent_path().string();
}

// `name` + `suffix` within `limit` bytes (a run id's, a file name's): a name
// too long for that keeps its start and gets 8 hex digits of a hash of the
// whole name before the suffix, so that two long names alike in their start
// still derive two names, and the same name always the same one.
std::string derived_name(const std::string& name, const std::string& suffix, std::size_t limit) {
  if (name.size() + suffix.size() <= limit) return name + suffix;
  std::uint32_t hash = 2166136261u;  // FNV-1a
  for (const char c : name) hash = (hash ^ static_cast<unsigned char>(c)) * 16777619u;
  const std::string tag = fmt::format("-{:08x}", hash);
  return name.substr(0, limit - suffix.size() - tag.size()) + tag + suffix;
}

}  // namespace

std::optional<int> resume_requeued_job(const Spec& spec, const HostFacts& host,
                                       const std::vector<StepPlan>& plans, const EnvMap& env, RunOptions& run,
                                       bool enabled, SummaryTarget& target) {
  RequeueQuestion question;
  question.spec_file = absolute_spec_file(spec);
  question.args = run.args;
  std::string why;  // "Slurm job 4242 was requeued (...)", "the gang's head started again (...)"
  std::string problem;
  if (host.gang) {
    // A gang's head whose pod the platform replaced: no count says so, so
    // an earlier run of the same gang is what does, and without one the
    // head starts afresh as on its first start, saying nothing.
    const auto gang = read_gang_identity(*host.gang, env, &problem);
    if (!problem.empty()) throw Error(problem, kExitUsage);
    if (!gang) return std::nullopt;
    question.job_id = gang->id;
    question.gang = true;
    question.attempt = gang->attempt;
    question.said = gang->said;
    why = "the gang's head started again (" + gang->said + ")";
  } else {
    const auto job = read_slurm_restart(env, &problem);
    if (!problem.empty()) throw Error(problem, kExitUsage);
    if (!job || job->restart_count == 0) return std::nullopt;
    question.job_id = job->job_id;
    question.restart_count = job->restart_count;
    why = requeued(*job);
  }
  if (!enabled) {
    if (!question.gang) std::cerr << "flowrun: " << why << "; --no-requeue-resume: starting afresh\n";
    return std::nullopt;
  }
  const std::string runs_dir = runs_dir_of(spec, run);
  const std::vector<RunRecord> runs = read_run_records(runs_dir);
  const RunRecord* found = pick_requeued_run(question, runs);
  if (found == nullptr) {
    if (question.gang) return std::nullopt;
    std::cerr << "flowrun: " << why << ", but " << runs_dir << " has no earlier run of "
              << (question.spec_file.empty() ? spec.file : question.spec_file)
              << (run.args.empty() ? "" : " with these arguments") << " in this job; starting afresh\n";
    return std::nullopt;
  }
  const RunRecord& record = *found;
  if (auto holder = run_lock_holder(record.run_dir))
    throw Error(
        fmt::format("{}, but its run {} is still in progress ({}); flowrun does not run it twice: stop "
                    "that flowrun first, or start afresh with --no-requeue-resume",
                    why, record.run_id, *holder),
        kExitUsage);
  // Held until the new run ends, as flowrun resume holds it.
  const RunLock lock = RunLock::resume(record.run_dir, record.run_id, host.hostname);
  const std::string done =
      fmt::format("flowrun: {}: run {} ({}) of this spec", why, record.run_id, record.run_dir);
  if (record.finished && record.exit_code == 0) {
    std::cerr << done << " succeeded already; nothing to run\n";
    return kExitOk;
  }

  std::string saved_text;
  Spec before = saved_spec(record, record.spec_dir, saved_text);
  if (!record.python.empty()) use_python(before, record.python);
  ResumeQuestion ask;
  ask.now = &spec;
  ask.before = &before;
  ask.run_id = record.run_id;
  ask.run_dir = record.run_dir;
  ask.prior = read_prior_steps(record, step_names(before));
  ask.args_now = run.args;
  ask.args_before = record.args;
  const std::vector<ResumeDecision> decisions = decide_resume(ask);
  ResumeFrom from = resume_from(record, record.run_dir, decisions);
  if (from.why.empty()) {
    std::cerr << done << ": every step succeeded; nothing to run\n";
    return kExitOk;
  }
  from.requeue = true;
  from.restart_from = carried_restart_counts(spec, decisions, ask.prior, record);
  std::cerr << requeue_line(question, record, decisions, ask.prior, from.restart_from) << "\n";
  std::cerr.flush();
  run.resume = std::move(from);
  // A run id or directory given on the command line is the earlier run's.
  // A gang's head without attempts counts the runs of its gang instead.
  const int restart = !question.gang ? question.restart_count
                      : question.attempt
                          ? *question.attempt
                          : static_cast<int>(std::count_if(runs.begin(), runs.end(), [&](const RunRecord& r) {
                              return r.gang_id == question.job_id;
                            }));
  const std::string suffix = fmt::format("-requeue{}", restart);
  run.run_id = run.run_id.empty() ? make_run_id(spec.name) : derived_name(run.run_id, suffix, kMaxNameLength);
  if (!run.run_dir.empty()) {
    const std::filesystem::path dir = run_dir_for(spec, "requeue", run.run_dir);
    run.run_dir = (dir.parent_path() / derived_name(dir.filename().string(), suffix, NAME_MAX)).string();
  }
  target.run_dir = run_dir_for(spec, run.run_id, run.run_dir);
  return run_flow(spec, host, plans, env, run);
}

}  // namespace flowrun
