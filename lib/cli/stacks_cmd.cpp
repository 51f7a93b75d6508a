// flowrun stacks RUN: where every rank of a running step is, now, without
// stopping anything. The run's own flowrun takes the stacks (on every node,
// through its agents): this command sends it SIGQUIT, as a user at its
// terminal may with Ctrl-\, and waits for the step's stacks.json that
// answers it (written by rename, so it is whole when it appears).
#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <optional>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "flowrun/clock.h"
#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/flow.h"
#include "flowrun/json.h"
#include "flowrun/result.h"
#include "flowrun/util.h"

#include "commands.h"
#include "runs.h"

namespace flowrun {

namespace {

// The step of `record` that runs now.
std::string running_step(const RunRecord& record) {
  for (const auto& [step, state] : record.steps) {
    if (state == "running") return step;
  }
  return {};
}

// A stacks.json as the report it describes; nullopt when it is not one, or
// answers a request made before `asked_ns`.
std::optional<StackReport> read_stacks(const std::string& path, std::int64_t asked_ns, std::string* text) {
  const auto read = try_read_file(path, 16 << 20);
  const auto doc = read ? parse_json(*read) : std::nullopt;
  const Json* requested = doc ? find(*doc, "requested_unix_ns") : nullptr;
  if (requested == nullptr || !requested->is_number_integer() || requested->get<std::int64_t>() < asked_ns)
    return std::nullopt;
  StackReport report;
  if (const std::string* source = find_string(*doc, "source")) report.source = *source;
  report.ranks = static_cast<int>(find_int(*doc, "ranks").value_or(0));
  const Json* groups = find(*doc, "groups");
  if (groups != nullptr && groups->is_array()) {
    for (const Json& g : *groups) {
      StackGroup group;
      if (const Json* ranks = find(g, "ranks"); ranks != nullptr && ranks->is_array()) {
        for (const Json& r : *ranks) {
          if (r.is_number_integer()) group.ranks.push_back(r.get<int>());
        }
      }
      if (const std::string* where = find_string(g, "where")) group.where = *where;
      if (const std::string* missing = find_string(g, "missing")) group.missing = *missing;
      if (!group.ranks.empty()) report.groups.push_back(std::move(group));
    }
  }
  *text = *read;
  return report;
}

// Whether process `pid` of this host has `path` open: the run's flowrun
// holds its run.lock open while it runs. A pid on another host (a shared
// run directory) is another process here, however its number reads.
// nullopt: its open files cannot be read (it runs as another user).
std::optional<bool> holds_open(pid_t pid, const struct stat& want) {
  std::error_code ec;
  std::filesystem::directory_iterator fds(fmt::format("/proc/{}/fd", pid), ec);
  if (ec) return ec == std::errc::permission_denied ? std::nullopt : std::optional<bool>(false);
  for (const auto& fd : fds) {
    struct stat got {};
    if (stat(fd.path().c_str(), &got) == 0 && got.st_dev == want.st_dev && got.st_ino == want.st_ino)
      return true;
  }
  return false;
}

struct Unique {
  int fd = -1;
  explicit Unique(int f) : fd(f) {}
  ~Unique() {
    if (fd >= 0) close(fd);
  }
};

// The run directory as this command may trust it before it signals anyone:
// the caller's own, not a link. Another user's could name any pid and hold
// a run.lock that is a link to /dev/null, held open by whatever holds
// /dev/null. Throws Error (exit 2) naming what is wrong.
void trusted_run_dir(const std::string& run_dir) {
  Unique dir(open(run_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (dir.fd < 0 || fstat(dir.fd, &st) != 0)
    throw Error(fmt::format("cannot open the run directory {}: {}", run_dir, std::strerror(errno)),
                kExitUsage);
  if (st.st_uid != geteuid())
    throw Error(
        fmt::format("refusing to signal for the run directory {}: it belongs to another user (uid {}); "
                    "run flowrun stacks as the user who started the run",
                    run_dir, st.st_uid),
        kExitUsage);
}

// The run's run.lock, in a trusted run directory: a regular file (not a
// link, a FIFO or a device) of the caller's. What it is, for holds_open.
struct stat trusted_run_lock(const std::string& run_dir) {
  trusted_run_dir(run_dir);
  Unique lock(
      open((run_dir + "/run.lock").c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  struct stat st {};
  if (lock.fd < 0 || fstat(lock.fd, &st) != 0)
    throw Error(fmt::format("cannot open {}/run.lock: {}", run_dir, std::strerror(errno)));
  if (!S_ISREG(st.st_mode) || st.st_uid != geteuid())
    throw Error(
        fmt::format("refusing to signal for the run in {}: its run.lock is {} (expected a regular file "
                    "of uid {}); the run directory is damaged",
                    run_dir, S_ISREG(st.st_mode) ? "another user's file" : "not a regular file", geteuid()),
        kExitUsage);
  return st;
}

// Asks the run's flowrun (pid `pid`, holding the run's lock) for the stacks
// and waits up to `wait_s` for the step's stacks.json that answers. Returns
// the report and the file's text.
std::pair<StackReport, std::string> ask_for_stacks(const std::string& run_dir, const RunRecord& record,
                                                   const std::string& step, double wait_s) {
  const std::string step_dir = run_dir + "/" + step;
  const std::string file = step_dir + "/stacks.json";
  Unique watch(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (watch.fd < 0 || inotify_add_watch(watch.fd, step_dir.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE) < 0)
    throw Error(fmt::format("cannot watch {}: {}", step_dir, std::strerror(errno)));
  // The pid is the run's only while the run's lock is held: open it first,
  // then check the lock, so that the signal cannot reach a process that
  // took the pid after the run ended.
  const struct stat lock = trusted_run_lock(run_dir);
  Unique pidfd(static_cast<int>(syscall(SYS_pidfd_open, record.pid, 0)));
  if (!run_in_progress(run_dir))
    throw Error(fmt::format("run {} has just ended: no stacks to take", record.run_id));
  const std::optional<bool> holds = pidfd.fd < 0 ? false : holds_open(record.pid, lock);
  if (!holds)
    throw Error(
        fmt::format("cannot tell whether pid {} is run {}'s flowrun: its open files are not this user's "
                    "to read; run flowrun stacks as the user who started the run",
                    record.pid, record.run_id));
  if (!*holds)
    throw Error(fmt::format("run {} runs on {} (flowrun pid {}), not on this host: run flowrun stacks there",
                            record.run_id, record.host.empty() ? "another host" : record.host, record.pid));
  const std::int64_t asked = unix_now_ns();
  if (syscall(SYS_pidfd_send_signal, pidfd.fd, SIGQUIT, nullptr, 0) != 0)
    throw Error(
        fmt::format("cannot signal the run's flowrun (pid {}): {}", record.pid, std::strerror(errno)));
  const std::int64_t deadline = unix_now_ns() + static_cast<std::int64_t>(wait_s * 1e9);
  std::string text;
  while (true) {
    if (auto report = read_stacks(file, asked, &text)) return {*report, text};
    const std::int64_t left_ms = (deadline - unix_now_ns()) / 1'000'000;
    if (left_ms <= 0) break;
    pollfd fds[2] = {{watch.fd, POLLIN, 0}, {pidfd.fd, POLLIN, 0}};
    if (poll(fds, 2, static_cast<int>(std::min<std::int64_t>(left_ms, 1000))) < 0 && errno != EINTR)
      throw Error(fmt::format("cannot wait for {}: {}", file, std::strerror(errno)));
    if ((fds[1].revents & POLLIN) != 0) {
      if (auto report = read_stacks(file, asked, &text)) return {*report, text};
      throw Error(fmt::format("run {} ended before its stacks were taken", record.run_id));
    }
    char events[4096];
    while (read(watch.fd, events, sizeof events) > 0) {
    }
  }
  throw Error(
      fmt::format("run {} did not answer within {:g} s (its flowrun is pid {}; the stacks it takes go "
                  "to {})",
                  record.run_id, wait_s, record.pid, file));
}

const char* kStacksFooter =
    R"(RUN: a run id, a unique prefix of one, latest (the newest run), or a run directory.
The run's own flowrun takes the stacks, on this host and, through its agents, on every node:
py-spy's Python stack of each running rank (the kernel's state when py-spy is missing), all at
once, within the step's forensics timeout (3 s unless the spec says otherwise). Ranks with the
same stack are grouped, and each group named by its innermost frame of user code, so the odd one
out stands out. Nothing is stopped. Run it on the host where the run's flowrun runs.
The same: kill -QUIT <flowrun's pid>, or Ctrl-\ at its terminal. Each rank's whole stack goes to
RUN/STEP/rankR/stack.txt, the grouping to RUN/STEP/stacks.json (--json prints it).

Example:
  flowrun stacks latest
  flowrun: stacks of step 'train' (4 ranks, by py-spy); nothing was stopped
  flowrun:   ranks 0, 1, 3 (3 of 4) are in all_reduce (train.py:88); rank 2 is in load_batch (data.py:41)
  flowrun:   whole stacks: .flowrun/runs/q-20261202-063308-3fa2c1/train/rank*/stack.txt

Exit codes: 0 shown; 1 the run is not running or did not answer in time; 2 no such run. See docs/cli.md.)";

}  // namespace

int cmd_stacks(int argc, char** argv) {
  std::string run;
  double wait_s = 30;
  bool json = false;
  CLI::App app{"Print where every rank of a running step is (its Python stack), stopping nothing",
               "flowrun stacks"};
  add_run_argument(app, run);
  app.add_option("--wait", wait_s, "Seconds to wait for the run's answer (default 30)")
      ->type_name("SECONDS")
      ->check(seconds_between(0.001, 86400));
  app.add_flag("--json", json, "Print the step's stacks.json instead");
  app.footer(kStacksFooter);
  if (const auto done = parse_subcommand(app, "stacks", argc, argv)) return *done;
  return report_errors([&]() -> int {
    const std::string run_dir = locate_run(run, current_directory());
    trusted_run_dir(run_dir);
    const RunRecord record = read_record_of(run_dir);
    if (!run_in_progress(run_dir))
      throw Error(
          fmt::format("run {} is not running ({}): flowrun stacks asks a running step; the stacks "
                      "taken when a step was stopped are in its results.json and rankR/stack.txt",
                      record.run_id, read_run_row(run_dir).state));
    const std::string step = running_step(record);
    if (step.empty()) throw Error(fmt::format("no step of run {} is running now", record.run_id));
    const auto [report, text] = ask_for_stacks(run_dir, record, step, wait_s);
    if (json) {
      std::cout << text;
      return kExitOk;
    }
    std::string out = stacks_headline(step, report) + "\n";
    if (!report.groups.empty()) out += format_stacks_line(report) + "\n";
    if (report.ranks > 0)
      out += fmt::format("flowrun:   whole stacks: {}/{}/rank*/stack.txt\n", run_dir, step);
    std::cout << out;
    return kExitOk;
  });
}

}  // namespace flowrun
