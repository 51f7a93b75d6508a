// What a failed rank's own output tells the user (the contracts are in
// result.h): the traceback of its error file, and the hints for two mistakes
// its stderr names, Lightning's devices * num_nodes and a Python without a
// module the program imports.

#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <map>

#include "flowrun/json.h"
#include "flowrun/path.h"
#include "flowrun/result.h"
#include "flowrun/text.h"

namespace flowrun {

namespace {

// Reads the digits at the start of `s` (at most 9) into `n` and drops them.
bool take_number(std::string_view& s, int& n) {
  std::size_t len = 0;
  n = 0;
  while (len < s.size() && len < 9 && s[len] >= '0' && s[len] <= '9') n = n * 10 + (s[len++] - '0');
  s.remove_prefix(len);
  return len > 0;
}

bool take(std::string_view& s, std::string_view word) {
  if (s.substr(0, word.size()) != word) return false;
  s.remove_prefix(word.size());
  return true;
}

// "1 node x 2 per node", "2 nodes x 3 per node".
std::string layout_text(int nodes, int per_node) {
  return fmt::format("{} x {} per node", plural(nodes, "node"), per_node);
}

}  // namespace

std::optional<std::string> lightning_devices_hint(std::string_view text,
                                                  const std::vector<WorkerRecord>& workers) {
  // Lightning's own words; the numbers are read, the rest must match.
  constexpr std::string_view kStart = "You set `devices=";
  int devices = 0, num_nodes = 0, a = 0, b = 0, world = 0;
  bool found = false;
  for (std::size_t at = text.find(kStart); at != std::string_view::npos && !found;
       at = text.find(kStart, at + 1)) {
    std::string_view s = text.substr(at + kStart.size());
    found = take_number(s, devices) && take(s, "` and `num_nodes=") && take_number(s, num_nodes) &&
            take(s, "` in Lightning, but the product (") && take_number(s, a) && take(s, " * ") &&
            take_number(s, b) && take(s, ") does not match the world size (") && take_number(s, world) &&
            take(s, ")") && a == devices && b == num_nodes;
  }
  if (!found || workers.empty()) return std::nullopt;

  std::map<std::string, int> per_node;  // node -> workers ("" for one node)
  for (const auto& w : workers) ++per_node[w.node];
  const int total = static_cast<int>(workers.size());
  const int nodes = static_cast<int>(per_node.size());
  auto [fewest, most] = std::minmax_element(per_node.begin(), per_node.end(),
                                            [](const auto& x, const auto& y) { return x.second < y.second; });
  std::string out =
      fmt::format("flowrun:   Lightning's Trainer(devices={}, num_nodes={}) must multiply to this step's {} ",
                  devices, num_nodes, plural(total, "worker"));
  if (fewest->second != most->second) {
    return out + fmt::format(
                     "({} nodes with {} to {} workers each, which Lightning's devices cannot express): "
                     "give every node the same number of workers in the step's parallel:",
                     nodes, fewest->second, most->second);
  }
  const int per = most->second;
  return out +
         fmt::format("({}): set devices={}, num_nodes={}, or change the step's parallel: to run {} ({})",
                     layout_text(nodes, per), per, nodes, plural(devices * num_nodes, "worker"),
                     layout_text(num_nodes, devices));
}

std::optional<std::string> parse_error_file(const std::string& text) {
  auto root = parse_json(text);
  if (!root) return std::nullopt;
  const Json* message = find(*root, "message");
  if (!message) return std::nullopt;
  if (const auto* plain = message->get_ptr<const std::string*>()) {
    if (plain->empty()) return std::nullopt;
    return *plain;
  }
  if (const Json* extra = find(*message, "extraInfo")) {
    const std::string* stack = find_string(*extra, "py_callstack");
    if (stack && !stack->empty()) return *stack;
  }
  const std::string* inner = find_string(*message, "message");
  if (inner && !inner->empty()) return *inner;
  return std::nullopt;
}

std::optional<std::string> missing_module_hint(std::string_view text, const WorkerRecord& w) {
  constexpr std::string_view kError = "ModuleNotFoundError: No module named '";
  std::string module;
  for (std::size_t at = text.find(kError); at != std::string_view::npos; at = text.find(kError, at + 1)) {
    std::string_view rest = text.substr(at + kError.size());
    std::size_t len = 0;
    while (len < rest.size() && len < 200 &&
           (std::isalnum(static_cast<unsigned char>(rest[len])) != 0 || rest[len] == '_' || rest[len] == '.'))
      ++len;
    if (len > 0 && len < rest.size() && rest[len] == '\'') module = std::string(rest.substr(0, len));
  }
  if (module.empty()) return std::nullopt;

  std::string who = w.rank < 0 ? "it" : fmt::format("rank {}", w.rank);
  if (w.rank >= 0 && !w.node.empty()) who += " on " + w.node;
  constexpr std::string_view kChoose =
      ": choose the Python that has it with --python PY (flowrun run, flowrun SPEC) or python: PY in the "
      "spec";
  if (w.program.empty())
    return fmt::format("flowrun:   the Python {} ran has no module '{}'{}", who, module, kChoose);
  const std::string_view file = base_name(w.program);
  if (file.substr(0, 6) == "python") {
    const bool searched = !w.command.empty() && w.command.find('/') == std::string::npos;
    return fmt::format("flowrun:   {} ran {}{}, which has no module '{}'{}", who, w.program,
                       searched ? " (" + w.command + " as found on its PATH)" : "", module, kChoose);
  }
  std::string out = fmt::format("flowrun:   {} ran {}, not Python itself; ", who, w.program);
  if (w.path_python.empty())
    return out + fmt::format(
                     "its PATH has no python3: write the full path of the Python that has module '{}' in "
                     "the step's run:",
                     module);
  return out +
         fmt::format(
             "python3 on its PATH is {}: if that is the Python without module '{}', write the full path "
             "of the one that has it in the step's run: (--python and python: replace only a run that "
             "starts with python or python3)",
             w.path_python, module);
}

}  // namespace flowrun
