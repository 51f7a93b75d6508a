// Hang forensics (lib/supervisor/stacks.cpp): reading py-spy's dump, the
// innermost frame of user code, grouping the ranks by identical stacks and
// the report's line.
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <fstream>
#include <stdlib.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "stack_taker.h"
#include "testing.h"
#include "worker_pipes.h"

using namespace flowrun;

namespace {

std::string dump(int pid, const std::string& frames) {
  return "Process " + std::to_string(pid) +
         ": /usr/bin/python3 train.py\nPython v3.11.2 (/usr/bin/python3.11)\n\nThread " +
         std::to_string(pid) + " (active+gil): \"MainThread\"\n" + frames;
}

const std::string kWaiting =
    "    all_reduce (/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:1322)\n"
    "    step (/work/proj/train.py:88)\n"
    "    <module> (/work/proj/train.py:120)\n";
const std::string kLoading =
    "    load_batch (/work/proj/data.py:41)\n"
    "    step (/work/proj/train.py:80)\n"
    "    <module> (/work/proj/train.py:120)\n";

RankStack parsed(int rank, const std::string& text) {
  RankStack r;
  r.rank = rank;
  r.stack = parse_py_spy_dump(text);
  return r;
}

}  // namespace

TEST_CASE("py-spy's dump: threads, frames innermost first, the MainThread found") {
  const std::string text = dump(812, kLoading) +
                           "Thread 813 (idle): \"pin_memory\"\n"
                           "    wait (/usr/lib/python3.11/threading.py:320)\n"
                           "        Arguments:\n"
                           "            self: <Condition at 0x7f00>\n";
  auto stack = parse_py_spy_dump(text);
  REQUIRE(stack);
  REQUIRE(stack->threads.size() == 2);
  CHECK(stack->main == 0);
  REQUIRE(stack->threads[0].size() == 3);
  CHECK(stack->threads[0][0] == StackFrame{"load_batch", "/work/proj/data.py", 41});
  CHECK(stack->threads[0][2].function == "<module>");
  REQUIRE(stack->threads[1].size() == 1);  // --locals lines are not frames
  CHECK(stack->threads[1][0].line == 320);

  CHECK_FALSE(parse_py_spy_dump(""));
  CHECK_FALSE(parse_py_spy_dump("Error: Failed to find python version from target process\n"));
}

TEST_CASE("the innermost user frame, named by the library call it waits in") {
  CHECK(where_in(*parse_py_spy_dump(dump(1, kWaiting))) == "all_reduce (train.py:88)");
  CHECK(where_in(*parse_py_spy_dump(dump(1, kLoading))) == "load_batch (data.py:41)");
  // torch 2 wraps its collectives: the name is the wrapped call's.
  CHECK(where_in(*parse_py_spy_dump(dump(
            1,
            "    all_reduce (/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:2501)\n"
            "    wrapper (/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py:83)\n"
            "    step (/work/proj/train.py:88)\n"))) == "all_reduce (train.py:88)");
  // Only library frames: the innermost one.
  CHECK(where_in(*parse_py_spy_dump(dump(1, "    wait (/usr/lib/python3.11/threading.py:320)\n"))) ==
        "wait (threading.py:320)");
  CHECK(is_library_file("/venv/lib/python3.11/site-packages/torch/nn/module.py"));
  CHECK(is_library_file("<frozen runpy>"));
  CHECK_FALSE(is_library_file("/work/proj/train.py"));
}

TEST_CASE("ranks grouped by identical frames, ignoring pids and thread ids; the odd one out named") {
  std::vector<RankStack> ranks{parsed(0, dump(100, kWaiting)), parsed(1, dump(101, kWaiting)),
                               parsed(2, dump(102, kLoading)), parsed(3, dump(103, kWaiting))};
  const StackReport report = group_stacks(ranks, "py-spy");
  REQUIRE(report.groups.size() == 2);
  CHECK(report.groups[0].ranks == std::vector<int>{0, 1, 3});
  CHECK(report.groups[0].where == "all_reduce (train.py:88)");
  CHECK(report.groups[1].ranks == std::vector<int>{2});
  CHECK(format_stacks_line(report) ==
        "flowrun:   ranks 0, 1, 3 (3 of 4) are in all_reduce (train.py:88); rank 2 is in load_batch "
        "(data.py:41)");

  SECTION("a different line is a different stack") {
    std::string other = kWaiting;
    other.replace(other.find("train.py:88"), 11, "train.py:90");
    ranks[3] = parsed(3, dump(103, other));
    CHECK(group_stacks(ranks, "py-spy").groups.size() == 3);
  }
  SECTION("missing stacks come last, grouped by reason") {
    ranks[1] = RankStack{1, std::nullopt, "", "py-spy did not finish within 3 s", ""};
    ranks[3] = RankStack{3, std::nullopt, "", "py-spy did not finish within 3 s", ""};
    const StackReport r = group_stacks(ranks, "py-spy");
    REQUIRE(r.groups.size() == 3);
    CHECK(r.groups[2].ranks == std::vector<int>{1, 3});
    CHECK(format_stacks_line(r) ==
          "flowrun:   rank 0 (1 of 4) is in all_reduce (train.py:88); rank 2 is in load_batch (data.py:41); "
          "ranks "
          "1, 3: no stack (py-spy did not finish within 3 s)");
  }
  SECTION("the kernel's words group the same way") {
    std::vector<RankStack> kernel{{0, std::nullopt, "futex_wait_queue (state S, syscall 202)", "", ""},
                                  {1, std::nullopt, "running (state R)", "", ""},
                                  {2, std::nullopt, "futex_wait_queue (state S, syscall 202)", "", ""}};
    const StackReport r = group_stacks(kernel, "kernel");
    REQUIRE(r.groups.size() == 2);
    CHECK(r.groups[0].ranks == std::vector<int>{0, 2});
    CHECK(r.groups[1].where == "running (state R)");
  }
}

TEST_CASE("the kernel's state of a live process and of none") {
  CHECK(kernel_state(getpid()).find("(state R") != std::string::npos);
  CHECK(kernel_state(-5).empty());
}

TEST_CASE("a rank's stack.txt and the text cut for the wire", "[stacks]") {
  RankStack r{2, std::nullopt, "futex_wait_queue (state S, syscall 202)", "", ""};
  CHECK(stack_file_text(r, "no py-spy on PATH") ==
        "(py-spy missing: no py-spy on PATH)\nkernel: futex_wait_queue (state S, syscall 202)\n");
  r = RankStack{3, std::nullopt, "", "py-spy: Permission denied", ""};
  CHECK(stack_file_text(r, "") == "(no stack: py-spy: Permission denied)\n");
  CHECK(cap_stack_dump("short\n") == "short\n");
  std::string big;
  while (big.size() < kMaxStackDumpBytes + 5000) big += "    frame (/w/train.py:1)\n";
  const std::string cut = cap_stack_dump(big);
  CHECK(cut.size() <= kMaxStackDumpBytes);
  CHECK(cut.find("\n(cut: ") != std::string::npos);
  CHECK(cut.substr(cut.size() - 12) == "bytes more)\n");
}

namespace {

// A stand-in py-spy at `path` that prints a dump of the pid it is given.
void write_fake_py_spy(const std::string& path) {
  std::ofstream(path) << "#!/bin/sh\n"
                         "printf 'Process %s: python3 train.py\\n\\nThread %s (idle): \"MainThread\"\\n"
                         "    wait (/w/train.py:7)\\n' \"$4\" \"$4\"\n";
  REQUIRE(chmod(path.c_str(), 0755) == 0);
}

}  // namespace

TEST_CASE("py-spy's output is read back whether or not the rank has a directory here", "[stacks]") {
  // A stand-in py-spy (FLOWRUN_PY_SPY) that prints a dump of the pid it is given.
  testing::ScopedTempDir dir("stacks");
  const std::string fake = dir.path() + "/py-spy";
  write_fake_py_spy(fake);
  setenv("FLOWRUN_PY_SPY", fake.c_str(), 1);
  // Rank 0 runs here, with its log files in its directory; rank 1 is an
  // agent's, whose output goes to the head: it has no directory on the node.
  WorkerList workers(2);
  for (int r = 0; r < 2; ++r) {
    workers[r].record.rank = r;
    workers[r].pid = getpid();
    workers[r].alive = true;
  }
  workers[0].record.stdout_log = dir.path() + "/stdout.log";
  boost::asio::io_context io;
  StackTaker taker(io);
  bool done = false;
  REQUIRE(taker.start(
      workers, 10, [](const std::string&) {}, [&] { done = true; }));
  io.run();
  unsetenv("FLOWRUN_PY_SPY");
  REQUIRE(done);
  CHECK(taker.source() == "py-spy");
  REQUIRE(taker.found().size() == 2);
  for (const RankStack& r : taker.found()) {
    INFO("rank " << r.rank << ": " << r.missing);
    CHECK(r.missing.empty());
    REQUIRE(r.stack);
    CHECK(where_in(*r.stack) == "wait (train.py:7)");
  }
  CHECK(testing::read_file(dir.path() + "/stack.txt") == taker.found()[0].dump + "\n");
}

TEST_CASE("py-spy beside the program a rank runs: a virtual environment's python3 not on any PATH",
          "[stacks]") {
  // pip install py-spy into the venv whose python3 the step names (run: or
  // python:); neither flowrun's PATH nor the rank's has the venv's bin/, as
  // on a node reached over ssh, where no login activates it.
  testing::ScopedTempDir dir("stacks-venv");
  const std::string bin = dir.path() + "/venv/bin", empty = dir.path() + "/empty";
  REQUIRE(mkdir((dir.path() + "/venv").c_str(), 0755) == 0);
  REQUIRE(mkdir(bin.c_str(), 0755) == 0);
  REQUIRE(mkdir(empty.c_str(), 0755) == 0);
  write_fake_py_spy(bin + "/py-spy");
  const char* path = std::getenv("PATH");
  const std::string saved = path != nullptr ? path : "";
  setenv("PATH", empty.c_str(), 1);
  unsetenv("FLOWRUN_PY_SPY");
  WorkerList workers(1);
  workers[0].record.rank = 0;
  workers[0].record.program = bin + "/python3";
  workers[0].pid = getpid();
  workers[0].alive = true;
  boost::asio::io_context io;
  StackTaker taker(io);
  bool done = false;
  std::vector<std::string> said;
  const bool started = taker.start(
      workers, 10, [&](const std::string& line) { said.push_back(line); }, [&] { done = true; });
  if (started) io.run();
  setenv("PATH", saved.c_str(), 1);
  REQUIRE(started);
  REQUIRE(done);
  CHECK(said.empty());
  CHECK(taker.source() == "py-spy");
  REQUIRE(taker.found().size() == 1);
  REQUIRE(taker.found()[0].stack);
  CHECK(where_in(*taker.found()[0].stack) == "wait (train.py:7)");
}
