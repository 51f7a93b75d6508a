// The failure report's line for Lightning's devices * num_nodes error: which
// text it recognises, what it advises for one node, several nodes and uneven
// nodes, and where it stands in the report.
#include <catch2/catch.hpp>

#include "flowrun/result.h"

using namespace flowrun;

namespace {

// Lightning 2.1's ValueError, as the traceback's last line shows it
// (lightning_fabric/plugins/environments/torchelastic.py, validate_settings).
const std::string kDevices3 =
    "ValueError: You set `devices=3` and `num_nodes=1` in Lightning, but the product (3 * 1) does not match "
    "the world size (2).\n";

// `per_node[i]` workers on node i; node names are empty for a single node, as
// the launcher leaves them.
std::vector<WorkerRecord> workers(const std::vector<int>& per_node) {
  std::vector<WorkerRecord> out;
  int rank = 0;
  for (std::size_t n = 0; n < per_node.size(); ++n) {
    for (int i = 0; i < per_node[n]; ++i) {
      WorkerRecord w;
      w.rank = rank++;
      w.local_rank = i;
      w.node = per_node.size() == 1 ? "" : "node" + std::to_string(n + 1);
      out.push_back(w);
    }
  }
  return out;
}

// One failed rank's text, the step's shape, and the line flowrun adds.
struct HintRow {
  const char* what;
  std::string error;          // the rank's text
  std::vector<int> per_node;  // workers on each node
  std::string hint;
};

}  // namespace

TEST_CASE("lightning hint: what it advises for one node, several, one worker and uneven nodes",
          "[result][lightning]") {
  const HintRow row = GENERATE(values<HintRow>({
      {"one node",
       kDevices3,
       {2},
       "flowrun:   Lightning's Trainer(devices=3, num_nodes=1) must multiply to this step's 2 workers "
       "(1 node x 2 per node): set devices=2, num_nodes=1, or change the step's parallel: to run 3 workers "
       "(1 node x 3 per node)"},
      {"several nodes",
       kDevices3,
       {2, 2},
       "flowrun:   Lightning's Trainer(devices=3, num_nodes=1) must multiply to this step's 4 workers "
       "(2 nodes x 2 per node): set devices=2, num_nodes=2, or change the step's parallel: to run 3 workers "
       "(1 node x 3 per node)"},
      {"several nodes, num_nodes already set",
       "You set `devices=4` and `num_nodes=2` in Lightning, but the product (4 * 2) does not match the world "
       "size (4).",
       {1, 1, 1, 1},
       "flowrun:   Lightning's Trainer(devices=4, num_nodes=2) must multiply to this step's 4 workers "
       "(4 nodes x 1 per node): set devices=1, num_nodes=4, or change the step's parallel: to run 8 workers "
       "(2 nodes x 4 per node)"},
      {"one worker",
       "You set `devices=2` and `num_nodes=1` in Lightning, but the product (2 * 1) does not match the world "
       "size (1).",
       {1},
       "flowrun:   Lightning's Trainer(devices=2, num_nodes=1) must multiply to this step's 1 worker "
       "(1 node x 1 per node): set devices=1, num_nodes=1, or change the step's parallel: to run 2 workers "
       "(1 node x 2 per node)"},
      {"one device",
       "You set `devices=1` and `num_nodes=1` in Lightning, but the product (1 * 1) does not match the world "
       "size (2).",
       {2},
       "flowrun:   Lightning's Trainer(devices=1, num_nodes=1) must multiply to this step's 2 workers "
       "(1 node x 2 per node): set devices=2, num_nodes=1, or change the step's parallel: to run 1 worker "
       "(1 node x 1 per node)"},
      {"nodes with different numbers of workers",
       kDevices3,
       {3, 2},
       "flowrun:   Lightning's Trainer(devices=3, num_nodes=1) must multiply to this step's 5 workers "
       "(2 nodes with 2 to 3 workers each, which Lightning's devices cannot express): give every node the "
       "same number of workers in the step's parallel:"},
  }));
  INFO(row.what);
  CHECK(lightning_devices_hint(row.error, workers(row.per_node)) == row.hint);
}

TEST_CASE("lightning hint: found anywhere in the text, only in Lightning's exact words",
          "[result][lightning]") {
  const std::string tail =
      "Traceback (most recent call last):\n  File \"train.py\", line 56, in main\n" + kDevices3;
  CHECK(lightning_devices_hint(tail, workers({2})).has_value());
  // Not Lightning's message, or not all of it.
  CHECK_FALSE(lightning_devices_hint("", workers({2})));
  CHECK_FALSE(lightning_devices_hint("ValueError: boom\n", workers({2})));
  CHECK_FALSE(lightning_devices_hint(kDevices3.substr(0, 80), workers({2})));
  CHECK_FALSE(
      lightning_devices_hint("You set `devices=x` and `num_nodes=1` in Lightning, but the product (3 * 1) "
                             "does not match the world size "
                             "(2).",
                             workers({2})));
  // The product must be of the same two numbers.
  CHECK_FALSE(
      lightning_devices_hint("You set `devices=3` and `num_nodes=1` in Lightning, but the product (2 * 1) "
                             "does not match the world size "
                             "(2).",
                             workers({2})));
  // Lightning's Slurm check is another error (devices against --ntasks-per-node).
  CHECK_FALSE(lightning_devices_hint(
      "ValueError: You set `devices=3` in Lightning, but the number of tasks per node configured in SLURM "
      "`--ntasks-per-node=2` does not match. HINT: Set `devices=2`.",
      workers({2})));
  // A first near miss does not hide the real message after it.
  CHECK(lightning_devices_hint("You set `devices=9`\n" + kDevices3, workers({2})).has_value());
  // No workers, nothing to advise.
  CHECK_FALSE(lightning_devices_hint(kDevices3, {}));
}

TEST_CASE("lightning hint: the report puts it after the culprit's stderr", "[result][lightning]") {
  AttemptRecord a;
  a.workers = workers({2});
  const std::string dir = "/w/.flowrun/runs/lightning-20261129-171053-4f1c2a/train";
  for (auto& w : a.workers) {
    w.pid = 4240 + w.rank;
    w.status = {ExitStatus::Kind::exited, 1, ""};
    w.start_unix_ns = 1'000'000'000;
    w.end_unix_ns = w.start_unix_ns + (w.rank == 0 ? 15'000'000'000 : 16'000'000'000);
    w.stderr_log = dir + "/rank" + std::to_string(w.rank) + "/stderr.log";
    w.stderr_tail = "    raise ValueError(\n" + kDevices3;
  }
  assign_roles(a, {1});
  StepRecord s;
  s.step = "train";
  s.parallel = true;
  s.outcome = a.outcome = Outcome::failed;
  s.exit_code = 1;
  s.attempts.push_back(a);
  CHECK(format_failure_report(s, "") ==
        "flowrun: step 'train' failed: rank 0 exited with code 1 after 15 s (pid 4240)\n"
        "flowrun:   last 2 lines of its stderr (" +
            dir +
            "/rank0/stderr.log):\n"
            "        raise ValueError(\n"
            "    " +
            kDevices3 +
            "flowrun:   Lightning's Trainer(devices=3, num_nodes=1) must multiply to this step's 2 workers "
            "(1 node x 2 per node): set devices=2, num_nodes=1, or change the step's parallel: to run 3 "
            "workers "
            "(1 node x 3 per node)\n"
            "flowrun:   stopped by flowrun: rank 1\n"
            "flowrun:   logs: " +
            dir + "\n");

  // From the error file when the stderr tail does not hold it.
  s.attempts[0].workers[0].stderr_tail = "(stderr cut short)\n";
  const std::string error_file =
      R"({"message": {"message": "ValueError: You set `devices=3` and `num_nodes=1` in Lightning, but the product )"
      R"((3 * 1) does not match the world size (2).", "extraInfo": {"py_callstack": "", "timestamp": "1"}}})";
  CHECK(format_failure_report(s, error_file)
            .find("flowrun:   Lightning's Trainer(devices=3, num_nodes=1) must "
                  "multiply to this step's 2 workers (1 node x 2 per node)") != std::string::npos);
}
