// The restart policy under a step's parallel: (spec_detail.h): which causes
// and exit codes restart the step, the shortest attempt, and the progress file
// (docs/spec.md, "restart"; lib/step/restart_policy.h decides with it).

#include <algorithm>
#include <filesystem>
#include <set>

#include "spec_detail.h"

namespace flowrun::spec_detail {

// restart: {causes, exit_codes, min_attempt, progress_file} (docs/spec.md, "restart").
void Checker::restart(const Entry& e, const Step& s, RestartPolicy& policy) {
  policy.is_set = true;
  policy.loc = e.key_loc;
  if (e.value.IsNull()) return;
  if (!e.value.IsMap()) {
    expected(e, "a mapping of restart settings ('restart: {}' for the defaults)");
    return;
  }
  auto keys = entries(e.value, e.loc, e.path, kRestartKeys, kRestartElsewhere);
  if (const Entry* c = find(keys, "causes")) restart_causes(*c, policy);
  if (const Entry* c = find(keys, "exit_codes")) restart_exit_codes(*c, policy);
  if (const Entry* m = find(keys, "min_attempt")) policy.min_attempt_s = duration(*m);
  if (const Entry* f = find(keys, "progress_file")) progress_file(*f, s, policy);
  const Entry* c = find(keys, "causes");
  if (c && c->value.IsSequence() && c->value.size() == 0 && !find(keys, "exit_codes"))
    error(c->loc, c->path,
          "no cause and no exit code would restart the step; name the causes that restart it "
          "(exception, exit_code, signal), or the exit codes under exit_codes");
}

void Checker::restart_causes(const Entry& e, RestartPolicy& policy) {
  static constexpr std::string_view kNames[] = {"exception", "exit_code", "signal"};
  static constexpr int kValues[] = {0, 1, 2};
  std::vector<Entry> values;
  if (!one_or_more(e, values)) {
    expected(e, "a cause or a list of causes (exception, exit_code, signal)");
    return;
  }
  bool* const flags[] = {&policy.on_exception, &policy.on_exit_code, &policy.on_signal};
  for (bool* flag : flags) *flag = false;
  std::set<int> seen;
  for (const Entry& item : values) {
    if (item.value.IsScalar() && item.value.Scalar() == "node_lost") {
      error(item.loc, item.path,
            "node_lost cannot restart a step: a restart runs every rank again on the nodes the step "
            "started with, and a lost node is not replaced (docs/multinode.md); remove it");
      continue;
    }
    auto which = choice<int>(item, kNames, kValues);
    if (!which) continue;
    if (!seen.insert(*which).second) {
      error(item.loc, item.path, "cause " + quote(item.value.Scalar()) + " is listed twice");
      continue;
    }
    *flags[*which] = true;
  }
}

void Checker::restart_exit_codes(const Entry& e, RestartPolicy& policy) {
  std::vector<Entry> values;
  if (!one_or_more(e, values) || values.empty()) {
    expected(e, "an exit code or a list of exit codes (1 to 255)");
    return;
  }
  for (const Entry& item : values) {
    int code = 0;
    if (!item.value.IsScalar() || parse_whole(item.value.Scalar(), code) != Whole::ok || code < 1 ||
        code > 255) {
      expected(item, "an exit code from 1 to 255");
      continue;
    }
    if (std::find(policy.exit_codes.begin(), policy.exit_codes.end(), code) != policy.exit_codes.end()) {
      error(item.loc, item.path, "exit code " + std::to_string(code) + " is listed twice");
      continue;
    }
    policy.exit_codes.push_back(code);
  }
}

void Checker::progress_file(const Entry& e, const Step& s, RestartPolicy& policy) {
  auto text = string(e, "a file path");
  if (!text) return;
  if (text->empty() || text->find('\0') != std::string::npos || text->find('\n') != std::string::npos ||
      text->size() >= kMaxPathLength || text->back() == '/') {
    expected(e, "a file path (relative to the step's workdir, or absolute)");
    return;
  }
  policy.progress_file_text = *text;
  policy.progress_file = (std::filesystem::path(s.workdir) / *text).lexically_normal().string();
}

}  // namespace flowrun::spec_detail
