#include "attempt_news.h"

namespace flowrun::cluster {

void News::take(AttemptResult& result) {
  result.notes.assign(notes.begin() + static_cast<std::ptrdiff_t>(notes_taken_), notes.end());
  result.errors.assign(errors.begin() + static_cast<std::ptrdiff_t>(errors_taken_), errors.end());
  notes_taken_ = notes.size();
  errors_taken_ = errors.size();
}

AttemptResult not_started(Outcome outcome, std::int64_t now_ns) {
  AttemptResult result;
  result.started = false;
  result.record.outcome = outcome;
  result.record.start_unix_ns = result.record.end_unix_ns = now_ns;
  return result;
}

Outcome attempt_outcome(Outcome stopped_for, bool rank_failed, bool errors, bool write_error) {
  if (stopped_for != Outcome::succeeded) return stopped_for;
  return rank_failed || errors || write_error ? Outcome::failed : Outcome::succeeded;
}

}  // namespace flowrun::cluster
