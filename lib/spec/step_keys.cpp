// A step's keys (spec_detail.h): its name first, since it gives every other
// problem of the step its path, then each key in the order docs/spec.md lists
// them, with outputs:, logs: and forensics:. A step's run: is read in
// step_run.cpp, its parallel: in parallel_keys.cpp.

#include <cstdio>

#include "flowrun/glob.h"

#include "spec_detail.h"

namespace flowrun::spec_detail {

namespace {

// A relative glob that stays inside the workdir, with balanced [...] classes,
// read as the join's walk reads it (flowrun/glob.h).
std::optional<std::string> glob_problem(std::string_view glob) {
  const auto problem = Glob::parse(glob).problem();
  if (!problem) return std::nullopt;
  const std::string quoted = "glob " + quote(glob);
  switch (*problem) {
    case GlobProblem::empty:
      return "empty glob; expected a path pattern relative to the workdir, like 'checkpoints/*.pt'";
    case GlobProblem::nul_or_newline:
      return quoted + " contains a NUL or newline; expected a path pattern on one line";
    case GlobProblem::absolute:
      return quoted + " is absolute; expected a pattern relative to the step's workdir";
    case GlobProblem::dot_dot: return quoted + " leaves the workdir with '..'; expected a pattern inside it";
    case GlobProblem::unclosed_class:
      return quoted + " has a '[' without ']'; expected balanced [...] character classes";
    case GlobProblem::stray_close:
      return quoted + " has a ']' without '['; expected balanced [...] character classes";
  }
  return std::nullopt;
}

}  // namespace

void Checker::step(const YAML::Node& node, std::size_t index) {
  if (exhausted_) return;
  Step& s = spec_.steps.emplace_back();
  StepNotes& notes = notes_.emplace_back();
  s.workdir = spec_.workdir;
  s.loc = to_location(node.Mark());
  notes.path = "steps[" + std::to_string(index) + "]";
  if (!node.IsMap()) {
    error(s.loc, notes.path, expected_text("a step (a mapping with 'name' and 'run')", node));
    return;
  }

  // The name first: it gives every other problem of the step its path.
  YAML::Node name_node;
  for (const auto& pair : node) {
    if (pair.first.IsScalar() && pair.first.Scalar() == "name") {
      name_node = pair.second;
      break;
    }
  }
  if (name_node.IsScalar() && check_name(name_node.Scalar()) == NameCheck::ok) {
    const std::string& name = name_node.Scalar();
    if (!index_.contains(name)) {
      index_.emplace(name, index);
      notes.path = "steps." + name;
      notes.in_graph = true;
    }
  }

  auto keys = entries(node, s.loc, notes.path, kStepKeys, kStepElsewhere);
  if (const Entry* e = find(keys, "name")) {
    Entry at_index = *e;
    at_index.path = "steps[" + std::to_string(index) + "].name";
    if (auto name = string(at_index, "a step name (a string)")) {
      s.name = *name;
      if (!is_step_name(*name)) {
        bad_names_.insert(*name);
        error(e->loc, at_index.path,
              "invalid step name " + quote(*name) +
                  "; expected letters, digits, '_' and '-', starting with a letter or digit");
      } else if (check_name(*name) == NameCheck::too_long) {
        bad_names_.insert(*name);
        error(e->loc, at_index.path, too_long("step name", *name));
      } else if (!notes.in_graph) {
        const Step& first = spec_.steps[index_.at(*name)];
        error(e->loc, at_index.path,
              "duplicate step name " + quote(*name) + " (first defined at line " +
                  std::to_string(first.loc.line) + "); step names must be unique");
      }
    }
  } else {
    error(s.loc, notes.path, "missing required key 'name' (the step's name)");
  }

  bool shell_known = true;
  if (const Entry* e = find(keys, "shell")) {
    auto shell = boolean(*e);
    shell_known = shell.has_value();
    s.shell = shell.value_or(false);
  }
  if (const Entry* e = find(keys, "run")) {
    step_run(*e, s, notes, shell_known);
  } else {
    error(s.loc, notes.path, "missing required key 'run' (the command to run)");
  }
  if (const Entry* e = find(keys, "env")) s.env = env(*e);
  if (const Entry* e = find(keys, "workdir")) {
    if (auto dir = directory(*e, spec_.workdir)) s.workdir = *dir;
  }
  if (const Entry* e = find(keys, "needs")) {
    notes.needs_written = true;
    std::vector<Entry> values;
    if (!one_or_more(*e, values)) {
      std::string message = expected_text("a step name or a list of step names", e->value);
      if (e->value.IsNull()) message += "; write 'needs: []' for none";
      error(e->loc, e->path, message);
    }
    for (const Entry& item : values) {
      if (auto name = string(item, "a step name")) notes.needs.emplace_back(*name, item.loc);
    }
  }
  if (const Entry* e = find(keys, "timeout")) s.timeout_s = duration(*e);
  if (const Entry* e = find(keys, "stall_timeout")) s.stall_timeout_s = duration(*e);
  if (const Entry* e = find(keys, "parallel")) {
    notes.has_parallel = true;
    step_parallel(*e, s);
  }
  for (std::string_view key : {"outputs", "inputs", "collect", "logs", "forensics"}) {
    if (const Entry* e = find(keys, key); e && !notes.has_parallel)
      error(e->key_loc, e->path,
            "only parallel steps have " + std::string(key) + "; add 'parallel:' or remove it");
  }
  // outputs: and inputs:, globs relative to the workdir, read alike.
  for (auto [key, globs] : {std::pair{"outputs", &s.outputs}, std::pair{"inputs", &s.inputs}}) {
    const Entry* e = find(keys, key);
    if (e == nullptr || !notes.has_parallel) continue;
    std::vector<Entry> values;
    if (!one_or_more(*e, values)) {
      expected(*e, "a glob or a list of globs");
    }
    for (const Entry& item : values) {
      auto glob = string(item, "a glob (a string)");
      if (!glob) continue;
      if (auto problem = glob_problem(*glob))
        error(item.loc, item.path, *problem);
      else
        globs->push_back(*glob);
    }
  }
  if (const Entry* e = find(keys, "collect"); e && notes.has_parallel) {
    static constexpr std::string_view kNames[] = {"rank0", "all"};
    static constexpr Collect kValues[] = {Collect::rank0, Collect::all};
    s.collect = choice<Collect>(*e, kNames, kValues).value_or(Collect::rank0);
  }
  if (const Entry* e = find(keys, "logs"); e && notes.has_parallel) step_logs(*e, s);
  if (const Entry* e = find(keys, "forensics"); e && notes.has_parallel) step_forensics(*e, s.forensics);
  if (const Entry* e = find(keys, "join")) {
    s.join_loc = e->loc;
    if (auto name = string(*e, "the name of a parallel step")) {
      if (notes.has_parallel) {
        error(
            e->key_loc, e->path,
            "a step cannot both join and be parallel: a join step runs once, after the parallel step; remove "
            "'join' or 'parallel'");
      } else {
        s.join = *name;
      }
    }
  }
}

// logs: {console: all | RANK | [RANK, ...], fold: BOOL | DURATION}: which
// ranks the console shows, and how long a line waits to be folded.
void Checker::step_logs(const Entry& e, Step& s) {
  if (!e.value.IsMap()) {
    expected(e, "a mapping such as {console: [0]}");
    return;
  }
  auto keys = entries(e.value, e.loc, e.path, kLogsKeys, {});
  if (const Entry* fold = find(keys, "fold")) {
    const std::string text = fold->value.IsScalar() ? fold->value.Scalar() : "";
    if (text == "true" || text == "True" || text == "TRUE") {
      s.fold_s = kDefaultFoldS;
    } else if (text == "false" || text == "False" || text == "FALSE") {
      s.fold_s = 0.0;
    } else if (auto seconds = text.empty() ? std::nullopt : parse_duration(text);
               seconds && *seconds > 0 && *seconds <= kMaxFoldS) {
      s.fold_s = seconds;
    } else {
      expected(*fold, "true, false or the longest a line waits for the other ranks, up to 60s ('0.2s')");
    }
  }
  const Entry* console = find(keys, "console");
  if (console == nullptr) return;
  if (console->value.IsScalar() && console->value.Scalar() == "all") return;
  std::vector<Entry> values;
  if (!one_or_more(*console, values)) {
    expected(*console, "'all', a rank or a list of ranks");
    return;
  }
  std::vector<int> ranks;
  for (const Entry& item : values) {
    if (auto rank = count(item, "a rank (a whole number, 0 or more)", "all", true)) ranks.push_back(*rank);
  }
  s.console_ranks = ranks;
}

namespace {

// 0.05, 0.1, 2: a number of seconds as %g writes it.
std::string shortest(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

}  // namespace

// forensics: nccl | off | {stacks: BOOL, timeout: DURATION, nccl: BOOL,
// sample: DURATION | off}.
void Checker::step_forensics(const Entry& e, Forensics& f) {
  f.loc = e.loc;
  if (e.value.IsScalar() && e.value.Scalar() == "nccl") {
    f.nccl = true;
    return;
  }
  if (e.value.IsScalar() && e.value.Scalar() == "off") {
    f.stacks = false;
    f.sample_s = 0;
    return;
  }
  if (!e.value.IsMap()) {
    std::string message = expected_text(
        "'nccl', 'off' or a mapping such as {stacks: true, timeout: 3s, nccl: true, sample: 1s}", e.value);
    if (e.value.IsScalar()) {
      if (auto match = closest_match(e.value.Scalar(), {"nccl", "off"}))
        message += "; did you mean '" + *match + "'?";
    }
    error(e.loc, e.path, message);
    return;
  }
  auto keys = entries(e.value, e.loc, e.path, kForensicsKeys, {});
  const Entry* stacks = find(keys, "stacks");
  const Entry* timeout = find(keys, "timeout");
  if (stacks) f.stacks = boolean(*stacks).value_or(true);
  const std::optional<double> seconds = timeout ? duration(*timeout) : std::nullopt;
  if (seconds) f.timeout_s = *seconds;
  if (const Entry* nccl = find(keys, "nccl")) f.nccl = boolean(*nccl).value_or(false);
  if (const Entry* sample = find(keys, "sample")) {
    if (sample->value.IsScalar() && (sample->value.Scalar() == "off" || sample->value.Scalar() == "false")) {
      f.sample_s = 0;
    } else if (const auto every = duration(*sample)) {
      if (*every < kMinSampleS)
        error(sample->loc, sample->path,
              "a sample every " + shortest(*every) + " s would cost the ranks time; at least " +
                  shortest(kMinSampleS) + "s (or off)");
      else
        f.sample_s = *every;
    }
  }
  if (seconds && !f.stacks)
    error(timeout->key_loc, timeout->path,
          "timeout is the time for the ranks' stacks, and stacks: false takes none; remove one of them");
}

}  // namespace flowrun::spec_detail
