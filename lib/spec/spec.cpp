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
// The walk is spec_detail.h's Checker. This file holds its start (the text's
// encoding, the YAML documents, the top level) and the public functions of
// spec.h that need no file; each level below the top is read in a file of
// its own (spec_detail.h names them), and load_spec.cpp reads the files.

#include "flowrun/spec.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "flowrun/util.h"

#include "spec_detail.h"

namespace flowrun {

namespace spec_detail {

namespace {

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
    case Engine::gang: return "gang";
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

}  // namespace flowrun
