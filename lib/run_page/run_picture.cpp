// Reading a run directory into a RunPicture: everything the page shows is
// already on disk (docs/cli.md "run directory"): run.json (each step's state),
// plan.json (the ranks' nodes, the plan's why, the outputs), each step's
// results.json (every attempt's workers with start, end and role, stacks,
// restarts, replaced and dropped nodes, node checks), and while a step runs,
// each rank's end.json, written the moment it ends.
#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fmt/format.h>
#include <map>

#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/json.h"
#include "flowrun/run_page.h"

namespace flowrun {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxRecord = 64 << 20;  // a results.json of 1,024 ranks x many attempts
constexpr std::size_t kTailBytes = 8 << 10;   // enough for kStderrLines lines

std::optional<Json> read_json(const std::string& path) {
  const auto text = try_read_file(path, kMaxRecord);
  return text ? parse_json(*text) : std::nullopt;
}

std::string string_of(const Json& object, std::string_view key) {
  const std::string* s = find_string(object, key);
  return s != nullptr ? *s : "";
}

std::vector<std::string> strings_of(const Json& object, std::string_view key) {
  std::vector<std::string> out;
  const Json* list = find(object, key);
  if (list == nullptr || !list->is_array()) return out;
  for (const auto& item : *list)
    if (item.is_string()) out.push_back(item.get<std::string>());
  return out;
}

const Json& array_of(const Json& object, std::string_view key) {
  static const Json empty = Json::array();
  const Json* list = find(object, key);
  return list != nullptr && list->is_array() ? *list : empty;
}

// "2026-12-05T11:49:23.585Z", as flowrun writes every time, in unix ns; 0
// for anything else (null, a missing key).
std::int64_t time_of(const Json& object, std::string_view key) {
  const std::string* s = find_string(object, key);
  std::tm tm{};
  int ms = 0;
  if (s == nullptr || std::sscanf(s->c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon,
                                  &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7)
    return 0;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<std::int64_t>(timegm(&tm)) * 1'000'000'000 + std::int64_t{ms} * 1'000'000;
}

// The last kTailBytes of a log that may be gigabytes long, and that a rank
// may have replaced with a FIFO or a device: read only as a regular file.
std::string tail_of(const std::string& path) {
  // One byte more than kept: the byte before the window says whether its
  // first line is whole (it follows a '\n') or cut (dropped).
  std::string text = try_read_file_tail(path, kTailBytes + 1).value_or("");
  if (text.size() > kTailBytes) {
    const bool whole = text.front() == '\n';
    text.erase(0, 1);
    if (!whole) {
      const auto nl = text.find('\n');
      text.erase(0, nl == std::string::npos ? text.size() : nl + 1);
    }
  }
  return text;
}

BarEnd end_of(const std::string& status, const std::string& role) {
  if (status == "running" || status == "not_started") return BarEnd::running;
  if (status == "lost") return BarEnd::lost;
  if (role == "culprit") return BarEnd::culprit;
  if (role == "failed_after") return BarEnd::failed;
  if (role == "victim") return BarEnd::stopped;
  return BarEnd::ok;
}

std::string how_of(const Json& w, const std::string& status) {
  if (status == "exited") {
    const auto code = find_int(w, "exit_code");
    return code ? fmt::format("exited {}", *code) : "exited";
  }
  if (status == "signaled") return string_of(w, "signal").empty() ? "signaled" : string_of(w, "signal");
  if (status == "spawn_failed") return "could not start: " + string_of(w, "spawn_error");
  if (status == "lost") return "lost with its node";
  if (status == "not_started") return "did not start";
  return status.empty() ? "?" : status;
}

// A rank's bar from a worker of results.json or end.json. `attempt_dir`:
// where a restarted attempt's logs were kept (rankR/attemptN), "" for the
// last attempt, whose logs are where the worker says.
RankBar bar_of(const Json& w, const std::string& planned_host, const std::string& kept_dir) {
  RankBar bar;
  const std::string status = string_of(w, "status");
  bar.rank = find_int(w, "rank").value_or(-1);
  bar.node = string_of(w, "node").empty() ? planned_host : string_of(w, "node");
  bar.start_ns = time_of(w, "start");
  bar.end_ns = time_of(w, "end");
  bar.end = end_of(status, string_of(w, "role"));
  bar.culprit = string_of(w, "role") == "culprit";
  bar.how = how_of(w, status);
  const Json* stalled = find(w, "stalled");
  bar.stalled = stalled != nullptr && stalled->is_boolean() && stalled->get<bool>();
  bar.stdout_log = string_of(w, "stdout_log");
  bar.stderr_log = string_of(w, "stderr_log");
  if (!kept_dir.empty() && fs::exists(kept_dir + "/stderr.log")) {
    bar.stdout_log = kept_dir + "/stdout.log";
    bar.stderr_log = kept_dir + "/stderr.log";
  }
  if (!bar.stderr_log.empty()) bar.last_stderr = last_lines(tail_of(bar.stderr_log), kStderrLines);
  return bar;
}

// What plan.json says of a step: kind, why, outputs, and each rank's host.
struct PlanOfStep {
  bool parallel = false;
  std::vector<std::string> why, outputs;
  std::map<int, std::string> hosts;  // rank -> host
};

std::map<std::string, PlanOfStep> read_plan(const std::string& run_dir) {
  std::map<std::string, PlanOfStep> plans;
  const auto doc = read_json(run_dir + "/plan.json");
  if (!doc) return plans;
  for (const auto& s : array_of(*doc, "steps")) {
    PlanOfStep& p = plans[string_of(s, "name")];
    p.parallel = string_of(s, "kind") == "parallel";
    p.why = strings_of(s, "why");
    p.outputs = strings_of(s, "outputs");
    const Json& nodes = array_of(s, "nodes");
    for (const auto& r : array_of(s, "ranks")) {
      const auto rank = find_int(r, "rank");
      const auto node = find_int(r, "node");
      if (!rank || !node || *node < 0 || static_cast<std::size_t>(*node) >= nodes.size()) continue;
      p.hosts[*rank] = string_of(nodes[static_cast<std::size_t>(*node)], "host");
    }
  }
  return plans;
}

std::string host_of(const PlanOfStep& plan, int rank, const std::string& fallback) {
  const auto found = plan.hosts.find(rank);
  return found != plan.hosts.end() && !found->second.empty() ? found->second : fallback;
}

std::string exception_of(const Json& attempt) {
  const Json* e = find(attempt, "exception");
  if (e == nullptr || !e->is_object()) return "";
  std::string text = string_of(*e, "type");
  if (!string_of(*e, "message").empty()) text += ": " + string_of(*e, "message");
  if (!string_of(*e, "file").empty())
    text += fmt::format(" ({}:{})", string_of(*e, "file"), find_int(*e, "line").value_or(0));
  return text;
}

void read_stacks(const Json& attempt, AttemptPicture& out) {
  const Json* stacks = find(attempt, "stacks");
  if (stacks == nullptr || !stacks->is_object()) return;
  out.stacks_source = string_of(*stacks, "source");
  for (const auto& g : array_of(*stacks, "groups")) {
    StackPicture group;
    for (const auto& r : array_of(g, "ranks"))
      if (r.is_number_integer()) group.ranks.push_back(r.get<int>());
    group.where = string_of(g, "where");
    group.missing = string_of(g, "missing");
    out.stacks.push_back(std::move(group));
  }
}

void read_slow_ranks(const Json& attempt, AttemptPicture& out) {
  const Json* shares = find(attempt, "wait_shares");
  const Json* slow = shares != nullptr && shares->is_object() ? find(*shares, "slow") : nullptr;
  if (slow == nullptr || !slow->is_object()) return;
  for (const auto& r : array_of(*slow, "ranks"))
    if (r.is_number_integer()) out.slow_ranks.push_back(r.get<int>());
  const auto percent = [&](const char* key) {
    const Json* share = find(*slow, key);
    return share != nullptr && share->is_number() ? fmt::format("{:.0f}%", share->get<double>() * 100) : "?";
  };
  out.slow_why = fmt::format("waiting in collectives {} of the time, the other ranks {}",
                             percent("slow_share"), percent("others_share"));
  if (!string_of(*slow, "frame").empty()) out.slow_why += "; hottest frame " + string_of(*slow, "frame");
}

AttemptPicture attempt_of(const Json& a, const PlanOfStep& plan, const StepPicture& step,
                          const std::string& host, bool last) {
  AttemptPicture out;
  out.restart_count = find_int(a, "restart_count").value_or(0);
  out.outcome = string_of(a, "outcome");
  out.cause = string_of(a, "cause");
  out.exception = exception_of(a);
  out.restart_reason = string_of(a, "restart_reason");
  const Json* restarted = find(a, "restarted");
  out.restarted = restarted != nullptr && restarted->is_boolean() && restarted->get<bool>();
  out.culprit_rank = find_int(a, "culprit_rank");
  out.start_ns = time_of(a, "start");
  out.end_ns = time_of(a, "end");
  out.world_size = find_int(a, "world_size").value_or(0);
  for (const auto& r : array_of(a, "replaced_nodes"))
    out.replaced.push_back(fmt::format("node {}: {} lost, spare {} seated in its place",
                                       find_int(r, "node_rank").value_or(-1), string_of(r, "lost"),
                                       string_of(r, "spare")));
  out.dropped_nodes = strings_of(a, "dropped_nodes");
  out.added_nodes = strings_of(a, "added_nodes");
  read_stacks(a, out);
  read_slow_ranks(a, out);
  for (const auto& w : array_of(a, "workers")) {
    const int rank = find_int(w, "rank").value_or(-1);
    const std::string kept =
        last || rank < 0 ? "" : fmt::format("{}/rank{}/attempt{}", step.dir, rank, out.restart_count);
    out.bars.push_back(bar_of(w, host_of(plan, rank, host), kept));
  }
  std::sort(out.bars.begin(), out.bars.end(),
            [](const RankBar& x, const RankBar& y) { return x.rank < y.rank; });
  return out;
}

void read_results(const Json& doc, const PlanOfStep& plan, const std::string& host, StepPicture& step) {
  step.outcome = string_of(doc, "outcome");
  step.exit_code = find_int(doc, "exit_code");
  step.start_ns = time_of(doc, "start");
  step.end_ns = time_of(doc, "end");
  step.notes = strings_of(doc, "notes");
  const Json* may_help = find(doc, "retry_may_help");
  if (!string_of(doc, "retry_why").empty() && may_help != nullptr && may_help->is_boolean())
    step.retry = fmt::format("a retry {} ({}): {}", may_help->get<bool>() ? "may help" : "will not help",
                             string_of(doc, "failure_class"), string_of(doc, "retry_why"));
  for (const auto& v : array_of(doc, "node_checks")) {
    NodeCheckPicture check{string_of(v, "node"), true, ""};
    const Json* ok = find(v, "ok");
    check.ok = ok == nullptr || !ok->is_boolean() || ok->get<bool>();
    for (const auto& c : array_of(v, "checks")) {
      const Json* c_ok = find(c, "ok");
      if (c_ok != nullptr && c_ok->is_boolean() && !c_ok->get<bool>())
        check.detail +=
            (check.detail.empty() ? "" : "; ") + string_of(c, "name") + ": " + string_of(c, "detail");
    }
    step.node_checks.push_back(std::move(check));
  }
  step.excluded_nodes = strings_of(doc, "excluded_nodes");
  const Json& attempts = array_of(doc, "attempts");
  for (std::size_t i = 0; i < attempts.size(); ++i)
    step.attempts.push_back(attempt_of(attempts[i], plan, step, host, i + 1 == attempts.size()));
}

// A step still running has no results.json: its ranks' end.json say how the
// ended ones ended; the others run still. The attempt's number is run.json's
// count of attempts started.
void read_live_step(const PlanOfStep& plan, const std::string& host, int attempts_started,
                    StepPicture& step) {
  AttemptPicture attempt;
  attempt.restart_count = std::max(attempts_started - 1, 0);
  attempt.outcome = "running";
  attempt.world_size = static_cast<int>(plan.hosts.size());
  for (const auto& [rank, rank_host] : plan.hosts) {
    const std::string dir = fmt::format("{}/rank{}", step.dir, rank);
    const auto end = read_json(dir + "/end.json");
    const Json* worker = end ? find(*end, "worker") : nullptr;
    RankBar bar;
    if (worker != nullptr && worker->is_object() && find_int(*worker, "rank") == rank) {
      bar = bar_of(*worker, rank_host.empty() ? host : rank_host, "");
      if (bar.end == BarEnd::ok && bar.how != "exited 0")
        bar.end = BarEnd::failed;  // roles are not decided yet
    } else {
      bar.rank = rank;
      bar.node = rank_host.empty() ? host : rank_host;
      bar.how = "running";
      bar.stdout_log = dir + "/stdout.log";
      bar.stderr_log = dir + "/stderr.log";
      bar.last_stderr = last_lines(tail_of(bar.stderr_log), kStderrLines);
    }
    attempt.bars.push_back(std::move(bar));
  }
  step.attempts.push_back(std::move(attempt));
}

std::vector<std::string> collected_in(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::vector<std::string> last_lines(const std::string& text, std::size_t lines) {
  std::vector<std::string> out;
  std::size_t end = text.size();
  if (end > 0 && text[end - 1] == '\n') --end;
  while (end > 0 && out.size() < lines) {
    const std::size_t nl = text.rfind('\n', end - 1);
    const std::size_t from = nl == std::string::npos ? 0 : nl + 1;
    std::string line = text.substr(from, end - from);
    if (line.size() > kStderrLineBytes) line = line.substr(0, kStderrLineBytes) + "...";
    out.push_back(std::move(line));
    if (nl == std::string::npos) break;
    end = nl;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

RunPicture read_run_picture(const std::string& run_dir, const std::string& state, std::int64_t now_ns) {
  const auto run = read_json(run_dir + "/run.json");
  if (!run || !run->is_object())
    throw Error(fmt::format("{}/run.json: cannot read the run's record (is this a run directory?)", run_dir));
  RunPicture picture;
  picture.run_id = string_of(*run, "run_id");
  picture.flow = string_of(*run, "flow");
  picture.run_dir = run_dir;
  picture.host = string_of(*run, "host");
  picture.state = state;
  picture.exit_code = find_int(*run, "exit_code");
  picture.error = string_of(*run, "error");
  picture.start_ns = time_of(*run, "start");
  picture.end_ns = time_of(*run, "end");
  picture.taken_ns = now_ns;
  const auto plans = read_plan(run_dir);
  const Json* steps = find(*run, "steps");
  const Json* started = find(*run, "attempts_started");
  if (steps == nullptr || !steps->is_object())
    throw Error(fmt::format("{}/run.json: no \"steps\" object: not a run record of this flowrun", run_dir));
  for (auto it = steps->begin(); it != steps->end(); ++it) {
    const std::string name = it.key();
    StepPicture step;
    step.name = name;
    step.state = it.value().is_string() ? it.value().get<std::string>() : "?";
    step.dir = run_dir + "/" + name;
    const auto plan_found = plans.find(name);
    const PlanOfStep plan = plan_found != plans.end() ? plan_found->second : PlanOfStep{};
    step.parallel = plan.parallel;
    step.why = plan.why;
    step.outputs = plan.outputs;
    step.collected = collected_in(step.dir + "/outputs");
    if (const auto results = read_json(step.dir + "/results.json"); results && results->is_object()) {
      read_results(*results, plan, picture.host, step);
    } else if (step.state == "running" && plan.parallel) {
      const auto n = started != nullptr ? find_int(*started, name) : std::nullopt;
      read_live_step(plan, picture.host, n.value_or(1), step);
    }
    picture.steps.push_back(std::move(step));
  }
  return picture;
}

}  // namespace flowrun
