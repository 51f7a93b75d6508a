// The preflight across nodes (lib/head/node_preflight.cpp), over fake
// links: node 0 makes the communicator's id and the others join it; a
// malformed id is the node's protocol error; a node whose check fails stops
// the others'; node 0 ending without an id leaves the others unchecked; the
// report is written once every node has answered.
#include "node_preflight.h"

#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <unistd.h>
#include <utility>
#include <variant>
#include <vector>

#include "flowrun/preflight_wire.h"

#include "testing.h"

using namespace flowrun;
using namespace flowrun::cluster;

namespace {

// Three nodes of two GPUs each, and what the preflight sent them.
class Preflights {
 public:
  Preflights()
      : console_fd_(open((dir_.path() + "/console.txt").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644)) {
    REQUIRE(console_fd_ >= 0);
  }
  ~Preflights() { close(console_fd_); }
  Preflights(const Preflights&) = delete;
  Preflights& operator=(const Preflights&) = delete;

  NodePreflight& preflight() { return preflight_; }
  std::string report_path() const { return dir_.path() + "/preflight.txt"; }

  std::vector<std::pair<int, Preflight>> sent;
  std::vector<std::pair<int, std::string>> stopped;
  std::vector<bool> lost = std::vector<bool>(3, false);

 private:
  static StepPlan three_nodes() {
    StepPlan plan;
    plan.step = "train";
    plan.nodes.resize(3);
    for (auto& node : plan.nodes) {
      node.gpus.resize(2);
      node.gpus[1].index = 1;
    }
    return plan;
  }

  testing::ScopedTempDir dir_{"node-preflight"};
  int console_fd_;
  Console console_{console_fd_, console_fd_};
  StepPlan plan_ = three_nodes();
  NodePreflight preflight_{
      console_, plan_, report_path(),
      NodePreflight::Links{
          [this](int node, const Preflight& m) { sent.emplace_back(node, m); },
          [this](int node, const std::string& reason) { stopped.emplace_back(node, reason); },
          [this](int node) { return lost[static_cast<std::size_t>(node)]; }}};
};

const std::vector<std::string> kNames{"n0", "n1", "n2"};

using testing::read_text;

}  // namespace

TEST_CASE("node preflight: node 0 makes the id, the others join it at their first rank", "[node_preflight]") {
  Preflights p;
  p.preflight().start(kNames);
  REQUIRE(p.sent.size() == 1);
  CHECK(p.sent[0].first == 0);
  CHECK(p.sent[0].second.nccl_id == "make");
  CHECK(p.sent[0].second.devices == std::vector<int>{0, 1});
  CHECK(p.sent[0].second.nranks == 6);
  CHECK(p.sent[0].second.first_rank == 0);
  CHECK(sweep_of(p.sent[0].second) == preflight_sweep());  // the quicker sweep, not doctor's default
  CHECK(preflight_sweep() != AllReduceSweep{});
  p.lost[2] = true;
  const std::string id(kNcclIdHexChars, 'a');
  CHECK(p.preflight().on_id(1, PreflightId{id}));  // only node 0's id counts
  CHECK(p.sent.size() == 1);
  CHECK(p.preflight().on_id(0, PreflightId{id}));
  REQUIRE(p.sent.size() == 2);  // not to node 2, which is lost
  CHECK(p.sent[1].first == 1);
  CHECK(p.sent[1].second.nccl_id == id);
  CHECK(p.sent[1].second.first_rank == 2);
  CHECK(p.preflight().on_id(0, PreflightId{id}));  // a second id is ignored
  CHECK(p.sent.size() == 2);
}

TEST_CASE("node preflight: the sweep and the communicator part cross the wire whole", "[node_preflight]") {
  // Every field differs from its default and from the others, so a field
  // left out or swapped either way shows.
  const AllReduceSweep sweep{1 << 10, 1 << 24, 3, 7, 11, 13};
  const NcclPart part{17, 5, std::string(kNcclIdHexChars, 'c')};
  const Preflight m = preflight_message({4, 6}, sweep, part);
  CHECK(m.devices == std::vector<int>{4, 6});
  CHECK(sweep_of(m) == sweep);
  CHECK(part_of(m) == part);
  std::string why;
  const std::optional<Message> decoded = decode_message(encode(m), &why);
  REQUIRE(decoded);
  const auto* back = std::get_if<Preflight>(&*decoded);
  REQUIRE(back != nullptr);
  CHECK(sweep_of(*back) == sweep);
  CHECK(part_of(*back) == part);
}

TEST_CASE("node preflight: an id that is not 256 hex characters is node 0's protocol error",
          "[node_preflight]") {
  Preflights p;
  p.preflight().start(kNames);
  CHECK_FALSE(p.preflight().on_id(0, PreflightId{"not an id"}));
  CHECK_FALSE(p.preflight().on_id(0, PreflightId{std::string(kNcclIdHexChars, 'G')}));
  CHECK(p.sent.size() == 1);
}

TEST_CASE("node preflight: a node whose check fails stops the others' checks once", "[node_preflight]") {
  Preflights p;
  p.preflight().start(kNames);
  REQUIRE(p.preflight().on_id(0, PreflightId{std::string(kNcclIdHexChars, '0')}));
  CHECK(p.preflight().on_done(1, PreflightDone{"not a report"}) == NodePreflight::State::checking);
  CHECK(p.stopped == std::vector<std::pair<int, std::string>>{{0, "the preflight check failed on node n1"},
                                                              {2, "the preflight check failed on node n1"}});
  CHECK(p.preflight().on_done(1, PreflightDone{"again"}) ==
        NodePreflight::State::checking);  // answered already
  CHECK(p.preflight().on_done(2, PreflightDone{"not a report"}) == NodePreflight::State::checking);
  CHECK(p.stopped.size() == 2);
  CHECK_FALSE(std::filesystem::exists(p.report_path()));
  CHECK(p.preflight().on_done(0, PreflightDone{"not a report"}) == NodePreflight::State::failed);
  CHECK(std::filesystem::exists(p.report_path()));
}

TEST_CASE("node preflight: node 0 ending without an id answers for the others", "[node_preflight]") {
  Preflights p;
  p.preflight().start(kNames);
  CHECK(p.preflight().on_done(0, PreflightDone{"not a report"}) == NodePreflight::State::failed);
  CHECK(p.stopped.empty());
  REQUIRE(std::filesystem::exists(p.report_path()));
  CHECK(read_text(p.report_path()).find("node 0's ended before it made the NCCL communicator") !=
        std::string::npos);
}
