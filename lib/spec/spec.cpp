// Parsing and checking flow specs (the contract is in lib/spec/include/flowrun/spec.h,
// the format in docs/spec.md).
//
// yaml-cpp builds the node tree, then a hand-written walk checks it against
// the format, key by key. The walk never recurses generically: it only
// descends into the keys it knows, a fixed depth, so alias cycles such as
// `&a [*a]` are harmless. yaml-cpp bounds its own recursion (DeepRecursion);
// text that is not UTF-8 or holds NUL bytes is refused before it gets there,
// since yaml-cpp would otherwise guess UTF-16/32 from the zero bytes.
//
// Every problem is collected; one bad value never stops the walk. Problems that
// would only follow from an earlier one are not reported: a step with a bad
// name stays out of the graph and references to that name are not reported
// again, a step whose `shell:` is unreadable does not have its `run` split.
//
// The walk is spec_detail.h's Checker; this file walks the format's levels,
// and one value of any level is read in values.cpp.

#include "flowrun/spec.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "flowrun/files.h"
#include "flowrun/shell_text.h"
#include "flowrun/util.h"

#include "spec_detail.h"

namespace flowrun {

namespace spec_detail {

namespace {

// A relative glob that stays inside the workdir, with balanced [...] classes.
std::optional<std::string> glob_problem(std::string_view glob) {
  if (glob.empty())
    return "empty glob; expected a path pattern relative to the workdir, like 'checkpoints/*.pt'";
  if (glob.find('\0') != std::string_view::npos || glob.find('\n') != std::string_view::npos)
    return "glob " + quote(glob) + " contains a NUL or newline; expected a path pattern on one line";
  if (glob.front() == '/')
    return "glob " + quote(glob) + " is absolute; expected a pattern relative to the step's workdir";
  // Each component as the walk looks it up: '\x' is x, so '\.\.' is '..'
  // too. (A component with a wildcard is matched against directory entries,
  // which never include '..'.)
  for (std::size_t start = 0; start <= glob.size();) {
    std::size_t end = std::min(glob.find('/', start), glob.size());
    std::string name;
    for (std::size_t i = start; i < end; ++i) {
      if (glob[i] == '\\' && i + 1 < end) ++i;
      name += glob[i];
    }
    if (name == "..")
      return "glob " + quote(glob) + " leaves the workdir with '..'; expected a pattern inside it";
    start = end + 1;
  }
  for (std::size_t i = 0; i < glob.size(); ++i) {
    if (glob[i] == '\\') {
      ++i;
    } else if (glob[i] == ']') {
      return "glob " + quote(glob) + " has a ']' without '['; expected balanced [...] character classes";
    } else if (glob[i] == '[') {
      std::size_t j = i + 1;
      if (j < glob.size() && (glob[j] == '!' || glob[j] == '^')) ++j;
      if (j < glob.size() && glob[j] == ']') ++j;  // a leading ']' is a member
      while (j < glob.size() && glob[j] != ']') ++j;
      if (j >= glob.size())
        return "glob " + quote(glob) + " has a '[' without ']'; expected balanced [...] character classes";
      i = j;
    }
  }
  return std::nullopt;
}

bool is_gpu_uuid(std::string_view id) {
  if (!(id.starts_with("GPU-") || id.starts_with("MIG-")) || id.size() <= 4) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '/';
  });
}

// Sees where each YAML document begins, without building nodes. yaml-cpp 0.7
// does not consume a stray token such as a top-level ',' and then reports the
// same empty document again and again (YAML::LoadAll never returns,
// jbeder/yaml-cpp#1040); two documents that begin at the same place are that.
class DocumentProbe : public YAML::EventHandler {
 public:
  std::optional<YAML::Mark> start;  // of the document's first node

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { note(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { note(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override {
    note(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    note(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    note(mark);
  }
  void OnMapEnd() override {}

 private:
  void note(const YAML::Mark& mark) {
    if (!start) start = mark;
  }
};

}  // namespace

// "Did you mean": compares a name with every step name; a budget keeps a
// large spec full of unknown names from taking minutes.
class Suggester {
 public:
  explicit Suggester(std::vector<std::string> names) : names_(std::move(names)) {
    for (const auto& name : names_) name_chars_ += name.size() + 1;
  }
  std::optional<std::string> operator()(const std::string& name) {
    const std::size_t cost = (std::min<std::size_t>(name.size(), 64) + 1) * name_chars_;
    if (cost > budget_) return std::nullopt;
    budget_ -= cost;
    return closest_match(name, names_);
  }

 private:
  std::vector<std::string> names_;
  std::size_t name_chars_ = 0;
  std::size_t budget_ = 10'000'000;
};

bool Checker::check_text(std::string_view text) {
  if (text.size() > kMaxSpecBytes) {
    error({}, "", "the file is larger than " + format_bytes(kMaxSpecBytes) + "; a spec must be smaller");
    return false;
  }
  int line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < text.size();) {
    auto c = static_cast<unsigned char>(text[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && c != 0 && i + n <= text.size();
    for (std::size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (ok && n > 1) {
      // Overlong forms, surrogates and values above U+10FFFF are not UTF-8 either.
      auto c1 = static_cast<unsigned char>(text[i + 1]);
      ok = !(c == 0xC0 || c == 0xC1 || (c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) ||
             (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90) || c > 0xF4);
    }
    if (!ok) {
      Location loc{line, static_cast<int>(i - line_start) + 1};
      error(loc, "",
            c == 0 ? "the file contains a NUL byte; expected YAML text"
                   : "the file is not valid UTF-8; expected YAML text in UTF-8");
      return false;
    }
    if (c == '\n') {
      ++line;
      line_start = i + 1;
    }
    i += n;
  }
  return true;
}

SpecParse Checker::run(std::string_view text) {
  text_ = text;
  spec_.file = file_;
  spec_.dir = dir_;
  spec_.workdir = dir_;
  if (check_text(text)) {
    const std::string input(text);
    YAML::Node root;
    try {
      // First the documents' starts (at most three are looked at), then the
      // first document's nodes.
      std::istringstream stream(input);
      YAML::Parser parser(stream);
      std::vector<YAML::Mark> starts;
      for (int i = 0; i < 3; ++i) {
        DocumentProbe probe;
        if (!parser.HandleNextDocument(probe)) break;
        starts.push_back(probe.start.value_or(YAML::Mark::null_mark()));
      }
      for (std::size_t i = 1; i < starts.size(); ++i) {
        if (starts[i].pos == starts[i - 1].pos) {
          const Location loc = to_location(starts[i].is_null() ? YAML::Mark() : starts[i]);
          const std::size_t pos = static_cast<std::size_t>(std::max(starts[i].pos, 0));
          error(loc, "", "invalid YAML: unexpected " + quote(input.substr(std::min(pos, input.size()), 1)));
          break;
        }
      }
      if (diagnostics_.empty() && starts.size() > 1)
        error(to_location(starts[1]), "", "the file holds more than one YAML document; expected one spec");
      if (diagnostics_.empty()) root = YAML::Load(input);
    } catch (const YAML::DeepRecursion& e) {
      error(to_location(e.mark), "", "invalid YAML: nested too deeply");
    } catch (const YAML::Exception& e) {
      error(to_location(e.mark), "", "invalid YAML: " + e.msg);
    }
    if (diagnostics_.empty()) {
      if (root.IsNull())
        error({}, "", "the file is empty; expected a mapping with a list of 'steps'");
      else
        top(root);
    }
  }
  if (exhausted_) {
    diagnostics_.clear();
    error({}, "", "the spec is too large once its aliases (*name) are expanded; use fewer aliases");
  }
  sort_diagnostics(diagnostics_);
  std::set<std::string> seen;
  std::erase_if(diagnostics_, [&](const Diagnostic& d) { return !seen.insert(d.to_string()).second; });
  SpecParse result;
  if (diagnostics_.empty() && !spec_.python.empty()) use_python(spec_, spec_.python);
  if (diagnostics_.empty()) result.spec = std::move(spec_);
  result.diagnostics = std::move(diagnostics_);
  return result;
}

void Checker::top(const YAML::Node& root) {
  Location root_loc = to_location(root.Mark());
  if (root_loc.line == 0) root_loc = {1, 1};
  if (!root.IsMap()) {
    error(root_loc, "", expected_text("a mapping with a list of 'steps'", root));
    return;
  }
  auto keys = entries(root, root_loc, "", kTopKeys, kTopElsewhere);

  // The name becomes part of run ids, so of directory names.
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  auto name_char = [&](char c) { return alnum(c) || c == '.' || c == '_' || c == '-'; };
  std::string stem = std::filesystem::path(file_).stem().string();
  for (char& c : stem) {
    if (!name_char(c)) c = '-';
  }
  spec_.name = stem.empty() || !alnum(stem[0]) ? "flow" + stem : stem;
  if (const Entry* e = find(keys, "name")) {
    if (auto name = string(*e, "a flow name (a string)")) {
      const NameCheck check = check_name(*name, ".");
      if (check == NameCheck::ok)
        spec_.name = *name;
      else if (check == NameCheck::too_long)
        error(e->loc, e->path, too_long("flow name", *name));
      else
        error(e->loc, e->path,
              "invalid flow name " + quote(*name) +
                  "; expected letters, digits, '.', '_' and '-', starting with a letter or digit");
    }
  }
  if (const Entry* e = find(keys, "env")) spec_.env = env(*e);
  if (const Entry* e = find(keys, "workdir")) {
    if (auto dir = directory(*e, dir_)) spec_.workdir = *dir;
  }
  if (const Entry* e = find(keys, "cluster")) cluster(*e);
  if (const Entry* e = find(keys, "python")) {
    auto text = string(*e, "a Python interpreter (a path, or a name looked up on PATH)");
    if (text && (text->empty() || text->find_first_of(std::string_view("\0\n", 2)) != std::string::npos))
      expected(*e, "a Python interpreter (a path, or a name looked up on PATH)");
    else if (text)
      spec_.python = python_path(*text, dir_);
  }

  const Entry* steps = find(keys, "steps");
  if (!steps) {
    error(root_loc, "", "missing required key 'steps' (the list of steps to run)");
    return;
  }
  if (!steps->value.IsSequence() || steps->value.size() == 0) {
    expected(*steps, "a non-empty list of steps");
    return;
  }
  std::size_t index = 0;
  for (const YAML::Node& item : items(steps->value)) step(item, index++);
  if (!exhausted_) graph();
}

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
  for (std::string_view key : {"outputs", "collect", "logs", "forensics"}) {
    if (const Entry* e = find(keys, key); e && !notes.has_parallel)
      error(e->key_loc, e->path,
            "only parallel steps have " + std::string(key) + "; add 'parallel:' or remove it");
  }
  if (const Entry* e = find(keys, "outputs"); e && notes.has_parallel) {
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
        s.outputs.push_back(*glob);
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

// logs: {console: all | RANK | [RANK, ...]}: which ranks the console shows.
void Checker::step_logs(const Entry& e, Step& s) {
  if (!e.value.IsMap()) {
    expected(e, "a mapping such as {console: [0]}");
    return;
  }
  auto keys = entries(e.value, e.loc, e.path, kLogsKeys, {});
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

// forensics: nccl | off | {stacks: BOOL, timeout: DURATION, nccl: BOOL}.
void Checker::step_forensics(const Entry& e, Forensics& f) {
  f.loc = e.loc;
  if (e.value.IsScalar() && e.value.Scalar() == "nccl") {
    f.nccl = true;
    return;
  }
  if (e.value.IsScalar() && e.value.Scalar() == "off") {
    f.stacks = false;
    return;
  }
  if (!e.value.IsMap()) {
    std::string message =
        expected_text("'nccl', 'off' or a mapping such as {stacks: true, timeout: 3s, nccl: true}", e.value);
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
  if (seconds && !f.stacks)
    error(timeout->key_loc, timeout->path,
          "timeout is the time for the ranks' stacks, and stacks: false takes none; remove one of them");
}

void Checker::step_run(const Entry& e, Step& s, StepNotes& notes, bool shell_known) {
  s.run_loc = e.loc;
  if (!shell_known) return;
  if (s.shell) {
    if (!e.value.IsScalar()) {
      expected(e, "a script (a string) with 'shell: true'");
      return;
    }
    s.script = e.value.Scalar();
    if (s.script.find_first_not_of(" \t\r\n") == std::string::npos) {
      expected(e, "a non-empty script");
      return;
    }
    if (auto problem = argument_problem(s.script)) {
      error(e.loc, e.path, "the script " + *problem);
      return;
    }
    if (templates_in(s.script, e.loc, e.path, notes))
      shell_templates(s.script, e.value, e.loc, e.path, {}, {});
    return;
  }
  auto argv = words(e, "a command (a string or a list of words)", false);
  if (!argv) return;
  if (argv->front().empty()) {
    error(e.loc, e.path, "the program (the first word) is empty; expected a program name or path");
    return;
  }
  s.argv = std::move(*argv);
  s.python_command = s.argv.front() == "python" || s.argv.front() == "python3";
  bool well_formed = true;
  const std::vector<YAML::Node> nodes = e.value.IsSequence() ? items(e.value) : std::vector<YAML::Node>{};
  if (e.value.IsSequence()) {
    for (std::size_t i = 0; i < nodes.size() && i < s.argv.size(); ++i) {
      Location loc = to_location(nodes[i].Mark());
      well_formed = templates_in(s.argv[i], loc.line ? loc : e.loc, e.path, notes) && well_formed;
    }
  } else {
    well_formed = templates_in(e.value.Scalar(), e.loc, e.path, notes);
  }
  // The script word of a shell run with -c is shell text, as a `shell: true` script is.
  std::string unquotable;
  const std::optional<std::size_t> script = shell_script_word(s.argv, &unquotable);
  if (!well_formed) return;
  if (const std::optional<std::size_t> program = rereading_program(s.argv)) {
    for (std::size_t i = *program + 1; i < s.argv.size(); ++i) {
      const std::size_t at = std::min(s.argv[i].find("${args}"), s.argv[i].find("${steps."));
      if (at == std::string::npos) continue;
      const std::string_view needle =
          std::string_view(s.argv[i]).substr(at, s.argv[i].find('}', at) - at + 1);
      const Location loc = i < nodes.size() ? to_location(nodes[i].Mark()) : e.loc;
      error(
          loc.line ? loc : e.loc, e.path,
          "template " + quote(needle) + " is in a word of " + s.argv[*program] +
              ", which hands it to a shell that reads it as a script; pass the value another way, such as a "
              "file or an environment variable");
      return;
    }
  }
  if (!script) return;
  std::string before;  // the words before it, where its templates' text may appear too
  for (std::size_t i = 0; i < *script; ++i) before += s.argv[i] + "\n";
  if (*script < nodes.size()) {
    const Location loc = to_location(nodes[*script].Mark());
    shell_templates(s.argv[*script], nodes[*script], loc.line ? loc : e.loc, e.path, {}, unquotable);
  } else {
    shell_templates(s.argv[*script], e.value, e.loc, e.path, before, unquotable);
  }
}

// The templates of shell text: each must stand where a value can be quoted
// (shell_text.h); one that does not is refused at its own line and column.
void Checker::shell_templates(std::string_view script, const YAML::Node& node, Location loc,
                              const std::string& path, std::string_view before,
                              const std::string& unquotable) {
  std::size_t at = 0;
  std::string reason;
  const ShellScan scan = scan_shell_text(script);
  if (!unquotable.empty()) {
    const std::size_t first = std::min(script.find("${args}"), script.find("${steps."));
    if (first == std::string_view::npos) return;
    at = first;
    reason =
        "is in a script for " + unquotable +
        ", whose quoting flowrun does not know; run the script with bash or sh, or pass the value as a word "
        "of its own after the script";
  } else if (scan.refusal) {
    at = scan.refusal->offset;
    reason = "stands " + scan.refusal->reason;
  } else {
    return;
  }
  const std::size_t end = script.find('}', at);
  const std::string needle(script.substr(at, end == std::string_view::npos ? 2 : end - at + 1));
  std::size_t skip = 0;
  for (std::size_t k = before.find(needle); k != std::string_view::npos; k = before.find(needle, k + 1))
    ++skip;
  for (std::size_t k = script.find(needle); k < at; k = script.find(needle, k + 1)) ++skip;
  error(locate(node, loc, needle, skip), path, "template " + quote(needle) + " " + reason);
}

// Where the (skip+1)-th `needle` after `node`'s start is in the spec's text;
// `fallback` (the value's own position) when it is not found there as written.
Location Checker::locate(const YAML::Node& node, Location fallback, std::string_view needle,
                         std::size_t skip) const {
  const YAML::Mark mark = node.Mark();
  if (mark.pos < 0 || static_cast<std::size_t>(mark.pos) > text_.size()) return fallback;
  std::size_t at = text_.find(needle, static_cast<std::size_t>(mark.pos));
  for (; at != std::string_view::npos && skip > 0; --skip) at = text_.find(needle, at + 1);
  if (at == std::string_view::npos) return fallback;
  const std::string_view head = text_.substr(0, at);
  const std::size_t newline = head.rfind('\n');
  const std::size_t line_start = newline == std::string_view::npos ? 0 : newline + 1;
  const auto line = 1 + std::count(head.begin(), head.end(), '\n');
  const std::size_t column = at - line_start;
  return {static_cast<int>(line), static_cast<int>(column) + 1};
}

bool Checker::templates_in(std::string_view text, Location loc, const std::string& path, StepNotes& notes) {
  std::string problem;
  auto found = find_placeholders(text, &problem);
  if (!found) {
    error(loc, path, problem);
    return false;
  }
  for (const Placeholder& p : *found) {
    if (p.kind == Placeholder::Kind::step_outputs) notes.refs.emplace_back(p.step, loc);
  }
  return true;
}

// `nodes: "MIN:MAX"`: torchrun's elastic range. "N:N" is the count N.
void Checker::node_range(const Entry& e, ParallelSpec& p) {
  const std::string& text = e.value.Scalar();
  const std::size_t colon = text.find(':');
  int lo = 0, hi = 0;
  const bool whole = parse_whole(std::string_view(text).substr(0, colon), lo) == Whole::ok &&
                     parse_whole(std::string_view(text).substr(colon + 1), hi) == Whole::ok;
  if (!whole || lo < 1 || hi < 1) {
    expected(e, "'auto', a positive whole number, or a range \"MIN:MAX\" of them (\"1:4\")");
    return;
  }
  if (lo > hi) {
    error(e.loc, e.path,
          "nodes: \"" + text + "\" has its minimum above its maximum; write \"" + std::to_string(hi) + ":" +
              std::to_string(lo) + "\"");
    return;
  }
  p.nodes.value = hi;
  if (lo < hi) p.min_nodes = lo;
}

void Checker::step_parallel(const Entry& e, Step& s) {
  ParallelSpec& p = s.parallel.emplace();
  p.loc = p.gpus.loc = p.nodes.loc = p.procs_per_node.loc = p.cpus_loc = e.key_loc;
  if (e.value.IsNull()) return;
  if (!e.value.IsMap()) {
    expected(e, "a mapping of parallel settings ('parallel: {}' for the defaults)");
    return;
  }
  auto keys = entries(e.value, e.loc, e.path, kParallelKeys, kParallelElsewhere);
  if (const Entry* g = find(keys, "gpus")) gpus(*g, p.gpus);
  for (auto [key, target] : {std::pair{"nodes", &p.nodes}, std::pair{"procs_per_node", &p.procs_per_node}}) {
    const Entry* n = find(keys, key);
    if (!n) continue;
    target->loc = n->loc;
    if (n->value.IsScalar() && n->value.Scalar() == "auto") continue;
    if (target == &p.nodes && n->value.IsScalar() && n->value.Scalar().find(':') != std::string::npos) {
      node_range(*n, p);
      continue;
    }
    if (auto value = count(*n, "a positive whole number", "auto", false)) target->value = *value;
  }
  if (const Entry* c = find(keys, "cpus")) {
    p.cpus_loc = c->loc;
    if (auto value = count(*c, "a positive whole number of CPU workers", "", false)) p.cpus = *value;
    if (find(keys, "gpus"))
      error(c->key_loc, c->path,
            "cpus and gpus cannot both be set; choose one: gpus for GPU workers, cpus for CPU workers");
  }
  if (const Entry* k = find(keys, "spare_nodes")) {
    p.spare_nodes_loc = k->loc;
    p.spare_nodes = count(*k, "a whole number of spare nodes (0 or more)", "", true).value_or(0);
    if (p.spare_nodes > 0 && p.min_nodes > 0)
      error(k->key_loc, k->path,
            "spare_nodes and an elastic nodes: \"" + std::to_string(p.min_nodes) + ":" +
                std::to_string(*p.nodes.value) +
                "\" cannot both be set: the range already takes nodes that join later and goes on without "
                "a lost one; give nodes: " +
                std::to_string(*p.nodes.value) + " with spare_nodes, or the range alone");
  }
  const Entry* m = find(keys, "max_restarts");
  std::optional<int> restarts;
  if (m) restarts = count(*m, "a whole number of restarts (0 or more)", "", true);
  p.max_restarts = restarts.value_or(0);
  if (const Entry* r = find(keys, "restart")) {
    restart(*r, s, p.restart);
    if (p.max_restarts == 0 && (!m || restarts))
      error(r->key_loc, r->path,
            "restart: chooses which failures restart the step, but max_restarts is " +
                std::string(m ? "0" : "not set (0)") +
                "; set max_restarts to how many restarts it may start (torchrun's --max-restarts)");
  }
  if (const Entry* v = find(keys, "visible_devices")) {
    static constexpr std::string_view kNames[] = {"node", "process"};
    static constexpr Visibility kValues[] = {Visibility::node, Visibility::process};
    p.visible_devices = choice<Visibility>(*v, kNames, kValues).value_or(Visibility::node);
  }
  for (auto [key, target] : {std::pair{"role", &p.role}, std::pair{"job_id", &p.job_id}}) {
    const Entry* n = find(keys, key);
    if (!n) continue;
    // A variable's value (ROLE_NAME, TORCHELASTIC_RUN_ID), on one line.
    const std::string name = std::string(key) == "role" ? "ROLE_NAME" : "TORCHELASTIC_RUN_ID";
    auto value = string(*n, "a name (it becomes every worker's " + name + ")");
    if (!value) continue;
    if (value->empty() || value->size() > 1000 ||
        value->find_first_of(std::string_view("\0\n", 2)) != std::string::npos) {
      expected(*n, "a name of 1 to 1000 characters on one line (it becomes every worker's " + name + ")");
      continue;
    }
    *target = *value;
  }
  if (const Entry* f = find(keys, "preflight")) {
    p.preflight = boolean(*f).value_or(false);
    if (p.preflight && find(keys, "cpus"))
      error(
          f->key_loc, f->path,
          "preflight checks the step's GPUs, and a step of CPU workers (cpus) has none; remove one of them");
  }
}

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

void Checker::gpus(const Entry& e, GpuRequest& request) {
  request.loc = e.loc;
  request.is_set = true;
  constexpr std::string_view kExpected = "'all', a positive whole number or a list of GPU ids like [0, 1]";
  if (e.value.IsScalar() && e.value.Scalar() == "all") {
    request.kind = GpuRequest::Kind::all;
    return;
  }
  if (e.value.IsScalar()) {
    int value = 0;
    Whole status = parse_whole(e.value.Scalar(), value);
    if (status == Whole::too_large) {
      expected(e, "a positive whole number up to " + std::to_string(kMaxInt));
    } else if (status == Whole::bad) {
      expected(e, kExpected);
    } else if (value == 0) {
      error(e.loc, e.path, expected_text(kExpected, e.value) + "; for CPU workers use 'cpus'");
    } else {
      request.kind = GpuRequest::Kind::count;
      request.count = value;
    }
    return;
  }
  if (!e.value.IsSequence() || e.value.size() == 0) {
    expected(e, e.value.IsSequence() ? "a non-empty list of GPU ids" : kExpected);
    return;
  }
  request.kind = GpuRequest::Kind::ids;
  std::map<std::string, Location> seen;
  for (const YAML::Node& item : items(e.value)) {
    Location loc = to_location(item.Mark());
    if (loc.line == 0) loc = e.loc;
    std::string id;
    int ordinal = 0;
    if (item.IsScalar() && parse_whole(item.Scalar(), ordinal) == Whole::ok) {
      id = std::to_string(ordinal);
    } else if (item.IsScalar() && is_gpu_uuid(item.Scalar())) {
      id = item.Scalar();
    } else {
      error(loc, e.path,
            expected_text("a GPU index (0, 1, ...) or a UUID starting with 'GPU-' or 'MIG-'", item));
      continue;
    }
    auto [first, fresh] = seen.emplace(id, loc);
    if (!fresh) {
      error(loc, e.path, "GPU " + id + " is listed twice; expected each GPU once");
      continue;
    }
    request.ids.push_back(id);
  }
}

void Checker::cluster(const Entry& e) {
  ClusterSpec& c = spec_.cluster.emplace();
  c.loc = c.hosts_loc = e.key_loc;
  if (!e.value.IsMap() && !e.value.IsNull()) {
    expected(e, "a mapping with the cluster's 'engine'");
    return;
  }
  auto keys = e.value.IsMap() ? entries(e.value, e.loc, e.path, kClusterKeys, kClusterElsewhere)
                              : std::vector<Entry>{};
  std::optional<Engine> engine;
  if (const Entry* g = find(keys, "engine")) {
    static constexpr std::string_view kNames[] = {"slurm", "ssh", "manual"};
    static constexpr Engine kValues[] = {Engine::slurm, Engine::ssh, Engine::manual};
    engine = choice<Engine>(*g, kNames, kValues);
    c.engine = engine.value_or(Engine::slurm);
  } else {
    error(e.key_loc, e.path, "missing required key 'engine' ('slurm', 'ssh' or 'manual')");
  }
  const Entry* hosts = find(keys, "hosts");
  if (hosts) {
    c.hosts_loc = hosts->loc;
    if (!hosts->value.IsSequence()) {
      expected(*hosts, "a list of host names");
    } else if (hosts->value.size() == 0 && engine == Engine::ssh) {
      expected(*hosts, "a non-empty list of host names for engine 'ssh'");
    } else {
      std::map<std::string, Location> seen;
      for (const YAML::Node& item : items(hosts->value)) {
        Location loc = to_location(item.Mark());
        if (loc.line == 0) loc = hosts->loc;
        if (!item.IsScalar() || !is_host_name(item.Scalar())) {
          error(loc, hosts->path, expected_text("a host name (no spaces, not starting with '-')", item));
        } else if (!seen.emplace(item.Scalar(), loc).second) {
          error(loc, hosts->path,
                "host " + quote(item.Scalar()) + " is listed twice; expected each node once");
        } else {
          c.hosts.push_back(item.Scalar());
        }
      }
    }
  }
  if (const Entry* f = find(keys, "hostfile")) {
    if (engine && engine != Engine::ssh) {
      error(f->key_loc, f->path, "hostfile is only used with engine 'ssh'; remove it or set engine: ssh");
    } else if (hosts) {
      error(f->key_loc, f->path, "hosts and hostfile cannot both be set; list the nodes in one of them");
    } else if (auto path = string(*f, "a file path (a string)")) {
      if (path->empty() || path->find('\0') != std::string::npos || path->find('\n') != std::string::npos) {
        expected(*f, "a file path");
      } else {
        c.hostfile = (std::filesystem::path(dir_) / *path).lexically_normal().string();
        c.hosts_loc = f->loc;
      }
    }
  } else if (!hosts && engine == Engine::ssh) {
    error(e.key_loc, e.path,
          "missing required key 'hosts' or 'hostfile' for engine 'ssh' (the nodes, in node-rank order)");
  }
  if (const Entry* g = find(keys, "gpus_per_node")) {
    if (auto value = count(*g, "a positive whole number", "", false)) c.gpus_per_node = *value;
  }
  if (const Entry* s = find(keys, "ssh_command")) {
    if (engine && engine != Engine::ssh) {
      error(s->key_loc, s->path, "ssh_command is only used with engine 'ssh'; remove it or set engine: ssh");
    } else if (auto argv = words(*s, "a command (a string or a list of words)", false)) {
      c.ssh_command = std::move(*argv);
    }
  }
  if (const Entry* s = find(keys, "srun_args")) {
    if (engine && engine != Engine::slurm) {
      error(s->key_loc, s->path,
            "srun_args is only used with engine 'slurm'; remove it or set engine: slurm");
    } else if (auto args = words(*s, "srun arguments (a string or a list of words)", true)) {
      c.srun_args = std::move(*args);
    }
  }
  if (const Entry* a = find(keys, "address")) {
    // Handed to bind() and to every agent's command line: one word, not an option.
    if (a->value.IsScalar() && is_host_name(a->value.Scalar()))
      c.address = a->value.Scalar();
    else
      expected(*a, "an address (an IP address or a host name, no spaces)");
  }
  if (const Entry* t = find(keys, "heartbeat_timeout"))
    c.heartbeat_timeout_s = duration(*t).value_or(c.heartbeat_timeout_s);
  if (const Entry* t = find(keys, "join_timeout")) c.join_timeout_s = duration(*t).value_or(c.join_timeout_s);
  if (const Entry* t = find(keys, "last_call_timeout"))
    c.last_call_timeout_s = duration(*t).value_or(c.last_call_timeout_s);
}

// Resolves needs and joins into edges, then reports missing steps, cycles and
// templates that name a step which does not run first; on success fills order.
graph::Edges Checker::step_edges(Suggester& suggest) {
  const std::size_t n = spec_.steps.size();
  graph::Edges edges(n);  // i -> steps i needs
  auto no_step = [&](const std::string& name) {
    std::string message = "no step named " + quote(name);
    if (auto match = suggest(name)) message += "; did you mean '" + *match + "'?";
    return message;
  };
  for (std::size_t i = 0; i < n; ++i) {
    Step& s = spec_.steps[i];
    StepNotes& notes = notes_[i];
    std::set<std::size_t> added;
    auto add = [&](const std::string& name, std::size_t target) {
      if (!added.insert(target).second) return;
      s.needs.push_back(name);
      edges[i].push_back(target);
    };
    if (notes.needs_written) {
      for (const auto& [name, loc] : notes.needs) {
        if (auto it = index_.find(name); it != index_.end())
          add(name, it->second);
        else if (!bad_names_.contains(name))
          error(loc, notes.path + ".needs", no_step(name));
      }
    } else if (i > 0 && notes_[i - 1].in_graph) {
      add(spec_.steps[i - 1].name, i - 1);
    }
    if (!s.join.empty()) {
      auto it = index_.find(s.join);
      if (it == index_.end()) {
        if (!bad_names_.contains(s.join)) error(s.join_loc, notes.path + ".join", no_step(s.join));
      } else if (!notes_[it->second].has_parallel) {
        error(s.join_loc, notes.path + ".join",
              "cannot join " + quote(s.join) +
                  ": it is not a parallel step; expected the name of a step with 'parallel:'");
      } else {
        add(s.join, it->second);
      }
    }
  }
  return edges;
}

void Checker::output_refs(const graph::Edges& edges, const std::vector<std::size_t>& order,
                          Suggester& suggest) {
  const std::size_t n = spec_.steps.size();
  // ${steps.NAME.outputs}: NAME must be a parallel step this one waits for.
  struct Ref {
    std::size_t step, target;
    Location loc;
  };
  std::vector<Ref> refs;
  for (std::size_t i = 0; i < n; ++i) {
    for (const auto& [name, loc] : notes_[i].refs) {
      auto it = index_.find(name);
      std::string tmpl = "'${steps." + name + ".outputs}'";
      if (it == index_.end()) {
        if (bad_names_.contains(name)) continue;
        auto match = suggest(name);
        error(loc, notes_[i].path + ".run",
              "no step named " + quote(name) + " (in " + tmpl + "); " +
                  (match ? "did you mean '" + *match + "'?" : "expected the name of a parallel step"));
      } else if (!notes_[it->second].has_parallel) {
        error(loc, notes_[i].path + ".run",
              tmpl + " names step " + quote(name) +
                  ", which is not parallel; only parallel steps have outputs");
      } else {
        refs.push_back({i, it->second, loc});
      }
    }
  }
  std::vector<std::pair<std::size_t, std::size_t>> queries;
  for (const Ref& ref : refs) queries.emplace_back(ref.step, ref.target);
  const std::vector<bool> before = graph::reaches(edges, order, queries);
  std::vector<bool> ordered(n, false);
  for (std::size_t v : order) ordered[v] = true;
  for (std::size_t q = 0; q < refs.size(); ++q) {
    const Ref& ref = refs[q];
    // A step on or after a cycle has no order to check against; the cycle is reported.
    if (before[q] || !ordered[ref.step]) continue;
    error(ref.loc, notes_[ref.step].path + ".run",
          "step " + quote(spec_.steps[ref.target].name) +
              " does not run before this step; add it to needs or join it");
  }
}

void Checker::graph() {
  const std::size_t n = spec_.steps.size();
  std::vector<std::string> names;
  for (std::size_t i = 0; i < n; ++i) {
    if (notes_[i].in_graph) names.push_back(spec_.steps[i].name);
  }
  Suggester suggest(std::move(names));
  const graph::Edges edges = step_edges(suggest);
  // Cycles, reported once each at the cycle's first step in file order.
  const std::vector<std::vector<std::size_t>> cycles = graph::cycles(edges);
  for (const auto& cycle : cycles) {
    std::vector<std::string> names_on;
    for (std::size_t v : cycle) names_on.push_back(spec_.steps[v].name);
    const std::size_t i = cycle.front();
    error(spec_.steps[i].loc, notes_[i].path,
          "dependency cycle " + join(names_on, " -> ") +
              " (each step needs the next); remove one of these needs");
  }
  const bool has_cycle = !cycles.empty();
  // Steps on a cycle, or after one, are not in the order.
  std::vector<std::size_t> order = graph::order(edges);

  output_refs(edges, order, suggest);
  if (!has_cycle && diagnostics_.empty()) spec_.order = std::move(order);
}

}  // namespace spec_detail

const Step* Spec::find_step(std::string_view step_name) const {
  for (const Step& step : steps) {
    if (step.name == step_name) return &step;
  }
  return nullptr;
}

std::string_view engine_name(Engine engine) {
  switch (engine) {
    case Engine::slurm: return "slurm";
    case Engine::ssh: return "ssh";
    case Engine::manual: return "manual";
  }
  return "unknown";
}

std::string python_path(const std::string& python, const std::string& dir) {
  if (python.find('/') == std::string::npos) return python;
  return (std::filesystem::path(dir) / python).lexically_normal().string();
}

void use_python(Spec& spec, const std::string& python) {
  spec.python = python;
  for (Step& step : spec.steps) {
    // A path, not a template: a working directory such as /tmp/${x} stays as it is.
    if (step.python_command) step.argv.front() = escape_templates(python);
  }
}

SpecParse parse_spec(std::string_view text, const std::string& file, const std::string& dir) {
  SpecParse parse = spec_detail::Checker(file, dir).run(text);
  if (parse.spec) parse.spec->text = std::string(text);
  return parse;
}

namespace {

using spec_detail::is_host_name;
using spec_detail::parse_whole;
using spec_detail::quote;
using spec_detail::Whole;

// A hostfile as MPI launchers read it: one host per line, optionally followed
// by `slots=N` (accepted so an existing MPI hostfile works; flowrun places
// ranks by GPUs, so N is ignored), '#' to the end of a line a comment.
std::vector<std::string> parse_hostfile(std::string_view text, const std::string& file,
                                        std::vector<Diagnostic>& diagnostics) {
  std::vector<std::string> hosts;
  std::map<std::string, int, std::less<>> seen;  // host -> line
  auto error = [&](int line, std::size_t at, std::string message) {
    diagnostics.push_back({file, {line, static_cast<int>(at) + 1}, "", std::move(message)});
  };
  constexpr std::string_view kBlank = " \t\r\v\f";
  int line_number = 0;
  for (std::size_t start = 0; start < text.size();) {
    ++line_number;
    const std::size_t end = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, end - start);
    line = line.substr(0, line.find('#'));
    std::vector<std::pair<std::string_view, std::size_t>> words;  // word, offset in the line
    for (std::size_t at = line.find_first_not_of(kBlank); at != std::string_view::npos;) {
      std::size_t stop = std::min(line.find_first_of(kBlank, at), line.size());
      words.emplace_back(line.substr(at, stop - at), at);
      at = line.find_first_not_of(kBlank, stop);
    }
    start = end + 1;
    if (words.empty()) continue;
    const auto [host, host_at] = words[0];
    if (!is_host_name(host)) {
      error(line_number, host_at,
            "expected a host name (not starting with '-', no control characters), got " + quote(host));
    } else if (auto [first, fresh] = seen.emplace(host, line_number); !fresh) {
      error(line_number, host_at,
            "host " + quote(host) + " is listed twice (first at line " + std::to_string(first->second) +
                "); expected each node once");
    } else {
      hosts.emplace_back(host);
    }
    int slots = 0;
    for (std::size_t i = 1; i < words.size(); ++i) {
      const auto [word, at] = words[i];
      if (i == 1 && word.starts_with("slots=")) {
        if (parse_whole(word.substr(6), slots) != Whole::ok || slots == 0)
          error(line_number, at, "expected 'slots=N' with N a positive whole number, got " + quote(word));
        continue;
      }
      error(line_number, at,
            "unexpected " + quote(word) + "; expected one host per line, optionally followed by 'slots=N'");
      break;
    }
  }
  return hosts;
}

// Fills cluster.hosts from cluster.hostfile. Problems in the file are reported
// at its own lines, under the name the user would use for it: relative like
// the spec's when it sits next to it, else absolute.
void read_hostfile(const Spec& spec, ClusterSpec& cluster, std::vector<Diagnostic>& diagnostics) {
  std::string shown = cluster.hostfile;
  const std::filesystem::path relative = std::filesystem::path(cluster.hostfile).lexically_relative(spec.dir);
  if (std::filesystem::path(spec.file).is_relative() && !relative.empty() && *relative.begin() != "..")
    shown = (std::filesystem::path(spec.file).parent_path() / relative).lexically_normal().string();
  auto at_key = [&](std::string message) {
    diagnostics.push_back({spec.file, cluster.hosts_loc, "cluster.hostfile", std::move(message)});
  };
  // One byte past the limit, to tell a file that is too large.
  int err = 0;
  const auto read = try_read_given_file(cluster.hostfile, kMaxSpecBytes + 1, &err);
  if (!read) {
    at_key("cannot read " + shown + ": " + file_error_text(err));
    return;
  }
  const std::string& text = *read;
  if (text.size() > kMaxSpecBytes) {
    at_key(shown + " is larger than " + format_bytes(kMaxSpecBytes) + "; expected one host per line");
    return;
  }
  std::vector<Diagnostic> problems;
  cluster.hosts = parse_hostfile(text, shown, problems);
  if (!problems.empty()) {
    diagnostics.insert(diagnostics.end(), problems.begin(), problems.end());
  } else if (cluster.hosts.empty()) {
    at_key(shown + " lists no hosts; expected one host per line, the nodes in node-rank order");
  }
}

}  // namespace

SpecParse load_spec(const std::string& path) {
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  std::string dir = (ec ? std::filesystem::path(path) : absolute).parent_path().lexically_normal().string();
  if (dir.size() > 1 && dir.back() == '/') dir.pop_back();

  // One byte past the limit: parse_spec tells a file that is too large.
  int err = 0;
  const auto text = try_read_given_file(path, kMaxSpecBytes + 1, &err);
  if (!text) {
    SpecParse result;
    result.diagnostics.push_back({path, {}, "", std::string("cannot read: ") + file_error_text(err)});
    return result;
  }
  SpecParse result = parse_spec(*text, path, dir);
  // parse_spec does no I/O; the hostfile is read once the spec itself is clean.
  if (result.spec && result.spec->cluster && !result.spec->cluster->hostfile.empty()) {
    read_hostfile(*result.spec, *result.spec->cluster, result.diagnostics);
    if (!result.diagnostics.empty()) result.spec.reset();
  }
  return result;
}

}  // namespace flowrun
