#include "graph.h"

#include <algorithm>
#include <limits>
#include <set>

namespace flowrun::graph {

namespace {
constexpr std::size_t kUnset = std::numeric_limits<std::size_t>::max();
}

std::vector<std::size_t> components(const Edges& edges, std::size_t* count) {
  const std::size_t n = edges.size();
  std::vector<std::size_t> number(n, kUnset), low(n, 0), component(n, kUnset);
  std::vector<std::size_t> stack, work;  // work: DFS stack of nodes; next edge kept in `cursor`
  std::vector<std::size_t> cursor(n, 0);
  std::vector<bool> on_stack(n, false);
  std::size_t counter = 0, found = 0;
  for (std::size_t root = 0; root < n; ++root) {
    if (number[root] != kUnset) continue;
    work.push_back(root);
    while (!work.empty()) {
      std::size_t v = work.back();
      if (number[v] == kUnset) {
        number[v] = low[v] = counter++;
        stack.push_back(v);
        on_stack[v] = true;
      }
      if (cursor[v] < edges[v].size()) {
        std::size_t w = edges[v][cursor[v]++];
        if (number[w] == kUnset)
          work.push_back(w);
        else if (on_stack[w])
          low[v] = std::min(low[v], number[w]);
        continue;
      }
      work.pop_back();
      if (!work.empty()) low[work.back()] = std::min(low[work.back()], low[v]);
      if (low[v] == number[v]) {
        std::size_t w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = false;
          component[w] = found;
        } while (w != v);
        ++found;
      }
    }
  }
  if (count) *count = found;
  return component;
}

std::vector<std::vector<std::size_t>> cycles(const Edges& edges) {
  const std::size_t n = edges.size();
  std::size_t count = 0;
  const std::vector<std::size_t> component = components(edges, &count);
  std::vector<bool> reported(count, false);
  std::vector<std::vector<std::size_t>> found;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = component[i];
    const bool cyclic = std::any_of(edges[i].begin(), edges[i].end(),
                                    [&](std::size_t w) { return w == i || component[w] == c; });
    if (!cyclic || reported[c]) continue;
    reported[c] = true;
    // The shortest way back to i inside its component.
    std::vector<std::size_t> parent(n, kUnset);
    std::vector<std::size_t> queue{i};
    std::size_t last = kUnset;
    for (std::size_t q = 0; q < queue.size() && last == kUnset; ++q) {
      for (std::size_t w : edges[queue[q]]) {
        if (component[w] != c) continue;
        if (w == i) {
          last = queue[q];
          break;
        }
        if (parent[w] == kUnset) {
          parent[w] = queue[q];
          queue.push_back(w);
        }
      }
    }
    std::vector<std::size_t> cycle{i};
    for (std::size_t v = last; v != i; v = parent[v]) cycle.push_back(v);
    std::reverse(cycle.begin() + 1, cycle.end());
    cycle.push_back(i);
    found.push_back(std::move(cycle));
  }
  return found;
}

std::vector<std::size_t> order(const Edges& edges) {
  const std::size_t n = edges.size();
  std::vector<std::size_t> sorted;
  std::vector<std::size_t> waiting(n, 0);
  std::vector<std::vector<std::size_t>> dependents(n);
  for (std::size_t i = 0; i < n; ++i) {
    waiting[i] = edges[i].size();
    for (std::size_t w : edges[i]) dependents[w].push_back(i);
  }
  std::set<std::size_t> ready;
  for (std::size_t i = 0; i < n; ++i) {
    if (waiting[i] == 0) ready.insert(i);
  }
  while (!ready.empty()) {
    std::size_t v = *ready.begin();
    ready.erase(ready.begin());
    sorted.push_back(v);
    for (std::size_t d : dependents[v]) {
      if (--waiting[d] == 0) ready.insert(d);
    }
  }
  return sorted;
}

std::vector<bool> reaches(const Edges& edges, const std::vector<std::size_t>& sorted,
                          const std::vector<std::pair<std::size_t, std::size_t>>& queries) {
  const std::size_t n = edges.size();
  std::vector<std::size_t> targets;
  std::vector<int> slot(n, -1);
  for (const auto& [from, to] : queries) {
    (void)from;
    if (slot[to] < 0) {
      slot[to] = static_cast<int>(targets.size());
      targets.push_back(to);
    }
  }
  std::vector<std::vector<std::size_t>> by_block((targets.size() + 63) / 64);
  for (std::size_t q = 0; q < queries.size(); ++q)
    by_block[static_cast<std::size_t>(slot[queries[q].second]) / 64].push_back(q);
  std::vector<bool> answer(queries.size(), false);
  std::vector<std::uint64_t> after(n);
  for (std::size_t block = 0; block < by_block.size(); ++block) {
    auto bit = [&](std::size_t v) -> std::uint64_t {
      const auto s = static_cast<std::size_t>(slot[v]);
      return slot[v] >= 0 && s / 64 == block ? std::uint64_t{1} << (s % 64) : 0;
    };
    std::fill(after.begin(), after.end(), 0);
    for (std::size_t v : sorted) {
      for (std::size_t w : edges[v]) after[v] |= after[w] | bit(w);
    }
    for (std::size_t q : by_block[block]) answer[q] = (after[queries[q].first] & bit(queries[q].second)) != 0;
  }
  return answer;
}

}  // namespace flowrun::graph
