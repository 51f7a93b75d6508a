#include "flowrun/step_runner.h"

#include <algorithm>
#include <exception>
#include <fmt/format.h>
#include <future>
#include <sys/stat.h>
#include <thread>
#include <tuple>

#include "flowrun/files.h"
#include "flowrun/restart_policy.h"

namespace flowrun {

namespace {

// What flowrun reads of a worker's error file.
constexpr std::size_t kMaxErrorFileBytes = 1 << 20;

// A file as stat() sees it, to tell whether it changed: written (its size,
// its modification time), replaced (another inode) or made or removed.
struct FileStamp {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  std::int64_t mtime_ns = 0, ctime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

FileStamp stamp_of(const std::string& path) {
  FileStamp s;
  struct stat st {};
  if (path.empty() || stat(path.c_str(), &st) != 0) return s;
  s = {true,
       st.st_dev,
       st.st_ino,
       st.st_size,
       st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec,
       st.st_ctim.tv_sec * 1'000'000'000LL + st.st_ctim.tv_nsec};
  return s;
}

// The culprit's error file (TORCHELASTIC_ERROR_FILE) of a failed attempt, as
// classify_failure reads it.
std::string culprit_error_file(const AttemptRecord& a) {
  if (a.outcome != Outcome::failed || !a.culprit) return {};
  const std::string& path = a.workers.at(static_cast<std::size_t>(*a.culprit)).error_file;
  return path.empty() ? std::string() : try_read_file(path, kMaxErrorFileBytes).value_or("");
}

// After an attempt: its root cause and the policy's decision, kept in its
// record. `run` holds the attempts before it and the step's errors so far.
void decide_after(AttemptResult& result, const StepRun& run, const StepPlan& plan, int interrupt,
                  std::optional<bool> progress_file_changed, int carried) {
  AttemptRecord& record = result.record;
  FailureFacts facts = classify_failure(record, result.node_gone, culprit_error_file(record));
  record.cause = facts.cause;
  record.exception = std::move(facts.exception);
  RestartQuestion question;
  question.last = &record;
  question.previous = run.attempts.empty() ? nullptr : &run.attempts.back();
  question.node_gone = result.node_gone;
  question.spare_ready = result.spare_ready;
  question.spares_planned = !plan.spares.empty();
  for (const auto& before : run.attempts) question.spare_restarts += before.replacements.empty() ? 0 : 1;
  question.spare_restarts += record.replacements.empty() ? 0 : 1;
  question.carried_restarts = carried;
  question.elastic_nodes = result.elastic_nodes;
  question.min_nodes = plan.min_nodes;
  question.max_nodes = static_cast<int>(plan.nodes.size());
  for (const auto& before : run.attempts) question.elastic_restarts += before.dropped_nodes.empty() ? 0 : 1;
  question.elastic_restarts += record.dropped_nodes.empty() ? 0 : 1;
  question.errors = !run.errors.empty();
  question.interrupt = interrupt;
  question.max_restarts = plan.max_restarts;
  question.progress_file_changed = progress_file_changed;
  const RestartDecision decision = decide_restart(plan.restart, question);
  record.restarted = decision.restart;
  record.restart_reason = decision.reason;
}

}  // namespace

StepRunner::StepRunner(const Step& step, const StepPlan& plan, const RunLayout& layout,
                       const Console& console, bool preflight,
                       std::function<std::optional<double>()> time_left)
    : step_(step),
      plan_(plan),
      layout_(layout),
      console_(console),
      preflight_(preflight),
      time_left_(std::move(time_left)) {}

StepRun StepRunner::run(WorkerGroup& group) {
  StepRun run;
  auto take = [&run](AttemptResult& result) {
    for (auto& note : result.notes) run.notes.push_back(std::move(note));
    for (auto& error : result.errors) run.errors.push_back(std::move(error));
  };
  if (preflight_) {
    if (auto refused = group.preflight()) {
      // Refused as a step whose nodes never started is: one attempt, no rank.
      take(*refused);
      run.attempts.push_back(std::move(refused->record));
      settle_step_run(run, group.interrupt_signal());
      return run;
    }
  }
  for (int restart = first_restart_;; ++restart) {
    Attempt attempt{restart, time_left_ ? time_left_() : std::nullopt, {}, restart == first_restart_};
    if (!attempt.first) {
      attempt.keep_previous = [this, &run, restart] { keep_ranks(run.attempts.back(), restart - 1); };
    }
    const std::string& progress_file = plan_.restart.progress_file;
    const FileStamp before = stamp_of(progress_file);
    if (on_attempts_) on_attempts_(restart + 1);
    AttemptResult result = group.run_attempt(attempt);
    if (!result.started && on_attempts_) on_attempts_(restart);
    if (step_.forensics.nccl) note_nccl_traces(result.record, layout_, step_.name, restart);
    take(result);
    if (!result.started && !run.attempts.empty()) break;  // the attempt before decides
    std::optional<bool> changed;
    if (!progress_file.empty()) changed = !(stamp_of(progress_file) == before);
    decide_after(result, run, plan_, group.interrupt_signal(), changed, first_restart_);
    run.attempts.push_back(std::move(result.record));
    const AttemptRecord& last = run.attempts.back();
    if (!last.restarted) break;
    const int world = result.next_world_size > 0 ? result.next_world_size : plan_.world_size;
    console_.message(restart_message(step_.name, last, world, group.placement(), restart + 1,
                                     plan_.max_restarts, last.restart_reason,
                                     result.spare_ready || result.elastic_nodes.has_value(), first_restart_));
  }
  settle_step_run(run, group.interrupt_signal());
  return run;
}

std::string restart_message(const std::string& step, const AttemptRecord& failed, int world_size,
                            const std::string& placement, int restart, int max_restarts,
                            const std::string& reason, bool on_spare, int carried) {
  std::string why = "a worker failed";
  if (failed.culprit) {
    const auto& w = failed.workers[static_cast<std::size_t>(*failed.culprit)];
    why = placement.empty() ? fmt::format("rank {} {}", w.rank, w.status.describe())
                            : fmt::format("rank {} on {} {}", w.rank, w.node, w.status.describe());
  }
  const std::string count = on_spare      ? fmt::format("restart {}, not counted to max_restarts", restart)
                            : carried > 0 ? fmt::format("restart {}; {} of {} in this run", restart,
                                                        restart - carried, max_restarts)
                                          : fmt::format("restart {} of {}", restart, max_restarts);
  return fmt::format("flowrun: step '{}' failed ({}); restarting all {} workers{} ({}){}", step, why,
                     world_size, placement.empty() ? "" : " on " + placement, count,
                     reason.empty() ? "" : ": " + reason);
}

void StepRunner::keep_ranks(AttemptRecord& failed, int attempt) const {
  const std::size_t n = plan_.ranks.size();
  auto keep_every = [&](std::size_t first, std::size_t stride) {
    for (std::size_t i = first; i < n; i += stride) {
      const int rank = plan_.ranks[i].rank;
      keep_failed_attempt(failed, layout_.rank_dir(step_.name, rank), rank, attempt);
    }
  };
  // A dozen system calls a rank: thousands of ranks take a core for a good
  // part of a second. Each thread keeps its own ranks and writes only their
  // records.
  constexpr std::size_t kRanksPerThread = 256;
  constexpr std::size_t kMaxThreads = 8;
  const std::size_t threads = std::min(
      {n / kRanksPerThread + 1, kMaxThreads, std::size_t{std::max(1u, std::thread::hardware_concurrency())}});
  std::vector<std::future<void>> others;
  for (std::size_t t = 1; t < threads; ++t)
    others.push_back(std::async(std::launch::async, keep_every, t, threads));
  std::exception_ptr first;
  try {
    keep_every(0, threads);
  } catch (...) {
    first = std::current_exception();
  }
  for (auto& other : others) {
    try {
      other.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void keep_failed_attempt(AttemptRecord& failed, const std::string& rank_dir, int rank, int attempt) {
  const std::string dump = nccl_trace_prefix(attempt) + std::to_string(rank);
  const std::string kept = keep_attempt(rank_dir, attempt, {dump});
  if (kept.empty()) return;
  auto point = [&](WorkerRecord& w) {
    w.stdout_log = kept + "/stdout.log";
    w.stderr_log = kept + "/stderr.log";
    w.error_file = kept + "/error.json";
    if (!w.nccl_trace.empty()) w.nccl_trace = kept + "/" + dump;
  };
  // Rank r's record is the r-th, as the attempts record them; else looked for.
  const auto at = static_cast<std::size_t>(rank);
  if (rank >= 0 && at < failed.workers.size() && failed.workers[at].rank == rank) {
    point(failed.workers[at]);
    return;
  }
  for (auto& w : failed.workers) {
    if (w.rank == rank) point(w);
  }
}

void note_nccl_traces(AttemptRecord& attempt, const RunLayout& layout, const std::string& step, int restart) {
  for (auto& w : attempt.workers) {
    if (w.rank < 0) continue;
    const std::string path = layout.nccl_trace(step, w.rank, restart);
    struct stat st {};
    if (lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) w.nccl_trace = path;
  }
}

int step_exit_code(const AttemptRecord& attempt, int interrupt) {
  switch (attempt.outcome) {
    case Outcome::succeeded: return 0;
    case Outcome::timed_out:
    case Outcome::stalled: return 124;
    case Outcome::interrupted: return 128 + (interrupt != 0 ? interrupt : 2);
    case Outcome::failed: break;
  }
  if (attempt.culprit) {
    const WorkerRecord& culprit = attempt.workers[static_cast<std::size_t>(*attempt.culprit)];
    // One that flowrun's stop killed after its error file recorded its
    // failure: 1, Python's code for what it raised, not 143, which a
    // scheduler would read as its own SIGTERM.
    if (culprit.error_file_unix_ns > 0 && culprit.status.kind == ExitStatus::Kind::signaled) return 1;
    return culprit.status.shell_code();
  }
  if (!attempt.write_error.empty()) return 1;  // flowrun's own I/O failure stopped the workers
  // No rank failed first (a node was lost after its ranks succeeded, an
  // upload was refused, ...): the code of a rank flowrun stopped (143 for its
  // SIGTERM) would blame it; a rank that failed on its own, or else 1.
  for (const auto& w : attempt.workers) {
    if (!w.status.ok() && w.role != Role::victim) return w.status.shell_code();
  }
  return 1;
}

void settle_step_run(StepRun& run, int interrupt) {
  AttemptRecord& last = run.attempts.back();
  // flowrun's own errors (a node's, an upload's) fail the step its ranks finished.
  if (!run.errors.empty() && last.outcome == Outcome::succeeded) last.outcome = Outcome::failed;
  run.outcome = last.outcome;
  run.exit_code = step_exit_code(last, interrupt);
  if (!run.errors.empty() && run.exit_code == 0) run.exit_code = 1;
}

JoinRequest join_request(const Step& step, const StepPlan& full, const RunLayout& layout, FileTime started,
                         const std::vector<AttemptRecord>& ran) {
  const int ranks = ran.empty() ? 0 : static_cast<int>(ran.back().workers.size());
  const bool fewer = full.min_nodes > 0 && ranks > 0 && ranks < full.world_size;
  const StepPlan plan = fewer ? plan_for_nodes(full, ranks / full.nodes.front().procs) : full;
  JoinRequest request;
  request.step = step.name;
  request.workdir = step.workdir;
  request.outputs = step.outputs;
  request.collect = step.collect;
  request.world_size = plan.world_size;
  request.ranks_on_node = plan.nodes.front().procs;
  for (int r = 0; r < plan.world_size; ++r)
    request.rank_output_dirs.push_back(layout.output_dir(step.name, r));
  request.outputs_dir = layout.inputs_dir(step.name);
  request.started = started;
  request.run_dir = layout.run_dir;
  return request;
}

}  // namespace flowrun
