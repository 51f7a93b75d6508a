// The step graph's algorithms on small graphs whose answers are known by
// hand (lib/spec/graph.h); the spec tests cover the messages built on them.
#include "graph.h"

#include <catch2/catch.hpp>

using namespace flowrun;
using graph::Edges;

TEST_CASE("graph: a chain has no cycle and runs in its own order", "[graph]") {
  const Edges chain = {{}, {0}, {1}, {2}};  // 3 needs 2 needs 1 needs 0
  CHECK(graph::cycles(chain).empty());
  CHECK(graph::order(chain) == std::vector<std::size_t>{0, 1, 2, 3});
  std::size_t count = 0;
  const auto comp = graph::components(chain, &count);
  CHECK(count == 4);
  CHECK(comp.size() == 4);
}

TEST_CASE("graph: ties in the order go to the node that comes first", "[graph]") {
  const Edges g = {{2}, {}, {}, {1}};  // 0 needs 2, 3 needs 1
  CHECK(graph::order(g) == std::vector<std::size_t>{1, 2, 0, 3});
}

TEST_CASE("graph: each cycle once, the shortest way back from its first node", "[graph]") {
  // 0 -> 1 -> 2 -> 0 and a longer way 0 -> 3 -> 4 -> 2; a self loop at 5;
  // 6 after the cycle.
  const Edges g = {{3, 1}, {2}, {0}, {4}, {2}, {5}, {0}};
  const auto found = graph::cycles(g);
  REQUIRE(found.size() == 2);
  CHECK(found[0] == std::vector<std::size_t>{0, 1, 2, 0});
  CHECK(found[1] == std::vector<std::size_t>{5, 5});
  std::size_t count = 0;
  const auto comp = graph::components(g, &count);
  CHECK(comp[0] == comp[1]);
  CHECK(comp[1] == comp[2]);
  CHECK(comp[0] == comp[3]);
  CHECK(comp[5] != comp[0]);
  CHECK(comp[6] != comp[0]);
  // Nodes on a cycle, or after one, have no place in the order.
  CHECK(graph::order(g).empty());
}

TEST_CASE("graph: reaches answers through indirect needs, past 64 targets", "[graph]") {
  // A chain of 200: node i needs node i - 1.
  Edges chain(200);
  for (std::size_t i = 1; i < chain.size(); ++i) chain[i] = {i - 1};
  const auto sorted = graph::order(chain);
  std::vector<std::pair<std::size_t, std::size_t>> queries;
  for (std::size_t t = 0; t < 150; ++t) queries.emplace_back(199, t);  // 150 targets: three blocks
  queries.emplace_back(10, 20);                                        // 20 comes after 10
  queries.emplace_back(5, 5);                                          // a node does not need itself
  const auto answer = graph::reaches(chain, sorted, queries);
  REQUIRE(answer.size() == queries.size());
  for (std::size_t q = 0; q < 150; ++q) CHECK(answer[q]);
  CHECK_FALSE(answer[150]);
  CHECK_FALSE(answer[151]);
}

TEST_CASE("graph: a query from a node outside the order answers false", "[graph]") {
  const Edges g = {{1}, {0}, {0}};  // 0 and 1 a cycle; 2 after it
  const auto sorted = graph::order(g);
  CHECK(sorted.empty());
  CHECK(graph::reaches(g, sorted, {{2, 0}}) == std::vector<bool>{false});
}
