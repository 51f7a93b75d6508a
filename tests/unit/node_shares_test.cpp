// The head's tally of every node's ranks (lib/head/node_shares.h): it names
// the slow rank with its node, and asks every node to sample faster while it
// holds a suspect, since no agent sees the other nodes' ranks.
#include "node_shares.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "flowrun/plan.h"
#include "flowrun/wait_shares.h"

namespace flowrun {

namespace {

// 4 ranks on 2 nodes: 0 and 1 on node 0, 2 and 3 on node 1.
StepPlan two_nodes() {
  StepPlan plan;
  plan.step = "train";
  plan.world_size = 4;
  for (int r = 0; r < 4; ++r) plan.ranks.push_back(RankPlan{r, r / 2, r % 2, {}});
  return plan;
}

Shares::Rank rank_of(int rank, std::int64_t samples, std::int64_t waits) {
  return {rank, samples, waits, {{"load_batch (data.py:88)", samples - waits}}};
}

}  // namespace

TEST_CASE("the head hurries every node's sampler while it suspects a rank, and names it with its node",
          "[node_shares]") {
  const StepPlan plan = two_nodes();
  std::vector<std::string> said;
  std::vector<int> rates;
  cluster::NodeShares shares(
      plan, "", [&](const std::string& line) { said.push_back(line); },
      [&](int rate) { rates.push_back(rate); });
  shares.reset(0, 1.0);
  // Each node alone looks alike; together rank 3 seldom waits.
  CHECK_FALSE(shares.take(0, "node-a", Shares{0, {rank_of(0, 12, 9), rank_of(1, 12, 9)}}));
  CHECK(rates.empty());
  CHECK_FALSE(shares.take(1, "node-b", Shares{0, {rank_of(2, 12, 9), rank_of(3, 12, 2)}}));
  CHECK(rates == std::vector<int>{static_cast<int>(kSuspectRate)});
  // More of the same: said once, once the evidence is solid; the nodes go back to the base rate.
  CHECK_FALSE(shares.take(0, "node-a", Shares{0, {rank_of(0, 60, 45), rank_of(1, 60, 44)}}));
  CHECK_FALSE(shares.take(1, "node-b", Shares{0, {rank_of(2, 60, 45), rank_of(3, 60, 6)}}));
  REQUIRE(said.size() == 1);
  CHECK(said[0].rfind("flowrun: train: rank 3 (node-b) is the slow rank", 0) == 0);
  CHECK(rates == std::vector<int>{static_cast<int>(kSuspectRate), 1});
  CHECK_FALSE(shares.take(1, "node-b", Shares{0, {rank_of(2, 70, 52), rank_of(3, 70, 7)}}));
  CHECK(said.size() == 1);
  CHECK(rates.size() == 2);
  // A new attempt starts every node at the base rate again, and names anew.
  shares.reset(1, 1.0);
  CHECK_FALSE(shares.take(1, "node-b", Shares{1, {rank_of(2, 12, 9), rank_of(3, 12, 2)}}));
  CHECK_FALSE(shares.take(0, "node-a", Shares{1, {rank_of(0, 12, 9), rank_of(1, 12, 9)}}));
  CHECK(rates == std::vector<int>{static_cast<int>(kSuspectRate), 1, static_cast<int>(kSuspectRate)});
}

TEST_CASE("the head refuses shares of a rank that does not run on the node", "[node_shares]") {
  const StepPlan plan = two_nodes();
  std::vector<int> rates;
  cluster::NodeShares shares(
      plan, "", [](const std::string&) {}, [&](int rate) { rates.push_back(rate); });
  shares.reset(0, 1.0);
  CHECK(shares.take(0, "node-a", Shares{0, {rank_of(3, 12, 2)}}) ==
        std::optional<std::string>("shares of rank 3, which does not run on node 0"));
  CHECK(shares.take(0, "node-a", Shares{0, {{0, 3, 4, {}}}}) ==
        std::optional<std::string>("shares of rank 0: 4 waits and 0 blocked in 3 samples"));
  CHECK(shares.take(0, "node-a", Shares{0, {{0, 3, 1, {}, 4, 0, 0}}}) ==
        std::optional<std::string>("shares of rank 0: 1 waits and 4 blocked in 3 samples"));
  CHECK(shares.take(0, "node-a", Shares{0, {{0, 3, 1, {}, 2, 5000, 4000}}}) ==
        std::optional<std::string>("shares of rank 0: blocked 5000 us of a span of 4000 us"));
  // An earlier attempt's tallies are dropped, not counted and not refused.
  CHECK_FALSE(shares.take(1, "node-b", Shares{7, {rank_of(2, 12, 9), rank_of(3, 12, 2)}}));
  CHECK(rates.empty());
}

}  // namespace flowrun
