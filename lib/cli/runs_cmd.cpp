// flowrun runs [DIR] and flowrun status RUN: the runs kept in .flowrun/runs,
// found again by id, prefix or `latest`, and what a run (live or not) is doing.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <sys/stat.h>
#include <unistd.h>

#include "flowrun/clock.h"
#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/flow.h"
#include "flowrun/json.h"
#include "flowrun/util.h"

#include "commands.h"
#include "runs.h"

namespace flowrun {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxRunFile = 16 << 20;

// `dir` with a last component that is a link (`latest`) replaced by the run
// directory it points at.
std::string past_link(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_symlink(dir, ec)) return dir.lexically_normal().string();
  const fs::path target = fs::read_symlink(dir, ec);
  if (ec) return dir.lexically_normal().string();
  return (target.is_absolute() ? target : dir.parent_path() / target).lexically_normal().string();
}

std::string looked_in(const std::vector<std::string>& dirs, const std::string& cwd) {
  if (dirs.empty()) return (fs::path(cwd) / ".flowrun" / "runs").string() + " nor in a directory above it";
  return join(dirs, ", ");
}

}  // namespace

std::int64_t mtime_unix_ns(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return 0;
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

namespace {

// Whether `path` and what it leads to are this user's: another user's
// .flowrun/runs above the working directory (/tmp/.flowrun/runs on a shared
// host) is not one of this user's run directories, and its `latest` could
// point anywhere. Git refuses another owner's repository for the same reason.
bool owned_by_me(const fs::path& path) {
  struct stat link {
  }, target{};
  return lstat(path.c_str(), &link) == 0 && stat(path.c_str(), &target) == 0 && link.st_uid == geteuid() &&
         target.st_uid == geteuid();
}

// FLOWRUN_CEILING_DIRS: directories, colon-separated, above which the search
// stops (git's GIT_CEILING_DIRECTORIES): the search looks in them but not
// in their parents.
std::vector<fs::path> ceilings() {
  std::vector<fs::path> dirs;
  const char* env = std::getenv("FLOWRUN_CEILING_DIRS");
  std::string_view rest = env != nullptr ? env : "";
  while (!rest.empty()) {
    const std::size_t colon = std::min(rest.find(':'), rest.size());
    if (colon > 0) dirs.push_back(fs::path(rest.substr(0, colon)).lexically_normal());
    rest.remove_prefix(std::min(colon + 1, rest.size()));
  }
  return dirs;
}

}  // namespace

std::vector<std::string> runs_dirs_above(const std::string& cwd) {
  std::vector<std::string> dirs;
  std::error_code ec;
  const std::vector<fs::path> stops = ceilings();
  for (fs::path dir = fs::path(cwd).lexically_normal();; dir = dir.parent_path()) {
    const fs::path runs = dir / ".flowrun" / "runs";
    if (fs::is_directory(runs, ec) && owned_by_me(dir / ".flowrun") && owned_by_me(runs))
      dirs.push_back(runs.string());
    if (dir == dir.parent_path() || dir.empty()) break;
    if (std::find(stops.begin(), stops.end(), dir) != stops.end()) break;
  }
  return dirs;
}

std::vector<std::string> run_ids_in(const std::string& runs_dir) {
  std::vector<std::string> ids;
  std::error_code ec;
  for (fs::directory_iterator it(runs_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == "latest" || name.starts_with('.') || it->is_symlink(ec) || !it->is_directory(ec)) continue;
    ids.push_back(name);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::string locate_run(const std::string& query, const std::string& cwd) {
  if (query.empty())
    throw Error("no run given: name a run id, a prefix of one, latest or a run directory", kExitUsage);
  std::error_code ec;
  const fs::path as_path = fs::path(cwd) / query;
  if (query.find('/') != std::string::npos || (query != "latest" && fs::is_directory(as_path, ec))) {
    if (!fs::is_directory(as_path, ec))
      throw Error("no run directory " + as_path.lexically_normal().string(), kExitUsage);
    std::string dir = past_link(as_path);
    if (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return dir;
  }
  const std::vector<std::string> dirs = runs_dirs_above(cwd);
  if (query == "latest") {
    for (const auto& runs : dirs) {
      if (fs::is_symlink(fs::path(runs) / "latest", ec)) return past_link(fs::path(runs) / "latest");
    }
    throw Error("no run 'latest': no .flowrun/runs/latest in " + looked_in(dirs, cwd) +
                    " (flowrun makes it when a run starts in the default run directory)",
                kExitUsage);
  }
  for (const auto& runs : dirs) {
    const std::vector<std::string> ids = run_ids_in(runs);
    const RunMatch match = match_run(query, ids);
    if (!match.id.empty()) return runs + "/" + match.id;
    if (!match.ambiguous.empty()) {
      std::string message = fmt::format("'{}' names {} runs in {}:", query, match.ambiguous.size(), runs);
      for (const auto& id : match.ambiguous) message += "\n  " + id;
      throw Error(message + "\nGive more of the id.", kExitUsage);
    }
  }
  std::string message = "no run '" + query + "' in " + looked_in(dirs, cwd);
  if (!dirs.empty()) {
    if (auto close = closest_match(query, run_ids_in(dirs.front())))
      message += "; did you mean '" + *close + "'?";
  }
  throw Error(message + "\n'flowrun runs' lists the runs; a run directory may be given as a path.",
              kExitUsage);
}

RunRow read_run_row(const std::string& run_dir) {
  RunRow row;
  row.id = fs::path(run_dir).filename().string();
  row.state = "damaged";
  row.sort_ns = mtime_unix_ns(run_dir);
  int err = 0;
  const auto text = try_read_file(run_dir + "/run.json", kMaxRunFile, &err);
  if (!text) {
    row.problem = err == ENOENT ? "no run.json (not a run, or one of a flowrun before run.json)"
                                : std::string("cannot read run.json: ") + file_error_text(err);
    return row;
  }
  if (!parse_json(*text)) {
    row.problem = "run.json is not JSON (cut short or damaged)";
    return row;
  }
  RunRecord record;
  try {
    record = parse_run_json(*text, "run.json");
  } catch (const Error& e) {
    std::string why = e.what();
    if (why.starts_with("run.json: ")) why = why.substr(10);
    row.problem = "run.json: " + why.substr(0, why.find(';'));
    return row;
  }
  row.flow = record.flow;
  row.exit_code = record.exit_code;
  row.start_unix_ns = record.start_unix_ns;
  row.end_unix_ns = record.end_unix_ns;
  if (record.start_unix_ns > 0) row.sort_ns = record.start_unix_ns;
  if (!record.finished)
    row.state = run_in_progress(run_dir) ? "running" : "killed";
  else
    row.state = record.exit_code == 0 ? "succeeded" : "failed";
  for (const auto& [name, state] : record.steps) {
    if (state == "failed" || (row.state == "running" && state == "running")) {
      row.step = name;
      break;
    }
  }
  return row;
}

RunRecord read_record_of(const std::string& run_dir) {
  const RunRow row = read_run_row(run_dir);
  if (row.state == "damaged")
    throw Error(fmt::format("{}: {}; 'flowrun runs' lists it as damaged", run_dir, row.problem), kExitUsage);
  return read_run_record(run_dir);
}

PlannedStep planned_step(const std::string& run_dir, const std::string& step) {
  PlannedStep planned;
  planned.name = step;
  const auto text = try_read_file(run_dir + "/plan.json", kMaxRunFile);
  const auto doc = text ? parse_json(*text) : std::nullopt;
  const Json* steps = doc ? find(*doc, "steps") : nullptr;
  for (const auto& s : steps && steps->is_array() ? *steps : Json::array()) {
    const std::string* name = find_string(s, "name");
    if (name == nullptr || *name != step) continue;
    const std::string* kind = find_string(s, "kind");
    planned.parallel = kind != nullptr && *kind == "parallel";
    const Json* nodes = find(s, "nodes");
    const Json* ranks = find(s, "ranks");
    if (ranks == nullptr || !ranks->is_array()) break;
    for (const auto& r : *ranks) {
      const auto rank = find_int(r, "rank");
      if (!rank) continue;
      planned.ranks.push_back(*rank);
      const int n = find_int(r, "node").value_or(-1);
      planned.nodes.push_back(n);
      const std::string* host = nullptr;
      if (nodes != nullptr && nodes->is_array() && n >= 0 && static_cast<std::size_t>(n) < nodes->size())
        host = find_string((*nodes)[static_cast<std::size_t>(n)], "host");
      planned.hosts.push_back(host != nullptr ? *host : "");
    }
    return planned;
  }
  if (steps != nullptr) return planned;
  // No plan to read: the rank directories there are.
  std::error_code ec;
  for (fs::directory_iterator it(run_dir + "/" + step, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 4 && name.starts_with("rank") &&
        name.find_first_not_of("0123456789", 4) == std::string::npos && name.size() < 10) {
      planned.parallel = true;
      planned.ranks.push_back(std::stoi(name.substr(4)));
    }
  }
  std::sort(planned.ranks.begin(), planned.ranks.end());
  planned.nodes.assign(planned.ranks.size(), -1);
  planned.hosts.assign(planned.ranks.size(), "");
  return planned;
}

namespace {

// The runs directory `flowrun runs DIR` means: DIR/.flowrun/runs when there
// is one (DIR is where runs were started, or a spec file beside them), else
// DIR itself (a directory of runs, such as the parent of --run-dir's).
std::string runs_dir_of(const std::string& arg, const std::string& cwd) {
  std::error_code ec;
  fs::path dir = fs::path(cwd) / arg;
  if (fs::is_regular_file(dir, ec)) dir = dir.parent_path();
  if (fs::is_directory(dir / ".flowrun" / "runs", ec))
    return (dir / ".flowrun" / "runs").lexically_normal().string();
  if (!fs::is_directory(dir, ec)) throw Error("no directory " + dir.lexically_normal().string(), kExitUsage);
  return dir.lexically_normal().string();
}

const char* kRunsFooter =
    R"(Without DIR: the runs in ./.flowrun/runs, or in the nearest directory above that has one.
DIR may be where flowrun ran (DIR/.flowrun/runs), a spec file beside it, or a directory of run
directories (such as the parent of the --run-dir runs were given).

state: running, succeeded, failed, killed (flowrun died before it closed run.json), or damaged
(run.json missing, cut short, or not a run record; the reason is shown). step: the step that
failed, or the one a running run is on. Newest last, like ls -tr.

Then: flowrun logs ID (a prefix of the id, or latest, will do) and flowrun status ID.
Exit codes: 0 listed (also when there is no run yet), 2 no such DIR. See docs/cli.md.)";

}  // namespace

int cmd_runs(int argc, char** argv) {
  std::string dir;
  CLI::App app{"List past and running flows, from each run's run.json", "flowrun runs"};
  app.add_option("dir", dir, "Where the runs are (default: the nearest .flowrun/runs)")->type_name("DIR");
  app.footer(kRunsFooter);
  if (const auto done = parse_subcommand(app, "runs", argc, argv)) return *done;
  return report_errors([&]() -> int {
    const std::string cwd = current_directory();
    std::string runs;
    if (!dir.empty()) {
      runs = runs_dir_of(dir, cwd);
    } else if (auto above = runs_dirs_above(cwd); !above.empty()) {
      runs = above.front();
    } else {
      std::cerr << "flowrun: no runs: no .flowrun/runs in " << cwd
                << " or above it (flowrun SPEC starts one; give DIR for runs elsewhere)\n";
      return kExitOk;
    }
    std::vector<RunRow> rows;
    for (const auto& id : run_ids_in(runs)) rows.push_back(read_run_row(runs + "/" + id));
    if (rows.empty()) {
      std::cerr << "flowrun: no runs in " << runs << "\n";
      return kExitOk;
    }
    std::cout << format_runs_table(std::move(rows), unix_now_ns());
    return kExitOk;
  });
}

}  // namespace flowrun
