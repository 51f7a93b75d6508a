// The checks over the step graph (spec_detail.h), once every step is read:
// needs and joins resolved into edges (graph.h holds the algorithms), missing
// steps with a "did you mean", cycles, and ${steps.NAME.outputs} templates
// that name a step which does not run first. On success they fill the order.

#include <set>

#include "spec_detail.h"

namespace flowrun::spec_detail {

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

}  // namespace flowrun::spec_detail
