// The restart policy's decision table (decide_restart), with the exact
// reasons the console, the report and results.json show.
#include "flowrun/restart_policy.h"

#include <catch2/catch.hpp>
#include <csignal>

#include "failed_attempts.h"

using namespace flowrun;
using namespace flowrun::testing;

namespace {

RestartPolicy policy_of(bool exception, bool exit_code, bool signal) {
  RestartPolicy p;
  p.is_set = true;
  p.on_exception = exception;
  p.on_exit_code = exit_code;
  p.on_signal = signal;
  return p;
}

RestartDecision decide(const RestartPolicy& p, const AttemptRecord& last,
                       const AttemptRecord* previous = nullptr, int max_restarts = 2) {
  RestartQuestion q;
  q.last = &last;
  q.previous = previous;
  q.max_restarts = max_restarts;
  return decide_restart(p, q);
}

}  // namespace

TEST_CASE("the decision table: flowrun's own rules come before any policy", "[restart]") {
  const RestartPolicy torchrun;  // no restart: map
  const AttemptRecord failed = classified(failed_with(exited(3)));
  CHECK(decide(torchrun, failed).restart);
  CHECK(decide(torchrun, failed).reason == "every failure restarts");

  // max_restarts 0, or an attempt that succeeded: nothing to decide, nothing said.
  CHECK(decide(torchrun, failed, nullptr, 0).reason.empty());
  CHECK_FALSE(decide(torchrun, failed, nullptr, 0).restart);
  AttemptRecord ok;
  CHECK(decide(torchrun, ok).reason.empty());

  auto with = [&](auto change) {
    AttemptRecord a = failed;
    RestartQuestion q;
    q.last = &a;
    q.max_restarts = 2;
    change(a, q);
    return decide_restart(policy_of(true, true, true), q);
  };
  auto reason = [&](auto change) {
    const RestartDecision d = with(change);
    CHECK_FALSE(d.restart);
    return d.reason;
  };
  CHECK(reason([](AttemptRecord& a, RestartQuestion&) { a.outcome = Outcome::timed_out; }) ==
        "a timeout does not restart");
  CHECK(reason([](AttemptRecord& a, RestartQuestion&) { a.outcome = Outcome::stalled; }) ==
        "a stall does not restart");
  CHECK(reason([](AttemptRecord& a, RestartQuestion& q) {
          a.outcome = Outcome::interrupted;
          q.interrupt = SIGINT;
        }) == "flowrun received SIGINT");
  CHECK(reason([](AttemptRecord&, RestartQuestion& q) { q.interrupt = SIGTERM; }) ==
        "flowrun received SIGTERM");
  CHECK(reason([](AttemptRecord& a, RestartQuestion&) { a.write_error = "cannot write"; }) ==
        "flowrun could not write the run directory");
  CHECK(reason([](AttemptRecord&, RestartQuestion& q) { q.errors = true; }) ==
        "flowrun's own errors (above) fail the step");
  CHECK(reason([](AttemptRecord&, RestartQuestion& q) { q.node_gone = true; }) ==
        "a node of the step is gone, and a restart needs every node the step started with");
  CHECK(reason([](AttemptRecord& a, RestartQuestion& q) {
          a.workers[1].status = {ExitStatus::Kind::lost, 0, ""};
          a.workers[1].node = "node2";
          q.node_gone = true;
        }) == "rank 1's node, node2, was lost, and a restart needs every node the step started with");
  CHECK(reason([](AttemptRecord& a, RestartQuestion&) { a.restart_count = 2; }) ==
        "its 2 restarts (max_restarts) have run");
  CHECK(reason([](AttemptRecord& a, RestartQuestion& q) {
          a.restart_count = 1;
          q.max_restarts = 1;
        }) == "its 1 restart (max_restarts) has run");
  // A count carried on from an earlier run (a requeued Slurm job) does not count to max_restarts.
  CHECK(with([](AttemptRecord& a, RestartQuestion& q) {
          a.restart_count = 3;
          q.carried_restarts = 2;
        }).restart);
  CHECK(reason([](AttemptRecord& a, RestartQuestion& q) {
          a.restart_count = 4;
          q.carried_restarts = 2;
        }) == "its 2 restarts (max_restarts) have run");
}

TEST_CASE("the decision table: a spare that waits restarts a step whose node was lost", "[restart]") {
  const AttemptRecord lost = [] {
    AttemptRecord a = classified(failed_with(exited(3)));
    a.workers[1].status = {ExitStatus::Kind::lost, 0, ""};
    a.workers[1].node = "node2";
    return a;
  }();
  auto decide_spare = [&](auto change) {
    AttemptRecord a = lost;
    RestartQuestion q;
    q.last = &a;
    q.node_gone = true;
    q.spares_planned = true;
    q.spare_ready = true;
    change(a, q);
    return decide_restart(policy_of(false, false, false), q);  // no cause restarts, max_restarts 0
  };
  // Whatever the cause and max_restarts (0 here): the spare takes the node's place.
  const RestartDecision d = decide_spare([](AttemptRecord&, RestartQuestion&) {});
  CHECK(d.restart);
  CHECK(d.reason == "a spare node takes the lost node's place");
  // Spares' restarts do not count to max_restarts: 2 restarts so far, one of them a spare's.
  auto after_two = [&](int spare_restarts) {
    return decide_spare([spare_restarts](AttemptRecord& a, RestartQuestion& q) {
      a.restart_count = 2;
      q.spare_ready = q.node_gone = false;
      q.spare_restarts = spare_restarts;
      q.max_restarts = 2;
    });
  };
  CHECK(after_two(0).reason == "its 2 restarts (max_restarts) have run");
  CHECK(after_two(1).reason != after_two(0).reason);  // the policy decides: one restart is left
  // Still never after a timeout, an interrupt or flowrun's own errors.
  CHECK_FALSE(
      decide_spare([](AttemptRecord& a, RestartQuestion&) { a.outcome = Outcome::timed_out; }).restart);
  CHECK_FALSE(decide_spare([](AttemptRecord&, RestartQuestion& q) { q.interrupt = SIGTERM; }).restart);
  CHECK_FALSE(decide_spare([](AttemptRecord&, RestartQuestion& q) { q.errors = true; }).restart);
  // No spare left: said even with max_restarts 0.
  const RestartDecision none =
      decide_spare([](AttemptRecord&, RestartQuestion& q) { q.spare_ready = false; });
  CHECK_FALSE(none.restart);
  CHECK(none.reason == "rank 1's node, node2, was lost, and no spare node is left to take its place");
}

TEST_CASE("the decision table: an elastic step goes on with the nodes left while MIN remain", "[restart]") {
  AttemptRecord lost = classified(failed_with(exited(3)));
  lost.workers[1].status = {ExitStatus::Kind::lost, 0, ""};
  lost.workers[1].node = "node2";
  RestartQuestion q;
  q.last = &lost;
  q.node_gone = true;
  q.min_nodes = 1;
  q.max_nodes = 2;
  q.elastic_nodes = 1;
  // Whatever the causes and max_restarts (0 here) say: the loss is the cause, the range bounds it.
  RestartDecision d = decide_restart(policy_of(false, false, false), q);
  CHECK(d.restart);
  CHECK(d.reason == "the step goes on with the node left (nodes: \"1:2\")");
  q.elastic_nodes = 3;
  q.max_nodes = 4;
  CHECK(decide_restart(policy_of(false, false, false), q).reason ==
        "the step goes on with the 3 nodes left (nodes: \"1:4\")");
  // Fewer than MIN left: said even with max_restarts 0.
  q.elastic_nodes.reset();
  q.min_nodes = 2;
  d = decide_restart(policy_of(false, false, false), q);
  CHECK_FALSE(d.restart);
  CHECK(d.reason == "rank 1's node, node2, was lost, and fewer than 2 nodes are left (nodes: \"2:4\")");
  // Never after an interrupt (a preemption ends the job, nodes or not).
  q.elastic_nodes = 2;
  q.interrupt = SIGTERM;
  CHECK_FALSE(decide_restart(policy_of(false, false, false), q).restart);
  // Its restarts do not count to max_restarts: 2 restarts so far, one of them elastic.
  AttemptRecord failed = classified(failed_with(exited(3)));
  failed.restart_count = 2;
  RestartQuestion later;
  later.last = &failed;
  later.max_restarts = 2;
  later.min_nodes = 1;
  later.max_nodes = 2;
  CHECK(decide_restart(RestartPolicy{}, later).reason == "its 2 restarts (max_restarts) have run");
  later.elastic_restarts = 1;
  CHECK(decide_restart(RestartPolicy{}, later).reason == "every failure restarts");
}

TEST_CASE("the decision table: which causes restart", "[restart]") {
  const AttemptRecord exception = classified(failed_with(exited(1), kTraceback));
  const AttemptRecord code3 = classified(failed_with(exited(3)));
  const AttemptRecord code75 = classified(failed_with(exited(75)));
  const AttemptRecord oom = classified(failed_with(killed(SIGKILL)));

  const RestartPolicy all = policy_of(true, true, true);
  CHECK(decide(all, exception).reason == "an exception restarts");
  CHECK(decide(all, code3).reason == "an exit code restarts");
  CHECK(decide(all, oom).reason == "a signal restarts");
  CHECK(decide(all, oom).restart);

  const RestartPolicy no_exception = policy_of(false, true, true);
  CHECK_FALSE(decide(no_exception, exception).restart);
  CHECK(decide(no_exception, exception).reason ==
        "rank 1 raised ValueError: bad batch 3 (train.py:8), and restart.causes leaves out exception");
  const RestartPolicy signal_only = policy_of(false, false, true);
  CHECK(decide(signal_only, code3).reason ==
        "rank 1 exited with code 3, and restart.causes leaves out exit_code");
  CHECK(decide(policy_of(true, true, false), oom).reason ==
        "rank 1 was killed by signal 9 (SIGKILL), and restart.causes leaves out signal");

  // exit_codes: of the exit codes, only these restart, whatever causes says of exit_code.
  RestartPolicy chosen = signal_only;
  chosen.exit_codes = {75, 76};
  CHECK(decide(chosen, code75).restart);
  CHECK(decide(chosen, code75).reason == "exit code 75 is in restart.exit_codes");
  CHECK_FALSE(decide(chosen, code3).restart);
  CHECK(decide(chosen, code3).reason ==
        "rank 1 exited with code 3, which restart.exit_codes (75, 76) leaves out");
  chosen.on_exit_code = true;
  CHECK_FALSE(decide(chosen, code3).restart);
  CHECK(decide(chosen, oom).restart);
  CHECK_FALSE(decide(chosen, exception).restart);  // an exception is not its exit code 1
}

TEST_CASE("the decision table: no progress stops the loop", "[restart]") {
  const AttemptRecord first = classified(failed_with(exited(1), kTraceback, 0));
  const AttemptRecord again = classified(failed_with(exited(1), kTraceback, 1));
  const AttemptRecord other =
      classified(failed_with(exited(1), "  File \"/w/train.py\", line 9, in main\nKeyError: 'lr'\n", 1));

  SECTION("built in: the same exception as the attempt before") {
    const RestartPolicy p = policy_of(true, true, true);
    CHECK(decide(p, first).restart);  // the first attempt has none before it
    const RestartDecision d = decide(p, again, &first);
    CHECK_FALSE(d.restart);
    CHECK(d.reason ==
          "rank 1 raised ValueError: bad batch 3 (train.py:8) again, as in attempt 0: no progress");
    CHECK(decide(p, other, &first).restart);
    // An exit code repeated is not an exception repeated.
    const AttemptRecord code = classified(failed_with(exited(3), "", 1));
    CHECK(decide(p, code, &code).restart);
    // torchrun's rule has no measure of progress.
    CHECK(decide(RestartPolicy{}, again, &first).restart);
  }
  SECTION("min_attempt: a short attempt that failed as the one before") {
    RestartPolicy p = policy_of(true, true, true);
    p.min_attempt_s = 60;
    const RestartDecision d = decide(p, again, &first);
    CHECK_FALSE(d.restart);
    CHECK(d.reason ==
          "attempt 1 failed as attempt 0 did, after 3.0 s, less than min_attempt 1m: no progress");
    CHECK(decide(p, other, &first).restart);  // failed otherwise
    AttemptRecord long_one = again;
    long_one.end_unix_ns = long_one.start_unix_ns + 61'000'000'000;
    CHECK(decide(p, long_one, &first).restart);  // ran long enough: the same exception restarts
    const AttemptRecord code = classified(failed_with(exited(3), "", 1));
    CHECK_FALSE(decide(p, code, &code).restart);
    const AttemptRecord code4 = classified(failed_with(exited(4), "", 1));
    CHECK(decide(p, code4, &code).restart);
  }
  SECTION("progress_file: it must change during the attempt") {
    RestartPolicy p = policy_of(true, true, true);
    p.progress_file = "/w/ckpt/last.pt";
    p.progress_file_text = "ckpt/last.pt";
    RestartQuestion q;
    q.last = &again;
    q.previous = &first;
    q.max_restarts = 2;
    q.progress_file_changed = false;
    RestartDecision d = decide_restart(p, q);
    CHECK_FALSE(d.restart);
    CHECK(d.reason == "progress_file ckpt/last.pt did not change during attempt 1: no progress");
    q.progress_file_changed = true;  // the same exception, but the checkpoint moved on
    d = decide_restart(p, q);
    CHECK(d.restart);
    CHECK(d.reason == "an exception restarts");
  }
}

TEST_CASE("failed alike: the same cause and code, signal or exception, whichever rank", "[restart]") {
  const AttemptRecord a = classified(failed_with(exited(3)));
  AttemptRecord b = classified(failed_with(exited(3)));
  std::swap(b.workers[0].rank, b.workers[1].rank);
  CHECK(failed_alike(a, b));
  CHECK_FALSE(failed_alike(a, classified(failed_with(exited(4)))));
  CHECK_FALSE(failed_alike(a, classified(failed_with(killed(3)))));
  CHECK(failed_alike(classified(failed_with(killed(9))), classified(failed_with(killed(9)))));
  CHECK_FALSE(failed_alike(a, AttemptRecord{}));
}
