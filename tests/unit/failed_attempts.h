// Failed attempts for the tests of the root cause (failure_cause_test.cpp)
// and of the restart policy (restart_policy_test.cpp).
#pragma once

#include <csignal>
#include <string>

#include "flowrun/result.h"

#include "testing.h"

namespace flowrun::testing {

inline constexpr const char* kTraceback = R"(epoch 3 loss 0.12
Traceback (most recent call last):
  File "/work/proj/train.py", line 12, in <module>
    main()
  File "/work/proj/train.py", line 8, in main
    raise ValueError(f"bad batch {n}")
ValueError: bad batch 3
)";

// One failed attempt: rank 1 ended with `status` first, rank 0 was stopped.
inline AttemptRecord failed_with(ExitStatus status, std::string stderr_tail = "", int restart = 0) {
  AttemptRecord a;
  a.restart_count = restart;
  a.outcome = Outcome::failed;
  a.start_unix_ns = 1'000'000'000;
  a.end_unix_ns = 4'000'000'000;  // 3 s
  WorkerRecord r0, r1;
  r0.rank = 0;
  r0.status = {ExitStatus::Kind::signaled, SIGTERM, ""};
  r0.end_unix_ns = 3'000'000'001;
  r1.rank = 1;
  r1.status = std::move(status);
  r1.end_unix_ns = 3'000'000'000;
  r1.stderr_tail = std::move(stderr_tail);
  a.workers = {r0, r1};
  assign_roles(a, {0});
  return a;
}

// The attempt classified as the step runner does, with no error file.
inline AttemptRecord classified(AttemptRecord a, const std::string& error_file = "", bool node_gone = false) {
  FailureFacts facts = classify_failure(a, node_gone, error_file);
  a.cause = facts.cause;
  a.exception = facts.exception;
  return a;
}

}  // namespace flowrun::testing
