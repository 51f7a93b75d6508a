// The head's bookkeeping of a multi-node step's attempts: the notes and
// errors it gathers, each handed to the step runner once (with the attempt
// that saw it, or with the step's end), and how an attempt ended.
// Internal to lib/head.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "flowrun/result.h"
#include "flowrun/worker_group.h"

namespace flowrun::cluster {

class News {
 public:
  std::vector<std::string> notes;   // for results.json
  std::vector<std::string> errors;  // flowrun's own reasons the step failed (workdir, uploads, ...)

  // The notes and errors that came since the last call, into `result`.
  void take(AttemptResult& result);

 private:
  std::size_t notes_taken_ = 0, errors_taken_ = 0;
};

// What stands for an attempt whose ranks never started: the outcome the
// step ended with before (failed, timed_out or interrupted), no workers,
// `now_ns` its start and end.
AttemptResult not_started(Outcome outcome, std::int64_t now_ns);

// How an attempt ended: why the head stopped its nodes (`stopped_for`:
// failed, stalled, timed_out, interrupted), or, when nothing stopped them,
// failed if a rank failed, the step has errors of flowrun's own, or a file
// of the run directory could not be written; else succeeded. Pure.
Outcome attempt_outcome(Outcome stopped_for, bool rank_failed, bool errors, bool write_error);

}  // namespace flowrun::cluster
