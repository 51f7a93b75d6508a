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

#include "flowrun/files.h"
#include "flowrun/flow.h"
#include "flowrun/json.h"
#include "flowrun/json_read.h"
#include "flowrun/supervisor.h"

#include "commands.h"

namespace flowrun {

namespace {

// As resume reads them: a run's records are small, but a worker's notes may
// make results.json large.
constexpr std::size_t kMaxRecordBytes = 16 << 20;

std::optional<JsonValue> read_json(const std::string& path) {
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
  JsonValue doc;
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

void copy_value(JsonWriter& json, const JsonValue* value) {
  if (value == nullptr || value->is_null()) {
    json.null();
  } else if (value->is_string()) {
    json.value(value->string);
  } else if (value->type == JsonValue::Type::number) {
    json.value(static_cast<std::int64_t>(value->number));
  } else if (value->type == JsonValue::Type::boolean) {
    json.value(value->boolean);
  } else {
    json.null();  // not a value the summary copies
  }
}

void copy_key(JsonWriter& json, const JsonValue& from, std::string_view key) {
  json.key(key);
  copy_value(json, from.find(key));
}

const JsonValue* workers_of(const JsonValue* results) {
  const JsonValue* ranks = results != nullptr ? results->find("ranks") : nullptr;
  return ranks != nullptr && ranks->is_array() ? ranks : nullptr;
}

// The worker of the last attempt that caused the step's failure.
const JsonValue* culprit_worker(const JsonValue* results) {
  if (const JsonValue* workers = workers_of(results)) {
    for (const auto& w : workers->array) {
      if (const auto* role = w.find_string("role"); role && *role == "culprit") return &w;
    }
  }
  return nullptr;
}

// A step as the summary has it: run.json's state, results.json's outcome.
void write_step(JsonWriter& json, const std::string& name, const std::string& state,
                const std::string& results_path, const JsonValue* results) {
  json.begin_object();
  json.key("name").value(name);
  json.key("state").value(state);
  if (results == nullptr) {
    json.key("outcome").null();
    json.key("exit_code").null();
    json.key("attempts").value(0);
    json.key("failed_ranks").begin_array().end_array();
    json.key("results").null();
    json.end_object();
    return;
  }
  copy_key(json, *results, "outcome");
  copy_key(json, *results, "exit_code");
  const JsonValue* attempts = results->find("attempts");
  json.key("attempts").value(attempts && attempts->is_array() ? static_cast<int>(attempts->array.size()) : 0);
  // The ranks that failed by themselves: the culprit and those that failed
  // after it (not the ones flowrun stopped).
  json.key("failed_ranks").begin_array();
  if (const JsonValue* workers = workers_of(results)) {
    for (const auto& w : workers->array) {
      const auto* role = w.find_string("role");
      const JsonValue* rank = w.find("rank");
      if (role && (*role == "culprit" || *role == "failed_after") && rank &&
          rank->type == JsonValue::Type::number)
        json.value(static_cast<std::int64_t>(rank->number));
    }
  }
  json.end_array();
  json.key("results").value(results_path);
  json.end_object();
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return !path.empty() && stat(path.c_str(), &st) == 0;
}

// The step that made the run fail, and its culprit rank when it had one.
void write_culprit(JsonWriter& json, const std::string& step, const JsonValue* results) {
  json.begin_object();
  json.key("step").value(step);
  if (results == nullptr) {
    for (const char* key : {"outcome", "step_exit_code", "rank", "node", "status", "exit_code", "signal",
                            "shell_code", "stderr_log", "error_file"})
      json.key(key).null();
    json.end_object();
    return;
  }
  copy_key(json, *results, "outcome");
  json.key("step_exit_code");
  copy_value(json, results->find("exit_code"));
  const JsonValue* w = culprit_worker(results);
  static const JsonValue none;
  const JsonValue& worker = w != nullptr ? *w : none;
  for (const char* key : {"rank", "node", "status", "exit_code", "signal", "shell_code", "stderr_log"})
    copy_key(json, worker, key);
  // Only when the worker wrote one.
  const std::string* error_file = worker.find_string("error_file");
  json.key("error_file");
  if (error_file != nullptr && file_exists(*error_file))
    json.value(*error_file);
  else
    json.null();
  json.end_object();
}

std::string run_state(const RunRecord& record, int exit_code,
                      const std::vector<std::optional<JsonValue>>& results) {
  if (!record.error.empty()) return "error";
  if (exit_code == 0) return "succeeded";
  bool not_run = false;
  for (std::size_t i = 0; i < record.steps.size(); ++i) {
    if (record.steps[i].second == "not_run") not_run = true;
    const auto& r = results[i];
    if (r && r->is_object()) {
      if (const auto* outcome = r->find_string("outcome"); outcome && *outcome == "interrupted")
        return "interrupted";
    }
  }
  return exit_code > 128 && not_run ? "interrupted" : "failed";
}

void null_or(JsonWriter& json, std::string_view key, const std::string& text) {
  json.key(key);
  if (text.empty())
    json.null();
  else
    json.value(text);
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

std::string format_summary_json(const SummaryTarget& target, int exit_code, const std::string& error) {
  const std::string& run_dir = target.run_dir;
  const std::optional<OwnRecord> own = own_record(run_dir, target.since_unix_ns);
  const RunRecord* record = own ? &own->record : nullptr;
  JsonWriter json;
  json.begin_object();
  json.key("format").value(kSummaryFormat);
  if (!record) {
    json.key("run_id").null();
    json.key("run_dir").null();
    json.key("flow").null();
    json.key("state").value(exit_code == 0 ? "succeeded" : exit_code == kExitUsage ? "usage_error" : "error");
    json.key("exit_code").value(exit_code);
    null_or(json, "error", error);
    json.key("resumed_from").null();
    json.key("start").null();
    json.key("end").null();
    json.key("steps").begin_array().end_array();
    json.key("culprit").null();
    json.end_object();
    return json.str();
  }
  std::vector<std::optional<JsonValue>> results;
  for (const auto& step : record->steps) {
    auto doc = read_json(run_dir + "/" + step.first + "/results.json");
    if (doc && !doc->is_object()) doc.reset();
    results.push_back(std::move(doc));
  }
  json.key("run_id").value(record->run_id);
  json.key("run_dir").value(run_dir);
  json.key("flow").value(record->flow);
  json.key("state").value(run_state(*record, exit_code, results));
  json.key("exit_code").value(exit_code);
  null_or(json, "error", !record->error.empty() ? record->error : error);
  null_or(json, "resumed_from", record->resumed_from_id);
  copy_key(json, own->doc, "start");
  copy_key(json, own->doc, "end");
  json.key("steps").begin_array();
  std::optional<std::size_t> culprit;
  for (std::size_t i = 0; i < record->steps.size(); ++i) {
    const auto& [name, state] = record->steps[i];
    if (!culprit && state == "failed") culprit = i;
    write_step(json, name, state, run_dir + "/" + name + "/results.json",
               results[i] ? &*results[i] : nullptr);
  }
  json.end_array();
  json.key("culprit");
  if (culprit && exit_code != 0)
    write_culprit(json, record->steps[*culprit].first, results[*culprit] ? &*results[*culprit] : nullptr);
  else
    json.null();
  json.end_object();
  return json.str();
}

std::string format_validate_json(const std::string& spec_path, const std::vector<Diagnostic>& errors,
                                 const std::vector<std::string>& steps) {
  JsonWriter json;
  json.begin_object();
  json.key("format").value(kValidateFormat);
  json.key("spec").value(spec_path);
  json.key("valid").value(errors.empty());
  json.key("steps").strings(steps);
  json.key("errors").begin_array();
  for (const auto& d : errors) {
    json.begin_object();
    json.key("file").value(d.file);
    json.key("line");
    if (d.loc.line > 0)
      json.value(d.loc.line);
    else
      json.null();
    json.key("column");
    if (d.loc.column > 0)
      json.value(d.loc.column);
    else
      json.null();
    null_or(json, "path", d.path);
    json.key("message").value(d.message);
    json.key("text").value(d.to_string());
    json.end_object();
  }
  json.end_array();
  // Nothing in a spec is only a warning today; the key is there for when it is.
  json.key("warnings").begin_array().end_array();
  json.end_object();
  return json.str();
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

  const std::string text = format_summary_json(target, code, error);
  if (!request.file.empty()) {
    if (const int err = try_write_file(request.file, text); err != 0) {
      std::cerr << "flowrun: error: cannot write the summary " << request.file << ": " << std::strerror(err)
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
