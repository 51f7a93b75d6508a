// The head's table of nodes (lib/head/node_table.cpp): the heartbeat
// rule on a fake clock (the `now` each tick is given), who joined and who
// is missing, the node rank a joiner gets, the GPU counts the plan wants,
// and one heartbeat tick over fake links that nothing drains (a frame sent
// stays queued).
#include "node_table.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "flowrun/supervisor.h"

#include "fake_node_link.h"
#include "testing.h"

using namespace flowrun;
using namespace flowrun::cluster;

namespace {

using testing::kSecond;

StepPlan three_nodes() {
  StepPlan plan;
  plan.step = "train";
  plan.nodes.resize(3);
  plan.nodes[1].host = "gpu-b";
  for (auto& node : plan.nodes) node.gpus_available = 2;
  return plan;
}

Joiner joiner(const std::string& node, int gpus = 2, const std::string& via = "10.0.0.1") {
  Joiner j;
  j.node = node;
  j.gpus = gpus;
  j.ip = "10.0.0.9";
  j.via = via;
  return j;
}

// Links to nodes that stay open until closed, and keep what is sent to
// them queued (no loop drains them).
class Loopback {
 public:
  std::shared_ptr<flowrun::testing::FakeLink> connect() {
    auto link = std::make_shared<flowrun::testing::FakeLink>();
    link->heard_at(monotonic_now_ns());
    return link;
  }
};

}  // namespace

TEST_CASE("claim_node_rank: the claimed rank, or the lowest free one the engine does not hold",
          "[node_table]") {
  const std::vector<std::string> node_names{"a", "b", "", ""};
  const auto names = [&](int rank) { return node_names.at(static_cast<std::size_t>(rank)); };
  const std::vector<bool> joined{true, true, false, false};
  CHECK(claim_node_rank(2, joined, names, {}).rank == 2);
  CHECK(claim_node_rank(-1, joined, names, {}).rank == 2);
  CHECK(claim_node_rank(-1, joined, names, {2}).rank ==
        3);  // node 2's ssh starts an agent with --node-rank 2
  CHECK(claim_node_rank(-1, joined, names, {}).refusal.empty());
}

TEST_CASE("claim_node_rank: a rank out of range, one taken, or none left is refused", "[node_table]") {
  const std::vector<std::string> node_names{"a", "b"};
  const auto names = [&](int rank) { return node_names.at(static_cast<std::size_t>(rank)); };
  CHECK(claim_node_rank(2, {true, false}, names, {}).refusal ==
        "it asks for node rank 2, but the step has 2 nodes");
  CHECK(claim_node_rank(2, {true, false}, names, {}).rank == -1);
  CHECK(claim_node_rank(0, {true, false}, names, {}).refusal == "node rank 0 has already joined (from a)");
  CHECK(claim_node_rank(-1, {true, true}, names, {}).refusal == "no node rank is left for it");
  CHECK(claim_node_rank(-1, {true, false}, names, {1}).refusal == "no node rank is left for it");
}

TEST_CASE("heartbeat_silence: a node is lost once silent past the timeout, not at it", "[node_table]") {
  CHECK_FALSE(heartbeat_silence(5 * kSecond, 4 * kSecond, 2.0));
  CHECK_FALSE(heartbeat_silence(6 * kSecond, 4 * kSecond, 2.0));
  CHECK(heartbeat_silence(7 * kSecond + kSecond / 2, 4 * kSecond, 2.0) ==
        "no heartbeat for 3.5 s (cluster.heartbeat_timeout: 2 s)");
  CHECK(heartbeat_silence(4 * kSecond + kSecond / 10, 4 * kSecond, 0.05) ==
        "no heartbeat for 0.1 s (cluster.heartbeat_timeout: 0.05 s)");
}

TEST_CASE("NodeTable: nodes by rank, joined one by one until every one has", "[node_table]") {
  const StepPlan plan = three_nodes();
  NodeTable nodes(plan.nodes.size());
  REQUIRE(nodes.size() == 3);
  CHECK(nodes[2].rank == 2);
  CHECK(nodes.missing(plan) == std::vector<std::string>{"node 0", "node 1 (gpu-b)", "node 2"});

  CHECK_FALSE(nodes.join(1, joiner("b\x1b[31m"), nullptr));
  CHECK(nodes[1].name == R"(b\x1b[31m)");  // printed, so made printable
  CHECK(nodes[1].peer_ip == "10.0.0.9");
  CHECK(nodes.missing(plan) == std::vector<std::string>{"node 0", "node 2"});
  CHECK_FALSE(nodes.join(0, joiner("a", 2, "10.0.1.1"), nullptr));
  CHECK(nodes.join(2, joiner("c"), nullptr));
  CHECK(nodes.missing(plan).empty());
  CHECK(nodes.names() == std::vector<std::string>{"a", R"(b\x1b[31m)", "c"});
  CHECK(nodes.via_names() == std::vector<std::pair<std::string, std::string>>{
                                 {"10.0.1.1", "a"}, {"10.0.0.1", R"(b\x1b[31m)"}, {"10.0.0.1", "c"}});
}

TEST_CASE("NodeTable: a joiner gets a free node rank, not one taken or held for the engine", "[node_table]") {
  NodeTable nodes(3);
  nodes.join(0, joiner("a"), nullptr);
  Joiner any = joiner("b");
  CHECK(nodes.admit(any, {}).rank == 1);
  CHECK(nodes.admit(any, {1}).rank == 2);
  any.claim = 0;
  CHECK(nodes.admit(any, {}).refusal == "node rank 0 has already joined (from a)");
}

TEST_CASE(
    "NodeTable: joiners that ask for no rank get the lowest free one, whichever seats were taken before",
    "[node_table]") {
  // The table looks from the lowest seat that may be free, not from seat 0: it must still find a seat
  // below one that joined out of order.
  NodeTable nodes(4);
  const Joiner any = joiner("x");
  nodes.join(2, joiner("c"), nullptr);  // joined by its claim
  CHECK(nodes.admit(any, {}).rank == 0);
  nodes.join(0, joiner("a"), nullptr);
  CHECK(nodes.admit(any, {}).rank == 1);
  CHECK(nodes.admit(any, {1}).rank == 3);  // 1 held for the engine's agent, 2 taken
  nodes.join(1, joiner("b"), nullptr);
  CHECK(nodes.admit(any, {}).rank == 3);
  nodes.join(3, joiner("d"), nullptr);
  CHECK(nodes.admit(any, {}).refusal == "no node rank is left for it");
  CHECK(free_node_rank({true, true, false, false}, {}, 2) == 2);
  CHECK(free_node_rank({true, true, false, false}, {2}, 2) == 3);
}

TEST_CASE("NodeTable: nodes without the GPUs the plan gave them, in one line", "[node_table]") {
  const StepPlan plan = three_nodes();
  NodeTable nodes(plan.nodes.size());
  nodes.join(0, joiner("a", 2), nullptr);
  nodes.join(1, joiner("b", 1), nullptr);
  nodes.join(2, joiner("c", -1), nullptr);
  CHECK(nodes.gpu_mismatches(plan) ==
        "node b has 1 GPU, the plan gives each node 2; node c has 0 GPUs, the plan gives each node 2");
  nodes[1].gpus = nodes[2].gpus = 2;
  CHECK(nodes.gpu_mismatches(plan).empty());
}

TEST_CASE("NodeTable: a node is gone when lost, closed after its done, or signalled", "[node_table]") {
  NodeTable nodes(2);
  CHECK_FALSE(nodes.any_gone());
  nodes[1].done = nodes[0].ready = true;
  CHECK_FALSE(nodes.any_gone());
  for (bool Node::*gone : {&Node::lost, &Node::closed, &Node::signalled}) {
    NodeTable one(2);
    one[1].*gone = true;
    CHECK(one.any_gone());
  }
}

TEST_CASE("NodeTable::heartbeat: a heartbeat to each open node with nothing queued; the silent ones lost",
          "[node_table]") {
  Loopback loopback;
  NodeTable nodes(4);
  const auto a = loopback.connect();
  const auto b = loopback.connect();
  const auto c = loopback.connect();
  nodes.join(0, joiner("a"), a);
  nodes.join(1, joiner("b"), b);
  nodes.join(2, joiner("c"), c);  // node 3 has not joined: skipped
  c->close();                     // closed: skipped
  std::vector<std::string> lost;
  const auto record = [&](Node& n, const std::string& why) {
    lost.push_back(n.name + ": " + why);
    return true;
  };

  const std::int64_t heard = std::max(a->last_heard_ns(), b->last_heard_ns());
  CHECK(nodes.heartbeat(heard + kSecond, 2.0, record));
  CHECK(lost.empty());
  const std::size_t queued = a->queued();
  CHECK(queued > 0);
  CHECK(b->queued() == queued);
  CHECK(c->queued() == 0);

  // No loop ran: the heartbeat is still queued, and no second one joins it.
  CHECK(nodes.heartbeat(heard + kSecond, 2.0, record));
  CHECK(a->queued() == queued);

  // Past the timeout both are lost, in rank order; a lost node is skipped after.
  const std::int64_t late = std::min(a->last_heard_ns(), b->last_heard_ns()) + 10 * kSecond;
  CHECK(nodes.heartbeat(late, 2.0, record));
  REQUIRE(lost.size() == 2);
  CHECK(lost[0].rfind("a: no heartbeat for ", 0) == 0);
  CHECK(lost[1].rfind("b: no heartbeat for ", 0) == 0);
  CHECK(a->queued() == queued);

  // The head's loss ended the step: the tick stops at the first.
  lost.clear();
  nodes[0].lost = false;
  CHECK_FALSE(nodes.heartbeat(late, 2.0, [&](Node& n, const std::string& why) {
    record(n, why);
    n.lost = true;
    return false;
  }));
  CHECK(lost.size() == 1);
}

TEST_CASE("NodeTable: the join timeout's report names the missing nodes and where to reach the head",
          "[node_table]") {
  const StepPlan plan = three_nodes();
  NodeTable nodes(plan.nodes.size());
  nodes.join(0, joiner("a"), nullptr);
  CHECK(nodes.join_timeout(plan, 2.5, "10.0.0.1:29400") ==
        "2 of 3 nodes did not join within 2.5 s: node 1 (gpu-b), node 2; check that 'flowrun agent' can "
        "start there and reach 10.0.0.1:29400 (cluster.join_timeout)");
  CHECK(nodes.lost_text(nodes[0], "its agent's connection closed") ==
        "node a (node rank 0 of 3) lost: its agent's connection closed");
}

TEST_CASE("connection_lost: the head's own close, the agent's plain close, or the agent's with its reason",
          "[node_table]") {
  CHECK(connection_lost(true, "a frame failed to open") ==
        "the head closed its connection: a frame failed to open");
  CHECK(connection_lost(false, "the connection closed") == "its agent's connection closed");
  CHECK(connection_lost(false, "the connection failed: reset") ==
        "its agent's connection closed (the connection failed: reset)");
}

TEST_CASE("NodeTable with spares: a spare's seat after the nodes, admitted until the step ends",
          "[node_table]") {
  const StepPlan plan = three_nodes();
  NodeTable nodes(2, 2);  // 2 nodes, 2 spares' seats
  CHECK(nodes.size() == 2);
  CHECK(nodes.seats() == 4);
  CHECK(nodes.is_spare_seat(2));
  CHECK_FALSE(nodes.is_spare_seat(1));
  // A spare that joins first does not complete the nodes.
  Joiner spare = joiner("s");
  spare.claim = 3;
  CHECK(nodes.admit(spare, {}).rank == 3);
  CHECK_FALSE(nodes.join(3, spare, nullptr));
  CHECK_FALSE(nodes.join(0, joiner("a"), nullptr));
  CHECK(nodes.join(1, joiner("b"), nullptr));
  CHECK(nodes.names() == std::vector<std::string>{"a", "b"});  // the nodes alone
  CHECK(std::distance(nodes.begin(), nodes.end()) == 2);
  // Once every node joined, only a spare's seat is left to a joiner.
  Joiner late = joiner("t");
  CHECK(nodes.admit(late, {}, true).rank == 2);
  late.claim = 1;
  CHECK(nodes.admit(late, {}, true).refusal == "node rank 1 has already joined (from b)");
  CHECK(nodes.lost_text(nodes[3], "its agent's connection closed") ==
        "spare node s lost: its agent's connection closed");
}

TEST_CASE("NodeTable::replace: the first spare that waits takes a lost node's rank; the lost one retires",
          "[node_table]") {
  Loopback loopback;
  NodeTable nodes(2, 2);
  nodes.join(0, joiner("a"), loopback.connect());
  nodes.join(1, joiner("b"), loopback.connect());
  nodes.join(2, joiner("small", 1), loopback.connect());  // too few GPUs to take a place
  nodes.join(3, joiner("s"), loopback.connect());
  CHECK(nodes.spares_waiting(2) == 1);
  CHECK(nodes.spares_waiting(-1) == 2);
  CHECK(nodes.replaceable().empty());

  {
    // A node left out for its check was told bye and its agent ends by itself: no engine to cut short,
    // also once a spare sits in its seat.
    NodeTable checked(2, 1);
    checked.join(0, joiner("a"), loopback.connect());
    checked.join(1, joiner("b"), loopback.connect());
    checked.join(2, joiner("s"), loopback.connect());
    CHECK_FALSE(checked.any_hanging());
    checked[1].lost = checked[1].left_out = true;
    CHECK(checked.any_gone());
    CHECK_FALSE(checked.any_hanging());
    CHECK(checked.replace(1, 2) == 2);
    CHECK(checked[2].retired);
    CHECK_FALSE(checked.any_hanging());
    checked[0].lost = true;  // a's link is down: its engine may hang
    CHECK(checked.any_hanging());
  }

  NodeTable table(2, 2);
  table.join(0, joiner("a"), loopback.connect());
  table.join(1, joiner("b"), loopback.connect());
  table.join(2, joiner("small", 1), loopback.connect());
  table.join(3, joiner("s"), loopback.connect());
  table[1].lost = table[1].done = true;
  table[0].done = true;
  CHECK(table.any_gone());
  CHECK(table.replaceable() == std::vector<int>{1});
  CHECK(table.spares_cover(2));
  CHECK_FALSE(table.spares_cover(4));  // no spare has 4 GPUs
  CHECK(table.replace(1, 2) == 3);
  CHECK(table[1].name == "s");
  CHECK(table[1].rank == 1);
  CHECK_FALSE(table[1].done);
  CHECK_FALSE(table[1].lost);
  CHECK(table[3].name == "b");
  CHECK(table[3].rank == 3);
  CHECK(table[3].retired);
  CHECK(table.any_hanging());  // b's srun or ssh may hang on its link
  CHECK_FALSE(table[3].conn->is_open());
  CHECK_FALSE(table.any_gone());
  CHECK(table.names() == std::vector<std::string>{"a", "s"});
  // The retired node never waits as a spare; the small one has too few GPUs.
  CHECK(table.spares_waiting(2) == 0);
  table[0].lost = true;
  CHECK(table.replace(0, 2) == -1);
  CHECK(table.replace(0, -1) == 2);  // a CPU step takes any spare
  // A signalled node (a preemption) is not a node's fault: no spare replaces it, nor any other then.
  table[1].lost = true;
  CHECK_FALSE(table.spares_cover(-1));  // both spares have taken a place: none is left
  table[0].signalled = true;
  CHECK(table.replaceable() == std::vector<int>{1});
  CHECK_FALSE(table.spares_cover(-1));
}

TEST_CASE("NodeTable, elastic: the nodes there gather into node ranks 0 and up; a lost one retires for good",
          "[node_table]") {
  Loopback loopback;
  NodeTable nodes(3, 0, 2);  // nodes: "2:3"
  CHECK(nodes.elastic());
  CHECK(nodes.min_nodes() == 2);
  CHECK_FALSE(nodes.join(0, joiner("a"), loopback.connect()));
  CHECK_FALSE(nodes.join(2, joiner("c"), loopback.connect()));  // node rank 1 never joins
  CHECK(nodes.joined() == 2);
  CHECK(nodes.usable() == 2);
  // The step starts with the two there: c takes node rank 1.
  auto change = nodes.reseat();
  CHECK(change.dropped.empty());
  CHECK(change.added.empty());
  CHECK(nodes.size() == 2);
  CHECK(nodes.seats() == 3);
  CHECK(nodes.names() == std::vector<std::string>{"a", "c"});
  CHECK(nodes[1].rank == 1);
  CHECK(nodes.is_spare_seat(2));
  // A node that joins late waits in the free seat, whatever node rank it asks for.
  Joiner late = joiner("d");
  late.claim = 0;
  CHECK(nodes.admit(late, {}, true).rank == 2);
  CHECK_FALSE(nodes.join(2, late, loopback.connect()));
  CHECK(nodes.lost_text(nodes[2], "its agent's connection closed") ==
        "waiting node d lost: its agent's connection closed");
  CHECK(nodes.usable() == 3);
  // c is lost: the next attempt has a and d; c's connection is closed and its seat never comes back.
  nodes[1].lost = true;
  CHECK(nodes.any_gone());
  CHECK(nodes.usable() == 2);
  change = nodes.reseat();
  CHECK(change.dropped == std::vector<std::string>{"c"});
  CHECK(change.added == std::vector<std::string>{"d"});
  CHECK(nodes.names() == std::vector<std::string>{"a", "d"});
  CHECK(nodes[1].rank == 1);
  CHECK_FALSE(nodes[1].done);
  CHECK_FALSE(nodes.any_gone());
  CHECK(nodes.any_hanging());
  // The retired node's seat is free for the next node that joins late.
  CHECK_FALSE(nodes[2].joined);
  CHECK(nodes.admit(joiner("e"), {}, true).rank == 2);
  // Fewer than MIN left: usable says so; the head then fails the step.
  nodes[0].lost = true;
  CHECK(nodes.usable() == 1);
}

TEST_CASE("NodeTable, elastic: at most MAX nodes are taken, the nodes of the step first", "[node_table]") {
  Loopback loopback;
  NodeTable nodes(2, 0, 1);  // nodes: "1:2"
  nodes.join(0, joiner("a"), loopback.connect());
  nodes.reseat();  // started with a alone
  CHECK(nodes.size() == 1);
  nodes.join(1, joiner("b"), loopback.connect());
  CHECK(nodes.usable() == 2);
  const auto change = nodes.reseat();  // a restart: b is taken in
  CHECK(change.added == std::vector<std::string>{"b"});
  CHECK(nodes.names() == std::vector<std::string>{"a", "b"});
  CHECK(nodes.size() == 2);
  CHECK(nodes.usable() == 2);
}
