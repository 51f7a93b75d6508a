// The head's attempt bookkeeping (lib/head/attempt_news.cpp): each note
// and error handed to the step runner once, what stands for an attempt
// that never started, and how an attempt's outcome is decided.
#include "attempt_news.h"

#include <string>
#include <vector>

#include "testing.h"

using namespace flowrun;
using namespace flowrun::cluster;

TEST_CASE("News: each note and error is handed on once, with the first result after it came",
          "[attempt_news]") {
  News news;
  AttemptResult first;
  news.take(first);
  CHECK(first.notes.empty());
  CHECK(first.errors.empty());

  news.notes.push_back("node a: preempted");
  news.errors.push_back("node b: upload refused");
  news.errors.push_back("node c: workdir");
  AttemptResult second;
  news.take(second);
  CHECK(second.notes == std::vector<std::string>{"node a: preempted"});
  CHECK(second.errors == std::vector<std::string>{"node b: upload refused", "node c: workdir"});

  news.notes.push_back("srun exited with code 1");
  AttemptResult third;
  news.take(third);
  CHECK(third.notes == std::vector<std::string>{"srun exited with code 1"});
  CHECK(third.errors.empty());
  CHECK(news.errors.size() == 2);  // kept whole, for the head's own checks
}

TEST_CASE("not_started: no workers, the outcome before the start, one instant", "[attempt_news]") {
  const AttemptResult result = not_started(Outcome::timed_out, 1234);
  CHECK_FALSE(result.started);
  CHECK(result.record.outcome == Outcome::timed_out);
  CHECK(result.record.start_unix_ns == 1234);
  CHECK(result.record.end_unix_ns == 1234);
  CHECK(result.record.workers.empty());
}

TEST_CASE("attempt_outcome: why the nodes were stopped wins; else any failure fails the attempt",
          "[attempt_news]") {
  CHECK(attempt_outcome(Outcome::succeeded, false, false, false) == Outcome::succeeded);
  CHECK(attempt_outcome(Outcome::succeeded, true, false, false) == Outcome::failed);
  CHECK(attempt_outcome(Outcome::succeeded, false, true, false) == Outcome::failed);
  CHECK(attempt_outcome(Outcome::succeeded, false, false, true) == Outcome::failed);
  for (Outcome why : {Outcome::failed, Outcome::stalled, Outcome::timed_out, Outcome::interrupted}) {
    CHECK(attempt_outcome(why, false, false, false) == why);
    CHECK(attempt_outcome(why, true, true, true) == why);
  }
}
