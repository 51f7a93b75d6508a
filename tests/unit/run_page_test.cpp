// Tests of the page of a run (lib/run_page): its structure for a few ranks
// and for 1,024 (folded by node, the odd ranks kept apart), the escaping of
// whatever a rank printed, and the reading of a run directory into a picture.
#include "flowrun/run_page.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <regex>
#include <set>
#include <sys/stat.h>

#include "testing.h"

using namespace flowrun;

namespace {

namespace fs = std::filesystem;

using testing::kMs;
constexpr std::int64_t kT0 = 1'764'935'363'000 * kMs;  // 2025-12-05T11:49:23Z

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

RankBar bar(int rank, const std::string& node, BarEnd end, std::string how, std::int64_t start_ms,
            std::int64_t end_ms) {
  RankBar b;
  b.rank = rank;
  b.node = node;
  b.end = end;
  b.how = std::move(how);
  b.start_ns = kT0 + start_ms * kMs;
  b.end_ns = kT0 + end_ms * kMs;
  b.stderr_log = fmt::format("/runs/r/train/rank{}/stderr.log", rank);
  b.stdout_log = fmt::format("/runs/r/train/rank{}/stdout.log", rank);
  return b;
}

// A failed run: `ranks` ranks, `per_node` a node; rank `culprit` exited 3 at
// 900 ms, the ranks in `failed` failed after it, the others were stopped.
RunPicture failed_run(int ranks, int per_node, int culprit, const std::set<int>& failed) {
  RunPicture run;
  run.run_id = "q-1";
  run.flow = "q";
  run.run_dir = "/runs/r";
  run.host = "host-0";
  run.state = "failed";
  run.exit_code = 3;
  run.start_ns = kT0;
  run.end_ns = kT0 + 1200 * kMs;
  StepPicture step;
  step.name = "train";
  step.state = "failed";
  step.parallel = true;
  step.outcome = "failed";
  step.exit_code = 3;
  step.dir = "/runs/r/train";
  AttemptPicture a;
  a.outcome = "failed";
  a.culprit_rank = culprit;
  a.world_size = ranks;
  for (int r = 0; r < ranks; ++r) {
    const std::string node = fmt::format("host-{}", r / per_node);
    if (r == culprit) {
      a.bars.push_back(bar(r, node, BarEnd::culprit, "exited 3", 100, 900));
      a.bars.back().culprit = true;
      a.bars.back().last_stderr = {"Traceback (most recent call last):",
                                   "</script><img src=x onerror=alert(1)>"};
    } else if (failed.count(r)) {
      a.bars.push_back(bar(r, node, BarEnd::failed, "exited 1", 100, 1000));
    } else {
      a.bars.push_back(bar(r, node, BarEnd::stopped, "SIGTERM", 100, 1100));
    }
  }
  step.attempts.push_back(std::move(a));
  run.steps.push_back(std::move(step));
  return run;
}

std::vector<std::string> matches(const std::string& text, const std::string& pattern) {
  std::vector<std::string> out;
  const std::regex re(pattern);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1].str());
  return out;
}

}  // namespace

TEST_CASE("run page: one row per rank, grouped by node, the culprit marked", "[run_page]") {
  const std::string page = format_run_page(failed_run(4, 2, 2, {3}));
  CHECK(page.starts_with("<!DOCTYPE html>"));
  CHECK(matches(page, "<details class=\"rank [^\"]*\" id=\"train-r(\\d+)\"") ==
        std::vector<std::string>{"0", "1", "2", "3"});
  CHECK(matches(page, "<div class=\"node\" data-node=\"([^\"]+)\"") ==
        std::vector<std::string>{"host-0", "host-1"});
  CHECK(matches(page, "id=\"train-r(\\d+)\" data-rank=\"\\d+\" data-end=\"culprit\" data-culprit=\"yes\"") ==
        std::vector<std::string>{"2"});
  CHECK(matches(page, "id=\"train-r(\\d+)\" data-rank=\"\\d+\" data-end=\"failed\"") ==
        std::vector<std::string>{"3"});
  CHECK(count(page, "data-end=\"stopped\"") == 2);
  CHECK(page.find("data-folded=\"no\"") != std::string::npos);
  // The axis covers the run: from its start to its end.
  CHECK(page.find(fmt::format("data-t0-ms=\"{}\" data-t1-ms=\"{}\"", kT0 / kMs, kT0 / kMs + 1200)) !=
        std::string::npos);
  CHECK(page.find("culprit <a href=\"#train-r2\">rank 2</a>") != std::string::npos);
  CHECK(page.find("still-running") == std::string::npos);
}

TEST_CASE("run page: what a rank printed never becomes markup", "[run_page]") {
  RunPicture run = failed_run(2, 2, 1, {});
  run.steps[0].name = "train";
  run.steps[0].why = {"<b>why</b> & \"quotes\""};
  run.steps[0].attempts[0].bars[0].stderr_log = "/runs/\"><script>x</script>/stderr.log";
  run.error = "<iframe src=evil>";
  const std::string page = format_run_page(run);
  CHECK(page.find("<img") == std::string::npos);
  CHECK(page.find("<iframe") == std::string::npos);
  CHECK(count(page, "<script>") == 1);  // the page's own
  CHECK(count(page, "</script>") == 1);
  CHECK(page.find("&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;") != std::string::npos);
  CHECK(page.find("&lt;b&gt;why&lt;/b&gt; &amp; &quot;quotes&quot;") != std::string::npos);
  CHECK(page.find("/runs/&quot;&gt;&lt;script&gt;x&lt;/script&gt;/stderr.log") != std::string::npos);
}

TEST_CASE("run page: 1,024 ranks fold by node, the odd ones keep their rows", "[run_page]") {
  const std::set<int> failed = {3, 700, 701};
  RunPicture run = failed_run(1024, 8, 517, failed);
  // Node host-9 (ranks 72-79) was lost: its ranks ended with it.
  for (auto& b : run.steps[0].attempts[0].bars) {
    if (b.node == "host-9") {
      b.end = BarEnd::lost;
      b.how = "lost with its node";
    }
  }
  const std::string page = format_run_page(run);
  CHECK(page.find("data-rank-count=\"1024\" data-folded=\"yes\"") != std::string::npos);
  // Rows of their own: the culprit, the three that failed after it, the 8 lost.
  std::vector<std::string> own = matches(page, "<details class=\"rank [^\"]*\" id=\"train-r(\\d+)\"");
  std::vector<std::string> expected = {"3"};
  for (int r = 72; r < 80; ++r) expected.push_back(std::to_string(r));
  for (const char* r : {"517", "700", "701"}) expected.push_back(r);
  CHECK(own == expected);
  // Every other node is one folded row; every rank can still be found by its id.
  const auto folded = matches(page, "<details class=\"rank fold [^\"]*\" data-ranks=\"([^\"]+)\"");
  CHECK(folded.size() == 127);  // 128 nodes, host-9 without ordinary ranks
  CHECK(std::find(folded.begin(), folded.end(), "0-2, 4-7") != folded.end());
  CHECK(std::find(folded.begin(), folded.end(), "512-516, 518-519") != folded.end());
  CHECK(count(page, "id=\"train-r") == 1024);
  CHECK(count(page, "<div class=\"node\" data-node=") == 128);
  CHECK(page.size() < 1'000'000);
}

TEST_CASE("run page: a running run is a snapshot that says so", "[run_page]") {
  RunPicture run = failed_run(2, 2, 1, {});
  run.state = "running";
  run.exit_code.reset();
  run.end_ns = 0;
  run.taken_ns = kT0 + 5000 * kMs;
  run.steps[0].state = "running";
  auto& bars = run.steps[0].attempts[0].bars;
  bars[1].end = BarEnd::running;
  bars[1].how = "running";
  bars[1].end_ns = 0;
  const std::string page = format_run_page(run);
  CHECK(page.find("id=\"still-running\"") != std::string::npos);
  CHECK(page.find(fmt::format("data-t1-ms=\"{}\"", kT0 / kMs + 5000)) != std::string::npos);
  // The running rank's bar reaches the snapshot's time.
  CHECK(page.find(fmt::format("data-end-ms=\"{}\"", kT0 / kMs + 5000)) != std::string::npos);
}

TEST_CASE("last_lines keeps the last lines, each cut", "[run_page]") {
  CHECK(last_lines("a\nb\nc\n", 2) == std::vector<std::string>{"b", "c"});
  CHECK(last_lines("a\nb", 5) == std::vector<std::string>{"a", "b"});
  CHECK(last_lines("", 5).empty());
  const auto cut = last_lines(std::string(1000, 'x'), 1);
  REQUIRE(cut.size() == 1);
  CHECK(cut[0] == std::string(kStderrLineBytes, 'x') + "...");
}

TEST_CASE("read_run_picture reads attempts, nodes and a restarted attempt's kept logs", "[run_page]") {
  testing::ScopedTempDir dir("run-page");
  const std::string run = dir.path();
  auto write = [](const std::string& path, const std::string& text) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << text;
  };
  write(run + "/run.json", R"({"format": 1, "run_id": "r1", "flow": "f", "host": "h0", "exit_code": 1,
    "start": "2026-12-05T11:49:23.000Z", "end": "2026-12-05T11:49:25.000Z",
    "steps": {"train": "failed", "eval": "skipped"}})");
  write(run + "/plan.json", R"({"steps": [{"name": "train", "kind": "parallel", "why": ["because"],
    "outputs": ["model.pt"], "nodes": [{"host": "h0"}, {"host": "h1"}],
    "ranks": [{"rank": 0, "node": 0}, {"rank": 1, "node": 1}]}]})");
  const std::string worker = R"({"rank": %d, "status": "%s", "exit_code": %s, "signal": null, "role": "%s",
    "start": "2026-12-05T11:49:23.%03dZ", "end": "2026-12-05T11:49:24.%03dZ", "stalled": false,
    "stderr_log": "%s/train/rank%d/stderr.log", "stdout_log": "%s/train/rank%d/stdout.log", "node": %s})";
  auto w = [&](int rank, const char* status, const char* code, const char* role, int ms, const char* node) {
    char buf[2048];
    std::snprintf(buf, sizeof buf, worker.c_str(), rank, status, code, role, ms, ms, run.c_str(), rank,
                  run.c_str(), rank, node);
    return std::string(buf);
  };
  write(run + "/train/results.json",
        R"({"outcome": "failed", "exit_code": 1, "start": "2026-12-05T11:49:23.100Z",
    "end": "2026-12-05T11:49:24.900Z", "retry_why": "because", "retry_may_help": false, "failure_class": "repeats",
    "node_checks": [{"node": "h2", "ok": false, "checks": [{"name": "gpus", "ok": false, "detail": "1 of 8"}]}],
    "excluded_nodes": ["h2"], "attempts": [
    {"restart_count": 0, "outcome": "failed", "culprit_rank": 1, "restarted": true, "restart_reason": "a signal restarts",
     "world_size": 2, "replaced_nodes": [], "stacks": {"source": "kernel", "groups": [{"ranks": [0], "where": "poll", "missing": null}]},
     "wait_shares": {"sample_ms": 1000, "ranks": [], "slow": {"ranks": [1], "slow_share": 0.03, "others_share": 0.714,
       "frame": "load_batch (data.py:88) <b>"}},
     "workers": [)" +
            w(0, "signaled", "null", "victim", 100, "\"h0\"") + "," +
            w(1, "lost", "null", "culprit", 100, "\"h1\"") + R"(]},
    {"restart_count": 1, "outcome": "failed", "culprit_rank": 0, "restarted": false, "world_size": 2,
     "replaced_nodes": [{"node_rank": 1, "lost": "h1", "spare": "h3"}],
     "workers": [)" +
            w(0, "exited", "1", "culprit", 500, "\"h0\"") + "," +
            w(1, "signaled", "null", "victim", 500, "\"h3\"") + "]}]}");
  write(run + "/train/rank0/stderr.log", "one\nlast words of attempt 1\n");
  write(run + "/train/rank0/attempt0/stderr.log", "words of attempt 0\n");
  write(run + "/train/outputs/model.pt", "x");

  const RunPicture p = read_run_picture(run, "failed", 0);
  CHECK(p.run_id == "r1");
  CHECK(p.end_ns - p.start_ns == 2'000'000'000);
  REQUIRE(p.steps.size() == 2);
  const StepPicture& s = p.steps[0];
  CHECK(s.parallel);
  CHECK(s.why == std::vector<std::string>{"because"});
  CHECK(s.collected == std::vector<std::string>{"model.pt"});
  CHECK(s.excluded_nodes == std::vector<std::string>{"h2"});
  REQUIRE(s.node_checks.size() == 1);
  CHECK(s.node_checks[0].detail == "gpus: 1 of 8");
  CHECK(s.retry == "a retry will not help (repeats): because");
  REQUIRE(s.attempts.size() == 2);
  const AttemptPicture& a0 = s.attempts[0];
  CHECK(a0.restart_reason == "a signal restarts");
  REQUIRE(a0.stacks.size() == 1);
  CHECK(a0.stacks[0].where == "poll");
  CHECK(a0.slow_ranks == std::vector<int>{1});
  CHECK(a0.slow_why ==
        "waiting in collectives 3% of the time, the other ranks 71%; hottest frame load_batch (data.py:88) "
        "<b>");
  const std::string page = format_run_page(p);
  CHECK(page.find("data-slow-ranks=\"1\">the slow rank: 1 (waiting in collectives 3% of the time") !=
        std::string::npos);
  CHECK(page.find("(data.py:88) &lt;b&gt;)</div>") != std::string::npos);
  CHECK(s.attempts[1].slow_ranks.empty());
  REQUIRE(a0.bars.size() == 2);
  CHECK(a0.bars[0].end == BarEnd::stopped);
  CHECK(a0.bars[0].how == "signaled");  // and no signal named
  CHECK(a0.bars[0].stderr_log == run + "/train/rank0/attempt0/stderr.log");
  CHECK(a0.bars[0].last_stderr == std::vector<std::string>{"words of attempt 0"});
  CHECK(a0.bars[1].end == BarEnd::lost);
  CHECK(a0.bars[1].node == "h1");
  const AttemptPicture& a1 = s.attempts[1];
  CHECK(a1.replaced == std::vector<std::string>{"node 1: h1 lost, spare h3 seated in its place"});
  CHECK(a1.bars[0].end == BarEnd::culprit);
  CHECK(a1.bars[0].how == "exited 1");
  CHECK(a1.bars[0].last_stderr == std::vector<std::string>{"one", "last words of attempt 1"});
  CHECK(a1.bars[1].node == "h3");
  CHECK(p.steps[1].attempts.empty());
  CHECK(p.steps[1].state == "skipped");
}

TEST_CASE("read_run_picture reads a log's last lines, and never blocks on a FIFO a rank left in its place",
          "[run_page]") {
  testing::ScopedTempDir dir("run-page");
  const std::string run = dir.path();
  auto write = [](const std::string& path, const std::string& text) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << text;
  };
  write(run + "/run.json", R"({"format": 1, "run_id": "r1", "flow": "f", "host": "h0", "exit_code": 1,
    "start": "2026-12-05T11:49:23.000Z", "end": "2026-12-05T11:49:25.000Z", "steps": {"train": "failed"}})");
  write(run + "/plan.json", R"({"steps": [{"name": "train", "kind": "parallel", "why": [],
    "nodes": [{"host": "h0"}], "ranks": [{"rank": 0, "node": 0}, {"rank": 1, "node": 0}]}]})");
  std::string workers;
  for (int rank : {0, 1}) {
    workers +=
        fmt::format(R"({}{{"rank": {}, "status": "exited", "exit_code": 1, "signal": null, "role": "{}",
      "start": "2026-12-05T11:49:23.100Z", "end": "2026-12-05T11:49:24.100Z", "stalled": false,
      "stderr_log": "{}/train/rank{}/stderr.log", "stdout_log": "", "node": "h0"}})",
                    rank == 0 ? "" : ",", rank, rank == 0 ? "culprit" : "failed_after", run, rank);
  }
  write(run + "/train/results.json",
        R"({"outcome": "failed", "exit_code": 1, "start": "2026-12-05T11:49:23.100Z",
    "end": "2026-12-05T11:49:24.900Z", "attempts": [{"restart_count": 0, "outcome": "failed", "culprit_rank": 0,
    "world_size": 2, "replaced_nodes": [], "workers": [)" +
            workers + "]}]}");
  // Rank 0's log is longer than the tail read: its cut first line is dropped, its last lines kept.
  std::string log;
  for (int i = 0; i < 5000; ++i) log += "line " + std::to_string(i) + "\n";
  write(run + "/train/rank0/stderr.log", log);
  fs::create_directories(run + "/train/rank1");
  REQUIRE(mkfifo((run + "/train/rank1/stderr.log").c_str(), 0600) == 0);

  const RunPicture p = read_run_picture(run, "failed", 0);
  REQUIRE(p.steps.size() == 1);
  REQUIRE(p.steps[0].attempts.size() == 1);
  const auto& bars = p.steps[0].attempts[0].bars;
  REQUIRE(bars.size() == 2);
  CHECK(bars[0].last_stderr ==
        std::vector<std::string>{"line 4995", "line 4996", "line 4997", "line 4998", "line 4999"});
  CHECK(bars[1].last_stderr.empty());
}

TEST_CASE("read_run_picture names run.json when it cannot read it", "[run_page]") {
  testing::ScopedTempDir dir("run-page-none");
  CHECK_THROWS_WITH(read_run_picture(dir.path(), "damaged", 0),
                    Catch::Contains(dir.path() + "/run.json: cannot read the run's record"));
}
