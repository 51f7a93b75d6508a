#include "flowrun/flow.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <set>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flowrun/doctor.h"
#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/gang.h"
#include "flowrun/join.h"
#include "flowrun/path.h"
#include "flowrun/process.h"
#include "flowrun/remote_group.h"
#include "flowrun/report.h"
#include "flowrun/result.h"
#include "flowrun/retry_advice.h"
#include "flowrun/run_page.h"
#include "flowrun/slurm.h"
#include "flowrun/step_runner.h"
#include "flowrun/supervisor.h"
#include "flowrun/worker_group.h"

#include "workdir_lock.h"

namespace flowrun {

namespace {

// What flowrun reads of a worker's error file.
constexpr std::size_t kMaxErrorFileBytes = 1 << 20;

std::string seconds(double s) {
  if (s < 10) return fmt::format("{:.2f} s", s);
  return fmt::format("{:.0f} s", s);
}

std::string join_quoted(const std::vector<std::string>& names) {
  std::vector<std::string> quoted;
  for (const auto& n : names) quoted.push_back("'" + n + "'");
  return join(quoted, ", ");
}

// The steps of a run by how they ended, in the order they ran.
struct RunTally {
  std::vector<std::string> failed, skipped, succeeded, reused;
};

// The run's last line: "flowrun: run ID succeeded: 2 steps in 1.20 s", or
// what failed, was not run, succeeded and was reused.
std::string format_run_end(const std::string& run_id, const RunTally& tally, int exit_code, int sig,
                           double took, const std::string& resumed_from) {
  if (exit_code == 0) {
    const std::size_t steps = tally.succeeded.size() + tally.reused.size();
    std::string text = fmt::format("flowrun: run {} succeeded: {} step{} in {}", run_id, steps,
                                   steps == 1 ? "" : "s", seconds(took));
    if (!tally.reused.empty())
      text += fmt::format(" ({} reused from run {})", tally.reused.size(), resumed_from);
    return text;
  }
  std::string text = fmt::format("flowrun: run {} {} after {} (exit code {}): ", run_id,
                                 sig != 0 ? "was interrupted" : "failed", seconds(took), exit_code);
  std::vector<std::string> parts;
  if (!tally.failed.empty()) parts.push_back("failed " + join_quoted(tally.failed));
  if (!tally.skipped.empty()) parts.push_back("not run " + join_quoted(tally.skipped));
  if (!tally.succeeded.empty()) parts.push_back("succeeded " + join_quoted(tally.succeeded));
  if (!tally.reused.empty())
    parts.push_back(fmt::format("reused {} from run {}", join_quoted(tally.reused), resumed_from));
  return text + join(parts, "; ");
}

// A run that did not succeed leaves its picture beside it, so the person who
// reads the failure opens one page instead of every rank's logs: writes
// report.html (as `flowrun report` does) and says where, or why not.
std::string write_run_page(const std::string& run_dir) {
  const std::string path = run_dir + "/" + kRunReportFile;
  try {
    const int err = try_write_file(path, format_run_page(read_run_picture(run_dir, "failed", unix_now_ns())));
    if (err == 0) return "flowrun: the run as one page: " + path;
    return fmt::format("flowrun: cannot write the run's page {}: {}", path, std::strerror(err));
  } catch (const Error& e) {
    return fmt::format("flowrun: cannot write the run's page {}: {}", path, e.what());
  }
}

// A step's end on the console: the failure report (and the join's errors),
// or the processes it left behind and "succeeded in".
void report_step_end(const Console& console, const StepRecord& record, const std::string& join_errors,
                     double took) {
  const auto& attempt = record.attempts.back();
  std::string error_text;                // the culprit's error file
  std::vector<std::string> error_texts;  // those of the ranks that failed after it, by index
  if (attempt.culprit && (!join_errors.empty() || record.outcome != Outcome::succeeded)) {
    error_text = try_read_file(attempt.workers[static_cast<std::size_t>(*attempt.culprit)].error_file,
                               kMaxErrorFileBytes)
                     .value_or("");
    error_texts.resize(attempt.workers.size());
    for (std::size_t i = 0; i < attempt.workers.size(); ++i) {
      const WorkerRecord& w = attempt.workers[i];
      if (w.role == Role::failed_after && !w.error_file.empty())
        error_texts[i] = try_read_file(w.error_file, kMaxErrorFileBytes).value_or("");
    }
  }
  if (!join_errors.empty() || record.outcome != Outcome::succeeded) {
    if (join_errors.empty() || attempt.culprit)
      console.message(format_failure_report(record, error_text, error_texts));
    if (!join_errors.empty()) console.message(join_errors);
    if (auto retry = advise_retry(record)) console.message(retry_line(*retry));
  } else {
    for (const auto& note : record.notes) {  // what the console's reader needs to know of a success too
      if (note.rfind("stopped ", 0) == 0 || note.rfind(kConsoleMissedNote, 0) == 0)
        console.message("flowrun: step '" + record.step + "': " + note);
    }
    console.message(fmt::format("flowrun: step '{}' succeeded in {}", record.step, seconds(took)));
  }
}

// preflight: true: flowrun doctor's NCCL check on the step's GPUs before
// any worker starts. On failure the step is refused with the doctor's
// report, as a step whose nodes never started is.
bool preflight_passes(const Console& console, const LaunchContext& ctx, const HostFacts& host, int fake_gpus,
                      const Step& step, const StepPlan& plan, std::vector<std::string>& errors) {
  std::vector<int> gpus;
  for (const Gpu& gpu : plan.nodes.front().gpus) gpus.push_back(gpu.index);
  console.message(fmt::format("flowrun: step '{}': preflight: checking NCCL on this host's {}", step.name,
                              describe_devices(plan)));
  // The links between the GPUs set the bandwidth's ceiling: the plan's
  // inventory has none (NVML calls per pair of GPUs), so probe them now.
  Inventory inventory = host.inventory;
  if (inventory.source != "fake" && inventory.links.size() != inventory.gpus.size()) {
    Inventory with_links =
        select_gpus(make_probe(ctx.parent_env, fake_gpus, /*topology=*/true)->probe(), ctx.parent_env);
    if (with_links.gpus.size() == inventory.gpus.size()) inventory = std::move(with_links);
  }
  DoctorOptions quick;
  quick.sweep = preflight_sweep();
  const PreflightResult pre = run_preflight(inventory, gpus, quick, host.hostname);
  // The whole report stays with the run, passed or not (the console shows it on failure).
  const std::string path = ctx.layout.step_dir(step.name) + "/preflight.txt";
  make_dirs(ctx.layout.step_dir(step.name));
  const int err = try_write_file(path, pre.report);
  if (pre.ok) {
    console.message(fmt::format(
        "flowrun: step '{}': preflight {} ({})", step.name, preflight_summary(evaluate_doctor(pre.facts)),
        err == 0 ? "report: " + path : "cannot write " + path + ": " + std::strerror(err)));
    return true;
  }
  console.message(pre.report);
  errors.push_back(
      "the preflight check of its GPUs failed (the report above); fix what it names, or set preflight: "
      "false");
  return false;
}

// run.json as the run starts: what it runs, from where, every step pending.
RunRecord first_record(const Spec& spec, const HostFacts& host, const RunOptions& options,
                       const LaunchContext& ctx) {
  RunRecord record;
  record.run_id = ctx.run_id;
  record.run_dir = ctx.layout.run_dir;
  record.flow = spec.name;
  record.spec_file = !options.spec_file.empty()  ? options.spec_file
                     : options.spec_text.empty() ? absolute_spec_file(spec)
                                                 : std::string();
  record.spec_dir = spec.dir;
  record.python = options.python;
  record.args = options.args;
  record.cpus = options.cpus;
  if (options.fake_gpus >= 0) record.fake_gpus = options.fake_gpus;
  record.host = host.hostname;
  record.pid = static_cast<int>(getpid());
  for (std::size_t index : spec.order) record.steps.emplace_back(spec.steps[index].name, "pending");
  if (options.resume) {
    record.resumed_from_id = options.resume->run_id;
    record.resumed_from_dir = options.resume->run_dir;
    record.resumed_by = options.resume->requeue ? "requeue" : "resume";
    for (const auto& [step, count] : options.resume->restart_from)
      record.attempts_started.emplace_back(step, count);
  }
  // The job it runs in, by which a requeue of the job finds this run again.
  if (auto job = read_slurm_restart(ctx.parent_env, nullptr)) {
    record.slurm_job_id = job->job_id;
    record.slurm_restart_count = job->restart_count;
  }
  // The gang it runs on, by which the head's next pod finds this run again.
  if (host.gang) {
    if (auto gang = read_gang_identity(*host.gang, ctx.parent_env, nullptr)) {
      record.gang_id = gang->id;
      record.gang_attempt = gang->attempt;
    }
  }
  return record;
}

// <workdir>/.flowrun/runs/latest, at the run that starts now: only in the
// default place, where every run of the workdir lives (a --run-dir may be
// anywhere). A link that cannot be made is said, and the run goes on.
void point_latest(const RunOptions& options, const LaunchContext& ctx, const Console& console) {
  if (!options.run_dir.empty()) return;
  const std::string link = std::filesystem::path(ctx.layout.run_dir).parent_path().string() + "/latest";
  if (const int err = replace_symlink(link, ctx.run_id); err != 0)
    console.message(fmt::format("flowrun: note: cannot point {} at this run: {}", link, std::strerror(err)));
}

// The step's time left, since `start_mono`; nullopt without a timeout.
std::optional<double> time_left(const Step& step, std::int64_t start_mono) {
  if (!step.timeout_s) return std::nullopt;
  return *step.timeout_s - static_cast<double>(monotonic_now_ns() - start_mono) / 1e9;
}

const StepPlan& plan_for(const std::vector<StepPlan>& plans, const Step& step) {
  for (const auto& plan : plans) {
    if (plan.step == step.name) return plan;
  }
  throw Error("internal: no plan for step '" + step.name + "'");
}

GroupOptions group_options_for(const Step& step, const RunOptions& options, const LaunchContext& ctx,
                               const LogStyle& style) {
  GroupOptions group;
  group.step = step.name;
  group.grace_s = options.grace_s;
  group.stall_timeout_s = step.stall_timeout_s;
  group.forensics_stacks = step.forensics.stacks;
  group.forensics_timeout_s = step.forensics.timeout_s;
  group.run_dir = ctx.layout.run_dir;
  group.stacks_file = ctx.layout.step_dir(step.name) + "/stacks.json";
  group.sample_s = step.forensics.sample_s;
  group.shares_file = ctx.layout.step_dir(step.name) + "/shares.json";
  group.style = style;
  // Only a parallel step's ranks fold; --no-fold, or logs.fold, turns it off.
  const double fold_s = !step.parallel || !options.fold ? 0.0 : step.fold_s.value_or(kDefaultFoldS);
  group.style.fold_ns = static_cast<std::int64_t>(fold_s * 1e9);
  return group;
}

// The restart count a requeue carried on for `step`; 0 for none.
int carried_count(const RunOptions& options, const std::string& step) {
  if (!options.resume) return 0;
  const auto found = options.resume->restart_from.find(step);
  return found == options.resume->restart_from.end() ? 0 : found->second;
}

// The earlier run whose attempts of parallel step `step` this run continues
// (a requeued Slurm job's), with how they failed; nullopt when none.
std::optional<StepRecord::ContinuedFrom> continued_from(const RunOptions& options, const std::string& step) {
  const int carried = carried_count(options, step);
  if (carried <= 0) return std::nullopt;
  const std::string results = options.resume->run_dir + "/" + step + "/results.json";
  return StepRecord::ContinuedFrom{options.resume->run_id, options.resume->run_dir, carried,
                                   failure_signatures(try_read_file(results, kMaxRecordBytes).value_or(""))};
}

// Notes in run.json's record that `started` attempts of `step` have started.
void note_attempts(RunRecord& record, const std::string& step, int started) {
  auto& counts = record.attempts_started;
  auto found = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == step; });
  if (found == counts.end())
    counts.emplace_back(step, started);
  else
    found->second = started;
}

// A rank's streams on the console: none for a rank --ranks (or the step's
// logs.console) leaves out, else what torchrun's --redirects, --tee and
// --local-ranks-filter say for its local rank.
ConsoleShows console_shows(const RunOptions& options, const Step& step, int rank, int local_rank) {
  const auto& chosen = options.console_ranks ? options.console_ranks : step.console_ranks;
  if (chosen && std::find(chosen->begin(), chosen->end(), rank) == chosen->end()) return ConsoleShows::none();
  if (!options.console_streams) return {};
  const unsigned shown = options.console_streams->shown(local_rank);
  return {(shown & kStdOut) != 0, (shown & kStdErr) != 0};
}

class FlowRunner {
 public:
  FlowRunner(const Spec& spec, const HostFacts& host, const std::vector<StepPlan>& plans, const EnvMap& env,
             const RunOptions& options)
      : spec_(spec), host_(host), plans_(plans), options_(options) {
    ctx_.run_id = options.run_id.empty() ? make_run_id(spec.name) : options.run_id;
    ctx_.layout.run_dir = run_dir_for(spec, ctx_.run_id, options.run_dir);
    ctx_.parent_env = env;
    ctx_.virtual_local_rank = options.virtual_local_rank;
    ctx_.cpus = options.worker_cpus;
    const bool tty = isatty(STDOUT_FILENO) == 1;
    const auto no_color = env_get(env, "NO_COLOR");
    style_.color = options.color == RunOptions::Color::always ||
                   (options.color == RunOptions::Color::automatic && tty && (!no_color || no_color->empty()));
    style_.progress_interval_ns = tty ? 1'000'000'000LL : 10'000'000'000LL;

    record_ = first_record(spec, host, options, ctx_);
  }

  int run() {
    // Signals wait until the supervisor handles them (they would end flowrun
    // with run.json saying "running"); workers start with none blocked.
    sigset_t held;
    sigemptyset(&held);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaddset(&held, sig);
    sigprocmask(SIG_BLOCK, &held, &mask_before_);
    // A run directory holds one run, and so does a workdir for outputs gathered by glob (workdir_lock.h,
    // taken first: a refused run makes no run directory). Held until this returns or flowrun dies:
    // `flowrun resume` tells a live run by its run.lock.
    const WorkdirLocks workdirs = WorkdirLocks::take(spec_, ctx_.run_id, host_.hostname);
    const RunLock lock = RunLock::create(ctx_.layout.run_dir, ctx_.run_id, host_.hostname, spec_.workdir);
    for (const auto& warning : workdirs.warnings()) console_.message(warning);
    record_.start_unix_ns = unix_now_ns();
    write_record();
    point_latest(options_, ctx_, console_);
    // From here on, however flowrun leaves (an error it cannot go on after,
    // a resource it runs out of), run.json is closed first: a record left
    // "running" would say that the run might still be going.
    try {
      return run_steps();
    } catch (const std::exception& e) {
      close_record_after(e);
      throw;
    }
  }

 private:
  enum class State { pending, succeeded, failed, skipped };

  // The run ends by an exception: the step that ran failed, and run.json
  // says why and with which exit code flowrun leaves (run_cli prints it).
  void close_record_after(const std::exception& e) {
    const auto* error = dynamic_cast<const Error*>(&e);
    for (auto& [name, state] : record_.steps) {
      if (state == "running") state = "failed";
    }
    record_.error = e.what();
    record_.finished = true;
    record_.exit_code = error != nullptr ? error->exit_code() : 1;
    record_.end_unix_ns = unix_now_ns();
    try_write_file(ctx_.layout.run_dir + "/run.json", format_run_json(record_));
    supervisor_ = nullptr;
    lobby_ = nullptr;
  }

  int run_steps() {
    write_file(ctx_.layout.run_dir + "/spec.yaml",
               options_.spec_text.empty() ? spec_.text : options_.spec_text);
    PlanView view{spec_, host_, plans_, ctx_, false};
    write_file(ctx_.layout.run_dir + "/plan.json", format_plan_json(view));
    started_ = true;  // from here on a file that cannot be written fails the step, not flowrun at once

    // The guardian's mark is this invocation's own secret, not the run id:
    // another run given the same --run-id is never touched.
    guardian_.start("FLOWRUN_INVOCATION", make_secret());
    become_subreaper();
    Supervisor supervisor(console_, guardian_.pid(), options_.stop_signals.value_or(kStopSignals));
    supervisor_ = &supervisor;
    sigprocmask(SIG_SETMASK, &mask_before_, nullptr);  // what came meanwhile is handled now
    // A gang's other nodes dial from their start: the lobby listens from now to
    // the flow's end (its destructor tells them the flow failed on an exception).
    std::optional<GangLobby> lobby;
    if (options_.gang) lobby_ = &lobby.emplace(supervisor, console_, *options_.gang);

    console_.message(fmt::format("flowrun: run {}: {} step{}; logs and results in {}", ctx_.run_id,
                                 spec_.steps.size(), spec_.steps.size() == 1 ? "" : "s",
                                 ctx_.layout.run_dir));
    const std::int64_t flow_start = monotonic_now_ns();
    int exit_code = 0;
    RunTally tally;
    for (std::size_t index : spec_.order) {
      const Step& step = spec_.steps[index];
      if (supervisor.interrupt_signal() != 0) {
        tally.skipped.push_back(step.name);
        set_state(step.name, "not_run");
        continue;
      }
      std::vector<std::string> blocked;
      for (const auto& need : step.needs) {
        if (state_[need] != State::succeeded) blocked.push_back(need);
      }
      if (!blocked.empty()) {
        console_.message(fmt::format("flowrun: step '{}' skipped: it needs {}, which did not succeed",
                                     step.name, join_quoted(blocked)));
        state_[step.name] = State::skipped;
        tally.skipped.push_back(step.name);
        set_state(step.name, "skipped");
        continue;
      }
      if (write_failed_) {
        // The run directory is full (or broken): nothing more runs on results
        // that cannot be recorded.
        console_.message(
            fmt::format("flowrun: step '{}' not run: flowrun could not write the run directory", step.name));
        tally.skipped.push_back(step.name);
        set_state(step.name, "not_run");
        continue;
      }
      if (options_.resume && options_.resume->reuse.contains(step.name)) {
        console_.message(reuse_step(step, *options_.resume, ctx_.layout));
        state_[step.name] = State::succeeded;
        tally.reused.push_back(step.name);
        set_state(step.name, "reused");
        continue;
      }
      if (options_.resume) {
        if (auto why = options_.resume->why.find(step.name); why != options_.resume->why.end())
          console_.message(fmt::format("flowrun: step '{}' runs ({})", step.name, why->second));
      }
      // A parallel step's first attempt writes run.json (its count of attempts)
      // as it starts, a moment from now: the state goes with it. With a
      // preflight check first, which may take a while, it is written now.
      set_state(step.name, "running", !step.parallel || step.parallel->preflight);
      const int code = run_step(step);
      state_[step.name] = code == 0 ? State::succeeded : State::failed;
      (code == 0 ? tally.succeeded : tally.failed).push_back(step.name);
      // The last step's end goes with the run's, written below.
      set_state(step.name, code == 0 ? "succeeded" : "failed", index != spec_.order.back());
      if (code != 0 && exit_code == 0) exit_code = code;
    }
    const int sig = supervisor.interrupt_signal();
    if (sig != 0 && exit_code == 0) exit_code = 128 + sig;
    if (write_failed_ && exit_code == 0) exit_code = 1;
    // run.json first: a run whose record cannot be written did not succeed.
    record_.finished = true;
    record_.exit_code = exit_code;
    record_.end_unix_ns = unix_now_ns();
    write_record();
    if (write_failed_ && exit_code == 0) exit_code = 1;
    const double took = static_cast<double>(monotonic_now_ns() - flow_start) / 1e9;
    if (exit_code != 0 && !write_failed_ && started_) console_.message(write_run_page(ctx_.layout.run_dir));
    console_.message(format_run_end(ctx_.run_id, tally, exit_code, sig, took,
                                    options_.resume ? options_.resume->run_id : std::string()));
    if (lobby) lobby->finish(exit_code);
    lobby_ = nullptr;
    supervisor_ = nullptr;
    guardian_.disarm();
    return exit_code;
  }

  // Once the run has started, a run.json that cannot be written is said once,
  // and no further step starts (write_failed_); flowrun then exits non-zero.
  void write_record() {
    const std::string path = ctx_.layout.run_dir + "/run.json";
    const int err = try_write_file(path, format_run_json(record_));
    if (err == 0) return;
    if (!started_) throw Error("cannot write " + path + ": " + std::strerror(err));
    write_failed_ = true;
    if (run_json_failed_) return;
    run_json_failed_ = true;
    console_.message(fmt::format(
        "flowrun: error: cannot write run.json in {}: {}; it is out of date, and no further step starts{}",
        ctx_.layout.run_dir, std::strerror(err), resume_hint(err)));
  }

  // " (free space there, then: flowrun resume DIR)" after a failed write.
  std::string resume_hint(int err) const { return write_failure_hint(err, ctx_.layout.run_dir); }

  // The step's state in run.json, written now unless `write` is false (the
  // caller's next write, moments later, takes it).
  void set_state(const std::string& step, const char* state, bool write = true) {
    for (auto& [name, value] : record_.steps) {
      if (name == step) value = state;
    }
    if (write) write_record();
  }

  ConsoleShows shows(const Step& step, int rank, int local_rank) const {
    return console_shows(options_, step, rank, local_rank);
  }

  const StepPlan& plan_of(const Step& step) const { return plan_for(plans_, step); }

  GroupOptions group_options(const Step& step) const {
    return group_options_for(step, options_, ctx_, style_);
  }

  // The join's gathering of a step whose workers succeeded: its outputs
  // into outputs/, noted in `record`. Returns flowrun's lines when they are
  // incomplete or cannot be gathered (the step then counts as failed).
  std::string gather(const Step& step, StepRecord& record, FileTime started, std::int64_t start_mono) {
    std::string join_errors;
    JoinRequest request = join_request(step, plan_of(step), ctx_.layout, started, record.attempts);
    // Gathering counts in the step's time and hears Ctrl-C: a large copy
    // stops at the step's deadline or at an interrupt, as the workers would.
    request.stop = [&]() -> std::string {
      if (const int sig = supervisor_->interrupt_signal(); sig != 0)
        return fmt::format("flowrun received {}", signal_name(sig));
      if (const auto left = time_left(step, start_mono); left && *left <= 0)
        return fmt::format("the step's timeout of {:g} s ran out", *step.timeout_s);
      return {};
    };
    JoinResult joined;
    bool gathered = false;
    try {
      joined = gather_outputs(request);
      gathered = true;
    } catch (const Error& e) {
      // The run directory cannot take the outputs (a full disk): what the
      // join would get is incomplete.
      const std::string what = e.what();
      const bool full = e.err() == ENOSPC || e.err() == EDQUOT;
      write_failed_ = true;
      record.outcome = Outcome::failed;
      record.exit_code = 1;
      record.notes.push_back(kCannotGatherNote + what);
      join_errors = fmt::format(
          "flowrun: error: step '{}': cannot gather its outputs: {}; the step counts as "
          "failed{}\n",
          step.name, what, resume_hint(full ? ENOSPC : EIO));
    }
    if (!gathered) {
      // Said above.
    } else if (!joined.ok()) {
      record.outcome = Outcome::failed;
      record.exit_code = 1;
      if (joined.stopped) {
        const int sig = supervisor_->interrupt_signal();
        record.outcome = sig != 0 ? Outcome::interrupted : Outcome::timed_out;
        record.exit_code = sig != 0 ? 128 + sig : 124;
      }
      for (const auto& e : joined.errors) record.notes.push_back(e);
      join_errors = fmt::format(
          "flowrun: step '{}': its workers succeeded, but its outputs are incomplete:\n", step.name);
      for (const auto& e : joined.errors) join_errors += "flowrun:   " + e + "\n";
    } else if (!step.outputs.empty() || !joined.files.empty()) {
      record.notes.push_back(fmt::format("gathered {} output file{} into {}", joined.files.size(),
                                         joined.files.size() == 1 ? "" : "s", request.outputs_dir));
    }
    return join_errors;
  }

  int run_step(const Step& step) {
    StepRecord record;
    record.step = step.name;
    record.parallel = step.is_parallel();
    record.timeout_s = step.timeout_s;
    record.stall_timeout_s = step.stall_timeout_s;
    const std::string step_dir = ctx_.layout.step_dir(step.name);
    make_dirs(step_dir);
    const FileTime started = file_clock_now();
    const std::int64_t start_mono = monotonic_now_ns();

    StepRun run =
        step.is_parallel() ? run_parallel(step, plan_of(step), start_mono) : run_plain(step, start_mono);
    record.attempts = std::move(run.attempts);
    record.notes = std::move(run.notes);
    const AttemptRecord& last = record.attempts.back();
    if (!last.write_error.empty()) write_failed_ = true;  // the supervisor said so
    for (const auto& note : supervisor_->notes()) record.notes.push_back(note);
    record.outcome = run.outcome;
    record.exit_code = run.exit_code;
    if (step.is_parallel()) record.continued_from = continued_from(options_, step.name);

    std::string join_errors;
    if (!run.errors.empty()) {
      for (const auto& e : run.errors) record.notes.push_back(e);
      join_errors = fmt::format("flowrun: step '{}' failed:\n", step.name);
      for (const auto& e : run.errors) join_errors += "flowrun:   " + e + "\n";
    }
    if (record.outcome == Outcome::succeeded && step.is_parallel()) {
      if (std::string errors = gather(step, record, started, start_mono); !errors.empty())
        join_errors = errors;
    }
    std::string results_error;
    bool unrecorded_success = false;
    if (const int err = try_write_file(step_dir + "/results.json", format_results_json(record)); err != 0) {
      write_failed_ = true;
      unrecorded_success = record.outcome == Outcome::succeeded;
      results_error = fmt::format(
          "flowrun: error: step '{}': cannot write results.json in {}: {}; its results are not "
          "recorded{}{}",
          step.name, step_dir, std::strerror(err), unrecorded_success ? ", so it counts as failed" : "",
          resume_hint(err));
      if (unrecorded_success) {
        record.outcome = Outcome::failed;
        record.exit_code = 1;
      }
    }

    if (!unrecorded_success)
      report_step_end(console_, record, join_errors,
                      static_cast<double>(monotonic_now_ns() - start_mono) / 1e9);
    if (!results_error.empty()) console_.message(results_error);
    return record.outcome == Outcome::succeeded ? 0 : record.exit_code;
  }

  // The step continues a requeue's carried count, and run.json says how many
  // of its attempts started, as each starts: a requeue after SIGKILL goes on
  // from there.
  void count_attempts(StepRunner& runner, const Step& step) {
    if (const int carried = carried_count(options_, step.name); carried > 0) runner.continue_count(carried);
    runner.on_attempts([this, name = step.name](int started) {
      note_attempts(record_, name, started);
      write_record();
    });
  }

  StepRun run_parallel(const Step& step, const StepPlan& plan, std::int64_t start_mono) {
    if (plan.mode == PlanMode::multi_node) return run_on_nodes_step(step, plan, start_mono);
    LocalStep job;
    job.spec = &spec_;
    job.step = &step;
    job.plan = &plan;
    job.ctx = ctx_;
    job.argv = expand_command(step, ctx_.layout, options_.args);
    job.group = group_options(step);
    job.shows = [this, &step](int rank, int local_rank) { return shows(step, rank, local_rank); };
    job.preflight = [this, &step, &plan](std::vector<std::string>& errors) {
      return preflight_passes(console_, ctx_, host_, options_.fake_gpus, step, plan, errors);
    };
    LocalGroup group(*supervisor_, console_, std::move(job));
    StepRunner runner(step, plan, ctx_.layout, console_, step.parallel->preflight && !plan.cpu,
                      [&step, start_mono] { return time_left(step, start_mono); });
    count_attempts(runner, step);
    return runner.run(group);
  }

  StepRun run_on_nodes_step(const Step& step, const StepPlan& plan, std::int64_t start_mono) {
    NodeStep job;
    job.spec = &spec_;
    job.step = &step;
    job.plan = &plan;
    job.ctx = ctx_;
    job.argv = expand_command(step, ctx_.layout, options_.args);
    job.group = group_options(step);
    job.group.timeout_s = time_left(step, start_mono);
    job.shows = [this, &step](int rank, int local_rank) { return shows(step, rank, local_rank); };
    job.fake_gpus = options_.fake_gpus;
    char self[4096] = {};
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    job.flowrun_path = n > 0 ? std::string(self, static_cast<std::size_t>(n)) : "flowrun";
    auto group =
        lobby_ != nullptr ? lobby_->group(job) : std::make_unique<RemoteGroup>(*supervisor_, console_, job);
    StepRunner runner(step, plan, ctx_.layout, console_, step.parallel->preflight && !plan.cpu,
                      [&step, start_mono] { return time_left(step, start_mono); });
    count_attempts(runner, step);
    StepRun run = runner.run(*group);
    AttemptResult rest = group->close();
    for (auto& note : rest.notes) run.notes.push_back(std::move(note));
    for (auto& error : rest.errors) run.errors.push_back(std::move(error));
    settle_step_run(run, supervisor_->interrupt_signal());
    return run;
  }

  StepRun run_plain(const Step& step, std::int64_t start_mono) {
    WorkerLaunch launch;
    launch.rank = -1;
    launch.argv = expand_command(step, ctx_.layout, options_.args);
    launch.env = full_env(ctx_.parent_env, step_env(spec_, step, ctx_));
    launch.workdir = step.workdir;
    const std::string step_dir = ctx_.layout.step_dir(step.name);
    launch.stdout_log = step_dir + "/stdout.log";
    launch.stderr_log = step_dir + "/stderr.log";
    GroupOptions group = group_options(step);
    group.timeout_s = time_left(step, start_mono);
    StepRun run;
    run.attempts.push_back(supervisor_->run_group({launch}, group));
    settle_step_run(run, supervisor_->interrupt_signal());
    return run;
  }

  const Spec& spec_;
  const HostFacts& host_;
  const std::vector<StepPlan>& plans_;
  const RunOptions& options_;
  LaunchContext ctx_;
  LogStyle style_;
  Console console_{.reader_wait_s = options_.console_wait_s};  // after options_
  Guardian guardian_;
  Supervisor* supervisor_ = nullptr;
  GangLobby* lobby_ = nullptr;  // a gang's, while the steps run
  std::map<std::string, State> state_;
  RunRecord record_;              // run.json
  bool started_ = false;          // the run's first files are written; steps may run
  bool write_failed_ = false;     // a file of the run directory could not be written
  bool run_json_failed_ = false;  // run.json could not be written (said once)
  sigset_t mask_before_{};        // the signal mask flowrun started with
};

}  // namespace

// The spec file as an absolute path, for run.json (resume reads it again).
std::string absolute_spec_file(const Spec& spec) {
  if (spec.file.empty()) return {};
  const std::string path =
      spec.file.front() == '/' ? spec.file : spec.dir + "/" + std::string(base_name(spec.file));
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? path : std::string();
}

int run_flow(const Spec& spec, const HostFacts& host, const std::vector<StepPlan>& plans, const EnvMap& env,
             const RunOptions& options) {
  FlowRunner runner(spec, host, plans, env, options);
  return runner.run();
}

std::optional<std::vector<int>> parse_rank_list(const std::string& text) {
  if (text == "all") return std::nullopt;
  std::vector<int> ranks;
  const std::string bad = "--ranks '" + text + "': expected 'all' or ranks such as 0, 0,2 or 0-3,6";
  auto fail = [&]() { return Error(bad, kExitUsage); };
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string part = text.substr(pos, end - pos);
    const std::size_t dash = part.find('-');
    auto number = [&](const std::string& s) {
      if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), ::isdigit)) throw fail();
      return std::stoi(s);
    };
    if (dash == std::string::npos) {
      ranks.push_back(number(part));
    } else {
      const int first = number(part.substr(0, dash));
      const int last = number(part.substr(dash + 1));
      if (last < first) throw fail();
      for (int r = first; r <= last; ++r) ranks.push_back(r);
    }
    pos = end + 1;
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

}  // namespace flowrun
