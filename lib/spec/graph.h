// The step graph's algorithms, apart from the YAML: a graph is a list of
// edges per node (i -> the nodes i needs), nodes numbered in file order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace flowrun::graph {

using Edges = std::vector<std::vector<std::size_t>>;

// Each node's strongly connected component (Tarjan's algorithm, iterative,
// so a long chain cannot overflow the stack); `*count` is how many there are.
std::vector<std::size_t> components(const Edges& edges, std::size_t* count);

// The cycles, one per component that has one, each as the shortest way from
// the component's first node (in file order) back to itself by breadth-first
// search: {i, ..., i}. Empty when the graph has none.
std::vector<std::vector<std::size_t>> cycles(const Edges& edges);

// Kahn's algorithm, always taking the ready node that comes first: every node
// after all the nodes it needs. Nodes on a cycle, or after one, are left out.
std::vector<std::size_t> order(const Edges& edges);

// For each (from, to) query: whether `to` is reached from `from` through its
// edges (from needs to, directly or not). `sorted` is order(edges). Queries
// whose `from` is not in `sorted` answer false. Reachability is marked 64
// targets at a time in one pass over `sorted`, not one search per query.
std::vector<bool> reaches(const Edges& edges, const std::vector<std::size_t>& sorted,
                          const std::vector<std::pair<std::size_t, std::size_t>>& queries);

}  // namespace flowrun::graph
