// Tests of finding runs again: a run named by a prefix of its id
// (match_run), the table of `flowrun runs`, the default step of `flowrun
// logs`, and locate_run and read_run_row on run directories under /tmp.
#include "runs.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "flowrun/error.h"
#include "flowrun/files.h"

#include "testing.h"

using namespace flowrun;

namespace {

namespace fs = std::filesystem;

using testing::write_text;

using testing::kSecond;

std::string run_json(const std::string& id, const std::string& state, const std::string& exit,
                     const std::string& steps) {
  return R"({"format": 1, "run_id": ")" + id + R"(", "run_dir": "/x", "flow": "demo", "state": ")" + state +
         R"(", "exit_code": )" + exit + R"(, "start": "2026-12-01T10:00:00.000Z", "steps": {)" + steps + "}}";
}

}  // namespace

TEST_CASE("a run is named by its id or by a prefix of one run's id", "[runs]") {
  const std::vector<std::string> ids = {"demo-20261201-100000-aaaaaa", "demo-20261201-110000-bbbbbb",
                                        "other-20261201-100000-cccccc"};
  CHECK(match_run("other", ids).id == "other-20261201-100000-cccccc");
  CHECK(match_run("demo-20261201-11", ids).id == "demo-20261201-110000-bbbbbb");
  CHECK(match_run("demo-20261201-100000-aaaaaa", ids).id == "demo-20261201-100000-aaaaaa");
  const RunMatch two = match_run("demo", ids);
  CHECK(two.id.empty());
  CHECK(two.ambiguous ==
        std::vector<std::string>{"demo-20261201-100000-aaaaaa", "demo-20261201-110000-bbbbbb"});
  const RunMatch none = match_run("nope", ids);
  CHECK((none.id.empty() && none.ambiguous.empty()));
  CHECK(match_run("", ids).id.empty());
  // An id that is also a prefix of another is the run it names exactly.
  CHECK(match_run("a", {"a", "ab"}).id == "a");
}

TEST_CASE("spans are short and exact enough to compare runs", "[runs]") {
  CHECK(format_span(400'000'000) == "0.4s");
  CHECK(format_span(12 * kSecond) == "12s");
  CHECK(format_span(185 * kSecond) == "3m05s");
  CHECK(format_span(7440 * kSecond) == "2h04m");
  CHECK(format_span((3 * 86400 + 7200) * kSecond) == "3d02h");
  CHECK(format_span(-1) == "-");
}

TEST_CASE("the runs table: oldest first, within 100 columns, a damaged run said as such", "[runs]") {
  RunRow ok{"demo-20261201-100000-aaaaaa",
            "demo",
            "succeeded",
            0,
            100 * kSecond,
            112 * kSecond,
            "",
            "",
            100 * kSecond};
  RunRow failed{"demo-20261201-110000-bbbbbb",
                "a-flow-name-far-too-long-for-the-column",
                "failed",
                3,
                200 * kSecond,
                203 * kSecond,
                "train",
                "",
                200 * kSecond};
  RunRow live{"demo-20261201-120000-cccccc",
              "demo",
              "running",
              std::nullopt,
              300 * kSecond,
              0,
              "evaluate",
              "",
              300 * kSecond};
  RunRow damaged{"demo-20261201-130000-dddddd",
                 "",
                 "damaged",
                 std::nullopt,
                 0,
                 0,
                 "",
                 "run.json is not JSON (cut short or damaged)",
                 150 * kSecond};
  const std::string table = format_runs_table({live, failed, damaged, ok}, 330 * kSecond);
  std::vector<std::string> lines;
  for (std::size_t pos = 0; pos < table.size();) {
    const std::size_t nl = table.find('\n', pos);
    lines.push_back(table.substr(pos, nl - pos));
    pos = nl + 1;
  }
  REQUIRE(lines.size() == 5);
  // 27 columns of id, 15 each for the flow and the step.
  CHECK(lines[0] == "id" + std::string(26, ' ') + "flow" + std::string(12, ' ') +
                        "state     exit start            duration step");
  CHECK(lines[1].starts_with("demo-20261201-100000-aaaaaa demo" + std::string(12, ' ') + "succeeded    0 "));
  CHECK(lines[1].ends_with(" 12s -"));
  CHECK(lines[2] == "demo-20261201-130000-dddddd -" + std::string(15, ' ') +
                        "damaged   run.json is not JSON (cut short or damaged)");
  CHECK(lines[3].find(" a-flow-name-fa~ failed" + std::string(7, ' ') + "3 ") != std::string::npos);
  CHECK(lines[3].ends_with(" 3.0s train"));
  CHECK(lines[4].find(" running" + std::string(6, ' ') + "- ") != std::string::npos);
  CHECK(lines[4].ends_with(" 30s evaluate"));  // running: now - start
  for (const auto& line : lines) CHECK(line.size() <= 100);
}

TEST_CASE("logs without --step: the failed step, else the running one, else the last that ran", "[runs]") {
  using Steps = std::vector<std::pair<std::string, std::string>>;
  CHECK(default_step(Steps{{"a", "succeeded"}, {"b", "failed"}, {"c", "skipped"}}) == "b");
  CHECK(default_step(Steps{{"a", "succeeded"}, {"b", "running"}, {"c", "pending"}}) == "b");
  CHECK(default_step(Steps{{"a", "succeeded"}, {"b", "succeeded"}, {"c", "not_run"}}) == "b");
  CHECK(default_step(Steps{{"a", "pending"}, {"b", "pending"}}) == "a");
  CHECK(default_step(Steps{}).empty());
}

TEST_CASE("runs are found by prefix and latest from below, and damaged ones are rows", "[runs]") {
  testing::ScopedTempDir dir("runs");
  const std::string runs = dir.path() + "/.flowrun/runs";
  const std::string a = "demo-20261201-100000-aaaaaa", b = "demo-20261201-110000-bbbbbb";
  write_text(runs + "/" + a + "/run.json", run_json(a, "finished", "0", R"("train": "succeeded")"));
  write_text(runs + "/" + b + "/run.json",
             run_json(b, "finished", "3", R"("prep": "succeeded", "train": "failed")"));
  write_text(runs + "/broken/run.json", R"({"format": 1, "run_id": "bro)");
  fs::create_directories(runs + "/empty");
  REQUIRE(replace_symlink(runs + "/latest", b) == 0);
  REQUIRE(replace_symlink(runs + "/latest", a) == 0);  // replaced, not refused
  fs::create_directories(dir.path() + "/sub/deeper");
  const std::string below = dir.path() + "/sub/deeper";

  CHECK(run_ids_in(runs) == std::vector<std::string>{"broken", a, b, "empty"});
  CHECK(locate_run("latest", below) == runs + "/" + a);
  CHECK(locate_run("demo-20261201-11", below) == runs + "/" + b);
  CHECK(locate_run(runs + "/latest", below) == runs + "/" + a);
  try {
    locate_run("demo", below);
    FAIL("an ambiguous prefix was taken");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) ==
          "'demo' names 2 runs in " + runs + ":\n  " + a + "\n  " + b + "\nGive more of the id.");
  }
  try {
    locate_run("nothing", below);
    FAIL("a run that is not there was found");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).starts_with("no run 'nothing' in " + runs));
  }

  const RunRow failed = read_run_row(runs + "/" + b);
  CHECK(
      (failed.state == "failed" && failed.exit_code == 3 && failed.step == "train" && failed.flow == "demo"));
  CHECK(read_run_row(runs + "/broken").problem == "run.json is not JSON (cut short or damaged)");
  CHECK(read_run_row(runs + "/broken").state == "damaged");
  CHECK(read_run_row(runs + "/empty").problem.starts_with("no run.json"));
  write_text(runs + "/other/run.json", R"({"format": 1})");
  CHECK(read_run_row(runs + "/other").problem == "run.json: not a run record (no \"run_id\" or \"run_dir\")");
  // "running" in run.json, but no flowrun holds its lock: it was killed.
  write_text(runs + "/killed/run.json", run_json("killed", "running", "null", R"("train": "running")"));
  CHECK(read_run_row(runs + "/killed").state == "killed");
}

TEST_CASE("the runs table keeps its columns aligned within 100 columns whatever the ids' lengths", "[runs]") {
  const std::string long_id = "a-flow-with-a-long-name-for-its-runs-20261201-100000-aaaaaa";  // 59
  const std::string longest(200, 'x');
  for (const std::string& id : {std::string(44, 'y'), std::string(45, 'y'), long_id, longest}) {
    RunRow short_row{"s", "demo", "succeeded", 0, 100 * kSecond, 112 * kSecond, "", "", 100 * kSecond};
    RunRow long_row{id, "demo", "failed", 3, 200 * kSecond, 203 * kSecond, "train", "", 200 * kSecond};
    RunRow damaged{id + "-d", "", "damaged", std::nullopt, 0, 0, "", "no run.json", 300 * kSecond};
    const std::string table = format_runs_table({short_row, long_row, damaged}, 330 * kSecond);
    INFO(table);
    std::vector<std::string> lines;
    for (std::size_t pos = 0; pos < table.size();) {
      const std::size_t nl = table.find('\n', pos);
      lines.push_back(table.substr(pos, nl - pos));
      pos = nl + 1;
    }
    // The flow and state columns start where the header's do, on every row.
    const std::size_t flow = lines[0].find("flow"), state = lines[0].find("state");
    std::size_t rows = 0;
    for (std::size_t i = 1; i < lines.size(); ++i) {
      if (lines[i] == id || lines[i] == id + "-d") {  // a long id on a line of its own, its row below
        REQUIRE(i + 1 < lines.size());
        CHECK(lines[i + 1].find_first_not_of(' ') == flow);
        continue;
      }
      ++rows;
      CHECK(lines[i].size() <= 100);
      CHECK(lines[i][flow - 1] == ' ');
      const std::size_t at = lines[i].find_first_not_of(' ', flow);
      CHECK(at == flow);
      CHECK(lines[i].substr(state).starts_with(
          std::vector<std::string>{"succeeded", "failed", "damaged"}[rows - 1]));
    }
    CHECK(rows == 3);
    CHECK(lines[0].size() <= 100);
  }
}
