// run.json, and what `flowrun resume` reads of an earlier run and decides.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <sstream>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flowrun/beneath.h"
#include "flowrun/error.h"
#include "flowrun/fd.h"
#include "flowrun/files.h"
#include "flowrun/flow.h"
#include "flowrun/json.h"

namespace flowrun {

namespace fs = std::filesystem;

namespace {

std::string iso_time(std::int64_t unix_ns) {
  const std::int64_t ms = unix_ns / 1'000'000;
  const auto seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000);
}

// Parses what iso_time writes; 0 for anything else.
std::int64_t parse_iso_time(const std::string& text) {
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7)
    return 0;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<std::int64_t>(timegm(&tm)) * 1'000'000'000 + std::int64_t{ms} * 1'000'000;
}

std::string quoted(const std::string& name) { return "'" + name + "'"; }

// "a", "a and b", "a, b and c".
std::string and_list(const std::vector<std::string>& items) {
  if (items.size() <= 1) return items.empty() ? "" : items.front();
  std::vector<std::string> head(items.begin(), items.end() - 1);
  return join(head, ", ") + " and " + items.back();
}

bool uses_args(const Step& step) {
  auto has = [](const std::string& text) {
    std::string error;
    auto found = find_placeholders(text, &error);
    return found && std::any_of(found->begin(), found->end(),
                                [](const Placeholder& p) { return p.kind == Placeholder::Kind::args; });
  };
  if (step.shell) return has(step.script);
  return std::any_of(step.argv.begin(), step.argv.end(), has);
}

std::string parallel_text(const Step& step) {
  if (!step.parallel) return "none";
  const ParallelSpec& p = *step.parallel;
  auto count = [](const AutoCount& c) { return c.value ? std::to_string(*c.value) : std::string("auto"); };
  return fmt::format("gpus {} {} [{}]; nodes {}; procs {}; cpus {}; visible {}",
                     static_cast<int>(p.gpus.kind), p.gpus.count, join(p.gpus.ids, ","), count(p.nodes),
                     count(p.procs_per_node), p.cpus ? std::to_string(*p.cpus) : "-",
                     static_cast<int>(p.visible_devices));
}

std::vector<std::string> env_text(const EnvList& env) {
  std::vector<std::string> out;
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

std::vector<std::string> sorted(std::vector<std::string> items) {
  std::sort(items.begin(), items.end());
  return items;
}

// Hard-links (copies across file systems) every file under `from` to the same
// place under `to`; returns the number of files.
std::size_t link_tree(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec) throw Error("cannot create the directory " + to.string() + ": " + ec.message());
  std::size_t files = 0;
  fs::recursive_directory_iterator it(from, ec), end;
  if (ec) throw Error("cannot read " + from.string() + ": " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const fs::path source = it->path();
    const fs::path dest = to / source.lexically_relative(from);
    const fs::file_status status = fs::symlink_status(source, ec);
    if (ec) break;
    if (fs::is_directory(status)) {
      fs::create_directory(dest, ec);
    } else if (fs::is_symlink(status)) {
      fs::copy_symlink(source, dest, ec);
    } else if (fs::is_regular_file(status)) {
      if (link(source.c_str(), dest.c_str()) != 0) {
        fs::copy_file(source, dest, ec);
        if (!ec) fs::last_write_time(dest, fs::last_write_time(source, ec), ec);
      }
      ++files;
    }
    if (ec) throw Error("cannot take " + source.string() + " into " + dest.string() + ": " + ec.message());
  }
  if (ec) throw Error("cannot read " + from.string() + ": " + ec.message());
  return files;
}

}  // namespace

// --- run.json -------------------------------------------------------------

std::string format_run_json(const RunRecord& record) {
  auto optional_int = [](const std::optional<int>& value) { return value ? Json(*value) : Json(); };
  auto string_or_null = [](const std::string& text) { return text.empty() ? Json() : Json(text); };
  Json json;
  json["format"] = kRunFormat;
  json["run_id"] = record.run_id;
  json["run_dir"] = record.run_dir;
  json["flow"] = record.flow;
  json["spec"] = string_or_null(record.spec_file);
  json["spec_dir"] = record.spec_dir;
  json["args"] = record.args;
  json["cpus"] = optional_int(record.cpus);
  json["fake_gpus"] = optional_int(record.fake_gpus);
  json["python"] = string_or_null(record.python);
  json["host"] = record.host;
  json["pid"] = record.pid;
  json["state"] = record.finished ? "finished" : "running";
  json["exit_code"] = optional_int(record.exit_code);
  json["start"] = iso_time(record.start_unix_ns);
  json["end"] = record.end_unix_ns > 0 ? Json(iso_time(record.end_unix_ns)) : Json();
  Json& steps = json["steps"] = Json::object();
  for (const auto& [name, state] : record.steps) steps[name] = state;
  json["resumed_from"] = record.resumed_from_id.empty() ? Json()
                                                        : Json{{"run_id", record.resumed_from_id},
                                                               {"run_dir", record.resumed_from_dir},
                                                               {"by", record.resumed_by}};
  json["error"] = string_or_null(record.error);
  json["slurm"] = record.slurm_job_id.empty()
                      ? Json()
                      : Json{{"job_id", record.slurm_job_id}, {"restart_count", record.slurm_restart_count}};
  json["gang"] = record.gang_id.empty()
                     ? Json()
                     : Json{{"id", record.gang_id},
                            {"attempt", record.gang_attempt ? Json(*record.gang_attempt) : Json()}};
  Json& attempts = json["attempts_started"] = Json::object();
  for (const auto& [step, count] : record.attempts_started) attempts[step] = count;
  // Paths and arguments are bytes, which resume and a requeue need exactly.
  return to_document(json, Bytes::keep);
}

RunRecord parse_run_json(const std::string& text, const std::string& path) {
  const auto doc = parse_json(text, Bytes::keep);
  auto refuse = [&](const std::string& why) {
    return Error(path + ": " + why + "; it cannot be resumed (run the spec again instead)", kExitUsage);
  };
  if (!doc || !doc->is_object()) throw refuse("not a run record (not a JSON object)");
  const auto format = find_int(*doc, "format");
  if (!format) throw refuse("not a run record (no \"format\")");
  if (*format > kRunFormat)
    throw Error(fmt::format("{}: written by a newer flowrun (run format {}; this flowrun reads format {}); "
                            "resume it with the flowrun that ran it",
                            path, *format, kRunFormat),
                kExitUsage);
  if (*format < kRunFormat)
    throw refuse(fmt::format("written by an older flowrun (run format {}; this flowrun reads format {})",
                             *format, kRunFormat));
  RunRecord record;
  const std::string* id = find_string(*doc, "run_id");
  const std::string* dir = find_string(*doc, "run_dir");
  if (id == nullptr || id->empty() || dir == nullptr)
    throw refuse("not a run record (no \"run_id\" or \"run_dir\")");
  record.run_id = *id;
  record.run_dir = *dir;
  if (const auto* flow = find_string(*doc, "flow")) record.flow = *flow;
  if (const auto* spec = find_string(*doc, "spec")) record.spec_file = *spec;
  if (const auto* spec_dir = find_string(*doc, "spec_dir")) record.spec_dir = *spec_dir;
  if (const Json* args = find(*doc, "args"); args && args->is_array()) {
    for (const auto& arg : *args) {
      if (!arg.is_string()) throw refuse("\"args\" holds something other than strings");
      record.args.push_back(arg.get<std::string>());
    }
  }
  record.cpus = find_int(*doc, "cpus");
  record.fake_gpus = find_int(*doc, "fake_gpus");
  if (const auto* python = find_string(*doc, "python")) record.python = *python;
  if (const auto* host = find_string(*doc, "host")) record.host = *host;
  record.pid = find_int(*doc, "pid").value_or(0);
  if (const auto* state = find_string(*doc, "state")) record.finished = *state == "finished";
  record.exit_code = find_int(*doc, "exit_code");
  if (const auto* start = find_string(*doc, "start")) record.start_unix_ns = parse_iso_time(*start);
  if (const auto* end = find_string(*doc, "end")) record.end_unix_ns = parse_iso_time(*end);
  if (const Json* steps = find(*doc, "steps"); steps && steps->is_object()) {
    for (const auto& [name, state] : steps->items())
      record.steps.emplace_back(name, state.is_string() ? state.get<std::string>() : "");
  }
  if (const Json* from = find(*doc, "resumed_from")) {
    if (const auto* from_id = find_string(*from, "run_id")) record.resumed_from_id = *from_id;
    if (const auto* from_dir = find_string(*from, "run_dir")) record.resumed_from_dir = *from_dir;
    if (const auto* by = find_string(*from, "by")) record.resumed_by = *by;
  }
  if (const auto* error = find_string(*doc, "error")) record.error = *error;
  if (const Json* slurm = find(*doc, "slurm")) {
    if (const auto* job = find_string(*slurm, "job_id")) record.slurm_job_id = *job;
    record.slurm_restart_count = find_int(*slurm, "restart_count").value_or(0);
  }
  if (const Json* gang = find(*doc, "gang")) {
    if (const auto* gang_id = find_string(*gang, "id")) record.gang_id = *gang_id;
    record.gang_attempt = find_int(*gang, "attempt");
  }
  if (const Json* attempts = find(*doc, "attempts_started"); attempts && attempts->is_object()) {
    for (const auto& [step, count] : attempts->items()) {
      if (count.is_number_integer()) record.attempts_started.emplace_back(step, count.get<int>());
    }
  }
  return record;
}

RunRecord read_run_record(const std::string& run_dir) {
  const std::string path = run_dir + "/run.json";
  int err = 0;
  const auto text = try_read_file(path, kMaxRecordBytes, &err);
  if (!text) {
    std::error_code ec;
    if (!fs::is_directory(run_dir, ec))
      throw Error(
          "no run directory " + run_dir + (err == ENOENT ? "" : std::string(": ") + file_error_text(err)),
          kExitUsage);
    if (err == ENOENT) {
      if (fs::exists(run_dir + "/spec.yaml", ec) || fs::exists(run_dir + "/plan.json", ec))
        throw Error(
            run_dir +
                " was written by an older flowrun, which did not record run.json; it cannot be resumed "
                "(run the spec again instead)",
            kExitUsage);
      throw Error(run_dir + " is not a flowrun run directory: it has no run.json", kExitUsage);
    }
    throw Error(path + " is damaged: " + file_error_text(err), kExitUsage);
  }
  RunRecord record = parse_run_json(*text, path);
  // The directory as found wins over the one recorded: a run directory may
  // have been moved or reached through another path.
  record.run_dir = run_dir;
  return record;
}

// --- run.lock -------------------------------------------------------------

namespace {

std::string lock_line(const std::string& host, std::string_view command, const std::string& run_id) {
  return fmt::format("{} {} {} {}\n", getpid(), host.empty() ? "-" : host, command,
                     run_id.empty() ? "-" : run_id);
}

struct Holder {
  std::string pid, host, command, run_id;
};

// Who run.lock says holds it; nullopt for a lock file without its line (a
// run of an older flowrun).
std::optional<Holder> read_holder(const std::string& path) {
  // Not a stream that could block: a FIFO planted as run.lock is refused.
  const auto text = try_read_file(path, 4096);
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  Holder h;
  if (!(in >> h.pid >> h.host >> h.command >> h.run_id)) return std::nullopt;
  return h;
}

bool lock_is_held(const std::string& path) {
  // O_NONBLOCK and O_NOFOLLOW: a FIFO or a link in run.lock's place is not
  // a lock anyone holds, and must not block this reader.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return false;
  }
  int rc;
  do {
    rc = flock(fd, LOCK_SH | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  const bool held = rc != 0 && errno == EWOULDBLOCK;
  close(fd);
  return held;
}

// "flowrun pid 4242 on host-a, running run flow-...": the holder of a lock
// found held.
std::string describe_holder(const std::string& path) {
  const auto h = read_holder(path);
  if (!h) return "another flowrun";
  if (h->command == "resume") return fmt::format("flowrun pid {} on {}, resuming the run", h->pid, h->host);
  return fmt::format("flowrun pid {} on {}, running run {}", h->pid, h->host, h->run_id);
}

// Why a new run cannot have `run_dir`, which is not empty.
Error taken(const std::string& run_dir) {
  const std::string lock = run_dir + "/run.lock";
  if (lock_is_held(lock))
    return Error(fmt::format("the run directory {} is in use ({}); choose another --run-id or --run-dir",
                             run_dir, describe_holder(lock)),
                 kExitUsage);
  std::error_code ec;
  if (fs::exists(run_dir + "/run.json", ec)) {
    std::string who = "an earlier run";
    try {
      const RunRecord record = read_run_record(run_dir);
      who = fmt::format("run {} (flowrun pid {} on {}, which has ended)", record.run_id, record.pid,
                        record.host.empty() ? "an unknown host" : record.host);
    } catch (const Error&) {
    }
    return Error(fmt::format("the run directory {} already holds {}; choose another --run-id or --run-dir "
                             "(flowrun resume {} runs again what did not succeed)",
                             run_dir, who, run_dir),
                 kExitUsage);
  }
  for (fs::directory_iterator it(run_dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().starts_with(".run.lock."))  // RunLock::create's, before its link
      return Error(
          "the run directory " + run_dir +
              " is in use (another flowrun is starting a run in it); choose another --run-id or --run-dir",
          kExitUsage);
  }
  return Error("the run directory " + run_dir +
                   " already holds files (of another run?); choose a new --run-dir or remove it",
               kExitUsage);
}

// Refuses `run_dir` and the directories above it up to `workdir` (see
// RunLock::create) when another user could change them under the run.
void require_safe_run_dir(const std::string& run_dir, const std::string& workdir, bool itself) {
  const std::string fix_own =
      "give the run a directory of your own (--run-dir DIR, one that does not exist yet or that you made "
      "empty with mkdir -m 700)";
  const std::string fix_parent = "another user could swap the run directory for theirs through it; " +
                                 fix_own + ", or make it yours and not writable by others (chmod go-w)";
  const fs::path top = fs::path(workdir).lexically_normal();
  fs::path dir = fs::path(run_dir).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // "runs/x/" is runs/x
  const bool under_workdir = !workdir.empty() && dir.string().starts_with(top.string() + "/");
  // The run directory itself never through a link; the directories above it
  // as the user named them (a workdir under /scratch -> /data).
  auto check = [&](const fs::path& d, bool first) {
    const UniqueFd fd(open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | (first ? O_NOFOLLOW : 0)));
    if (!fd) {
      if (first && (errno == ELOOP || errno == ENOTDIR))
        throw Error("refusing the run directory " + run_dir + ": it is a symbolic link; " + fix_own,
                    kExitUsage);
      throw Error("cannot open " + d.string() + ": " + std::strerror(errno), kExitUsage);
    }
    require_private_directory(fd.get(), d.string(),
                              first ? "the run directory" : "the run directory's parent", !first,
                              first ? fix_own : fix_parent);
  };
  if (itself) {
    check(dir, true);
    return;
  }
  do {
    const fs::path up = dir.parent_path();
    if (up == dir) break;
    dir = up;
    check(dir, false);
  } while (under_workdir && dir != top);
}

}  // namespace

RunLock RunLock::create(const std::string& run_dir, const std::string& run_id, const std::string& host,
                        const std::string& workdir) {
  const std::string parent = fs::path(run_dir).parent_path().string();
  if (!parent.empty() && parent != run_dir) make_dirs(parent);
  // Before anything is made in it: another user's .flowrun/runs gets nothing.
  require_safe_run_dir(run_dir, workdir, false);
  // mkdir, not make_dirs: of two flowruns making the same directory, one
  // gets EEXIST. An empty directory made beforehand (mktemp -d) is taken too;
  // then run.lock, made by link(), which fails with EEXIST for the second, is
  // what decides. Linked from a file already locked and written, it is never
  // seen empty or unlocked.
  if (mkdir(run_dir.c_str(), 0755) != 0) {
    const int err = errno;
    struct stat st {};
    if (err != EEXIST) throw Error("cannot create the run directory " + run_dir + ": " + std::strerror(err));
    if (stat(run_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw Error("the run directory " + run_dir + " exists and is not a directory; choose another --run-dir",
                  kExitUsage);
    require_safe_run_dir(run_dir, workdir, true);
    std::error_code ec;
    if (!fs::is_empty(run_dir, ec) || ec) throw taken(run_dir);
  } else {
    // Made here: no one else's, and not writable by others whatever the
    // umask allowed (a group's members could plant links in it).
    struct stat st {};
    if (stat(run_dir.c_str(), &st) == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
      chmod(run_dir.c_str(), st.st_mode & 0755);
    require_safe_run_dir(run_dir, workdir, true);
  }
  anchor_directory(run_dir);
  const std::string path = run_dir + "/run.lock";
  const std::string tmp = fmt::format("{}/.run.lock.{}", run_dir, getpid());
  const std::string line = lock_line(host, "run", run_id);
  int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST) throw taken(run_dir);  // a flowrun of the same pid elsewhere is at it
  if (fd < 0) throw Error("cannot create " + tmp + ": " + std::strerror(errno));
  auto fail = [&](const std::string& what, int err) {
    close(fd);
    unlink(tmp.c_str());
    if (err == EEXIST) throw taken(run_dir);
    throw Error("cannot " + what + " " + path + ": " + std::strerror(err));
  };
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) fail("lock", errno);
  if (!write_all(fd, line)) fail("write", errno);
  if (link(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    if (err != EPERM && err != EOPNOTSUPP) fail("create", err);
    // A file system without hard links: run.lock is made exclusively in
    // place, and is empty until its line is written.
    close(fd);
    unlink(tmp.c_str());
    fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      if (errno == EEXIST) throw taken(run_dir);
      throw Error("cannot create " + path + ": " + std::strerror(errno));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 || !write_all(fd, line)) {
      const int e = errno;
      close(fd);
      throw Error("cannot lock " + path + ": " + std::strerror(e));
    }
    return RunLock(fd);
  }
  unlink(tmp.c_str());
  return RunLock(fd);
}

RunLock RunLock::resume(const std::string& run_dir, const std::string& run_id, const std::string& host) {
  require_safe_run_dir(run_dir, "", true);
  require_safe_run_dir(run_dir, "", false);
  const std::string path = run_dir + "/run.lock";
  bool writable = true;
  // Never through a link (it would truncate and write the link's target)
  // nor into a FIFO or a device: what a rank of the run may have put there.
  const int flags = O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  int fd = open(path.c_str(), O_RDWR | O_CREAT | flags, 0644);
  if (fd < 0 && (errno == EACCES || errno == EROFS)) {  // a run directory one may only read
    writable = false;
    fd = open(path.c_str(), O_RDONLY | flags);
  }
  struct stat st {};
  if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    close(fd);
    throw Error(fmt::format("{} is damaged: {}; without its lock, run {} could be resumed twice at once: "
                            "remove it if no flowrun runs or resumes that run",
                            path, file_error_text(kErrNotRegular), run_id),
                kExitUsage);
  }
  if (fd < 0)
    throw Error(fmt::format("cannot open {}: {}; without its lock, run {} could be resumed twice at once",
                            path, errno == ELOOP ? "it is a symbolic link" : std::strerror(errno), run_id),
                kExitUsage);
  int rc;
  do {
    rc = flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    close(fd);
    if (err != EWOULDBLOCK) throw Error("cannot lock " + path + ": " + std::strerror(err));
    const auto h = read_holder(path);
    if (h && h->command == "resume")
      throw Error(
          fmt::format("run {} is being resumed already (flowrun pid {} on {}); wait for that resume to "
                      "end, then resume the run it made",
                      run_id, h->pid, h->host),
          kExitUsage);
    throw Error(fmt::format("run {} is still in progress ({}); resume it once it has ended", run_id,
                            h ? fmt::format("flowrun pid {} on {}", h->pid, h->host) : "another flowrun"),
                kExitUsage);
  }
  if (writable) {
    const std::string line = lock_line(host, "resume", "");
    if (ftruncate(fd, 0) != 0 || !write_all(fd, line)) {
      // The lock holds all the same; only the name of its holder is missing.
    }
  }
  return RunLock(fd);
}

RunLock::~RunLock() {
  if (fd_ >= 0) close(fd_);
}

bool run_in_progress(const std::string& run_dir) { return lock_is_held(run_dir + "/run.lock"); }

std::optional<std::string> run_lock_holder(const std::string& run_dir) {
  const std::string path = run_dir + "/run.lock";
  if (!lock_is_held(path)) return std::nullopt;
  const auto h = read_holder(path);
  return h ? fmt::format("flowrun pid {} on {}", h->pid, h->host) : std::string("another flowrun");
}

// --- finding a run --------------------------------------------------------

namespace {

// `dir` with a last component that is a link (.flowrun/runs/latest) replaced
// by the run directory it points at: the new run then names, reuses from and
// links to the run itself, which `latest` stops being once the new run starts.
std::string past_link(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_symlink(dir, ec)) return dir.string();
  const fs::path target = fs::read_symlink(dir, ec);
  if (ec) return dir.string();
  return (target.is_absolute() ? target : dir.parent_path() / target).lexically_normal().string();
}

}  // namespace

std::string find_run_dir(const std::string& run, const std::string& cwd) {
  std::error_code ec;
  if (run.empty()) throw Error("no run given: name a run id or a run directory", kExitUsage);
  const fs::path as_path = fs::path(cwd) / run;
  if (run.find('/') != std::string::npos || fs::is_directory(as_path, ec)) {
    if (!fs::is_directory(as_path, ec))
      throw Error("no run directory " + as_path.lexically_normal().string(), kExitUsage);
    std::string dir = as_path.lexically_normal().string();
    if (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return past_link(dir);
  }
  fs::path first_runs;  // the nearest .flowrun/runs, for a suggestion
  for (fs::path dir = fs::path(cwd).lexically_normal();; dir = dir.parent_path()) {
    const fs::path runs = dir / ".flowrun" / "runs";
    if (fs::is_directory(runs / run, ec)) return past_link(runs / run);
    if (first_runs.empty() && fs::is_directory(runs, ec)) first_runs = runs;
    if (dir == dir.parent_path() || dir.empty()) break;
  }
  std::string message = "no run '" + run + "' in " + (fs::path(cwd) / ".flowrun" / "runs").string() +
                        " nor in .flowrun/runs of a directory above it";
  if (!first_runs.empty()) {
    std::vector<std::string> ids;
    for (fs::directory_iterator it(first_runs, ec), end; !ec && it != end; it.increment(ec))
      ids.push_back(it->path().filename().string());
    if (auto match = closest_match(run, ids))
      message += "; did you mean '" + *match + "' (in " + first_runs.string() + ")?";
  }
  message +=
      "\nGive the run directory instead (flowrun printed it: 'logs and results in DIR'): flowrun resume DIR";
  throw Error(message, kExitUsage);
}

// --- what an earlier run did -----------------------------------------------

std::map<std::string, PriorStep> read_prior_steps(const RunRecord& record,
                                                  const std::vector<std::string>& names) {
  std::map<std::string, PriorStep> prior;
  for (const auto& name : names) {
    PriorStep& step = prior[name];
    for (const auto& [recorded, state] : record.steps) {
      if (recorded == name) step.state = state;
    }
    const std::string dir = record.run_dir + "/" + name;
    std::error_code ec;
    step.outputs = fs::is_directory(dir + "/outputs", ec);
    int err = 0;
    const auto text = try_read_file(dir + "/results.json", kMaxRecordBytes, &err);
    if (!text) continue;  // it did not run (or flowrun was killed while it ran)
    const auto doc = parse_json(*text);
    const std::string* outcome = doc ? find_string(*doc, "outcome") : nullptr;
    if (outcome == nullptr) {
      step.outcome = "unreadable";
      continue;
    }
    step.outcome = *outcome;
    if (const auto* end = find_string(*doc, "end")) step.end = *end;
    step.ran_in = record.run_id;
    if (const Json* from = find(*doc, "reused_from")) {
      if (const auto* id = find_string(*from, "run_id")) step.ran_in = *id;
    }
  }
  return prior;
}

std::vector<std::string> changed_parts(const Spec& now, const Step& step_now,
                                       const std::vector<std::string>& args_now, const Spec& before,
                                       const Step& step_before, const std::vector<std::string>& args_before) {
  std::vector<std::string> parts;
  auto compare = [&](const char* part, const auto& a, const auto& b) {
    if (a != b) parts.push_back(part);
  };
  compare("run", std::tie(step_now.shell, step_now.argv, step_now.script),
          std::tie(step_before.shell, step_before.argv, step_before.script));
  compare("env", env_text(step_now.env), env_text(step_before.env));
  compare("top-level env", env_text(now.env), env_text(before.env));
  compare("workdir", step_now.workdir, step_before.workdir);
  compare("needs", sorted(step_now.needs), sorted(step_before.needs));
  compare("join", step_now.join, step_before.join);
  compare("parallel", parallel_text(step_now), parallel_text(step_before));
  compare("outputs", step_now.outputs, step_before.outputs);
  compare("collect", step_now.collect, step_before.collect);
  if ((uses_args(step_now) || uses_args(step_before)) && args_now != args_before) parts.push_back("${args}");
  return parts;
}

std::vector<ResumeDecision> decide_resume(const ResumeQuestion& q) {
  const Spec& now = *q.now;
  const Spec& before = *q.before;
  const std::string in_run = " in run " + q.run_id;
  std::set<std::string> reused;
  std::vector<ResumeDecision> decisions;
  for (std::size_t index : now.order) {
    const Step& step = now.steps[index];
    ResumeDecision d{step.name, false, ""};
    const Step* old = before.find_step(step.name);
    const auto prior = q.prior.find(step.name);
    const std::string outcome = prior == q.prior.end() ? "" : prior->second.outcome;
    std::vector<std::string> blocked;
    for (const auto& need : step.needs) {
      if (!reused.contains(need)) blocked.push_back(need);
    }
    if (q.from && *q.from == step.name) {
      d.why = "--from " + step.name;
    } else if (old == nullptr) {
      d.why = "it is new since run " + q.run_id;
    } else if (outcome.empty()) {
      d.why = (prior != q.prior.end() && prior->second.state == "running" ? "it did not finish"
                                                                          : "it did not run") +
              in_run;
    } else if (outcome == "unreadable") {
      d.why = "its results.json" + in_run + " is unreadable";
    } else if (outcome != "succeeded") {
      d.why = (outcome == "timed_out"     ? "it timed out"
               : outcome == "stalled"     ? "it stalled"
               : outcome == "interrupted" ? "it was interrupted"
                                          : "it failed") +
              in_run;
    } else if (!blocked.empty()) {
      std::vector<std::string> names;
      for (const auto& b : blocked) names.push_back(quoted(b));
      d.why = "it needs " + and_list(names) + (blocked.size() == 1 ? ", which runs" : ", which run");
    } else if (auto parts = changed_parts(now, step, q.args_now, before, *old, q.args_before);
               !parts.empty()) {
      d.why = "its " + and_list(parts) + " changed since run " + q.run_id;
    } else if (step.is_parallel() && !prior->second.outputs) {
      d.why = "its gathered outputs are gone from " + q.run_dir + "/" + step.name + "/outputs";
    } else {
      d.reuse = true;
      reused.insert(step.name);
    }
    decisions.push_back(std::move(d));
  }
  return decisions;
}

// --- taking a step from an earlier run ----------------------------------------

std::string reuse_step(const Step& step, const ResumeFrom& from, const RunLayout& layout) {
  const std::string old_dir = from.run_dir + "/" + step.name;
  const std::string new_dir = layout.step_dir(step.name);
  std::error_code ec;
  fs::create_directories(new_dir, ec);
  if (ec) throw Error("cannot create the directory " + new_dir + ": " + ec.message());

  const std::string results_path = old_dir + "/results.json";
  auto doc = parse_json(read_file(results_path, kMaxRecordBytes));
  if (!doc || !doc->is_object()) throw Error(results_path + ": not a step's results (not a JSON object)");
  std::string ran_in = from.run_id;
  if (const Json* mark = find(*doc, "reused_from"); mark != nullptr && mark->is_object()) {
    // Taken again: it keeps naming the run that ran it.
    if (const auto* id = find_string(*mark, "run_id")) ran_in = *id;
  } else {
    // Later results formats only add keys, so one more at the end is safe.
    (*doc)["reused_from"] = {{"run_id", from.run_id}, {"run_dir", from.run_dir}};
  }
  write_file(new_dir + "/results.json", to_document(*doc));

  std::string files;
  if (step.is_parallel() && fs::is_directory(old_dir + "/outputs", ec)) {
    const std::size_t count = link_tree(old_dir + "/outputs", layout.inputs_dir(step.name));
    files = fmt::format("; {} output file{}", count, count == 1 ? "" : "s");
  }
  const std::string* end = find_string(*doc, "end");
  std::string when = end != nullptr ? "succeeded at " + *end : "succeeded";
  if (ran_in != from.run_id) when += " in run " + ran_in;
  return fmt::format("flowrun: step '{}' reused from run {} ({}{})", step.name, from.run_id, when, files);
}

}  // namespace flowrun
