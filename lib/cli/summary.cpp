#include "summary.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <iostream>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>

#include "flowrun/fd.h"
#include "flowrun/files.h"
#include "flowrun/flow.h"
#include "flowrun/json.h"
#include "flowrun/retry_advice.h"
#include "flowrun/run_page.h"
#include "flowrun/supervisor.h"
#include "flowrun/util.h"

#include "commands.h"

namespace flowrun {

namespace {

// As resume reads them: a run's records are small, but a worker's notes may
// make results.json large.
constexpr std::size_t kMaxRecordBytes = 16 << 20;

std::optional<Json> read_json(const std::string& path) {
  const auto text = try_read_file(path, kMaxRecordBytes);
  if (!text) return std::nullopt;
  return parse_json(*text);
}

// run.json in `run_dir` when this process wrote it, since `since_unix_ns` (a
// run directory taken by another run, which flowrun refused, holds that run's
// record; in a container its flowrun may have had this pid): as resume reads
// it, and as it is, for what the summary copies.
struct OwnRecord {
  RunRecord record;
  Json doc;
};

std::optional<OwnRecord> own_record(const std::string& run_dir, std::int64_t since_unix_ns) {
  if (run_dir.empty()) return std::nullopt;
  const auto text = try_read_file(run_dir + "/run.json", kMaxRecordBytes);
  if (!text) return std::nullopt;
  try {
    OwnRecord own{parse_run_json(*text, run_dir + "/run.json"), *parse_json(*text)};
    // run.json has milliseconds.
    if (own.record.pid != static_cast<int>(getpid()) || own.record.start_unix_ns + 1'000'000 < since_unix_ns)
      return std::nullopt;
    return own;
  } catch (const Error&) {
    return std::nullopt;
  }
}

// Scalars as they are; anything else is not a value the summary copies.
Json copy_of(const Json* value) { return value != nullptr && value->is_primitive() ? *value : Json(); }

const Json* workers_of(const Json* results) {
  const Json* ranks = results != nullptr ? find(*results, "ranks") : nullptr;
  return ranks != nullptr && ranks->is_array() ? ranks : nullptr;
}

// The worker of the last attempt that caused the step's failure.
const Json* culprit_worker(const Json* results) {
  if (const Json* workers = workers_of(results)) {
    for (const auto& w : *workers) {
      if (const auto* role = find_string(w, "role"); role && *role == "culprit") return &w;
    }
  }
  return nullptr;
}

// A step as the summary has it: run.json's state, results.json's outcome.
Json step_json(const std::string& name, const std::string& state, const std::string& results_path,
               const Json* results) {
  Json json;
  json["name"] = name;
  json["state"] = state;
  if (results == nullptr) {
    json["outcome"] = nullptr;
    json["exit_code"] = nullptr;
    json["attempts"] = 0;
    json["failed_ranks"] = Json::array();
    json["results"] = nullptr;
    return json;
  }
  json["outcome"] = copy_of(find(*results, "outcome"));
  json["exit_code"] = copy_of(find(*results, "exit_code"));
  const Json* attempts = find(*results, "attempts");
  json["attempts"] = attempts && attempts->is_array() ? static_cast<int>(attempts->size()) : 0;
  // The ranks that failed by themselves: the culprit and those that failed
  // after it (not the ones flowrun stopped).
  Json& failed = json["failed_ranks"] = Json::array();
  if (const Json* workers = workers_of(results)) {
    for (const auto& w : *workers) {
      const auto* role = find_string(w, "role");
      const auto rank = find_int(w, "rank");
      if (role && (*role == "culprit" || *role == "failed_after") && rank) failed.push_back(*rank);
    }
  }
  json["results"] = results_path;
  return json;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return !path.empty() && stat(path.c_str(), &st) == 0;
}

// The step that made the run fail, and its culprit rank when it had one.
Json culprit_json(const std::string& step, const Json* results) {
  Json json;
  json["step"] = step;
  if (results == nullptr) {
    for (const char* key : {"outcome", "step_exit_code", "rank", "node", "status", "exit_code", "signal",
                            "shell_code", "stderr_log", "error_file"})
      json[key] = nullptr;
    return json;
  }
  json["outcome"] = copy_of(find(*results, "outcome"));
  json["step_exit_code"] = copy_of(find(*results, "exit_code"));
  static const Json none;
  const Json* w = culprit_worker(results);
  const Json& worker = w != nullptr ? *w : none;
  for (const char* key : {"rank", "node", "status", "exit_code", "signal", "shell_code", "stderr_log"})
    json[key] = copy_of(find(worker, key));
  // Only when the worker wrote one.
  const std::string* error_file = find_string(worker, "error_file");
  json["error_file"] = error_file != nullptr && file_exists(*error_file) ? Json(*error_file) : Json();
  return json;
}

std::string run_state(const RunRecord& record, int exit_code,
                      const std::vector<std::optional<Json>>& results) {
  if (!record.error.empty()) return "error";
  if (exit_code == 0) return "succeeded";
  bool not_run = false;
  for (std::size_t i = 0; i < record.steps.size(); ++i) {
    if (record.steps[i].second == "not_run") not_run = true;
    const auto& r = results[i];
    if (r && r->is_object()) {
      if (const auto* outcome = find_string(*r, "outcome"); outcome && *outcome == "interrupted")
        return "interrupted";
    }
  }
  return exit_code > 128 && not_run ? "interrupted" : "failed";
}

Json null_or(const std::string& text) { return text.empty() ? Json() : Json(text); }

// failure_class, retry_may_help and retry_why: the culprit step's, as its
// results.json has them, or what the run's state and exit code say.
void put_retry(Json& json, const Json* culprit_results) {
  const std::string state = json["state"].get<std::string>();
  if (culprit_results != nullptr && culprit_results->contains("retry_may_help")) {
    for (const char* key : {"failure_class", "retry_may_help", "retry_why"})
      json[key] = copy_of(find(*culprit_results, key));
    return;
  }
  const auto advice = advise_retry_for_run(state, json["exit_code"].get<int>());
  json["failure_class"] = advice ? Json(failure_class_name(advice->failure_class)) : Json();
  json["retry_may_help"] = advice && advice->may_help;
  json["retry_why"] = advice ? Json(advice->why) : Json();
}

// A stop signal before the run holds them (spec read from a slow or blocked
// file, the GPU inventory, planning) would end flowrun by its default action,
// with no summary at all. Until then this handler writes one made beforehand,
// "interrupted" with no run, and exits as the signal would have made a run
// exit (128 + N). Only async-signal-safe calls: open, write, rename, _exit.
struct EarlySummary {
  std::string file, tmp;  // --summary-json FILE and its temporary name; empty: none
  int json_fd = -1;       // --json: the stdout set aside
  pid_t owner = 0;        // flowrun itself: a child between fork and exec takes the default action
  std::string texts[NSIG];
};
EarlySummary* early_summary = nullptr;

extern "C" void stop_before_run(int sig) {
  const EarlySummary* early = early_summary;
  if (early != nullptr && early->owner != getpid()) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  if (early != nullptr && sig > 0 && sig < NSIG) {
    const std::string& text = early->texts[sig];
    if (!early->file.empty()) {
      // A name no one could plant a link or a FIFO at beforehand, made anew.
      const int fd = open(early->tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (fd >= 0) {
        write_all(fd, text);
        if (close(fd) == 0) rename(early->tmp.c_str(), early->file.c_str());
      }
    }
    if (early->json_fd >= 0) write_all(early->json_fd, text);
  }
  _exit(128 + sig);
}

// Installs stop_before_run for the stop signals whose action is still the
// default (one flowrun's caller ignored stays ignored).
void hold_early_summary(EarlySummary& early, const SummaryTarget& target) {
  for (int sig : kStopSignals) {
    early.texts[sig] = format_summary_json(target, 128 + sig,
                                           "interrupted by " + signal_name(sig) + " before the run started");
  }
  early.owner = getpid();
  early_summary = &early;
  for (int sig : kStopSignals) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_handler = stop_before_run;
    sigemptyset(&sa.sa_mask);
    for (int other : kStopSignals) sigaddset(&sa.sa_mask, other);  // one summary, whole
    sigaction(sig, &sa, nullptr);
  }
}

}  // namespace

SummaryRequest scan_summary_request(const std::vector<std::string>& words) {
  SummaryRequest request;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& word = words[i];
    if (word == "--json") {
      request.json = true;
    } else if (word == "--summary-json" && i + 1 < words.size()) {
      request.file = words[++i];
    } else if (word.rfind("--summary-json=", 0) == 0 && word.size() > 15) {
      request.file = word.substr(15);
    }
  }
  return request;
}

// The run's page (flowrun report): where it goes, whether it is there yet, and
// the command that writes it, for a CI job to run before it keeps the file.
namespace {
Json report_json(const std::string& run_dir) {
  const std::string page = run_dir + "/" + kRunReportFile;
  struct stat st {};
  return {{"path", page},
          {"exists", ::stat(page.c_str(), &st) == 0},
          {"command", "flowrun report " + shell_quote(run_dir)}};
}
}  // namespace

std::string format_summary_json(const SummaryTarget& target, int exit_code, const std::string& error) {
  const std::string& run_dir = target.run_dir;
  const std::optional<OwnRecord> own = own_record(run_dir, target.since_unix_ns);
  const RunRecord* record = own ? &own->record : nullptr;
  Json json;
  json["format"] = kSummaryFormat;
  if (!record) {
    json["run_id"] = nullptr;
    json["run_dir"] = nullptr;
    json["flow"] = nullptr;
    json["state"] = exit_code == 0                                              ? "succeeded"
                    : exit_code == kExitUsage                                   ? "usage_error"
                    : exit_code > 128 && error.rfind("interrupted by ", 0) == 0 ? "interrupted"
                                                                                : "error";
    json["exit_code"] = exit_code;
    json["error"] = null_or(error);
    json["resumed_from"] = nullptr;
    json["start"] = nullptr;
    json["end"] = nullptr;
    json["steps"] = Json::array();
    json["culprit"] = nullptr;
    put_retry(json, nullptr);
    return to_document(json);
  }
  std::vector<std::optional<Json>> results;
  for (const auto& step : record->steps) {
    auto doc = read_json(run_dir + "/" + step.first + "/results.json");
    if (doc && !doc->is_object()) doc.reset();
    results.push_back(std::move(doc));
  }
  json["run_id"] = record->run_id;
  json["run_dir"] = run_dir;
  json["flow"] = record->flow;
  json["state"] = run_state(*record, exit_code, results);
  json["exit_code"] = exit_code;
  json["error"] = null_or(!record->error.empty() ? record->error : error);
  json["resumed_from"] = null_or(record->resumed_from_id);
  json["start"] = copy_of(find(own->doc, "start"));
  json["end"] = copy_of(find(own->doc, "end"));
  Json& steps = json["steps"] = Json::array();
  std::optional<std::size_t> culprit;
  for (std::size_t i = 0; i < record->steps.size(); ++i) {
    const auto& [name, state] = record->steps[i];
    if (!culprit && state == "failed") culprit = i;
    steps.push_back(
        step_json(name, state, run_dir + "/" + name + "/results.json", results[i] ? &*results[i] : nullptr));
  }
  const bool blamed = culprit && exit_code != 0;
  const Json* culprit_results = blamed && results[*culprit] ? &*results[*culprit] : nullptr;
  json["culprit"] = blamed ? culprit_json(record->steps[*culprit].first, culprit_results) : Json();
  put_retry(json, culprit_results);
  json["report"] = report_json(run_dir);
  return to_document(json);
}

std::string format_validate_json(const std::string& spec_path, const std::vector<Diagnostic>& errors,
                                 const std::vector<std::string>& steps) {
  Json json;
  json["format"] = kValidateFormat;
  json["spec"] = spec_path;
  json["valid"] = errors.empty();
  json["steps"] = steps;
  Json& list = json["errors"] = Json::array();
  for (const auto& d : errors) {
    list.push_back({{"file", d.file},
                    {"line", d.loc.line > 0 ? Json(d.loc.line) : Json()},
                    {"column", d.loc.column > 0 ? Json(d.loc.column) : Json()},
                    {"path", null_or(d.path)},
                    {"message", d.message},
                    {"text", d.to_string()}});
  }
  // Nothing in a spec is only a warning today; the key is there for when it is.
  json["warnings"] = Json::array();
  return to_document(json);
}

int report_with_summary(const SummaryRequest& request, const std::function<int(SummaryTarget&)>& command) {
  SummaryTarget target;
  target.since_unix_ns = unix_now_ns();
  if (!request.wanted()) return report_errors([&] { return command(target); });
  // With --json, stdout is the summary's alone: what would go there (the
  // workers' stdout, a dry run's plan) goes to stderr, as flowrun's own lines do.
  int summary_fd = -1;
  if (request.json) {
    std::cout.flush();
    std::fflush(stdout);
    summary_fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    if (summary_fd < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
      std::cerr << "flowrun: error: --json: cannot set stdout aside: " << std::strerror(errno) << "\n";
      return kExitFailure;
    }
  }
  EarlySummary early;
  if (!request.file.empty()) {
    early.file = request.file;
    early.tmp = request.file + ".tmp-" + random_hex(8);  // unguessable, as try_write_file's
  }
  early.json_fd = summary_fd;
  hold_early_summary(early, target);
  std::string error;
  int code = report_errors([&] { return command(target); }, &error);
  std::cout.flush();
  std::fflush(stdout);

  // A stop signal now would end flowrun with the summary half made: held, and
  // dropped when flowrun exits (the run has ended already).
  sigset_t held;
  sigemptyset(&held);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&held, sig);
  sigprocmask(SIG_BLOCK, &held, nullptr);
  early_summary = nullptr;

  const std::string text = format_summary_json(target, code, error);
  if (!request.file.empty()) {
    if (const int err = try_write_file(request.file, text); err != 0) {
      std::cerr << "flowrun: error: cannot write the summary " << request.file << ": " << file_error_text(err)
                << "\n";
      if (code == 0) code = kExitFailure;
    }
  }
  if (summary_fd >= 0) {
    dup2(summary_fd, STDOUT_FILENO);
    close(summary_fd);
    if (!write_all(STDOUT_FILENO, text.data(), text.size())) {
      std::cerr << "flowrun: error: --json: cannot write the summary to stdout: " << std::strerror(errno)
                << "\n";
      if (code == 0) code = kExitFailure;
    }
  }
  return code;
}

}  // namespace flowrun
