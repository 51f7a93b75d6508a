// flowrun logs RUN [--step S] [--rank R] [-f]: a step's log files, as the
// run directory keeps them (<step>/rank<R>/stdout.log and stderr.log for a
// parallel step, <step>/stdout.log and stderr.log for a plain one), printed
// or followed until the run ends.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <fcntl.h>
#include <fmt/format.h>
#include <iostream>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flowrun/beneath.h"
#include "flowrun/error.h"
#include "flowrun/flow.h"
#include "flowrun/path.h"
#include "flowrun/util.h"

#include "commands.h"
#include "runs.h"

namespace flowrun {

namespace {

struct LogFile {
  std::string path;   // absolute
  std::string shown;  // relative to the run directory, for the header
  off_t offset = 0;   // what has been printed
  ino_t inode = 0;    // of the file printed; another (a restart kept the old one in attemptN/) starts again
  bool damaged = false;  // not a regular file: said once, never read
};

// The log files of `step` (its rank `rank` only when >= 0), each rank's
// stdout.log then its stderr.log.
std::vector<LogFile> log_files(const std::string& run_dir, const std::string& step, int rank) {
  const PlannedStep planned = planned_step(run_dir, step);
  std::vector<std::string> dirs;
  if (!planned.parallel) {
    if (rank >= 0)
      throw Error(fmt::format("--rank {}: step '{}' is not a parallel step, so it has no ranks; drop --rank",
                              rank, step),
                  kExitUsage);
    dirs.push_back(step);
  } else if (rank >= 0) {
    if (std::find(planned.ranks.begin(), planned.ranks.end(), rank) == planned.ranks.end())
      throw Error(fmt::format("--rank {}: step '{}' has ranks 0-{}", rank, step,
                              planned.ranks.empty() ? 0 : planned.ranks.back()),
                  kExitUsage);
    dirs.push_back(fmt::format("{}/rank{}", step, rank));
  } else {
    for (int r : planned.ranks) dirs.push_back(fmt::format("{}/rank{}", step, r));
  }
  std::vector<LogFile> files;
  for (const auto& dir : dirs) {
    for (const char* name : {"stdout.log", "stderr.log"})
      files.push_back({run_dir + "/" + dir + "/" + name, dir + "/" + name, 0, 0});
  }
  return files;
}

// --rank without --step: the run's parallel step, the only one or the last
// that ran (the default step, the failed or last one, is often the join,
// which has no ranks), said on stderr so that the reader knows whose logs.
std::string rank_step(const std::string& run_dir, const RunRecord& record, int rank) {
  std::vector<std::pair<std::string, std::string>> parallel;
  for (const auto& [name, state] : record.steps) {
    if (planned_step(run_dir, name).parallel) parallel.emplace_back(name, state);
  }
  if (parallel.empty())
    throw Error(
        fmt::format("--rank {}: run {} has no parallel step, so no ranks; drop --rank", rank, record.run_id),
        kExitUsage);
  std::string step = parallel.front().first;
  std::string why = "its parallel step";
  if (parallel.size() > 1) {
    why = "its first parallel step; none has run yet";
    for (const auto& [name, state] : parallel) {
      if (state != "pending" && state != "skipped") {
        step = name;
        why = "the last of its parallel steps that ran";
      }
    }
  }
  std::cerr << "flowrun logs: --rank " << rank << " of step '" << step << "', " << why << "\n";
  return step;
}

// Prints what `file` holds past its offset; returns whether there was any.
// A header ("==> train/rank1/stderr.log <==", as tail(1) writes it) goes
// before a file's text when there are several and another was printed last.
// `whole`: the header even for an empty file (printing, not following).
bool print_new(LogFile& file, bool headers, const LogFile*& last, bool whole = false) {
  // O_NONBLOCK: a FIFO a rank left in its log's place opens at once (and is
  // then refused) instead of blocking this reader.
  const int fd = open(file.path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    if (!file.damaged)
      std::cerr << "flowrun: " << file.shown << " is damaged: " << file_type_name(st.st_mode)
                << ", not a regular file; skipped\n";
    file.damaged = true;
    return false;
  }
  if (st.st_ino != file.inode) {
    if (file.inode != 0) last = nullptr;  // say the file again
    file.inode = st.st_ino;
    file.offset = 0;
  }
  char buf[65536];
  bool any = false;
  auto header = [&] {
    if (!headers || last == &file) return;
    std::cout << (last != nullptr ? "\n" : "") << "==> " << file.shown << " <==\n";
    last = &file;
  };
  if (whole) header();
  for (;;) {
    const ssize_t n = pread(fd, buf, sizeof buf, file.offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (!any) header();
    any = true;
    std::cout.write(buf, n);
    file.offset += n;
  }
  close(fd);
  if (any) std::cout.flush();
  return any;
}

// Follows `files` until the run's lock is let go of, waking on inotify's
// news of the run's directories (and at least twice a second, since a lock
// let go of makes none), then prints what came last.
void follow(const std::string& run_dir, std::vector<LogFile>& files, const LogFile*& last) {
  const int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  const std::uint32_t mask = IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE;
  for (;;) {
    const bool live = run_in_progress(run_dir);
    if (in >= 0) {
      // Directories made since the last turn (a rank's, when its step starts).
      inotify_add_watch(in, run_dir.c_str(), mask);
      for (const auto& file : files) inotify_add_watch(in, std::string(dir_name(file.path)).c_str(), mask);
    }
    for (auto& file : files) print_new(file, files.size() > 1, last);
    if (!live) break;
    pollfd p{in, POLLIN, 0};
    if (in >= 0 && poll(&p, 1, 500) > 0) {
      char events[4096];
      while (read(in, events, sizeof events) > 0) {
      }
    } else if (in < 0) {
      usleep(200'000);
    }
  }
  if (in >= 0) close(in);
}

const char* kLogsFooter =
    R"(RUN: a run id, a unique prefix of one, latest (the newest run), or a run directory.
Without --step: the step that failed, else the one running, else the last that ran; with
--rank, the run's parallel step (the last that ran, when there are several). Without --rank:
every rank of a parallel step, each file under a header (==> train/rank1/stderr.log <==).
A rank's stdout.log comes before its stderr.log.

-f follows the run while it lasts, as tail -f does, and returns when flowrun ends.

Examples:
  flowrun logs latest                  the failed step's logs of the newest run
  flowrun logs quick --rank 1          rank 1 of the run whose id starts with "quick"
  flowrun logs latest --step train -f  follow step train until the run ends

Exit codes: 0 printed, 1 no log file there yet, 2 no such run, step or rank. See docs/cli.md.)";

}  // namespace

int cmd_logs(int argc, char** argv) {
  std::string run, step;
  int rank = -1;
  bool follow_run = false;
  CLI::App app{"Print a run's logs: a step's, or one rank's", "flowrun logs"};
  add_run_argument(app, run);
  app.add_option("--step", step, "The step (default: the failed one, else the running, else the last)")
      ->type_name("STEP");
  app.add_option("--rank", rank, "Only this rank of a parallel step")
      ->check(CLI::Range(0, 1 << 20))
      ->type_name("R");
  app.add_flag("-f,--follow", follow_run, "Follow the logs until the run ends");
  app.footer(kLogsFooter);
  if (const auto done = parse_subcommand(app, "logs", argc, argv)) return *done;
  return report_errors([&]() -> int {
    const std::string run_dir = locate_run(run, current_directory());
    const RunRecord record = read_record_of(run_dir);
    std::vector<std::string> names;
    for (const auto& [name, state] : record.steps) names.push_back(name);
    if (step.empty() && rank >= 0) {
      step = rank_step(run_dir, record, rank);
    } else if (step.empty()) {
      step = default_step(record.steps);
    } else if (std::find(names.begin(), names.end(), step) == names.end()) {
      std::string message = "--step " + step + ": run " + record.run_id + " has no step '" + step + "'";
      if (auto close = closest_match(step, names)) message += "; did you mean '" + *close + "'?";
      throw Error(message + "\nIts steps: " + join(names, ", "), kExitUsage);
    }
    if (step.empty()) throw Error("run " + record.run_id + " has no steps", kExitFailure);
    std::vector<LogFile> files = log_files(run_dir, step, rank);
    const LogFile* last = nullptr;
    if (follow_run) {
      follow(run_dir, files, last);
      return kExitOk;
    }
    bool any = false;
    for (auto& file : files) any = print_new(file, files.size() > 1, last, true) || any;
    if (!any && std::none_of(files.begin(), files.end(),
                             [](const LogFile& f) { return access(f.path.c_str(), F_OK) == 0; })) {
      std::string state;
      for (const auto& [name, s] : record.steps) {
        if (name == step) state = s;
      }
      std::cerr << "flowrun: no logs of step '" << step << "' in " << run_dir << " (it is " << state
                << "); flowrun logs " << record.run_id << " -f waits for them\n";
      return kExitFailure;
    }
    return kExitOk;
  });
}

}  // namespace flowrun
