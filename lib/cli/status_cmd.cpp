// flowrun status RUN: each step's and rank's state, the node it runs on and
// how long since it last wrote, read from the run directory while the run goes
// on (from another terminal) or after it ended. Nothing is asked of the
// flowrun that runs it: run.json says each step's state (rewritten as each
// step starts and ends), plan.json each rank's node, the log files' times the
// last output, a rank's end.json how it ended (written the moment flowrun
// learns it, while its peers may still run), a step's results.json how each
// rank ended once the step did.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <fmt/format.h>
#include <iostream>
#include <map>

#include "flowrun/clock.h"
#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/flow.h"
#include "flowrun/json.h"
#include "flowrun/run_page.h"
#include "flowrun/util.h"
#include "flowrun/wait_shares.h"

#include "commands.h"
#include "runs.h"

namespace flowrun {

namespace {

struct StatusRow {
  std::string step, rank, state, node, last, waits;
};

// What the samples of a step's ranks found (forensics' sample): each rank's
// share of samples waiting in a collective, "68% of 41", by rank; and the
// slow ranks' line when the evidence names them. From shares.json while the
// step runs (the agent or flowrun rewrites it every few seconds), from
// results.json after.
struct StepShares {
  std::map<int, std::string> waits;
  std::string slow;
};
StepShares step_shares(const std::string& step_dir, const std::string& step, bool running) {
  StepShares out;
  const auto text = try_read_file(step_dir + (running ? "/shares.json" : "/results.json"), 16 << 20);
  const auto doc = text ? parse_json(*text) : std::nullopt;
  const Json* shares = doc ? (running ? &*doc : find(*doc, "wait_shares")) : nullptr;
  const Json* ranks = shares != nullptr && shares->is_object() ? find(*shares, "ranks") : nullptr;
  if (ranks == nullptr || !ranks->is_array()) return out;
  for (const auto& r : *ranks) {
    const auto rank = find_int(r, "rank"), samples = find_int(r, "samples"), waits = find_int(r, "waits");
    if (!rank || !samples || !waits || *samples <= 0) continue;
    // The share as flowrun estimated it (its blocked time counted); an older
    // record has only the samples.
    const Json* estimated = find(r, "wait_share");
    const double share = estimated != nullptr && estimated->is_number()
                             ? estimated->get<double>()
                             : static_cast<double>(*waits) / static_cast<double>(*samples);
    out.waits[static_cast<int>(*rank)] = fmt::format("{} of {}", share_percent(share), *samples);
  }
  const Json* slow = find(*shares, "slow");
  const Json* slow_ranks = slow != nullptr && slow->is_object() ? find(*slow, "ranks") : nullptr;
  if (slow_ranks != nullptr && slow_ranks->is_array()) {
    SlowRanks named;
    for (const auto& r : *slow_ranks) {
      if (r.is_number_integer()) named.ranks.push_back(r.get<int>());
    }
    const Json* slow_share = find(*slow, "slow_share");
    const Json* others_share = find(*slow, "others_share");
    if (slow_share != nullptr && slow_share->is_number()) named.slow_share = slow_share->get<double>();
    if (others_share != nullptr && others_share->is_number())
      named.others_share = others_share->get<double>();
    if (const std::string* frame = find_string(*slow, "frame")) named.frame = printable(*frame);
    if (!named.ranks.empty()) out.slow = slow_ranks_line(step, named, nullptr) + "\n";
  }
  return out;
}

// How a rank ended, as a worker of results.json or end.json says it:
// "exited 0", "exited 3", "SIGKILL", "lost", ...
struct RankEnd {
  int rank = -1;
  std::string state, node;
};
RankEnd rank_end(const Json& w) {
  const std::string* status = find_string(w, "status");
  RankEnd end;
  end.rank = find_int(w, "rank").value_or(-1);
  end.state = status != nullptr ? *status : "?";
  if (end.state == "exited") {
    const auto code = find_int(w, "exit_code");
    end.state = code ? fmt::format("exited {}", *code) : "exited";
  } else if (end.state == "signaled") {
    if (const std::string* sig = find_string(w, "signal")) end.state = *sig;
  }
  if (const std::string* node = find_string(w, "node")) end.node = *node;
  return end;
}

// Each rank's end, by rank, from a finished step's results.json.
std::map<int, RankEnd> rank_ends(const std::string& step_dir) {
  std::map<int, RankEnd> ends;
  const auto text = try_read_file(step_dir + "/results.json", 16 << 20);
  const auto doc = text ? parse_json(*text) : std::nullopt;
  const Json* ranks = doc ? find(*doc, "ranks") : nullptr;
  if (ranks == nullptr || !ranks->is_array()) return ends;
  for (const auto& w : *ranks) {
    RankEnd end = rank_end(w);
    ends[end.rank] = std::move(end);
  }
  return ends;
}

// The end of a rank of a running step, from its end.json; nullopt while it
// runs (or when the file is not one flowrun wrote for this rank).
std::optional<RankEnd> live_rank_end(const std::string& rank_dir, int rank) {
  const auto text = try_read_file(rank_dir + "/end.json", 1 << 20);
  const auto doc = text ? parse_json(*text) : std::nullopt;
  const Json* worker = doc ? find(*doc, "worker") : nullptr;
  if (worker == nullptr || !worker->is_object()) return std::nullopt;
  RankEnd end = rank_end(*worker);
  if (end.rank != rank) return std::nullopt;
  return end;
}

// "0.4s ago" since the later of the two logs in `dir` last changed; "-"
// when neither exists yet.
std::string last_output(const std::string& dir, std::int64_t now) {
  const std::int64_t t = std::max(mtime_unix_ns(dir + "/stdout.log"), mtime_unix_ns(dir + "/stderr.log"));
  return t == 0 ? "-" : format_span(std::max<std::int64_t>(now - t, 0)) + " ago";
}

// `slow`: the lines naming a step's slow ranks, where the samples do.
std::vector<StatusRow> status_rows(const std::string& run_dir, const RunRecord& record, std::int64_t now,
                                   std::string& slow) {
  std::vector<StatusRow> rows;
  for (const auto& [step, state] : record.steps) {
    const std::string step_dir = run_dir + "/" + step;
    const bool ran = state == "running" || state == "succeeded" || state == "failed";
    const PlannedStep planned = ran ? planned_step(run_dir, step) : PlannedStep{};
    if (!ran || !planned.parallel) {
      rows.push_back(
          {step, "-", state, ran ? record.host : "-", ran ? last_output(step_dir, now) : "-", "-"});
      continue;
    }
    const auto ends = state == "running" ? std::map<int, RankEnd>{} : rank_ends(step_dir);
    const StepShares shares = step_shares(step_dir, step, state == "running");
    slow += shares.slow;
    for (std::size_t i = 0; i < planned.ranks.size(); ++i) {
      const int rank = planned.ranks[i];
      const std::string dir = fmt::format("{}/rank{}", step_dir, rank);
      StatusRow row{step, std::to_string(rank), "", planned.hosts[i], last_output(dir, now), "-"};
      if (auto found = shares.waits.find(rank); found != shares.waits.end()) row.waits = found->second;
      if (row.node.empty()) row.node = planned.nodes[i] >= 0 ? fmt::format("node{}", planned.nodes[i]) : "-";
      std::optional<RankEnd> end;
      if (auto found = ends.find(rank); found != ends.end()) {
        end = found->second;
      } else if (state == "running") {
        end = live_rank_end(dir, rank);
      }
      if (end) {
        row.state = end->state;
        if (!end->node.empty()) row.node = end->node;
      } else {
        // Live: what it has done so far is in its log files.
        row.state = state == "running" ? (row.last == "-" ? "starting" : "running") : state;
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

// Whether a retry may help, as the first failed step's results.json says
// ("a retry may help (infrastructure): ..."); "" when no step failed.
std::string retry_advice_of(const std::string& run_dir, const RunRecord& record) {
  for (const auto& [step, state] : record.steps) {
    if (state != "failed") continue;
    const auto text = try_read_file(run_dir + "/" + step + "/results.json", 16 << 20);
    const auto doc = text ? parse_json(*text) : std::nullopt;
    const Json* may_help = doc ? find(*doc, "retry_may_help") : nullptr;
    const std::string* klass = doc ? find_string(*doc, "failure_class") : nullptr;
    const std::string* why = doc ? find_string(*doc, "retry_why") : nullptr;
    if (may_help == nullptr || !may_help->is_boolean() || klass == nullptr || why == nullptr) return "";
    return fmt::format("a retry {} ({}): {}\n", may_help->get<bool>() ? "may help" : "will not help",
                       printable(*klass), printable(*why));
  }
  return "";
}

// Where the run's page is (flowrun report), or the command that writes it.
std::string report_line(const std::string& run_dir, const RunRecord& record) {
  const std::string page = run_dir + "/" + kRunReportFile;
  if (mtime_unix_ns(page) != 0)
    return fmt::format("page: {} (flowrun report {} writes it anew)\n", page, record.run_id);
  return fmt::format("page: flowrun report {} writes the run as one HTML page\n", record.run_id);
}

std::string format_status(const std::string& run_dir, const RunRecord& record, std::int64_t now) {
  const RunRow run = read_run_row(run_dir);
  std::string head = fmt::format("run {} (flow {}): {}", record.run_id, record.flow, run.state);
  if (record.exit_code) head += fmt::format(", exit {}", *record.exit_code);
  if (run.state == "running") head += fmt::format(", flowrun pid {} on {}", record.pid, record.host);
  if (run.state == "killed")
    head += fmt::format(" (flowrun pid {} on {} ended without closing run.json)", record.pid, record.host);
  const std::int64_t end = record.end_unix_ns > 0 ? record.end_unix_ns : now;
  if (record.start_unix_ns > 0)
    head += fmt::format(", {} since it started", format_span(end - record.start_unix_ns));
  if (!record.error.empty()) head += "\nflowrun: error: " + record.error;
  std::string slow;
  std::vector<StatusRow> rows = status_rows(run_dir, record, now, slow);
  // The samples' column, where a step's ranks were sampled.
  const bool sampled =
      std::any_of(rows.begin(), rows.end(), [](const StatusRow& r) { return r.waits != "-"; });
  rows.insert(rows.begin(),
              StatusRow{"step", "rank", "state", "node", "last output", "waiting in collectives"});
  std::size_t w[5] = {0, 0, 0, 0, 0};
  for (const auto& r : rows) {
    w[0] = std::max(w[0], r.step.size());
    w[1] = std::max(w[1], r.rank.size());
    w[2] = std::max(w[2], r.state.size());
    w[3] = std::max(w[3], r.node.size());
    w[4] = std::max(w[4], r.last.size());
  }
  std::string out = head + "\n";
  for (const auto& r : rows) {
    std::string row = fmt::format("  {:<{}}  {:<{}}  {:<{}}  {:<{}}  ", printable(r.step), w[0], r.rank, w[1],
                                  r.state, w[2], printable(r.node), w[3]);
    row += sampled ? fmt::format("{:<{}}  {}", r.last, w[4], r.waits) : r.last;
    out += row + "\n";
  }
  return out + slow + retry_advice_of(run_dir, record) + report_line(run_dir, record);
}

const char* kStatusFooter =
    R"(RUN: a run id, a unique prefix of one, latest (the newest run), or a run directory.
For a run in progress, from any terminal: each step's state; each rank of a parallel step that
runs, "starting" until it first writes, then "running", with the node it runs on and how long
since it last wrote to its logs (a rank silent for long may be stuck: flowrun logs RUN --rank R).
How a rank ended (exited N, SIGNAME, lost) shows as soon as it ends, while its peers still run.
After the run: the final states, and for a failed run whether a retry may help (docs/cli.md).
Where flowrun samples the ranks' stacks (forensics: sample), a last column gives each rank's share
of samples waiting in a collective, and a line names the slow rank once the samples do.

Example:
  flowrun status latest
  run q-20261202-063308-3fa2c1 (flow q): running, flowrun pid 4242 on host-a, 12s since it started
    step   rank  state      node    last output
    train  0     running    host-a  0.4s ago
    train  1     running    host-a  3.1s ago
    eval   -     pending    -       -

Exit codes: 0 shown, 2 no such run. See docs/cli.md.)";

}  // namespace

int cmd_status(int argc, char** argv) {
  std::string run;
  CLI::App app{"Show a run's steps and ranks: state, node, last output; live or finished", "flowrun status"};
  add_run_argument(app, run);
  app.footer(kStatusFooter);
  if (const auto done = parse_subcommand(app, "status", argc, argv)) return *done;
  return report_errors([&]() -> int {
    const std::string run_dir = locate_run(run, current_directory());
    std::cout << format_status(run_dir, read_record_of(run_dir), unix_now_ns());
    return kExitOk;
  });
}

}  // namespace flowrun
