#include "flowrun/result.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <csignal>
#include <ctime>
#include <fmt/format.h>
#include <map>

#include "flowrun/files.h"
#include "flowrun/json.h"
#include "flowrun/util.h"

namespace flowrun {

namespace {

using Kind = ExitStatus::Kind;

bool failed(const ExitStatus& s) {
  return !s.ok() && (s.kind == Kind::exited || s.kind == Kind::signaled || s.kind == Kind::spawn_failed ||
                     s.kind == Kind::lost);
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::not_started: return "not_started";
    case Kind::running: return "running";
    case Kind::exited: return "exited";
    case Kind::signaled: return "signaled";
    case Kind::spawn_failed: return "spawn_failed";
    case Kind::lost: return "lost";
  }
  return "unknown";
}

const char* role_name(Role role) {
  switch (role) {
    case Role::ok: return "ok";
    case Role::culprit: return "culprit";
    case Role::victim: return "victim";
    case Role::failed_after: return "failed_after";
  }
  return "unknown";
}

// How a rank that flowrun stopped ended: "exited" by itself inside its
// grace (its SIGTERM handler saved and returned: the teardown's success,
// whatever its code), "signaled" by the stop signal's default action (or
// another signal) inside its grace, "killed" by SIGKILL (the grace ran out,
// or a second Ctrl-C). nullptr for a rank flowrun did not stop, or one that
// never ran.
const char* teardown_name(const WorkerRecord& w) {
  if (w.role != Role::victim) return nullptr;
  if (w.status.kind == Kind::exited) return "exited";
  if (w.status.kind != Kind::signaled) return nullptr;
  return w.status.code == SIGKILL ? "killed" : "signaled";
}

const char* outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::succeeded: return "succeeded";
    case Outcome::failed: return "failed";
    case Outcome::timed_out: return "timed_out";
    case Outcome::interrupted: return "interrupted";
    case Outcome::stalled: return "stalled";
  }
  return "unknown";
}

// --- results.json ---------------------------------------------------------

// "2026-11-29T17:10:53.123Z"; the clock never reads before 1970 here.
std::string iso_time(std::int64_t unix_ns) {
  std::int64_t ms = unix_ns / 1'000'000;
  std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000);
}

Json time_or_null(std::int64_t unix_ns) { return unix_ns > 0 ? Json(iso_time(unix_ns)) : Json(); }

void span(Json& json, std::int64_t start_ns, std::int64_t end_ns) {
  json["start"] = time_or_null(start_ns);
  json["end"] = time_or_null(end_ns);
  json["duration_ms"] = start_ns > 0 && end_ns >= start_ns ? Json((end_ns - start_ns) / 1'000'000) : Json();
}

Json string_or_null(const std::string& text) { return text.empty() ? Json() : Json(text); }

std::optional<int> culprit_rank(const AttemptRecord& attempt) {
  if (!attempt.culprit) return std::nullopt;
  int rank = attempt.workers.at(static_cast<std::size_t>(*attempt.culprit)).rank;
  if (rank < 0) return std::nullopt;
  return rank;
}

Json int_or_null(std::optional<int> number) { return number ? Json(*number) : Json(); }

Json worker_json(const WorkerRecord& w) {
  const ExitStatus& s = w.status;
  Json json;
  json["rank"] = w.rank >= 0 ? Json(w.rank) : Json();
  json["local_rank"] = w.local_rank;
  json["pid"] = w.pid > 0 ? Json(w.pid) : Json();
  json["status"] = kind_name(s.kind);
  json["exit_code"] = s.kind == Kind::exited ? Json(s.code) : Json();
  json["signal"] = s.kind == Kind::signaled ? Json(signal_name(s.code)) : Json();
  json["spawn_error"] = s.kind == Kind::spawn_failed || s.kind == Kind::lost ? Json(s.spawn_error) : Json();
  json["shell_code"] = s.shell_code();
  json["role"] = role_name(w.role);
  const char* teardown = teardown_name(w);
  json["teardown"] = teardown != nullptr ? Json(teardown) : Json();
  span(json, w.start_unix_ns, w.end_unix_ns);
  json["peak_rss_kib"] = w.peak_rss_kib;
  json["stdout_log"] = string_or_null(w.stdout_log);
  json["stderr_log"] = string_or_null(w.stderr_log);
  json["error_file"] = string_or_null(w.error_file);
  json["node"] = string_or_null(w.node);
  json["silent_ms"] = w.silent_s ? Json(static_cast<std::int64_t>(std::llround(*w.silent_s * 1000))) : Json();
  json["suspended"] = w.suspended;
  json["stalled"] = w.stalled;
  json["nccl_trace"] = string_or_null(w.nccl_trace);
  return json;
}

Json exception_json(const std::optional<PythonException>& e) {
  if (!e) return Json();
  return {{"type", e->type},
          {"message", e->message},
          {"file", string_or_null(e->file)},
          {"line", e->file.empty() ? Json() : Json(e->line)}};
}

Json workers_json(const std::vector<WorkerRecord>& workers) {
  Json json = Json::array();
  for (const auto& w : workers) json.push_back(worker_json(w));
  return json;
}

Json stacks_json(const std::optional<StackReport>& stacks) {
  if (!stacks) return Json();
  Json json;
  json["source"] = stacks->source;
  Json& groups = json["groups"] = Json::array();
  for (const auto& g : stacks->groups) {
    Json group;
    group["ranks"] = g.ranks;
    group["where"] = string_or_null(g.where);
    group["missing"] = string_or_null(g.missing);
    groups.push_back(std::move(group));
  }
  return json;
}

// --- the report -----------------------------------------------------------

// Same rounding as the rest of flowrun's messages: "0.31 s", "42 s".
std::string seconds_text(double s) {
  if (s < 10) return fmt::format("{:.2f} s", s);
  return fmt::format("{:.0f} s", s);
}

// "rank 5", "ranks 0, 2-7".
std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (j - i >= 2) {
      parts.push_back(fmt::format("{}-{}", ranks[i], ranks[j]));
    } else {
      for (std::size_t k = i; k <= j; ++k) parts.push_back(std::to_string(ranks[k]));
    }
    i = j + 1;
  }
  return (ranks.size() == 1 ? "rank " : "ranks ") + join(parts, ", ");
}

// How long a rank was silent: "4.9 s" below a minute, then as a timeout
// ("1m30s", "3h2m5s").
std::string silence_text(double s) {
  if (s < 59.95) return fmt::format("{:.1f} s", s);
  return format_duration(static_cast<double>(std::llround(s)));
}

// "rank 1 (stopped) wrote nothing for 5.0 s, ranks 2, 3 on node2 for 5.1 s":
// `workers` grouped by node, state and silence (as shown), in rank order;
// `the_last` says "for the last 5.0 s". A plain step's process is "it".
std::string silence_list(const std::vector<const WorkerRecord*>& workers, bool the_last) {
  struct Group {
    std::vector<int> ranks;
    std::string node, silence;
    bool suspended = false;
  };
  std::vector<Group> groups;
  for (const WorkerRecord* w : workers) {
    const std::string silence = silence_text(w->silent_s.value_or(0));
    auto same = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return g.node == w->node && g.silence == silence && g.suspended == w->suspended;
    });
    if (same == groups.end() || w->rank < 0) {
      groups.push_back({{w->rank}, w->node, silence, w->suspended});
    } else {
      same->ranks.push_back(w->rank);
    }
  }
  std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
    return *std::min_element(a.ranks.begin(), a.ranks.end()) <
           *std::min_element(b.ranks.begin(), b.ranks.end());
  });
  std::vector<std::string> parts;
  for (const auto& g : groups) {
    std::string who = g.ranks.front() < 0 ? "it" : rank_list(g.ranks);
    if (!g.node.empty()) who += " on " + g.node;
    if (g.suspended) who += " (stopped)";
    parts.push_back(who + (parts.empty() ? " wrote nothing for " : " for ") + (the_last ? "the last " : "") +
                    g.silence);
  }
  return join(parts, ", ");
}

// The workers a timeout report names as looking hung: those silent the
// longest (within a second of it) and every suspended one.
std::vector<const WorkerRecord*> hung_looking(const AttemptRecord& attempt) {
  double longest = -1;
  for (const auto& w : attempt.workers) {
    if (w.silent_s) longest = std::max(longest, *w.silent_s);
  }
  std::vector<const WorkerRecord*> out;
  for (const auto& w : attempt.workers) {
    if (w.silent_s && (w.suspended || *w.silent_s >= longest - 1.0)) out.push_back(&w);
  }
  return out;
}

// How a worker ended, short, for lists: "exit code 1", "SIGABRT".
std::string short_status(const ExitStatus& s) {
  switch (s.kind) {
    case Kind::exited: return fmt::format("exit code {}", s.code);
    case Kind::signaled: return signal_name(s.code);
    case Kind::spawn_failed: return "could not start";
    case Kind::lost: return "node lost";
    case Kind::not_started: return "not started";
    case Kind::running: return "still running";
  }
  return "unknown";
}

// "rank 1 exited with code 3 after 0.31 s (pid 4242)"; no rank for a plain step.
std::string worker_headline(const WorkerRecord& w) {
  std::string out = w.rank >= 0 ? fmt::format("rank {}{} {}", w.rank, w.node.empty() ? "" : " on " + w.node,
                                              w.status.describe())
                                : w.status.describe();
  if (w.status.kind != Kind::exited && w.status.kind != Kind::signaled) return out;
  if (w.start_unix_ns > 0 && w.end_unix_ns >= w.start_unix_ns) {
    out += " after " + seconds_text(static_cast<double>(w.end_unix_ns - w.start_unix_ns) / 1e9);
  }
  if (w.pid > 0) out += fmt::format(" (pid {})", w.pid);
  return out;
}

// The lines of `text`, each as a terminal shows it: after its last '\r'.
std::vector<std::string> display_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t nl = text.find('\n', start);
    std::string line = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    start = nl == std::string::npos ? text.size() : nl + 1;
    while (!line.empty() && line.back() == '\r') line.pop_back();
    std::size_t cr = line.rfind('\r');
    if (cr != std::string::npos) line.erase(0, cr + 1);
    lines.push_back(std::move(line));
  }
  return lines;
}

void indented(std::string& out, const std::vector<std::string>& lines) {
  for (const auto& line : lines) out += line.empty() ? "\n" : "    " + line + "\n";
}

std::string trimmed(std::string_view s) {
  std::size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  std::size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

std::string dir_of(const std::string& path) {
  std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// <run_dir>/<step>: where a plain step's logs are, the parent of a rank's.
std::string log_dir(const StepRecord& record, const AttemptRecord& attempt) {
  for (const auto& w : attempt.workers) {
    const std::string& log = w.stderr_log.empty() ? w.stdout_log : w.stderr_log;
    if (log.empty()) continue;
    return record.parallel ? dir_of(dir_of(log)) : dir_of(log);
  }
  return "";
}

// "last 3 lines of its stderr (PATH):" and the lines; "its stderr was empty"
// when there are none and `say_empty`.
void stderr_tail(std::string& out, const WorkerRecord& w, bool say_empty) {
  std::string where = w.stderr_log.empty() ? "" : " (" + w.stderr_log + ")";
  std::vector<std::string> tail = display_lines(w.stderr_tail);
  if (tail.empty()) {
    if (say_empty) out += "flowrun:   its stderr was empty" + where + "\n";
    return;
  }
  out += tail.size() == 1 ? "flowrun:   last line of its stderr" + where + ":\n"
                          : fmt::format("flowrun:   last {} lines of its stderr{}:\n", tail.size(), where);
  indented(out, tail);
}

// The culprit's own output: OOM hint, stderr tail, error file traceback,
// Lightning hint (`workers`: the attempt's).
void culprit_details(std::string& out, const WorkerRecord& w, const std::string& error_file_text,
                     const std::vector<WorkerRecord>& workers) {
  if (w.status.kind == Kind::signaled && w.status.code == 9) {
    out +=
        "flowrun:   flowrun did not send that SIGKILL; it often comes from the kernel's out-of-memory killer";
    if (w.peak_rss_kib > 0)
      out += " (peak memory: " + format_bytes(static_cast<std::uint64_t>(w.peak_rss_kib) * 1024) + ")";
    out += "\n";
  }
  if (w.status.kind == Kind::spawn_failed || w.status.kind == Kind::lost) return;
  stderr_tail(out, w, true);
  if (auto traceback = parse_error_file(error_file_text)) {
    std::string shown = trimmed(*traceback);
    if (!shown.empty() && w.stderr_tail.find(shown) == std::string::npos) {
      out += "flowrun:   traceback from its error file" +
             (w.error_file.empty() ? "" : " (" + w.error_file + ")") + ":\n";
      indented(out, display_lines(shown));
    }
  }
  auto hint = lightning_devices_hint(w.stderr_tail, workers);
  if (!hint) hint = lightning_devices_hint(error_file_text, workers);
  if (hint) out += *hint + "\n";
  auto missing = missing_module_hint(w.stderr_tail, w);
  if (!missing) missing = missing_module_hint(error_file_text, w);
  if (missing) out += *missing + "\n";
}

// --- Lightning's devices * num_nodes error ---------------------------------

// Reads the digits at the start of `s` (at most 9) into `n` and drops them.
bool take_number(std::string_view& s, int& n) {
  std::size_t len = 0;
  n = 0;
  while (len < s.size() && len < 9 && s[len] >= '0' && s[len] <= '9') n = n * 10 + (s[len++] - '0');
  s.remove_prefix(len);
  return len > 0;
}

bool take(std::string_view& s, std::string_view word) {
  if (s.substr(0, word.size()) != word) return false;
  s.remove_prefix(word.size());
  return true;
}

// "1 node x 2 per node", "2 nodes x 3 per node".
std::string layout_text(int nodes, int per_node) {
  return fmt::format("{} node{} x {} per node", nodes, nodes == 1 ? "" : "s", per_node);
}

// "1 worker", "3 workers".
std::string workers_text(int n) { return fmt::format("{} worker{}", n, n == 1 ? "" : "s"); }

struct Groups {
  std::vector<int> victims;
  std::vector<int> killed;  // victims that only SIGKILL ended
  std::vector<int> succeeded;
  std::map<std::string, std::vector<int>> failed_after;  // by short status
};

Groups group_ranks(const AttemptRecord& attempt) {
  Groups g;
  for (const auto& w : attempt.workers) {
    switch (w.role) {
      case Role::victim:
        g.victims.push_back(w.rank);
        if (const char* t = teardown_name(w); t != nullptr && std::string_view(t) == "killed")
          g.killed.push_back(w.rank);
        break;
      case Role::ok: g.succeeded.push_back(w.rank); break;
      case Role::failed_after: g.failed_after[short_status(w.status)].push_back(w.rank); break;
      case Role::culprit: break;
    }
  }
  return g;
}

// What a rank that failed after the culprit left, as torchrun lists every
// failed rank: its end, then the traceback of its error file (`error_text`),
// or else the last line of its stderr. Nothing when it left neither.
void failed_after_details(std::string& out, const WorkerRecord& w, const std::string& error_text) {
  std::optional<std::string> traceback = parse_error_file(error_text);
  const std::string shown = traceback ? trimmed(*traceback) : std::string();
  if (!shown.empty()) {
    out += "flowrun:   " + worker_headline(w) + "; traceback from its error file" +
           (w.error_file.empty() ? "" : " (" + w.error_file + ")") + ":\n";
    indented(out, display_lines(shown));
    return;
  }
  std::vector<std::string> tail = display_lines(w.stderr_tail);
  while (!tail.empty() && trimmed(tail.back()).empty()) tail.pop_back();
  if (tail.empty()) return;
  out += "flowrun:   " + worker_headline(w) + "; last line of its stderr" +
         (w.stderr_log.empty() ? "" : " (" + w.stderr_log + ")") + ":\n";
  indented(out, {tail.back()});
}

// The lines after a parallel step's culprit: who else ended how, and what
// each rank that failed after it left (`error_texts`: the workers' error
// files, by index).
void other_ranks(std::string& out, const Groups& g, bool list_victims, const AttemptRecord& attempt,
                 const std::vector<std::string>& error_texts) {
  if (list_victims && !g.victims.empty())
    out += "flowrun:   stopped by flowrun: " + rank_list(g.victims) + "\n";
  if (list_victims && !g.killed.empty())
    out += "flowrun:   killed, SIGTERM did not end them in time: " + rank_list(g.killed) + "\n";
  if (!g.failed_after.empty()) {
    // Ordered by each group's lowest rank.
    std::vector<std::pair<std::vector<int>, std::string>> groups;
    for (const auto& [how, ranks] : g.failed_after) groups.emplace_back(ranks, how);
    std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
      return *std::min_element(a.first.begin(), a.first.end()) <
             *std::min_element(b.first.begin(), b.first.end());
    });
    std::vector<std::string> parts;
    for (const auto& [ranks, how] : groups) parts.push_back(rank_list(ranks) + " (" + how + ")");
    out += "flowrun:   failed after it: " + join(parts, ", ") + "\n";
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < attempt.workers.size(); ++i) {
      if (attempt.workers[i].role == Role::failed_after) order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return attempt.workers[a].rank < attempt.workers[b].rank;
    });
    for (std::size_t i : order)
      failed_after_details(out, attempt.workers[i], i < error_texts.size() ? error_texts[i] : std::string());
  }
  if (!g.succeeded.empty()) out += "flowrun:   had already succeeded: " + rank_list(g.succeeded) + "\n";
}

// "; flowrun stopped ranks 0-7" / "; flowrun stopped it (pid 42)" / "".
std::string stopped_clause(const StepRecord& record, const AttemptRecord& attempt, const Groups& g) {
  if (g.victims.empty()) return "";
  if (!record.parallel) {
    const WorkerRecord& w = attempt.workers.front();
    return w.pid > 0 ? fmt::format("; flowrun stopped it (pid {})", w.pid) : "; flowrun stopped it";
  }
  return "; flowrun stopped " + rank_list(g.victims);
}

void earlier_attempts(std::string& out, const StepRecord& record) {
  for (std::size_t i = 0; i + 1 < record.attempts.size(); ++i) {
    const AttemptRecord& a = record.attempts[i];
    std::string what = a.culprit ? worker_headline(a.workers.at(static_cast<std::size_t>(*a.culprit)))
                                 : std::string(outcome_name(a.outcome));
    out += fmt::format("flowrun:   before restart {}: {}\n", i + 1, what);
  }
}

}  // namespace

int ExitStatus::shell_code() const {
  switch (kind) {
    case Kind::exited: return code;
    case Kind::signaled: return 128 + code;
    case Kind::spawn_failed: return 127;
    default: return 1;
  }
}

std::string ExitStatus::describe() const {
  switch (kind) {
    case Kind::exited: return fmt::format("exited with code {}", code);
    case Kind::signaled: {
      std::string name = signal_name(code);
      if (name.rfind("SIG", 0) != 0) return "was killed by " + name;
      return fmt::format("was killed by signal {} ({})", code, name);
    }
    case Kind::spawn_failed:
      return spawn_error.empty() ? "could not start" : "could not start: " + spawn_error;
    case Kind::not_started: return "did not start";
    case Kind::running: return "is still running";
    case Kind::lost:
      return spawn_error.empty() ? "was lost with its node" : "was lost with its node: " + spawn_error;
  }
  return "ended";
}

std::string signal_name(int signal) {
  static const char* const kNames[] = {
      nullptr,     "SIGHUP",  "SIGINT",    "SIGQUIT", "SIGILL",   "SIGTRAP", "SIGABRT", "SIGBUS",
      "SIGFPE",    "SIGKILL", "SIGUSR1",   "SIGSEGV", "SIGUSR2",  "SIGPIPE", "SIGALRM", "SIGTERM",
      "SIGSTKFLT", "SIGCHLD", "SIGCONT",   "SIGSTOP", "SIGTSTP",  "SIGTTIN", "SIGTTOU", "SIGURG",
      "SIGXCPU",   "SIGXFSZ", "SIGVTALRM", "SIGPROF", "SIGWINCH", "SIGIO",   "SIGPWR",  "SIGSYS",
  };
  if (signal >= 1 && signal < static_cast<int>(std::size(kNames))) return kNames[signal];
  return fmt::format("signal {}", signal);
}

void assign_roles(AttemptRecord& attempt, const std::vector<int>& stopped) {
  auto& workers = attempt.workers;
  std::vector<bool> was_stopped(workers.size(), false);
  for (int i : stopped) {
    if (i >= 0 && static_cast<std::size_t>(i) < workers.size())
      was_stopped[static_cast<std::size_t>(i)] = true;
  }
  attempt.culprit.reset();
  for (std::size_t i = 0; i < workers.size(); ++i) {
    if (was_stopped[i] || !failed(workers[i].status)) continue;
    if (attempt.culprit) {
      const WorkerRecord& best = workers[static_cast<std::size_t>(*attempt.culprit)];
      if (std::pair(workers[i].end_unix_ns, workers[i].rank) >= std::pair(best.end_unix_ns, best.rank))
        continue;
    }
    attempt.culprit = static_cast<int>(i);
  }
  const WorkerRecord* culprit =
      attempt.culprit ? &workers[static_cast<std::size_t>(*attempt.culprit)] : nullptr;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    WorkerRecord& w = workers[i];
    if (attempt.culprit && static_cast<std::size_t>(*attempt.culprit) == i) {
      w.role = Role::culprit;
    } else if (was_stopped[i]) {
      bool done_before = w.status.ok() && culprit && w.end_unix_ns <= culprit->end_unix_ns;
      w.role = done_before ? Role::ok : Role::victim;
    } else if (failed(w.status)) {
      w.role = Role::failed_after;
    } else if (w.status.ok()) {
      w.role = Role::ok;
    } else {
      w.role = Role::victim;
    }
  }
}

void write_rank_end(const std::string& path, const WorkerRecord& w) {
  if (path.empty()) return;
  Json doc;
  doc["format"] = 1;
  doc["worker"] = worker_json(w);
  (void)try_write_file(path, to_document(doc));
}

std::string format_results_json(const StepRecord& record) {
  Json json;
  json["format"] = 1;
  json["step"] = record.step;
  json["parallel"] = record.parallel;
  json["outcome"] = outcome_name(record.outcome);
  json["exit_code"] = record.exit_code;
  for (auto [key, seconds] :
       {std::pair{"timeout_ms", record.timeout_s}, {"stall_timeout_ms", record.stall_timeout_s}})
    json[key] = seconds ? Json(static_cast<std::int64_t>(std::llround(*seconds * 1000))) : Json();
  const AttemptRecord* first = record.attempts.empty() ? nullptr : &record.attempts.front();
  const AttemptRecord* last = record.attempts.empty() ? nullptr : &record.attempts.back();
  span(json, first ? first->start_unix_ns : 0, last ? last->end_unix_ns : 0);
  json["restarts"] = std::max(0, static_cast<int>(record.attempts.size()) - 1);
  json["culprit_rank"] = int_or_null(last ? culprit_rank(*last) : std::nullopt);
  json["notes"] = record.notes;
  json["ranks"] = workers_json(last ? last->workers : std::vector<WorkerRecord>{});
  json["stacks"] = stacks_json(last ? last->stacks : std::nullopt);
  Json& attempts = json["attempts"] = Json::array();
  for (const auto& a : record.attempts) {
    Json attempt;
    attempt["restart_count"] = a.restart_count;
    attempt["master_port"] = a.master_port;
    attempt["outcome"] = outcome_name(a.outcome);
    attempt["culprit_rank"] = int_or_null(culprit_rank(a));
    span(attempt, a.start_unix_ns, a.end_unix_ns);
    attempt["workers"] = workers_json(a.workers);
    attempt["stacks"] = stacks_json(a.stacks);
    attempt["cause"] = a.cause ? Json(failure_cause_name(*a.cause)) : Json();
    attempt["exception"] = exception_json(a.exception);
    attempt["restarted"] = a.restarted;
    attempt["restart_reason"] = string_or_null(a.restart_reason);
    Json& replaced = attempt["replaced_nodes"] = Json::array();
    for (const auto& r : a.replacements)
      replaced.push_back({{"node_rank", r.node_rank}, {"lost", r.lost}, {"spare", r.spare}});
    attempt["world_size"] = a.workers.size();
    attempt["dropped_nodes"] = a.dropped_nodes;
    attempt["added_nodes"] = a.added_nodes;
    attempts.push_back(std::move(attempt));
  }
  const auto& from = record.continued_from;
  json["continued_from"] =
      from
          ? Json{{"run_id", from->run_id}, {"run_dir", from->run_dir}, {"restart_count", from->restart_count}}
          : Json();
  return to_document(json);
}

std::string format_failure_report(const StepRecord& record, const std::string& error_file_text,
                                  const std::vector<std::string>& error_file_texts) {
  if (record.outcome == Outcome::succeeded) return "";
  const std::string step = "flowrun: step '" + record.step + "'";
  if (record.attempts.empty()) return step + " " + outcome_name(record.outcome) + "\n";

  const AttemptRecord& attempt = record.attempts.back();
  const WorkerRecord* culprit =
      attempt.culprit ? &attempt.workers.at(static_cast<std::size_t>(*attempt.culprit)) : nullptr;
  const Groups groups = group_ranks(attempt);
  const std::size_t restarts = record.attempts.size() - 1;
  std::string out;

  if (record.outcome == Outcome::failed) {
    out = step + " failed";
    if (restarts > 0) out += fmt::format(" after {} restart{}", restarts, restarts == 1 ? "" : "s");
    if (culprit) {
      out += ": " + worker_headline(*culprit) + "\n";
    } else {
      out += attempt.write_error.empty() ? "\n" : ": " + attempt.write_error + "\n";
    }
    if (culprit) culprit_details(out, *culprit, error_file_text, attempt.workers);
    if (record.parallel) {
      other_ranks(out, groups, true, attempt, error_file_texts);
    } else if (!culprit && !attempt.workers.empty()) {
      out += "flowrun:   it " + worker_headline(attempt.workers.front()) + "\n";
    }
  } else {
    if (record.outcome == Outcome::timed_out) {
      out = step + " timed out";
      if (record.timeout_s) out += " after " + format_duration(*record.timeout_s);
    } else if (record.outcome == Outcome::stalled) {
      out = step + " stalled";
      std::vector<const WorkerRecord*> stalled;
      for (const auto& w : attempt.workers) {
        if (w.stalled) stalled.push_back(&w);
      }
      if (!stalled.empty()) out += ": " + silence_list(stalled, false);
      if (record.stall_timeout_s) out += " (stall_timeout: " + format_duration(*record.stall_timeout_s) + ")";
    } else {
      out = step + " was interrupted";
    }
    out += stopped_clause(record, attempt, groups) + "\n";
    if (record.outcome == Outcome::timed_out) {
      if (auto hung = hung_looking(attempt); !hung.empty())
        out += "flowrun:   " + silence_list(hung, true) + "\n";
    }
    if (culprit) out += "flowrun:   before that, " + worker_headline(*culprit) + "\n";
    if (record.parallel) {
      other_ranks(out, groups, false, attempt, error_file_texts);
    } else if (!attempt.workers.empty()) {
      stderr_tail(out, attempt.workers.front(), false);
    }
  }
  // Said in the headline of a failure without a culprit; else here.
  if (!attempt.write_error.empty() && (culprit || record.outcome != Outcome::failed))
    out += "flowrun:   also: " + attempt.write_error + "\n";
  if (attempt.stacks && !attempt.stacks->groups.empty()) out += format_stacks_line(*attempt.stacks) + "\n";
  if (auto traces = format_nccl_traces_line(attempt.workers)) out += *traces + "\n";
  if (!attempt.restarted && !attempt.restart_reason.empty())
    out += "flowrun:   not restarting: " + attempt.restart_reason + "\n";
  earlier_attempts(out, record);
  for (const auto& note : record.notes) out += "flowrun:   " + note + "\n";
  std::string logs = log_dir(record, attempt);
  if (!logs.empty()) out += "flowrun:   logs: " + logs + "\n";
  return out;
}

std::string format_stacks_line(const StackReport& stacks) {
  std::vector<std::string> parts;
  for (const auto& g : stacks.groups) {
    std::string who = rank_list(g.ranks);
    if (&g == &stacks.groups.front() && stacks.groups.size() > 1)
      who += fmt::format(" ({} of {})", g.ranks.size(), stacks.ranks);
    const bool many = g.ranks.size() > 1;
    if (!g.missing.empty()) {
      parts.push_back(fmt::format("{}: no stack ({})", who, g.missing));
    } else {
      parts.push_back(fmt::format("{} {} in {}", who, many ? "are" : "is", g.where));
    }
  }
  return "flowrun:   " + join(parts, "; ");
}

std::string stacks_headline(const std::string& step, const StackReport& stacks) {
  if (stacks.ranks == 0) return fmt::format("flowrun: stacks of step '{}': no rank is running", step);
  return fmt::format("flowrun: stacks of step '{}' ({} rank{}, by {}); nothing was stopped", step,
                     stacks.ranks, stacks.ranks == 1 ? "" : "s", stacks.source);
}

std::string stacks_document(const std::string& step, const StackReport& stacks,
                            std::int64_t requested_unix_ns, std::int64_t taken_unix_ns) {
  Json json;
  json["step"] = step;
  json["requested_unix_ns"] = requested_unix_ns;
  json["taken_unix_ns"] = taken_unix_ns;
  json["ranks"] = stacks.ranks;
  Json grouped = stacks_json(stacks);
  json["source"] = std::move(grouped["source"]);
  json["groups"] = std::move(grouped["groups"]);
  return to_document(json);
}

std::optional<std::string> format_nccl_traces_line(const std::vector<WorkerRecord>& workers) {
  std::vector<int> ranks;
  std::string first;
  for (const auto& w : workers) {
    if (w.nccl_trace.empty()) continue;
    ranks.push_back(w.rank);
    if (first.empty()) first = w.nccl_trace;
  }
  if (ranks.empty()) return std::nullopt;
  // <step dir>/rank<R>/<prefix><R>: the prefix is the name less the rank;
  // fr_trace walks the step's directory for it.
  const std::string name = first.substr(first.rfind('/') + 1);
  const std::string prefix = name.substr(0, name.find_last_not_of("0123456789") + 1);
  const std::string step_dir = dir_of(dir_of(first));
  const std::string where = step_dir + "/rank*/" + prefix + "*";
  std::string who = rank_list(ranks);
  if (ranks.size() < workers.size()) who += fmt::format(" ({} of {})", ranks.size(), workers.size());
  return fmt::format(
      "flowrun:   NCCL flight recorder dumps of {}: {}; read them with: python -m "
      "torch.distributed.flight_recorder.fr_trace {}-p {} {}",
      who, where, ranks.size() < workers.size() ? "-j " : "", shell_quote(prefix), shell_quote(step_dir));
}

std::string format_stall_message(const std::string& step, const std::vector<WorkerRecord>& stalled,
                                 double stall_timeout_s) {
  std::vector<const WorkerRecord*> workers;
  for (const auto& w : stalled) workers.push_back(&w);
  return fmt::format("flowrun: step '{}' stalled: {} (stall_timeout: {}); stopping the step", step,
                     silence_list(workers, false), format_duration(stall_timeout_s));
}

std::optional<std::string> lightning_devices_hint(std::string_view text,
                                                  const std::vector<WorkerRecord>& workers) {
  // Lightning's own words; the numbers are read, the rest must match.
  constexpr std::string_view kStart = "You set `devices=";
  int devices = 0, num_nodes = 0, a = 0, b = 0, world = 0;
  bool found = false;
  for (std::size_t at = text.find(kStart); at != std::string_view::npos && !found;
       at = text.find(kStart, at + 1)) {
    std::string_view s = text.substr(at + kStart.size());
    found = take_number(s, devices) && take(s, "` and `num_nodes=") && take_number(s, num_nodes) &&
            take(s, "` in Lightning, but the product (") && take_number(s, a) && take(s, " * ") &&
            take_number(s, b) && take(s, ") does not match the world size (") && take_number(s, world) &&
            take(s, ")") && a == devices && b == num_nodes;
  }
  if (!found || workers.empty()) return std::nullopt;

  std::map<std::string, int> per_node;  // node -> workers ("" for one node)
  for (const auto& w : workers) ++per_node[w.node];
  const int total = static_cast<int>(workers.size());
  const int nodes = static_cast<int>(per_node.size());
  auto [fewest, most] = std::minmax_element(per_node.begin(), per_node.end(),
                                            [](const auto& x, const auto& y) { return x.second < y.second; });
  std::string out =
      fmt::format("flowrun:   Lightning's Trainer(devices={}, num_nodes={}) must multiply to this step's {} ",
                  devices, num_nodes, workers_text(total));
  if (fewest->second != most->second) {
    return out + fmt::format(
                     "({} nodes with {} to {} workers each, which Lightning's devices cannot express): "
                     "give every node the same number of workers in the step's parallel:",
                     nodes, fewest->second, most->second);
  }
  const int per = most->second;
  return out +
         fmt::format("({}): set devices={}, num_nodes={}, or change the step's parallel: to run {} ({})",
                     layout_text(nodes, per), per, nodes, workers_text(devices * num_nodes),
                     layout_text(num_nodes, devices));
}

std::optional<std::string> parse_error_file(const std::string& text) {
  auto root = parse_json(text);
  if (!root) return std::nullopt;
  const Json* message = find(*root, "message");
  if (!message) return std::nullopt;
  if (const auto* plain = message->get_ptr<const std::string*>()) {
    if (plain->empty()) return std::nullopt;
    return *plain;
  }
  if (const Json* extra = find(*message, "extraInfo")) {
    const std::string* stack = find_string(*extra, "py_callstack");
    if (stack && !stack->empty()) return *stack;
  }
  const std::string* inner = find_string(*message, "message");
  if (inner && !inner->empty()) return *inner;
  return std::nullopt;
}

std::optional<std::string> missing_module_hint(std::string_view text, const WorkerRecord& w) {
  constexpr std::string_view kError = "ModuleNotFoundError: No module named '";
  std::string module;
  for (std::size_t at = text.find(kError); at != std::string_view::npos; at = text.find(kError, at + 1)) {
    std::string_view rest = text.substr(at + kError.size());
    std::size_t len = 0;
    while (len < rest.size() && len < 200 &&
           (std::isalnum(static_cast<unsigned char>(rest[len])) != 0 || rest[len] == '_' || rest[len] == '.'))
      ++len;
    if (len > 0 && len < rest.size() && rest[len] == '\'') module = std::string(rest.substr(0, len));
  }
  if (module.empty()) return std::nullopt;

  std::string who = w.rank < 0 ? "it" : fmt::format("rank {}", w.rank);
  if (w.rank >= 0 && !w.node.empty()) who += " on " + w.node;
  constexpr std::string_view kChoose =
      ": choose the Python that has it with --python PY (flowrun run, flowrun SPEC) or python: PY in the "
      "spec";
  if (w.program.empty())
    return fmt::format("flowrun:   the Python {} ran has no module '{}'{}", who, module, kChoose);
  const std::size_t slash = w.program.rfind('/');
  const std::string_view file =
      std::string_view(w.program).substr(slash == std::string::npos ? 0 : slash + 1);
  if (file.substr(0, 6) == "python") {
    const bool searched = !w.command.empty() && w.command.find('/') == std::string::npos;
    return fmt::format("flowrun:   {} ran {}{}, which has no module '{}'{}", who, w.program,
                       searched ? " (" + w.command + " as found on its PATH)" : "", module, kChoose);
  }
  std::string out = fmt::format("flowrun:   {} ran {}, not Python itself; ", who, w.program);
  if (w.path_python.empty())
    return out + fmt::format(
                     "its PATH has no python3: write the full path of the Python that has module '{}' in "
                     "the step's run:",
                     module);
  return out +
         fmt::format(
             "python3 on its PATH is {}: if that is the Python without module '{}', write the full path "
             "of the one that has it in the step's run: (--python and python: replace only a run that "
             "starts with python or python3)",
             w.path_python, module);
}

}  // namespace flowrun
