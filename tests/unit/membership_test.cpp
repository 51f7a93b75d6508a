// Membership as a table of events and outcomes, like restart_policy_test:
// the head's node table (joins, losses, signals, spares' seats) and its
// seats between attempts (a spare taking a lost node's rank, an elastic
// step going on with the nodes left or taking in late joiners), with no
// head, no link but a fake one and no loop. Each row: the step's shape,
// what happened, what the head may do about it (NodeSeats::outlook), and
// the nodes of the next attempt in node-rank order, or why there is none.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "flowrun/plan.h"
#include "flowrun/supervisor.h"

#include "fake_node_link.h"
#include "node_seats.h"
#include "node_table.h"

using namespace flowrun;
using namespace flowrun::cluster;

namespace {

struct Event {
  enum Kind { join, lose, signal, close_after_done } kind;
  std::string node;  // join: its name; else the node's name
};

struct Row {
  const char* what;
  int nodes;   // MAX
  int spares;  // parallel.spare_nodes
  int min;     // MIN of nodes: "MIN:MAX"; 0: a fixed count
  std::vector<Event> events;
  // What the head may do about it.
  bool node_gone, spare_ready;
  int elastic_nodes;  // -1: none
  int next_world_size;
  // After before_restart: the next attempt's nodes by node rank, or the
  // failure's first words.
  std::vector<std::string> next;
  std::string failure;
};

StepPlan full_plan(int nodes, int spares, int min) {
  StepPlan plan;
  plan.step = "train";
  plan.cpu = true;
  plan.min_nodes = min;
  for (int n = 0; n < nodes; ++n) {
    NodePlan node;
    node.procs = 2;
    plan.nodes.push_back(node);
    for (int local = 0; local < 2; ++local) {
      RankPlan r;
      r.rank = n * 2 + local;
      r.node = n;
      r.local_rank = local;
      plan.ranks.push_back(r);
    }
  }
  plan.spares.resize(static_cast<std::size_t>(spares));
  plan.world_size = nodes * 2;
  return plan;
}

Node* named(NodeTable& table, const std::string& name) {
  for (std::size_t seat = 0; seat < table.seats(); ++seat)
    if (table[seat].name == name) return &table[seat];
  return nullptr;
}

}  // namespace

TEST_CASE("membership: joins, losses and spares as a table of events and outcomes", "[membership]") {
  using E = Event;
  const std::vector<Row> rows = {
      {"every node there", 2, 0, 0, {{E::join, "a"}, {E::join, "b"}}, false, false, -1, 0, {"a", "b"}, ""},
      {"a node lost, no spare",
       2,
       0,
       0,
       {{E::join, "a"}, {E::join, "b"}, {E::lose, "b"}},
       true,
       false,
       -1,
       0,
       {},
       "node b (node rank 1) is gone and no spare node waits"},
      {"a node lost, a spare takes its rank",
       2,
       1,
       0,
       {{E::join, "a"}, {E::join, "b"}, {E::join, "s"}, {E::lose, "b"}},
       true,
       true,
       -1,
       0,
       {"a", "s"},
       ""},
      {"two lost, one spare",
       3,
       1,
       0,
       {{E::join, "a"}, {E::join, "b"}, {E::join, "c"}, {E::join, "s"}, {E::lose, "a"}, {E::lose, "c"}},
       true,
       false,
       -1,
       0,
       {},
       "node c (node rank 2) is gone and no spare node waits"},
      {"the spare itself lost: nothing gone of the step's",
       2,
       1,
       0,
       {{E::join, "a"}, {E::join, "b"}, {E::join, "s"}, {E::lose, "s"}},
       false,
       false,
       -1,
       0,
       {"a", "b"},
       ""},
      {"a node signalled (a preemption): no spare takes it, the step ends",
       2,
       1,
       0,
       {{E::join, "a"}, {E::join, "b"}, {E::join, "s"}, {E::signal, "b"}},
       true,
       false,
       -1,
       0,
       {},
       ""},
      {"a node that closed after its done is replaced",
       2,
       1,
       0,
       {{E::join, "a"}, {E::join, "b"}, {E::join, "s"}, {E::close_after_done, "a"}},
       true,
       true,
       -1,
       0,
       {"s", "b"},
       ""},
      {"elastic 1:3, one of three lost: on with two",
       3,
       0,
       1,
       {{E::join, "a"}, {E::join, "b"}, {E::join, "c"}, {E::lose, "b"}},
       true,
       false,
       2,
       4,
       {"a", "c"},
       ""},
      {"elastic 2:3, two of three lost: fewer than MIN",
       3,
       0,
       2,
       {{E::join, "a"}, {E::join, "b"}, {E::join, "c"}, {E::lose, "a"}, {E::lose, "b"}},
       true,
       false,
       -1,
       2,
       {},
       "only 1 node is left of the 3 the step had, fewer than 2"},
      {"elastic 1:2, a signalled node ends the step however many are left",
       2,
       0,
       1,
       {{E::join, "a"}, {E::join, "b"}, {E::signal, "b"}},
       true,
       false,
       -1,
       2,
       {},
       ""},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    const StepPlan full = full_plan(row.nodes, row.spares, row.min);
    StepPlan plan = full;
    NodeTable table(static_cast<std::size_t>(row.nodes), static_cast<std::size_t>(row.spares), row.min);
    const int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    REQUIRE(devnull >= 0);
    const Console console{devnull, devnull};
    std::vector<std::string> notes;
    std::string failure;
    NodeSeats seats(table, full, plan, console, notes,
                    {[](int) {}, [&](const std::string& why) { failure = why; },
                     [&](int nodes) { plan = plan_for_nodes(full, nodes); }});
    std::vector<std::shared_ptr<flowrun::testing::FakeLink>> links;
    for (const Event& e : row.events) {
      if (e.kind == Event::join) {
        Joiner j;
        j.node = e.node;
        j.gpus = -1;
        const Admission a = table.admit(j, {}, table.joined() == table.size());
        REQUIRE(a.rank >= 0);
        links.push_back(std::make_shared<flowrun::testing::FakeLink>());
        table.join(a.rank, j, links.back());
        continue;
      }
      Node* n = named(table, e.node);
      REQUIRE(n != nullptr);
      if (e.kind == Event::lose) {
        n->lost = true;
        n->conn->close();
      } else if (e.kind == Event::signal) {
        n->signalled = true;
      } else {
        n->done = true;
        n->closed = true;
        n->conn->close();
      }
    }
    const NodeSeats::Outlook o = seats.outlook();
    CHECK(o.node_gone == row.node_gone);
    CHECK(o.spare_ready == row.spare_ready);
    CHECK(o.elastic_nodes.value_or(-1) == row.elastic_nodes);
    CHECK(o.next_world_size == row.next_world_size);
    // A loss nothing covers ends the step (the step runner restarts only
    // when spare_ready or elastic_nodes says so): before_restart is not
    // asked, but for the rows that show what it would say.
    if (o.node_gone && !o.covered() && row.failure.empty()) {
      CHECK(row.next.empty());
      ::close(devnull);
      continue;
    }
    const bool on = seats.before_restart();
    if (row.failure.empty()) {
      CHECK(on);
      CHECK(table.names() == row.next);
      CHECK(plan.world_size == static_cast<int>(row.next.size()) * 2);
    } else {
      CHECK_FALSE(on);
      CHECK(failure.rfind(row.failure, 0) == 0);
    }
    ::close(devnull);
  }
}
