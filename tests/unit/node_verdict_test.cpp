// A node's verdict before a multi-node step's ranks start (node_verdict.h):
// facts in, each check's outcome out, with the exact words a user reads;
// and the stand-in NVML's faults as the real probe reads them; the reach of node 0 over real sockets.
#include "node_verdict.h"

#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include "flowrun/gpu.h"
#include "flowrun/slurm.h"

#include "node_check.h"

using namespace flowrun;
using namespace flowrun::cluster;

namespace {

// A healthy node of `gpus` GPUs, with 50 GiB free in its scratch and workdir.
NodeFacts healthy(int gpus) {
  NodeFacts f;
  f.expected_gpus = gpus;
  f.gpus_seen = gpus;
  f.gpus = probe_gpu_health(gpus);
  f.scratch = {"/tmp", std::int64_t(50) << 30, ""};
  f.workdir = {"/shared/work", std::int64_t(50) << 30, ""};
  return f;
}

const NodeCheck& check(const std::vector<NodeCheck>& checks, const std::string& name) {
  for (const auto& c : checks)
    if (c.name == name) return c;
  FAIL("no check " << name);
  throw;
}

}  // namespace

TEST_CASE("a healthy node passes every check", "[node_checks]") {
  NodeFacts f = healthy(4);
  f.torch = {"/usr/bin/python3", true, ""};
  const auto checks = judge_node(f);
  REQUIRE(checks.size() == 5);
  CHECK(checks[0] == NodeCheck{"gpu_count", true, "4 GPUs as the plan expects"});
  CHECK(checks[1] == NodeCheck{"gpu_health", true, "4 GPUs healthy (simulated)"});
  CHECK(checks[2] == NodeCheck{"scratch_space", true, "50.0 GiB free in /tmp"});
  CHECK(checks[3] == NodeCheck{"workdir_space", true, "50.0 GiB free in /shared/work"});
  CHECK(checks[4] == NodeCheck{"torch_import", true, "/usr/bin/python3 imports torch"});
}

TEST_CASE("a step of CPU workers checks no GPUs, and torch only when asked", "[node_checks]") {
  NodeFacts f = healthy(0);
  f.expected_gpus = -1;
  const auto checks = judge_node(f);
  REQUIRE(checks.size() == 2);
  CHECK(checks[0].name == "scratch_space");
  CHECK(checks[1].name == "workdir_space");
}

TEST_CASE("each GPU fault fails gpu_health and says what to do", "[node_checks]") {
  NodeFacts f = healthy(4);
  f.gpus.gpus[0].ecc_uncorrectable = 2;
  f.gpus.gpus[1].retired_pages_pending = 1;
  f.gpus.gpus[2].processes = 1;
  f.gpus.gpus[3].open_error = "Unknown Error";
  const auto checks = judge_node(f);
  const auto& c = check(checks, "gpu_health");
  CHECK_FALSE(c.ok);
  CHECK(
      c.detail ==
      "GPU 0 has 2 uncorrectable ECC errors: reset it (nvidia-smi -r) or drain the node; GPU 1 has retired "
      "pages "
      "pending, which only a reset retires: reset it (nvidia-smi -r) or drain the node; GPU 2 is busy: 1 "
      "process "
      "already runs on it (another job, or one left behind): end it, or leave the node out; GPU 3 cannot be "
      "opened (Unknown Error): reset it (nvidia-smi -r) or drain the node");
}

TEST_CASE("a GPU fewer than the plan's fails gpu_count", "[node_checks]") {
  NodeFacts f = healthy(4);
  f.gpus_seen = 3;
  CHECK(check(judge_node(f), "gpu_count") ==
        NodeCheck{"gpu_count", false,
                  "NVML reports 3 GPUs where the plan expects 4; a GPU is missing (fell off the bus, or "
                  "disabled): check nvidia-smi on the node, or leave it out"});
  f.gpus_seen = 0;
  f.gpus_unavailable = "libnvidia-ml.so.1 not found: no NVIDIA driver on this host";
  CHECK(check(judge_node(f), "gpu_count").detail ==
        "no GPUs (libnvidia-ml.so.1 not found: no NVIDIA driver on this host) where the plan expects 4; "
        "check the "
        "node's NVIDIA driver (nvidia-smi), or leave the node out");
}

TEST_CASE("free space under the threshold fails, naming the directory and the knob", "[node_checks]") {
  NodeFacts f = healthy(4);
  f.scratch.free_bytes = std::int64_t(100) << 20;
  f.workdir = {"/gone", -1, "No such file or directory"};
  const auto checks = judge_node(f);
  CHECK(check(checks, "scratch_space").detail ==
        "100 MiB free in /tmp (the ranks' scratch), under the 1024 MiB a node needs "
        "(FLOWRUN_NODE_CHECK_MIN_FREE_MB): free space there, or point TMPDIR elsewhere");
  CHECK(check(checks, "workdir_space") ==
        NodeCheck{"workdir_space", false,
                  "cannot tell the free space of /gone (the step's workdir): No such file or directory"});
}

TEST_CASE("a Python without torch fails torch_import with its last words", "[node_checks]") {
  NodeFacts f = healthy(4);
  f.torch = {"/opt/py/bin/python3", false, "ModuleNotFoundError: No module named 'torch'"};
  CHECK(check(judge_node(f), "torch_import").detail ==
        "/opt/py/bin/python3 -c 'import torch' failed: ModuleNotFoundError: No module named 'torch'; install "
        "torch for that Python on the node, or give the spec's python: one that has it");
}

TEST_CASE("a node that cannot reach node 0 fails reach_node0, naming the address and the route to check",
          "[node_checks]") {
  NodeFacts f = healthy(4);
  CHECK(judge_node(f).size() == 4);  // node 0 itself, or a node 0 with no port: not asked
  f.node0 = {"node1", "10.0.0.11", 40123, true, 1.5, ""};
  CHECK(check(judge_node(f), "reach_node0") ==
        NodeCheck{"reach_node0", true, "reaches node 0 (node1) at 10.0.0.11:40123 in 1.5 ms"});
  f.node0 = {"node1", "10.0.0.11", 40123, false, 0.1, "No route to host"};
  CHECK(
      check(judge_node(f), "reach_node0") ==
      NodeCheck{"reach_node0", false,
                "cannot reach node 0 (node1) at 10.0.0.11:40123: No route to host; its ranks could not reach "
                "MASTER_ADDR there either: check the route and the firewall from this node to 10.0.0.11 (ip "
                "route get 10.0.0.11), or leave the node out"});
}

TEST_CASE("the reach of node 0 is a TCP connection to its agent's port", "[node_checks]") {
  // A port that listens, and one bound that does not: connected, refused.
  auto bound = [](bool listens, int& port) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    if (listens) REQUIRE(listen(fd, 4) == 0);
    REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
    port = ntohs(sa.sin_port);
    return fd;
  };
  int open_port = 0, shut_port = 0;
  const int listening = bound(true, open_port);
  const int shut = bound(false, shut_port);
  Assign a;
  a.node_rank = 1;
  a.workdir = "/tmp";
  a.node0_name = "node-a";
  a.node0_address = "127.0.0.1";
  a.node0_port = open_port;
  const EnvMap env;
  const NodeFacts reached = gather_node_facts(a, Inventory{}, 0, env);
  CHECK(reached.node0.ok);
  CHECK(reached.node0.error.empty());
  CHECK(check(judge_node(reached), "reach_node0").ok);
  a.node0_port = shut_port;
  const NodeFacts refused = gather_node_facts(a, Inventory{}, 0, env);
  CHECK_FALSE(refused.node0.ok);
  CHECK(refused.node0.error == "Connection refused");
  a.node_rank = 0;  // node 0 does not check itself
  CHECK(gather_node_facts(a, Inventory{}, 0, env).node0.address.empty());
  close(listening);
  close(shut);
}

TEST_CASE("the stand-in NVML's faults reach the health probe", "[node_checks]") {
  setenv("FAKE_NVML_SCENARIO", "bridges", 1);
  setenv("FAKE_NVML_FAULTS", "ecc:1,busy:2,pending:0,missing:1", 1);
  const NodeGpuHealth health = probe_gpu_health(-1, FLOWRUN_FAKE_NVML);
  unsetenv("FAKE_NVML_FAULTS");
  REQUIRE(health.source == "nvml");
  CHECK(health.count == 3);
  REQUIRE(health.gpus.size() == 3);
  CHECK(health.gpus[0].retired_pages_pending == 1);
  CHECK(health.gpus[0].ecc_uncorrectable == 0);
  CHECK(health.gpus[1].ecc_uncorrectable == 1);
  CHECK(health.gpus[2].processes == 1);
  CHECK(health.gpus[1].processes == 0);
  CHECK(health.gpus[0].uuid == "GPU-00000000-0000-0000-0000-000000000000");

  setenv("FAKE_NVML_FAULTS", "noopen:3", 1);
  const NodeGpuHealth lost = probe_gpu_health(-1, FLOWRUN_FAKE_NVML);
  unsetenv("FAKE_NVML_FAULTS");
  unsetenv("FAKE_NVML_SCENARIO");
  REQUIRE(lost.gpus.size() == 4);
  CHECK(lost.gpus[3].open_error == "fake NVML error");
  CHECK(lost.gpus[2].open_error.empty());

  const NodeGpuHealth none = probe_gpu_health(-1, "/nonexistent/libnvidia-ml.so.1");
  CHECK(none.source == "none");
  CHECK(none.unavailable_reason == "/nonexistent/libnvidia-ml.so.1 not found: no NVIDIA driver on this host");
}

TEST_CASE("compress_hostlist writes what sbatch --exclude takes", "[slurm]") {
  CHECK(compress_hostlist({}) == "");
  CHECK(compress_hostlist({"node3"}) == "node3");
  CHECK(compress_hostlist({"node1", "node3", "node2", "gpu-a01", "login", "node3"}) ==
        "node[1-3],gpu-a01,login");
  CHECK(compress_hostlist({"gpu-a01", "gpu-a03", "gpu-a04", "gpu-a1"}) == "gpu-a[01,03-04],gpu-a1");
  for (const std::vector<std::string>& names : {std::vector<std::string>{"n8", "n9", "n10", "x"},
                                                std::vector<std::string>{"rack1-n07", "rack1-n09"}}) {
    std::string error;
    CHECK(expand_hostlist(compress_hostlist(names), &error) == names);
  }
}
