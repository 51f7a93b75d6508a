// A multi-node step's preflight: the report across nodes, a pure function of
// each node's recorded facts (tests/fixtures/gpu/), so every verdict is tested
// without a GPU or a second node.
#include <catch2/catch.hpp>
#include <string>

#include "flowrun/doctor.h"

#include "testing.h"

using namespace flowrun;

namespace {

using testing::load_doctor_facts;

// Two 8-GPU nodes whose sides of one 16-rank communicator are `a` and `b`.
ClusterDoctorFacts two_nodes(DoctorFacts a, DoctorFacts b) {
  ClusterDoctorFacts facts;
  facts.ranks = 16;
  a.hostname = "node-a";
  b.hostname = "node-b";
  facts.nodes.push_back({0, 0, "", std::move(a)});
  facts.nodes.push_back({1, 8, "", std::move(b)});
  return facts;
}

using testing::find_check;

}  // namespace

TEST_CASE("preflight across nodes: healthy nodes pass; each size takes the slowest node's time", "[doctor]") {
  DoctorFacts a = load_doctor_facts("h200x8-nvlink-healthy"), b = load_doctor_facts("h200x8-nvlink-healthy");
  a.allreduce.network = b.allreduce.network = "IB";
  b.allreduce.rows.back().time_ns = a.allreduce.rows.back().time_ns * 2;  // node b is slower at 1 GiB
  const ClusterDoctorFacts facts = two_nodes(a, b);

  const AllReduceFacts combined = combine_node_allreduce(facts);
  REQUIRE(combined.rows.size() == a.allreduce.rows.size());
  CHECK(combined.gpus == 16);
  CHECK(combined.rows.back().time_ns == b.allreduce.rows.back().time_ns);
  CHECK(combined.rows.front().time_ns == a.allreduce.rows.front().time_ns);

  const DoctorReport report = evaluate_cluster_doctor(facts);
  CHECK(report.exit_code == 0);
  const DoctorCheck* node0 = find_check(report, "node 0");
  REQUIRE(node0 != nullptr);
  CHECK(node0->status == CheckStatus::ok);
  CHECK(node0->message ==
        "node-a: 8 GPUs (NVIDIA H200 x8), driver 570.133.20, CUDA runtime 12.8, NCCL 2.26.2");
  const DoctorCheck* ar = find_check(report, "all-reduce");
  REQUIRE(ar != nullptr);
  CHECK(ar->message ==
        "14 sizes from 16 B to 1 GiB on 16 GPUs across 2 nodes, every sum correct, NCCL's network between "
        "nodes: IB");
  // The best large size: 256 MiB at node a's time beats 1 GiB at twice node a's time.
  const AllReduceRow& at256 = a.allreduce.rows[12];
  REQUIRE(at256.bytes == 256ull << 20);
  CHECK(report.large_busbw_gbps == Approx(busbw_gbps(at256.bytes, at256.time_ns, 16)));
  const DoctorCheck* bw = find_check(report, "bandwidth");
  REQUIRE(bw != nullptr);
  CHECK(bw->status == CheckStatus::skip);
  CHECK(
      bw->message.starts_with("large-message bus bandwidth 497.1 GB/s across 2 nodes, not judged: flowrun "
                              "knows no ceiling for the network"));

  const std::string text = format_cluster_doctor_text(facts, report);
  CHECK(text.starts_with(
      "flowrun doctor: 2 nodes, 16 GPUs (node-a: 8, node-b: 8)\n\n"
      "NCCL all-reduce across 2 nodes: 16 GPUs, float sum, out of place, 5 warmup + 20 timed "
      "iterations each; each time is the slowest node's\n"));
  CHECK(text.find("\n  ok    node 1      node-b: 8 GPUs (NVIDIA H200 x8), driver 570.133.20") !=
        std::string::npos);
  CHECK(text.ends_with("\nVerdict: healthy.\n"));
}

TEST_CASE("preflight across nodes: the node whose side hung is named, with what to do", "[doctor]") {
  DoctorFacts hung = load_doctor_facts("h200x8-hang");
  const ClusterDoctorFacts facts = two_nodes(load_doctor_facts("h200x8-nvlink-healthy"), hung);
  const DoctorReport report = evaluate_cluster_doctor(facts);
  CHECK(report.exit_code == 1);
  const DoctorCheck* ar = find_check(report, "all-reduce");
  REQUIRE(ar != nullptr);
  CHECK(ar->status == CheckStatus::fail);
  CHECK(ar->message == "NCCL all-reduce across 2 nodes hung on node-b: " + hung.allreduce.reason);
  CHECK(ar->advice.starts_with("a hang across nodes usually means NCCL cannot reach the other nodes"));
  CHECK(find_check(report, "bandwidth") == nullptr);
  const std::string text = format_cluster_doctor_text(facts, report);
  CHECK(text.find("\nNCCL all-reduce across") ==
        std::string::npos);  // no table of a sweep that did not finish
  CHECK(text.ends_with("\nVerdict: 1 check failed (all-reduce); exit 1.\n"));
}

TEST_CASE("preflight across nodes: a node without NCCL fails its own check and the all-reduce", "[doctor]") {
  ClusterDoctorFacts facts =
      two_nodes(load_doctor_facts("h200x8-nvlink-healthy"), load_doctor_facts("h200x8-no-nccl"));
  facts.nodes[0].facts.allreduce.status = "skipped";  // stopped when node b's check ended
  facts.nodes[0].facts.allreduce.reason = "stopped before it finished, while setting up";
  const DoctorReport report = evaluate_cluster_doctor(facts);
  CHECK(report.exit_code == 1);
  const DoctorCheck* node1 = find_check(report, "node 1");
  REQUIRE(node1 != nullptr);
  CHECK(node1->status == CheckStatus::fail);
  CHECK(node1->message.starts_with("node-b: nccl: NCCL not found: "));
  CHECK(node1->advice.starts_with("install NCCL"));
  const DoctorCheck* ar = find_check(report, "all-reduce");
  REQUIRE(ar != nullptr);
  CHECK(ar->status == CheckStatus::fail);
  // Node a's check was stopped because node b's ended: node b is the reason.
  CHECK(ar->message == "not run across the 2 nodes: on node-b: NCCL was not found");
}

TEST_CASE("preflight across nodes: nodes that never checked, and wrong sums", "[doctor]") {
  SECTION("node 0 ended before it made the communicator") {
    ClusterDoctorFacts facts = two_nodes(load_doctor_facts("h200x8-no-nccl"), DoctorFacts{});
    facts.nodes[1].not_checked =
        "its check never started: node 0's ended before it made the NCCL communicator";
    const DoctorReport report = evaluate_cluster_doctor(facts);
    CHECK(report.exit_code == 1);
    const DoctorCheck* node1 = find_check(report, "node 1");
    REQUIRE(node1 != nullptr);
    CHECK(node1->status == CheckStatus::skip);
    CHECK(
        node1->message ==
        "node-b: not checked: its check never started: node 0's ended before it made the NCCL communicator");
    CHECK(find_check(report, "all-reduce")->message ==
          "not run across the 2 nodes: on node-a: NCCL was not found");
  }
  SECTION("each node counts the wrong elements of its own GPUs") {
    DoctorFacts a = load_doctor_facts("h200x8-nvlink-healthy"), b = a;
    a.allreduce.rows[3].wrong = 2;
    b.allreduce.rows[3].wrong = 5;
    const DoctorReport report = evaluate_cluster_doctor(two_nodes(a, b));
    CHECK(report.exit_code == 1);
    CHECK(find_check(report, "all-reduce")->message == "wrong sums at 1 KiB (7 elements)");
  }
  SECTION("nodes whose sizes differ have nothing to compare") {
    DoctorFacts a = load_doctor_facts("h200x8-nvlink-healthy"), b = a;
    b.allreduce.rows.pop_back();
    const ClusterDoctorFacts facts = two_nodes(a, b);
    CHECK(combine_node_allreduce(facts).rows.empty());
    CHECK(find_check(evaluate_cluster_doctor(facts), "all-reduce")->message ==
          "the nodes measured no size in common");
  }
  SECTION("simulated GPUs: node 0's check did not run, nor did the others', for the same reason") {
    DoctorFacts sim;
    sim.runtime_skipped = "simulated GPUs (--fake-gpus or FLOWRUN_FAKE_GPUS)";
    sim.inventory.source = "fake";
    sim.allreduce.status = "not_run";
    ClusterDoctorFacts facts = two_nodes(sim, DoctorFacts{});
    facts.nodes[1].not_checked = sim.runtime_skipped;
    const DoctorReport report = evaluate_cluster_doctor(facts);
    CHECK(report.exit_code == 0);
    CHECK(find_check(report, "node 1")->message ==
          "node-b: not checked: simulated GPUs (--fake-gpus or FLOWRUN_FAKE_GPUS)");
    CHECK(find_check(report, "all-reduce")->status == CheckStatus::skip);
    CHECK(preflight_summary(report) == "not run: simulated GPUs (--fake-gpus or FLOWRUN_FAKE_GPUS)");
  }
  SECTION("simulated GPUs on every node: not run, and no failure") {
    DoctorFacts sim;
    sim.runtime_skipped = "simulated GPUs (--fake-gpus or FLOWRUN_FAKE_GPUS)";
    sim.inventory.source = "fake";
    sim.allreduce.status = "not_run";
    const DoctorReport report = evaluate_cluster_doctor(two_nodes(sim, sim));
    CHECK(report.exit_code == 0);
    CHECK(find_check(report, "all-reduce")->status == CheckStatus::skip);
  }
}
