// The failure report (format_failure_report and the stall, stacks and NCCL
// trace lines around it; the contracts are in result.h): what a step that did
// not succeed says on the console, from its StepRecord alone.

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>

#include "flowrun/path.h"
#include "flowrun/result.h"
#include "flowrun/util.h"

#include "result_detail.h"

namespace flowrun {

namespace {

using Kind = ExitStatus::Kind;
using result_detail::outcome_name;
using result_detail::teardown_name;

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
  if (w.role == Role::culprit && w.error_file_unix_ns > 0 && w.status.kind == Kind::signaled)
    out += ", stopped while it ended: it had failed first, as its error file says";
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

// <run_dir>/<step>: where a plain step's logs are, the parent of a rank's.
std::string log_dir(const StepRecord& record, const AttemptRecord& attempt) {
  for (const auto& w : attempt.workers) {
    const std::string& log = w.stderr_log.empty() ? w.stdout_log : w.stderr_log;
    if (log.empty()) continue;
    return std::string(record.parallel ? dir_name(dir_name(log)) : dir_name(log));
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
  const std::string name(base_name(first));
  const std::string prefix = name.substr(0, name.find_last_not_of("0123456789") + 1);
  const std::string step_dir(dir_name(dir_name(first)));
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

}  // namespace flowrun
