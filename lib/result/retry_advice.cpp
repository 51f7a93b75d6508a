// Whether trying again may help (the rules are in retry_advice.h).
#include "flowrun/retry_advice.h"

#include <algorithm>
#include <array>
#include <csignal>
#include <fmt/format.h>
#include <string_view>

namespace flowrun {

namespace {

// Exceptions a script raises before it reaches any collective, whatever the
// nodes: it cannot be parsed or imported.
constexpr std::array<std::string_view, 5> kStartupErrors = {"SyntaxError", "IndentationError", "TabError",
                                                            "ImportError", "ModuleNotFoundError"};

// Exceptions of a connection that broke under the rank: a peer's node, the
// network, the rendezvous store.
constexpr std::array<std::string_view, 8> kConnectionErrors = {
    "DistNetworkError",       "DistStoreError",         "ConnectionError", "ConnectionResetError",
    "ConnectionAbortedError", "ConnectionRefusedError", "BrokenPipeError", "TimeoutError"};

// The exception type's last dotted part: "torch.distributed.DistNetworkError" -> "DistNetworkError".
std::string_view base_type(std::string_view type) {
  const std::size_t dot = type.rfind('.');
  return dot == std::string_view::npos ? type : type.substr(dot + 1);
}

template <std::size_t N>
bool is_one_of(const std::optional<PythonException>& e, const std::array<std::string_view, N>& names) {
  return e && std::find(names.begin(), names.end(), base_type(e->type)) != names.end();
}

const WorkerRecord* culprit_of(const AttemptRecord& a) {
  if (!a.culprit || *a.culprit < 0 || static_cast<std::size_t>(*a.culprit) >= a.workers.size())
    return nullptr;
  return &a.workers[static_cast<std::size_t>(*a.culprit)];
}

// "rank 1 exited with code 3 (ValueError: boom (train.py:3))".
std::string what_failed(const AttemptRecord& a) {
  const WorkerRecord* w = culprit_of(a);
  if (w == nullptr) return "the step failed";
  std::string text =
      (w->rank >= 0 ? fmt::format("rank {} ", w->rank) : std::string("its command ")) + w->status.describe();
  if (a.exception) text += " (" + a.exception->describe() + ")";
  return text;
}

// How many attempts failed the same way (the same culprit rank, status, code
// and exception type), counting those of the run this one continues (a
// requeued Slurm job's); 0 unless every attempt did, two or more.
std::size_t same_every_time(const StepRecord& step) {
  std::vector<std::string> all;
  if (step.continued_from) all = step.continued_from->failures;
  for (const auto& a : step.attempts) all.push_back(failure_signature(a));
  const bool same =
      !all.empty() && !all.front().empty() &&
      std::all_of(all.begin(), all.end(), [&](const std::string& s) { return s == all.front(); });
  return same && all.size() >= 2 ? all.size() : 0;
}

RetryAdvice advice(FailureClass c, bool may_help, std::string why) { return {c, may_help, std::move(why)}; }

RetryAdvice interrupted_by(int exit_code) {
  const int sig = exit_code > 128 ? exit_code - 128 : 0;
  if (sig == SIGTERM || sig == SIGHUP)
    return advice(FailureClass::interrupted, true,
                  fmt::format("flowrun was stopped by {} (a scheduler's preemption or time limit, a node "
                              "drained): the run can go on where it stopped",
                              signal_name(sig)));
  return advice(FailureClass::interrupted, false,
                sig > 0 ? fmt::format("flowrun was stopped by {}: someone meant to stop it", signal_name(sig))
                        : std::string("flowrun was stopped: someone meant to stop it"));
}

// A failed attempt with no rank to blame: the ranks all succeeded (what
// came after them failed: outputs refused, an upload), or some never started
// (nodes that did not join, an engine that could not start them).
RetryAdvice no_rank_to_blame(const AttemptRecord& a) {
  const auto is = [&](ExitStatus::Kind kind) {
    return [kind](const WorkerRecord& w) { return w.status.kind == kind; };
  };
  if (!a.workers.empty() &&
      std::all_of(a.workers.begin(), a.workers.end(), [](const WorkerRecord& w) { return w.status.ok(); }))
    return advice(
        FailureClass::repeats, false,
        "every rank succeeded, and what the step does after them failed (said above): the same ranks "
        "do the same on a retry");
  if (a.workers.empty() || std::any_of(a.workers.begin(), a.workers.end(), is(ExitStatus::Kind::not_started)))
    return advice(
        FailureClass::infrastructure, true,
        "not every rank started: nodes did not join or could not start them (said above); a retry on "
        "other nodes may not meet it");
  return advice(FailureClass::failure, true, "the step failed with no rank to blame (said above)");
}

RetryAdvice failed_step(const StepRecord& step) {
  const AttemptRecord& last = step.attempts.back();
  if (last.outcome == Outcome::succeeded) {  // the join's gathering failed the step
    const bool cannot = std::any_of(step.notes.begin(), step.notes.end(), [](const std::string& note) {
      return note.rfind(kCannotGatherNote, 0) == 0;
    });
    if (cannot)
      return advice(
          FailureClass::error, false,
          "flowrun could not gather the step's outputs into the run directory: free space there before "
          "trying again");
    return advice(
        FailureClass::repeats, false,
        "the ranks succeeded but the step's outputs are incomplete (its notes say which): the script "
        "does not write them, and will not on a retry");
  }
  if (last.cause == FailureCause::node_lost)
    return advice(FailureClass::infrastructure, true,
                  what_failed(last) + ": its node was lost; a retry on other nodes may not meet it");
  if (!last.write_error.empty())
    return advice(FailureClass::error, false,
                  "flowrun could not write a rank's log in the run directory (said above): free space there "
                  "before trying again");
  const WorkerRecord* w = culprit_of(last);
  if (w == nullptr) return no_rank_to_blame(last);
  const std::string what = what_failed(last);
  if (const std::size_t times = same_every_time(step); times > 0) {
    const std::size_t earlier = times - step.attempts.size();
    return advice(
        FailureClass::repeats, false,
        fmt::format("{}, the same way in all {} attempts{}: it will again", what, times,
                    earlier > 0 ? fmt::format(" ({} in the run this one continues)", earlier) : ""));
  }
  if (w->status.kind == ExitStatus::Kind::spawn_failed ||
      (w->status.kind == ExitStatus::Kind::exited && (w->status.code == 126 || w->status.code == 127)))
    return advice(FailureClass::repeats, false, what + ": the command cannot start, on any node");
  if (is_one_of(last.exception, kStartupErrors))
    return advice(FailureClass::repeats, false,
                  what + ": the script fails at start-up, before any collective");
  if (w->status.kind == ExitStatus::Kind::exited && w->status.code == 2 && !last.exception)
    return advice(FailureClass::repeats, false,
                  what + ": 2 is a usage error's code (argparse's); the same arguments fail the same way");
  if (is_one_of(last.exception, kConnectionErrors))
    return advice(
        FailureClass::infrastructure, true,
        what + ": a connection broke under it (a peer's node, the network); a retry may not meet it");
  return advice(
      FailureClass::failure, true,
      what +
          ": one failure, not known to repeat, so a retry may tell; with restart: {max_restarts: 1} "
          "flowrun tries again itself, and classes a second identical failure as repeating");
}

}  // namespace

const char* failure_class_name(FailureClass c) {
  switch (c) {
    case FailureClass::usage: return "usage";
    case FailureClass::repeats: return "repeats";
    case FailureClass::infrastructure: return "infrastructure";
    case FailureClass::timeout: return "timeout";
    case FailureClass::interrupted: return "interrupted";
    case FailureClass::failure: return "failure";
    case FailureClass::error: return "error";
  }
  return "failure";
}

std::optional<RetryAdvice> advise_retry(const StepRecord& step) {
  if (step.outcome == Outcome::succeeded) return std::nullopt;
  if (step.outcome == Outcome::interrupted) return interrupted_by(step.exit_code);
  if (step.outcome == Outcome::timed_out)
    return advice(
        FailureClass::timeout, false,
        fmt::format("the step ran past its timeout{}: a retry runs into the same limit (raise it, or "
                    "go on from a checkpoint)",
                    step.timeout_s ? fmt::format(" ({:g} s)", *step.timeout_s) : std::string()));
  if (step.outcome == Outcome::stalled) {
    const bool every = step.attempts.size() >= 2 &&
                       std::all_of(step.attempts.begin(), step.attempts.end(),
                                   [](const AttemptRecord& a) { return a.outcome == Outcome::stalled; });
    if (every)
      return advice(
          FailureClass::repeats, false,
          fmt::format("the step stalled in all {} attempts: it hangs the same way", step.attempts.size()));
    return advice(FailureClass::timeout, true,
                  "a rank wrote nothing for the step's stall_timeout (a hang): a hang in a collective often "
                  "does not come back on a retry");
  }
  if (step.attempts.empty()) return advice(FailureClass::failure, true, "the step failed before it started");
  return failed_step(step);
}

std::string retry_line(const RetryAdvice& advice) {
  return fmt::format("flowrun: a retry {} ({}): {}", advice.may_help ? "may help" : "will not help",
                     failure_class_name(advice.failure_class), advice.why);
}

std::optional<RetryAdvice> advise_retry_for_run(const std::string& state, int exit_code) {
  if (state == "succeeded") return std::nullopt;
  if (state == "usage_error")
    return advice(
        FailureClass::usage, false,
        "flowrun refused the command line, the spec or the plan: the same command fails the same way");
  if (state == "interrupted") return interrupted_by(exit_code);
  if (state == "error")
    return advice(FailureClass::error, false,
                  "flowrun itself failed: fix what its error says before trying again");
  return advice(FailureClass::failure, true, "the run failed with no step to blame");
}

}  // namespace flowrun
