// Whether a retry may help (advise_retry): each class of failure, with the
// sentence the console, results.json and the summary carry.
#include "flowrun/retry_advice.h"

#include <catch2/catch.hpp>
#include <csignal>

#include "failed_attempts.h"

using namespace flowrun;
using namespace flowrun::testing;

namespace {

StepRecord step_of(std::vector<AttemptRecord> attempts, Outcome outcome = Outcome::failed,
                   int exit_code = 1) {
  StepRecord s;
  s.step = "train";
  s.parallel = true;
  s.outcome = outcome;
  s.exit_code = exit_code;
  s.attempts = std::move(attempts);
  return s;
}

std::string traceback(const std::string& exception) {
  return "Traceback (most recent call last):\n  File \"/w/train.py\", line 3, in <module>\n    x()\n" +
         exception + "\n";
}

RetryAdvice advise(const StepRecord& s) {
  const auto advice = advise_retry(s);
  REQUIRE(advice.has_value());
  return *advice;
}

}  // namespace

TEST_CASE("retry advice: a step that succeeded needs none", "[retry]") {
  AttemptRecord ok;
  CHECK_FALSE(advise_retry(step_of({ok}, Outcome::succeeded, 0)).has_value());
}

TEST_CASE("retry advice: a failure that will repeat", "[retry]") {
  SECTION("the same rank, the same way, in every attempt") {
    const auto a = classified(failed_with(exited(1), traceback("ValueError: bad batch 3")));
    const RetryAdvice r = advise(step_of({a, a}));
    CHECK(r.failure_class == FailureClass::repeats);
    CHECK_FALSE(r.may_help);
    CHECK(r.why ==
          "rank 1 exited with code 1 (ValueError: bad batch 3 (train.py:3)), the same way in all 2 attempts: "
          "it "
          "will again");
  }
  SECTION("a different exception the second time is not the same way") {
    const auto a = classified(failed_with(exited(1), traceback("ValueError: bad batch 3")));
    const auto b = classified(failed_with(exited(1), traceback("KeyError: 'x'")));
    CHECK(advise(step_of({a, b})).failure_class == FailureClass::failure);
  }
  SECTION("at start-up, before any collective") {
    for (const char* e : {"ModuleNotFoundError: No module named 'x'", "SyntaxError: invalid syntax",
                          "ImportError: cannot import name 'y'"}) {
      const RetryAdvice r = advise(step_of({classified(failed_with(exited(1), traceback(e)))}));
      CHECK(r.failure_class == FailureClass::repeats);
      CHECK_FALSE(r.may_help);
      CHECK(r.why.find("the script fails at start-up, before any collective") != std::string::npos);
    }
  }
  SECTION("a command that cannot start, or a usage error's exit code 2") {
    CHECK(
        advise(step_of({classified(failed_with({ExitStatus::Kind::spawn_failed, 0, "python4: not found"}))}))
            .failure_class == FailureClass::repeats);
    CHECK(advise(step_of({classified(failed_with(exited(127)))})).failure_class == FailureClass::repeats);
    const RetryAdvice r =
        advise(step_of({classified(failed_with(exited(2), "usage: train.py\nerror: bad"))}));
    CHECK(r.failure_class == FailureClass::repeats);
    CHECK(r.why.find("argparse") != std::string::npos);
  }
  SECTION("ranks that succeeded, outputs that are missing") {
    AttemptRecord ok;
    const RetryAdvice r = advise(step_of({ok}));
    CHECK(r.failure_class == FailureClass::repeats);
    StepRecord full = step_of({ok});
    full.notes.push_back(std::string(kCannotGatherNote) + "No space left on device");
    CHECK(advise(full).failure_class == FailureClass::error);
    CHECK_FALSE(advise(full).may_help);
  }
}

TEST_CASE("retry advice: infrastructure, where other nodes may not fail so", "[retry]") {
  SECTION("a node lost") {
    const auto lost = classified(failed_with({ExitStatus::Kind::lost, 0, "node1 went silent"}));
    const RetryAdvice r = advise(step_of({lost}));
    CHECK(r.failure_class == FailureClass::infrastructure);
    CHECK(r.may_help);
    CHECK(r.why.find("its node was lost") != std::string::npos);
  }
  SECTION("a connection that broke under the rank") {
    for (const char* e : {"torch.distributed.DistNetworkError: Connection reset by peer",
                          "ConnectionResetError: [Errno 104] Connection reset by peer"}) {
      const RetryAdvice r = advise(step_of({classified(failed_with(exited(1), traceback(e)))}));
      CHECK(r.failure_class == FailureClass::infrastructure);
      CHECK(r.may_help);
    }
  }
}

TEST_CASE("retry advice: timeouts, stalls and interruptions", "[retry]") {
  AttemptRecord timed;
  timed.outcome = Outcome::timed_out;
  StepRecord t = step_of({timed}, Outcome::timed_out, 124);
  t.timeout_s = 30;
  CHECK(advise(t).failure_class == FailureClass::timeout);
  CHECK_FALSE(advise(t).may_help);
  CHECK(advise(t).why.find("(30 s)") != std::string::npos);

  AttemptRecord stalled;
  stalled.outcome = Outcome::stalled;
  CHECK(advise(step_of({stalled}, Outcome::stalled, 124)).failure_class == FailureClass::timeout);
  CHECK(advise(step_of({stalled}, Outcome::stalled, 124)).may_help);
  CHECK(advise(step_of({stalled, stalled}, Outcome::stalled, 124)).failure_class == FailureClass::repeats);

  AttemptRecord stopped;
  stopped.outcome = Outcome::interrupted;
  CHECK(advise(step_of({stopped}, Outcome::interrupted, 128 + SIGTERM)).may_help);
  CHECK(advise(step_of({stopped}, Outcome::interrupted, 128 + SIGHUP)).may_help);
  CHECK_FALSE(advise(step_of({stopped}, Outcome::interrupted, 128 + SIGINT)).may_help);
  CHECK(advise(step_of({stopped}, Outcome::interrupted, 128 + SIGINT)).failure_class ==
        FailureClass::interrupted);
}

TEST_CASE("retry advice: one failure not known to repeat may be tried again", "[retry]") {
  const RetryAdvice r = advise(step_of({classified(failed_with(killed(SIGKILL)))}));
  CHECK(r.failure_class == FailureClass::failure);
  CHECK(r.may_help);
  CHECK(retry_line(r).rfind("flowrun: a retry may help (failure): rank 1 was killed by signal 9 (SIGKILL)",
                            0) == 0);
}

TEST_CASE("retry advice: a run no step is to blame for", "[retry]") {
  CHECK_FALSE(advise_retry_for_run("succeeded", 0).has_value());
  CHECK(advise_retry_for_run("usage_error", 2)->failure_class == FailureClass::usage);
  CHECK_FALSE(advise_retry_for_run("usage_error", 2)->may_help);
  CHECK(advise_retry_for_run("interrupted", 143)->may_help);
  CHECK_FALSE(advise_retry_for_run("interrupted", 130)->may_help);
  CHECK(advise_retry_for_run("error", 1)->failure_class == FailureClass::error);
}

TEST_CASE("retry advice: a failure that repeats across a requeued job's runs", "[retry]") {
  const auto a = classified(failed_with(exited(1), traceback("ValueError: bad batch 3")));
  // What the earlier run's results.json says of its attempts reads back as the attempts themselves.
  const StepRecord earlier = step_of({a});
  const std::vector<std::string> read = failure_signatures(format_results_json(earlier));
  REQUIRE(read == std::vector<std::string>{failure_signature(a)});
  CHECK(read.front() == "rank 1 \"exited\" 1 - ValueError");
  AttemptRecord ok;
  CHECK(failure_signature(ok).empty());
  CHECK(failure_signatures("not json").empty());

  StepRecord again = step_of({a});
  again.continued_from = StepRecord::ContinuedFrom{"flow-a", "/w/runs/flow-a", 1, read};
  const RetryAdvice r = advise(again);
  CHECK(r.failure_class == FailureClass::repeats);
  CHECK(r.why ==
        "rank 1 exited with code 1 (ValueError: bad batch 3 (train.py:3)), the same way in all 2 attempts (1 "
        "in "
        "the run this one continues): it will again");

  // Failed another way before the requeue: one failure here, not known to repeat.
  const auto b = classified(failed_with(killed(SIGKILL)));
  again.continued_from->failures = {failure_signature(b)};
  CHECK(advise(again).failure_class == FailureClass::failure);
  // The earlier run's attempt did not fail (a preemption stopped it): no repeat either.
  again.continued_from->failures = {""};
  CHECK(advise(again).failure_class == FailureClass::failure);
}
