#include "runs.h"

#include <algorithm>
#include <ctime>
#include <fmt/format.h>

#include "flowrun/util.h"

namespace flowrun {

RunMatch match_run(const std::string& query, const std::vector<std::string>& ids) {
  RunMatch match;
  if (query.empty()) return match;
  std::vector<std::string> prefixed;
  for (const auto& id : ids) {
    if (id == query) return {id, {}};
    if (id.starts_with(query)) prefixed.push_back(id);
  }
  std::sort(prefixed.begin(), prefixed.end());
  if (prefixed.size() == 1)
    match.id = prefixed.front();
  else
    match.ambiguous = std::move(prefixed);
  return match;
}

std::string format_span(std::int64_t ns) {
  if (ns < 0) return "-";
  const std::int64_t s = ns / 1'000'000'000;
  if (s < 10) return fmt::format("{:.1f}s", static_cast<double>(ns) / 1e9);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  return fmt::format("{}d{:02}h", s / 86400, (s % 86400) / 3600);
}

std::string default_step(const std::vector<std::pair<std::string, std::string>>& steps) {
  for (const auto& [name, state] : steps) {
    if (state == "failed") return name;
  }
  for (const auto& [name, state] : steps) {
    if (state == "running") return name;
  }
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (it->second == "succeeded") return it->first;
  }
  return steps.empty() ? std::string() : steps.front().first;
}

namespace {

std::string local_minute(std::int64_t unix_ns) {
  if (unix_ns <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M", &tm);
  return text;
}

// `text` cut to `width` characters, its last one "~" when cut.
std::string fit(const std::string& text, std::size_t width) {
  if (text.size() <= width) return text;
  return text.substr(0, width - 1) + "~";
}

}  // namespace

std::string format_runs_table(std::vector<RunRow> rows, std::int64_t now_unix_ns) {
  std::stable_sort(rows.begin(), rows.end(), [](const RunRow& a, const RunRow& b) {
    return a.sort_ns != b.sort_ns ? a.sort_ns < b.sort_ns : a.id < b.id;
  });
  // The id is never cut (it is what the other commands take); the flow and
  // the step get what is left of 100 columns, 6 to 16 each. An id too long
  // for the table to fit in 100 columns (the column is at most kMaxId wide)
  // stands on a line of its own, its row below it with the id's cell empty,
  // so that the columns stay aligned on a terminal of 100 columns.
  constexpr std::size_t kWidth = 100, kMinName = 6, kMaxName = 16;
  constexpr std::size_t kFixed = 9 + 1 + 4 + 1 + 16 + 1 + 8 + 1;  // state, exit, start, duration
  constexpr std::size_t kMaxId = kWidth - kFixed - 2 * (kMinName + 1) - 1;
  std::size_t id_width = 2;
  for (const auto& row : rows) {
    if (const std::size_t n = printable(row.id).size(); n <= kMaxId) id_width = std::max(id_width, n);
  }
  const std::size_t left = kWidth - (id_width + 1 + kFixed);
  const std::size_t name_width = std::clamp<std::size_t>((left - 1) / 2, kMinName, kMaxName);
  std::string out = fmt::format("{:<{}} {:<{}} {:<9} {:>4} {:<16} {:>8} {}\n", "id", id_width, "flow",
                                name_width, "state", "exit", "start", "duration", "step");
  for (const auto& row : rows) {
    std::string id = printable(row.id);
    if (id.size() > id_width) {
      out += id + "\n";
      id.clear();
    }
    if (row.state == "damaged") {
      out += fmt::format("{:<{}} {:<{}} {:<9} {}\n", id, id_width, "-", name_width, "damaged",
                         printable(row.problem));
      continue;
    }
    const std::int64_t end = row.end_unix_ns > 0 ? row.end_unix_ns : row.state == "running" ? now_unix_ns : 0;
    const std::string took = row.start_unix_ns > 0 && end > 0 ? format_span(end - row.start_unix_ns) : "-";
    out += fmt::format("{:<{}} {:<{}} {:<9} {:>4} {:<16} {:>8} {}\n", id, id_width,
                       fit(printable(row.flow.empty() ? "-" : row.flow), name_width), name_width, row.state,
                       row.exit_code ? std::to_string(*row.exit_code) : "-", local_minute(row.start_unix_ns),
                       took, row.step.empty() ? "-" : fit(printable(row.step), name_width));
  }
  return out;
}

}  // namespace flowrun
