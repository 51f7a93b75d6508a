// Worker, attempt and step records (the contracts are in result.h): how a
// worker ended, the culprit and the victims, and results.json. The failure
// report is in failure_report.cpp, the hints a rank's own output gives in
// failure_hints.cpp.

#include "flowrun/result.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <ctime>
#include <fmt/format.h>

#include "flowrun/files.h"
#include "flowrun/json.h"
#include "flowrun/retry_advice.h"
#include "flowrun/util.h"

#include "result_detail.h"

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

}  // namespace

namespace result_detail {

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

}  // namespace result_detail

namespace {

using result_detail::outcome_name;
using result_detail::teardown_name;

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
  json["error_file_time"] = time_or_null(w.error_file_unix_ns);
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

Json shares_json(const std::optional<WaitShares>& shares) {
  if (!shares) return Json();
  Json json;
  json["sample_ms"] = static_cast<std::int64_t>(std::llround(shares->sample_s * 1000));
  Json& ranks = json["ranks"] = Json::array();
  for (const auto& r : shares->ranks) {
    Json frames = Json::array();
    for (const auto& [frame, n] : r.frames) frames.push_back({{"frame", frame}, {"samples", n}});
    Json rank = {{"rank", r.rank},
                 {"samples", r.samples},
                 {"waits", r.waits},
                 {"idle", r.idles},
                 {"wait_share", std::round(waiting_share(r) * 1000) / 1000},
                 {"frames", std::move(frames)}};
    if (r.span_us > 0) {
      rank["blocked_s"] = static_cast<double>(r.blocked_us) / 1e6;
      rank["span_s"] = static_cast<double>(r.span_us) / 1e6;
    }
    ranks.push_back(std::move(rank));
  }
  const auto& slow = shares->slow;
  json["slow"] = slow ? Json{{"ranks", slow->ranks},
                             {"slow_share", std::round(slow->slow_share * 1000) / 1000},
                             {"others_share", std::round(slow->others_share * 1000) / 1000},
                             {"frame", string_or_null(slow->frame)}}
                      : Json();
  return json;
}

}  // namespace

double waiting_share(const RankShare& r) {
  if (r.span_us > 0) {
    const double blocked = static_cast<double>(r.blocked_us) / static_cast<double>(r.span_us);
    return r.idles > 0 ? blocked * static_cast<double>(r.waits) / static_cast<double>(r.idles) : 0;
  }
  return r.samples > 0 ? static_cast<double>(r.waits) / static_cast<double>(r.samples) : 0;
}

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
      if (std::pair(failure_time(workers[i]), workers[i].rank) >= std::pair(failure_time(best), best.rank))
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

std::int64_t failure_time(const WorkerRecord& w) {
  return w.error_file_unix_ns > 0 && (w.end_unix_ns == 0 || w.error_file_unix_ns < w.end_unix_ns)
             ? w.error_file_unix_ns
             : w.end_unix_ns;
}

void write_rank_end(const std::string& path, const WorkerRecord& w) {
  if (path.empty()) return;
  Json doc;
  doc["format"] = 1;
  doc["worker"] = worker_json(w);
  (void)try_write_file(path, to_document(doc));
}

namespace {

// A culprit's worker (worker_json's fields) and exception type, as one string.
std::string signature_of(const Json& worker, const std::string& exception_type) {
  const auto text = [](const Json* v) { return v == nullptr || v->is_null() ? std::string("-") : v->dump(); };
  return fmt::format("rank {} {} {} {} {}", text(find(worker, "rank")), text(find(worker, "status")),
                     text(find(worker, "exit_code")), text(find(worker, "signal")),
                     exception_type.empty() ? "-" : exception_type);
}

}  // namespace

std::string failure_signature(const AttemptRecord& a) {
  if (a.outcome != Outcome::failed || !a.culprit || static_cast<std::size_t>(*a.culprit) >= a.workers.size())
    return {};
  return signature_of(worker_json(a.workers[static_cast<std::size_t>(*a.culprit)]),
                      a.exception ? a.exception->type : "");
}

std::vector<std::string> failure_signatures(std::string_view results_json) {
  std::vector<std::string> out;
  const auto doc = parse_json(results_json);
  const Json* attempts = doc && doc->is_object() ? find(*doc, "attempts") : nullptr;
  if (attempts == nullptr || !attempts->is_array()) return out;
  for (const Json& a : *attempts) {
    std::string signature;
    const Json* outcome = a.is_object() ? find(a, "outcome") : nullptr;
    const Json* culprit = a.is_object() ? find(a, "culprit_rank") : nullptr;
    const Json* workers = a.is_object() ? find(a, "workers") : nullptr;
    if (outcome != nullptr && *outcome == "failed" && culprit != nullptr && culprit->is_number_integer() &&
        workers != nullptr && workers->is_array()) {
      const Json* exception = find(a, "exception");
      const Json* type = exception != nullptr && exception->is_object() ? find(*exception, "type") : nullptr;
      for (const Json& w : *workers) {
        const Json* rank = w.is_object() ? find(w, "rank") : nullptr;
        if (rank != nullptr && *rank == *culprit)
          signature = signature_of(w, type != nullptr && type->is_string() ? type->get<std::string>() : "");
      }
    }
    out.push_back(std::move(signature));
  }
  return out;
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
  json["wait_shares"] = shares_json(last ? last->shares : std::nullopt);
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
    attempt["wait_shares"] = shares_json(a.shares);
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
  const auto retry = advise_retry(record);
  json["failure_class"] = retry ? Json(failure_class_name(retry->failure_class)) : Json();
  json["retry_may_help"] = retry ? Json(retry->may_help) : Json(false);
  json["retry_why"] = retry ? Json(retry->why) : Json();
  const auto& from = record.continued_from;
  json["continued_from"] =
      from
          ? Json{{"run_id", from->run_id}, {"run_dir", from->run_dir}, {"restart_count", from->restart_count}}
          : Json();
  Json& verdicts = json["node_checks"] = Json::array();
  std::vector<std::string> excluded;
  for (const auto& a : record.attempts) {
    for (const auto& v : a.node_checks) {
      Json checks = Json::array();
      for (const auto& c : v.checks) checks.push_back({{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}});
      verdicts.push_back({{"node", v.node},
                          {"node_rank", v.node_rank},
                          {"ok", v.ok},
                          {"check_s", v.check_s},
                          {"checks", std::move(checks)}});
      if (!v.ok && std::find(excluded.begin(), excluded.end(), v.node) == excluded.end())
        excluded.push_back(v.node);
    }
  }
  json["excluded_nodes"] = excluded;
  return to_document(json);
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

std::string wait_shares_document(const std::string& step, int restart_count, const WaitShares& shares,
                                 std::int64_t written_unix_ns) {
  Json json = shares_json(shares);
  json["step"] = step;
  json["restart_count"] = restart_count;
  json["written_unix_ns"] = written_unix_ns;
  return to_document(json);
}

}  // namespace flowrun
