// A failed attempt's root cause (classify_failure) and the Python exception
// a traceback ends with (parse_python_exception).
#include <catch2/catch.hpp>
#include <csignal>

#include "flowrun/result.h"

#include "failed_attempts.h"

using namespace flowrun;
using namespace flowrun::testing;

TEST_CASE("a traceback's exception: type, first line of the message, innermost frame", "[restart]") {
  auto e = parse_python_exception(kTraceback);
  REQUIRE(e);
  CHECK(e->type == "ValueError");
  CHECK(e->message == "bad batch 3");
  CHECK(e->file == "/work/proj/train.py");
  CHECK(e->line == 8);
  CHECK(e->describe() == "ValueError: bad batch 3 (train.py:8)");

  // Cut at its head, as the 20-line stderr tail may be; Python 3.11's carets;
  // a dotted type; a message of several lines; a type without a message.
  e = parse_python_exception(
      "    y = f(x)\n  File \"/usr/lib/python3/dist-packages/torch/distributed/c10d.py\", line 1420, in "
      "all_reduce\n    work = group.allreduce([tensor], opts)\n           ^^^^^^^^^^^^^^^\n"
      "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275\nLast error:\nremote "
      "process exited\n");
  REQUIRE(e);
  CHECK(e->type == "torch.distributed.DistBackendError");
  CHECK(e->message == "NCCL error in: ProcessGroupNCCL.cpp:1275");
  CHECK(e->line == 1420);
  e = parse_python_exception("  File \"a.py\", line 2, in f\n    raise KeyError\nKeyError\n");
  REQUIRE(e);
  CHECK(e->describe() == "KeyError (a.py:2)");
  // A long message is cut to 200 bytes, before a character of several bytes rather than inside it.
  PythonException long_one{"ValueError", std::string(199, 'x') + "\xc3\xa9 and more", "a.py", 1};
  CHECK(long_one.describe() == "ValueError: " + std::string(199, 'x') + "... (a.py:1)");

  // Chained: the last traceback's exception.
  e = parse_python_exception(
      std::string(kTraceback) +
      "\nDuring handling of the above exception, another exception occurred:\n\n"
      "Traceback (most recent call last):\n  File \"/work/proj/train.py\", line 14, in "
      "<module>\n    cleanup()\nRuntimeError: cleanup failed\n");
  REQUIRE(e);
  CHECK(e->describe() == "RuntimeError: cleanup failed (train.py:14)");

  // A SyntaxError's frame has no ", in NAME".
  e = parse_python_exception(
      "  File \"/w/train.py\", line 3\n    x = = 1\n        ^\nSyntaxError: invalid syntax\n");
  REQUIRE(e);
  CHECK(e->describe() == "SyntaxError: invalid syntax (train.py:3)");

  // No frame, or no exception line after the innermost frame.
  CHECK_FALSE(parse_python_exception("ValueError: boom\n"));
  CHECK_FALSE(parse_python_exception("  File \"a.py\", line 2, in f\n    g()\n"));
  CHECK_FALSE(parse_python_exception("  File \"a.py\", line 2, in f\n    g()\n*** crashed ***\n"));
  CHECK_FALSE(parse_python_exception(""));
}

TEST_CASE("a failed attempt's root cause", "[restart]") {
  SECTION("a traceback on stderr and Python's exit code 1: exception") {
    const AttemptRecord a = classified(failed_with(exited(1), kTraceback));
    CHECK(a.cause == FailureCause::exception);
    REQUIRE(a.exception);
    CHECK(a.exception->describe() == "ValueError: bad batch 3 (train.py:8)");
  }
  SECTION("a traceback printed by a script that chose its own code: exit_code") {
    const AttemptRecord a = classified(failed_with(exited(75), kTraceback));
    CHECK(a.cause == FailureCause::exit_code);
    CHECK_FALSE(a.exception);
  }
  SECTION("exit code 1 without a traceback: exit_code") {
    CHECK(classified(failed_with(exited(1), "error: no data\n")).cause == FailureCause::exit_code);
  }
  SECTION("the error file (torch's @record) decides, whatever stderr holds") {
    const std::string record =
        R"({"message": {"message": "ValueError: bad batch 3", "extraInfo": {"py_callstack": )"
        R"("Traceback (most recent call last):\n  File \"/w/train.py\", line 8, in main\n    raise )"
        R"(ValueError()\nValueError: bad batch 3\n", "timestamp": "1700000000"}}})";
    AttemptRecord a = classified(failed_with(exited(1)), record);
    CHECK(a.cause == FailureCause::exception);
    REQUIRE(a.exception);
    CHECK(a.exception->describe() == "ValueError: bad batch 3 (train.py:8)");
    // The older shape: the message alone, no frame.
    a = classified(failed_with(exited(1)), R"({"message": "OSError: disk full", "timestamp": 1})");
    CHECK(a.cause == FailureCause::exception);
    REQUIRE(a.exception);
    CHECK(a.exception->describe() == "OSError: disk full");
    // Not an error file flowrun can read: stderr is asked.
    CHECK(classified(failed_with(exited(1)), "{}").cause == FailureCause::exit_code);
  }
  SECTION("killed by a signal, even with a traceback: signal") {
    CHECK(classified(failed_with(killed(SIGKILL), kTraceback)).cause == FailureCause::signal);
    CHECK(classified(failed_with(killed(SIGSEGV))).cause == FailureCause::signal);
  }
  SECTION("could not start: exit_code (a shell's 127)") {
    const ExitStatus spawn{ExitStatus::Kind::spawn_failed, 0, "python4: No such file or directory"};
    CHECK(classified(failed_with(spawn)).cause == FailureCause::exit_code);
  }
  SECTION("lost with its node, or no culprit and a node gone: node_lost") {
    const ExitStatus lost{ExitStatus::Kind::lost, 0, "its agent's connection closed"};
    CHECK(classified(failed_with(lost), "", true).cause == FailureCause::node_lost);
    AttemptRecord none;
    none.outcome = Outcome::failed;
    CHECK(classified(none, "", true).cause == FailureCause::node_lost);
    CHECK_FALSE(classified(none).cause);  // flowrun's own write error: nobody to blame
  }
  SECTION("an attempt that did not fail has no cause") {
    AttemptRecord a = failed_with(exited(3));
    a.outcome = Outcome::timed_out;
    CHECK_FALSE(classified(a).cause);
  }
  CHECK(std::string(failure_cause_name(FailureCause::node_lost)) == "node_lost");
}
