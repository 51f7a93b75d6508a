// Whether trying again may help: the class of a step's failure, for a
// scheduler that decides whether to requeue a job (docs/cli.md, "Retry or
// not"). The exit code stays what docs/cli.md promises (the culprit's own);
// the class goes beside it, into results.json and the run's summary. Pure.
#pragma once

#include <optional>
#include <string>

#include "flowrun/result.h"

namespace flowrun {

enum class FailureClass {
  usage,           // flowrun refused the command line, the spec or the plan; nothing ran
  repeats,         // it will fail the same way: the same rank the same way in every attempt, at start-up, ...
  infrastructure,  // a node lost, a peer's connection cut: other nodes may not fail so
  timeout,         // the step's timeout, or a stall (stall_timeout)
  interrupted,     // flowrun got a stop signal
  failure,         // a rank failed once, in a way not known to repeat
  error,           // flowrun itself failed (a run directory it cannot write)
};

// "usage", "repeats", "infrastructure", "timeout", "interrupted", "failure",
// "error": results.json's and the summary's failure_class.
const char* failure_class_name(FailureClass c);

// How a step's note that flowrun could not gather its outputs begins.
inline constexpr const char* kCannotGatherNote = "cannot gather the outputs: ";

struct RetryAdvice {
  FailureClass failure_class = FailureClass::failure;
  bool may_help = false;
  std::string why;  // one sentence: what happened, and why a retry may or may not help
};

// The advice for a step that did not succeed; nullopt for one that did.
// In order:
//   - interrupted: may help after SIGTERM or SIGHUP (a scheduler's
//     preemption, a node drained), not after SIGINT or SIGQUIT (a person);
//   - timed out: not (the same limit again); stalled: may help, unless every
//     attempt stalled (repeats);
//   - its ranks succeeded but its outputs are incomplete: repeats (the
//     script does not write them), or error when flowrun could not gather
//     them (a full disk);
//   - a node lost (cause node_lost): infrastructure, may help;
//   - flowrun could not write a log file: error, not;
//   - the same culprit rank failed the same way (status, code, exception
//     type) in every attempt, two or more, counting those of the run this
//     one continues (a requeued Slurm job's): repeats;
//   - the culprit could not start, exited 2 without a traceback (a usage
//     error, as argparse reports one) or raised at start-up (SyntaxError,
//     ImportError, ...), before any collective: repeats;
//   - it raised torch's DistNetworkError or DistStoreError, or lost a
//     connection (ConnectionResetError, BrokenPipeError, ...): infrastructure;
//   - otherwise (one failure not known to repeat): failure, may help.
std::optional<RetryAdvice> advise_retry(const StepRecord& step);

// flowrun's line for the console: "flowrun: a retry may help (infrastructure):
// ..." or "flowrun: a retry will not help (repeats): ...".
std::string retry_line(const RetryAdvice& advice);

// The advice when no step is to blame: flowrun's exit code `exit_code` and
// `state` as the summary has them ("succeeded", "usage_error", "error",
// "interrupted", "failed"); nullopt for success.
std::optional<RetryAdvice> advise_retry_for_run(const std::string& state, int exit_code);

}  // namespace flowrun
