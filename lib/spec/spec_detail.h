// What the spec's files share, private to lib/spec: the Checker, which walks
// a spec's YAML key by key and collects every problem, and the helpers more
// than one of its files needs. spec.cpp runs the walk from the top; each
// level of the format is read in a file of its own (step_keys.cpp,
// step_run.cpp, parallel_keys.cpp, restart_keys.cpp, cluster_keys.cpp), one
// value of any level in values.cpp, and the step graph in step_graph.cpp.
#pragma once

#include <cstddef>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <yaml-cpp/yaml.h>

#include "flowrun/spec.h"
#include "flowrun/util.h"

#include "graph.h"
#include "spec_keys.h"

namespace flowrun::spec_detail {

// Defined in placeholders.cpp.
std::string quote(std::string_view text);
bool is_step_name(std::string_view name);

inline constexpr int kMaxInt = std::numeric_limits<int>::max();
inline constexpr std::size_t kMaxPathLength = 4096;  // PATH_MAX

// Defined in values.cpp.

// A YAML mark as a Location ({} when it has none).
Location to_location(const YAML::Mark& mark);
// A value as a message names it: "1.5", "a string 'abc'", "an empty mapping".
std::string describe(const YAML::Node& node);
// "'a', 'b' or 'c'"
std::string one_of(std::span<const std::string_view> words);

enum class Whole { ok, bad, too_large };

// A non-negative whole number written in decimal digits.
Whole parse_whole(std::string_view s, int& out);

// A host name as a node is named on a command line: not empty, no blank or
// control character, not starting with '-'.
bool is_host_name(std::string_view host);

// "step name 'aaaa...' is 300 characters long; expected at most 100 ..."
std::string too_long(std::string_view what, std::string_view name);

// What is wrong with `word` as one argument of a program, or nullopt: execve
// ends it at a NUL, and refuses one longer than kMaxArgLength.
std::optional<std::string> argument_problem(std::string_view word);

// "90", "1.5", "90s", "30m", "1h30m", "2d", "500ms": a number of seconds, or
// numbers with units in decreasing order. Returns nullopt when malformed.
std::optional<double> parse_duration(std::string_view s);

// A key of a mapping and its value, ready to check.
struct Entry {
  std::string key;
  YAML::Node value;
  Location key_loc;
  Location loc;      // of the value; of the key when the value is empty
  std::string path;  // of the value
};

// The entry for `key`, or nullptr.
const Entry* find(const std::vector<Entry>& entries, std::string_view key);

// What a step looks like to the graph checks, next to the Step itself.
struct StepNotes {
  std::string path;           // "steps.NAME", or "steps[I]" without a usable name
  bool in_graph = false;      // has a valid name, the first with it
  bool has_parallel = false;  // wrote `parallel:`, valid or not
  bool needs_written = false;
  std::vector<std::pair<std::string, Location>> needs;  // as written
  std::vector<std::pair<std::string, Location>> refs;   // ${steps.NAME.outputs}
};

class Suggester;  // step_graph.cpp

class Checker {
 public:
  Checker(const std::string& file, const std::string& dir) : file_(file), dir_(dir) {}

  SpecParse run(std::string_view text);

 private:
  void error(Location loc, std::string path, std::string message) {
    diagnostics_.push_back({file_, loc, std::move(path), std::move(message)});
  }
  void expected(const Entry& e, std::string_view what) { error(e.loc, e.path, expected_text(what, e.value)); }
  static std::string expected_text(std::string_view what, const YAML::Node& got) {
    return "expected " + std::string(what) + ", got " + describe(got);
  }

  bool spend(const YAML::Node& node);
  std::vector<YAML::Node> items(const YAML::Node& sequence);
  bool check_text(std::string_view text);
  std::vector<Entry> entries(const YAML::Node& map, Location map_loc, const std::string& path,
                             std::span<const std::string_view> known, std::span<const Elsewhere> elsewhere);
  void unknown_key(Location loc, const std::string& path, const std::string& key,
                   std::span<const std::string_view> known, std::span<const Elsewhere> elsewhere);

  std::optional<std::string> string(const Entry& e, std::string_view what);
  // A value written as one scalar or as a list of them: appends each, located
  // at its item. False (and nothing appended) for anything else.
  bool one_or_more(const Entry& e, std::vector<Entry>& out);
  void step_logs(const Entry& e, Step& s);
  void step_forensics(const Entry& e, Forensics& f);
  std::optional<int> count(const Entry& e, std::string_view what, std::string_view word, bool allow_zero);
  std::optional<bool> boolean(const Entry& e);
  template <class E>
  std::optional<E> choice(const Entry& e, std::span<const std::string_view> names, std::span<const E> values);
  std::optional<std::vector<std::string>> words(const Entry& e, std::string_view what, bool allow_empty);
  std::optional<std::string> directory(const Entry& e, const std::string& base);
  std::optional<double> duration(const Entry& e);
  EnvList env(const Entry& e);

  void top(const YAML::Node& root);
  void step(const YAML::Node& node, std::size_t index);
  void step_run(const Entry& e, Step& s, StepNotes& notes, bool shell_known);
  void step_parallel(const Entry& e, Step& s);
  void node_range(const Entry& e, ParallelSpec& p);
  void restart(const Entry& e, const Step& s, RestartPolicy& policy);
  void restart_causes(const Entry& e, RestartPolicy& policy);
  void restart_exit_codes(const Entry& e, RestartPolicy& policy);
  void progress_file(const Entry& e, const Step& s, RestartPolicy& policy);
  void gpus(const Entry& e, GpuRequest& request);
  void cluster(const Entry& e);
  void graph();
  graph::Edges step_edges(Suggester& suggest);
  void output_refs(const graph::Edges& edges, const std::vector<std::size_t>& order, Suggester& suggest);
  bool templates_in(std::string_view text, Location loc, const std::string& path, StepNotes& notes);
  void shell_templates(std::string_view script, const YAML::Node& node, Location loc, const std::string& path,
                       std::string_view before, const std::string& unquotable);
  Location locate(const YAML::Node& node, Location fallback, std::string_view needle, std::size_t skip) const;

  const std::string& file_;
  const std::string& dir_;
  std::string_view text_;  // the spec's text, for a position inside a scalar
  std::vector<Diagnostic> diagnostics_;
  Spec spec_;
  std::vector<StepNotes> notes_;
  std::map<std::string, std::size_t, std::less<>> index_;  // step name -> first step with it
  std::set<std::string, std::less<>> bad_names_;           // names refused, not to be reported again
  // Work left, in values and bytes visited. Aliases let a small file name the
  // same large value many times; without them a file never needs more than
  // twice its size.
  std::size_t budget_ = 4 * kMaxSpecBytes;
  bool exhausted_ = false;  // then nothing else is reported: the walk stopped short
};

template <class E>
std::optional<E> Checker::choice(const Entry& e, std::span<const std::string_view> names,
                                 std::span<const E> values) {
  if (e.value.IsScalar()) {
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (names[i] == e.value.Scalar()) return values[i];
    }
  }
  std::string message = expected_text(one_of(names), e.value);
  if (e.value.IsScalar()) {
    if (auto match = closest_match(e.value.Scalar(), {names.begin(), names.end()}))
      message += "; did you mean '" + *match + "'?";
  }
  error(e.loc, e.path, message);
  return std::nullopt;
}

}  // namespace flowrun::spec_detail
