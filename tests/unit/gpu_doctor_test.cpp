// flowrun doctor: the verdict and report formats from recorded facts
// (tests/fixtures/gpu/), the topology rules, nccl-tests' arithmetic, the
// library search, NCCL's tuning lines, and the check child's protocol and
// time limits, all without a GPU; and the stand-in NCCL across processes.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <type_traits>
#include <unistd.h>
#include <vector>

#include "flowrun/doctor.h"
#include "flowrun/error.h"
#include "flowrun/gpu.h"
#include "flowrun/spec.h"

#include "testing.h"

using namespace flowrun;

namespace {

std::string fixture_path(const std::string& name) {
  return std::string(FLOWRUN_SOURCE_DIR) + "/tests/fixtures/gpu/" + name;
}

using testing::load_doctor_facts;

using testing::find_check;

// The report's "Checks:" lines, status and name only: "ok driver", "FAIL bandwidth".
std::vector<std::string> verdicts(const DoctorReport& report) {
  std::vector<std::string> out;
  for (const DoctorCheck& check : report.checks) {
    static const char* words[] = {"ok", "warn", "FAIL", "skip"};
    out.push_back(std::string(words[static_cast<int>(check.status)]) + " " + check.name);
  }
  return out;
}

// Sets the 1 GiB row so that 8 GPUs reach `busbw` GB/s (the other large row slower).
void set_large_busbw(DoctorFacts& facts, double busbw) {
  for (AllReduceRow& row : facts.allreduce.rows) {
    if (row.bytes >= kLargeMessageBytes) {
      const double algbw = busbw / (2.0 * 7 / 8) * (row.bytes == (1ull << 30) ? 1.0 : 0.9);
      row.time_ns = static_cast<std::int64_t>(static_cast<double>(row.bytes) / algbw);
    }
  }
}

// Runs `script` with /bin/sh as the check child.
GpuCheckOutcome run_script(const std::string& script, int silence_limit_s) {
  return doctor_detail::run_check_process({"/bin/sh", "-c", script}, silence_limit_s);
}

// The lines run_gpu_check_child writes, run in a forked child so its
// environment changes (NCCL_DEBUG and friends) stay out of this process; an
// empty value unsets the variable. `status` gets the child's exit status.
std::vector<std::string> child_lines(const GpuCheckRequest& request, const EnvMap& set_env,
                                     int* status_out = nullptr) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    for (const auto& [name, value] : set_env) {
      if (value.empty())
        unsetenv(name.c_str());
      else
        setenv(name.c_str(), value.c_str(), 1);
    }
    _exit(run_gpu_check_child(request, fds[1]));
  }
  close(fds[1]);
  std::string out;
  char buffer[4096];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) > 0;)
    out.append(buffer, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  if (status_out != nullptr)
    *status_out = WEXITSTATUS(status);
  else
    REQUIRE(WEXITSTATUS(status) == 0);
  std::vector<std::string> lines;
  std::stringstream in(out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("doctor: every fixture's report is exactly its recorded text", "[doctor]") {
  const std::pair<const char*, int> fixtures[] = {{"h200x8-nvlink-healthy", 0},
                                                  {"h200x8-nvlink-slow", 1},
                                                  {"h200x8-hang", 1},
                                                  {"h200x8-no-nccl", 1},
                                                  {"l40s-x4-pcie-two-sockets", 0},
                                                  {"h200x1", 0},
                                                  {"no-driver", 1}};
  for (const auto& [name, exit_code] : fixtures) {
    INFO(name);
    const DoctorFacts facts = load_doctor_facts(name);
    const DoctorReport report = evaluate_doctor(facts);
    CHECK(report.exit_code == exit_code);
    CHECK(format_doctor_text(facts, report) == testing::read_file(fixture_path(std::string(name) + ".txt")));
  }
}

TEST_CASE("doctor: the verdicts of the fixtures", "[doctor]") {
  SECTION("8 x H200 at 470 GB/s is healthy against the NVLS ceiling") {
    const DoctorReport report = evaluate_doctor(load_doctor_facts("h200x8-nvlink-healthy"));
    CHECK(verdicts(report) == std::vector<std::string>{"ok driver", "ok gpus", "ok links", "ok cuda",
                                                       "ok nccl", "ok all-reduce", "ok bandwidth"});
    REQUIRE(report.ceiling);
    CHECK(report.ceiling->id == "nvlink4-nvls");
    CHECK(report.ceiling->busbw_gbps == 475);
    CHECK(report.large_busbw_gbps == Approx(470.22).epsilon(1e-4));
  }
  SECTION("the same node at 300 GB/s is flagged, with what to check") {
    const DoctorReport report = evaluate_doctor(load_doctor_facts("h200x8-nvlink-slow"));
    const DoctorCheck* bandwidth = find_check(report, "bandwidth");
    REQUIRE(bandwidth);
    CHECK(bandwidth->status == CheckStatus::fail);
    CHECK(bandwidth->message ==
          "large-message bus bandwidth 300.0 GB/s is 63% of the 475 GB/s ceiling for NVLink 4 through "
          "NVSwitch, "
          "8 GPUs, NVLS (H100/H200 SXM), below the 85% (403.8 GB/s) a healthy node reaches");
    CHECK(bandwidth->advice.starts_with("check that every NVLink is up ('nvidia-smi nvlink --status')"));
    CHECK(report.exit_code == 1);
  }
  SECTION("4 PCIe GPUs across two sockets: a warning, and bandwidth not judged") {
    const DoctorReport report = evaluate_doctor(load_doctor_facts("l40s-x4-pcie-two-sockets"));
    CHECK(verdicts(report) == std::vector<std::string>{"ok driver", "ok gpus", "warn links", "ok cuda",
                                                       "ok nccl", "ok all-reduce", "skip bandwidth"});
    CHECK(!report.ceiling);
    CHECK(report.exit_code == 0);
  }
  SECTION("one GPU: the all-reduce runs, memory bandwidth is measured, no bus bandwidth verdict") {
    const DoctorReport report = evaluate_doctor(load_doctor_facts("h200x1"));
    CHECK(verdicts(report) == std::vector<std::string>{"ok driver", "ok gpus", "ok cuda", "ok nccl",
                                                       "ok all-reduce", "skip bandwidth", "ok memory"});
    CHECK(find_check(report, "memory")->message ==
          "device-to-device copy 3814.9 GB/s on GPU 0 (cudaMemcpy of 512 MiB, read and write counted)");
  }
  SECTION("no driver: the driver and cudaGetDeviceCount fail, each said plainly") {
    const DoctorReport report = evaluate_doctor(load_doctor_facts("no-driver"));
    CHECK(verdicts(report) ==
          std::vector<std::string>{"FAIL driver", "FAIL cuda", "ok nccl", "skip all-reduce"});
    CHECK(find_check(report, "cuda")->message ==
          "cudaGetDeviceCount failed: cudaErrorInsufficientDriver: CUDA driver version is insufficient for "
          "CUDA "
          "runtime version (CUDA runtime 13.0 from /usr/local/lib/libcudart.so.13; no CUDA driver answered)");
  }
  SECTION("no NCCL: the library, what was tried and how to install it") {
    const DoctorReport report = evaluate_doctor(load_doctor_facts("h200x8-no-nccl"));
    const DoctorCheck* nccl = find_check(report, "nccl");
    CHECK(nccl->status == CheckStatus::fail);
    CHECK(nccl->message ==
          "NCCL not found: libnccl.so.2: cannot open shared object file: No such file or directory (tried "
          "libnccl.so.2, /usr/local/cuda/lib64/libnccl.so.2, /usr/local/cuda/lib/libnccl.so.2)");
    CHECK(nccl->advice.find("FLOWRUN_NCCL_LIBRARY=/path/to/libnccl.so.2") != std::string::npos);
  }
  SECTION("a hang is a failure that says where") {
    const DoctorReport report = evaluate_doctor(load_doctor_facts("h200x8-hang"));
    const DoctorCheck* allreduce = find_check(report, "all-reduce");
    CHECK(allreduce->status == CheckStatus::fail);
    CHECK(allreduce->message ==
          "NCCL all-reduce hung: the all-reduce of 256 MiB did not finish within 60 s; flowrun aborted NCCL");
  }
}

TEST_CASE("doctor: the 85% line of the ceiling", "[doctor]") {
  DoctorFacts facts = load_doctor_facts("h200x8-nvlink-healthy");
  set_large_busbw(facts, 404.0);  // 85% of 475 is 403.75
  CHECK(find_check(evaluate_doctor(facts), "bandwidth")->status == CheckStatus::ok);
  set_large_busbw(facts, 403.5);
  CHECK(find_check(evaluate_doctor(facts), "bandwidth")->status == CheckStatus::fail);

  SECTION("sizes below 256 MiB are never judged") {
    facts.allreduce.rows.resize(12);  // up to 64 MiB
    const DoctorReport report = evaluate_doctor(facts);
    const DoctorCheck* bandwidth = find_check(report, "bandwidth");
    CHECK(bandwidth->status == CheckStatus::skip);
    CHECK(bandwidth->message == "not judged: no size of 256 MiB or more was measured correctly (--sizes)");
  }
  SECTION("a wrong sum fails the all-reduce and is not counted as bandwidth") {
    facts.allreduce.rows.back().wrong = 3;
    const DoctorReport report = evaluate_doctor(facts);
    CHECK(find_check(report, "all-reduce")->message == "wrong sums at 1 GiB (3 elements)");
    CHECK(report.large_busbw_gbps == Approx(403.5 * 0.9).epsilon(1e-3));
  }
}

TEST_CASE("doctor: which ceiling applies", "[doctor]") {
  DoctorFacts facts = load_doctor_facts("h200x8-nvlink-healthy");
  SECTION("NCCL choosing Ring on the 8-GPU node: the Ring ceiling, and NVLS is named") {
    for (AllReduceRow& row : facts.allreduce.rows) row.algorithm = "RING";
    const DoctorReport report = evaluate_doctor(facts);
    CHECK(report.ceiling->id == "nvlink4");
    CHECK(find_check(report, "bandwidth")->message ==
          "large-message bus bandwidth 470.2 GB/s is 127% of the 370 GB/s ceiling for NVLink 4 through "
          "NVSwitch "
          "without NVLS or with fewer than 8 GPUs (H100/H200 SXM) (NCCL chose RING; with NVLS, NVLink SHARP, "
          "such a "
          "node reaches 475 GB/s)");
  }
  SECTION("4 of the 8 GPUs: the Ring ceiling") {
    facts.inventory.gpus.resize(4);
    facts.inventory.links.resize(4);
    for (auto& row : facts.inventory.links) row.resize(4);
    facts.allreduce.gpus = 4;
    CHECK(evaluate_doctor(facts).ceiling->id == "nvlink4");
  }
  SECTION("A100s: NVLink 3") {
    for (Gpu& gpu : facts.inventory.gpus) gpu.details.compute_capability = "8.0";
    CHECK(evaluate_doctor(facts).ceiling->busbw_gbps == 230);
  }
  SECTION("PCIe within a socket: 80% of the slowest GPU link") {
    DoctorFacts pcie = load_doctor_facts("l40s-x4-pcie-two-sockets");
    for (auto& row : pcie.inventory.links) {
      for (GpuLink& link : row) {
        if (link.path == GpuPath::sys) link.path = GpuPath::phb;
      }
    }
    DoctorReport report = evaluate_doctor(pcie);
    REQUIRE(report.ceiling);
    CHECK(report.ceiling->link == "PCIe Gen4 x16 within one CPU socket");
    CHECK(report.ceiling->busbw_gbps == Approx(25.2));
    CHECK(find_check(report, "bandwidth")->status == CheckStatus::fail);  // 11.8 GB/s
    pcie.inventory.gpus[2].details.pcie_width = 8;
    report = evaluate_doctor(pcie);
    CHECK(report.ceiling->busbw_gbps == Approx(12.6));
    CHECK(find_check(report, "pcie")->message == "PCIe lanes missing: GPU 2 runs x8 of its x16");
    CHECK(find_check(report, "pcie")->status == CheckStatus::warn);
  }
}

TEST_CASE("doctor: NVLinks down", "[doctor]") {
  DoctorFacts facts = load_doctor_facts("h200x8-nvlink-healthy");
  facts.inventory.links[2][5] = facts.inventory.links[5][2] = GpuLink{GpuPath::nvlink, 17};
  facts.inventory.links[3][6] = facts.inventory.links[6][3] = GpuLink{GpuPath::sys, 0};
  const DoctorReport report = evaluate_doctor(facts);
  const DoctorCheck* links = find_check(report, "links");
  CHECK(links->status == CheckStatus::fail);
  CHECK(links->message == "NVLinks down: most pairs have NV18, but 2-5 NV17, 3-6 SYS");
}

TEST_CASE("doctor: nccl-tests' all-reduce arithmetic", "[doctor]") {
  // all_reduce.cu: baseBw = bytes / 1e9 / sec; busBw = baseBw * 2 (n-1) / n.
  const double seconds = 3996120e-9;
  const double base = 1073741824.0 / 1.0e9 / seconds;
  CHECK(algbw_gbps(1ull << 30, 3996120) == Approx(base));
  CHECK(busbw_gbps(1ull << 30, 3996120, 8) == Approx(base * 14 / 8));
  CHECK(busbw_gbps(1ull << 30, 3996120, 1) == 0);
  CHECK(busbw_gbps(1ull << 30, 3996120, 2) == Approx(base));
  CHECK(algbw_gbps(8, 0) == 0);
}

TEST_CASE("doctor: JSON round trip gives the same report", "[doctor]") {
  for (const char* name : {"h200x8-nvlink-slow", "l40s-x4-pcie-two-sockets", "no-driver"}) {
    INFO(name);
    const DoctorFacts facts = load_doctor_facts(name);
    const DoctorReport report = evaluate_doctor(facts);
    const std::string json = format_doctor_json(facts, report);
    const DoctorFacts back = parse_doctor_facts(json, "report.json");
    CHECK(format_doctor_text(back, evaluate_doctor(back)) == format_doctor_text(facts, report));
    CHECK(format_doctor_json(back, evaluate_doctor(back)) == json);
  }
  const std::string json = format_doctor_json(load_doctor_facts("h200x8-nvlink-healthy"),
                                              evaluate_doctor(load_doctor_facts("h200x8-nvlink-healthy")));
  CHECK(json.find("\"large_busbw_mb_s\": 470218,") != std::string::npos);
  CHECK(json.find("\"healthy\": true,") != std::string::npos);
}

TEST_CASE("doctor: facts files that are wrong say where", "[doctor]") {
  auto message = [](const std::string& text) {
    try {
      parse_doctor_facts(text, "f.json");
    } catch (const Error& e) {
      CHECK(e.exit_code() == kExitUsage);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message("{") == "f.json: not valid JSON");
  CHECK(
      message("{\"facts\": {}}") ==
      "f.json: flowrun_doctor_facts: missing: not a facts file (a facts file is what 'flowrun doctor --json' "
      "writes; see docs/gpu.md)");
  std::string text = testing::read_file(fixture_path("h200x8-nvlink-healthy.json"));
  const std::string row = "\"time_ns\": 17840";
  REQUIRE(text.find(row) != std::string::npos);
  text.replace(text.find(row), row.size(), "\"time_ns\": \"fast\"");
  CHECK(
      message(text) ==
      "f.json: facts.allreduce.rows[0].time_ns: expected a whole number >= 0 (a facts file is what 'flowrun "
      "doctor --json' writes; see docs/gpu.md)");
}

TEST_CASE("doctor: a simulated host passes without CUDA or NCCL", "[doctor]") {
  const Inventory inventory = select_gpus(fake_system_gpus(8), {});
  const PreflightResult result = run_preflight(inventory, {2, 3}, {}, "host-a");
  CHECK(result.ok);
  CHECK(result.facts.inventory.gpus.size() == 2);
  CHECK(result.facts.inventory.gpus[0].index == 2);
  CHECK(result.facts.inventory.links ==
        std::vector<std::vector<GpuLink>>{{{GpuPath::self, 0}, {GpuPath::nvlink, 18}},
                                          {{GpuPath::nvlink, 18}, {GpuPath::self, 0}}});
  CHECK(result.report.find(
            "  skip  all-reduce  not run: simulated GPUs (--fake-gpus or FLOWRUN_FAKE_GPUS)\n") !=
        std::string::npos);
  CHECK_THROWS_WITH(run_preflight(inventory, {8}), "preflight: GPU 8 is not one of this host's 8 GPUs");
}

TEST_CASE("topology: nvidia-smi's names", "[doctor]") {
  CHECK(gpu_link_name({GpuPath::nvlink, 18}) == "NV18");
  CHECK(gpu_link_name({GpuPath::sys, 0}) == "SYS");
  CHECK(gpu_link_name({GpuPath::self, 0}) == "X");
  for (const char* name : {"X", "NV4", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS", "?"})
    CHECK(gpu_link_name(*parse_gpu_link(name)) == name);
  CHECK(!parse_gpu_link("NV0"));
  CHECK(!parse_gpu_link("NV"));
  CHECK(!parse_gpu_link("nv18"));
  CHECK(nvlink_generation("9.0") == 4);
  CHECK(nvlink_generation("8.6") == 3);
  CHECK(nvlink_generation("10.0") == 5);
  CHECK(nvlink_generation("12.0") == 0);
  CHECK(nvlink_generation("") == 0);
  CHECK(gpu_detail::path_from_nvml_level(10) == GpuPath::pix);
  CHECK(gpu_detail::path_from_nvml_level(20) == GpuPath::pxb);
  CHECK(gpu_detail::path_from_nvml_level(30) == GpuPath::phb);
  CHECK(gpu_detail::path_from_nvml_level(40) == GpuPath::node);
  CHECK(gpu_detail::path_from_nvml_level(50) == GpuPath::sys);
  CHECK(gpu_detail::path_from_nvml_level(-1) == GpuPath::unknown);
  CHECK(gpu_detail::same_pci_device("00000000:19:00.0", "0000:19:00.0"));
  CHECK(gpu_detail::same_pci_device("00000000:9A:00.0", "00000000:9a:00.0"));
  CHECK(!gpu_detail::same_pci_device("00000000:19:00.0", "00000000:1A:00.0"));
  CHECK(!gpu_detail::same_pci_device("", ""));
}

TEST_CASE("topology: links from what NVML reports", "[doctor]") {
  std::vector<GpuDevice> devices(4);
  const char* buses[] = {"00000000:17:00.0", "00000000:31:00.0", "00000000:B1:00.0", "00000000:CA:00.0"};
  for (int i = 0; i < 4; ++i) devices[static_cast<std::size_t>(i)].pci_bus_id = buses[i];
  // 0-1 and 2-3 on one socket each (NODE), SYS across.
  std::vector<std::vector<int>> levels = {{0, 40, 50, 50}, {40, 0, 50, 50}, {50, 50, 0, 40}, {50, 50, 40, 0}};
  SECTION("bridges join 0-1 by 4 NVLinks; 2-3 stay PCIe") {
    std::vector<std::vector<gpu_detail::NvLinkEnd>> active(4);
    for (int k = 0; k < 4; ++k) {
      active[0].push_back({0, "0000:31:00.0"});
      active[1].push_back({0, "0000:17:00.0"});
    }
    const auto links = gpu_detail::build_links(devices, levels, active);
    CHECK(gpu_link_name(links[0][1]) == "NV4");
    CHECK(gpu_link_name(links[1][0]) == "NV4");
    CHECK(gpu_link_name(links[2][3]) == "NODE");
    CHECK(gpu_link_name(links[0][2]) == "SYS");
    CHECK(gpu_link_name(links[3][3]) == "X");
  }
  SECTION("links to NVSwitches join every switch-connected pair with the smaller count") {
    std::vector<std::vector<gpu_detail::NvLinkEnd>> active(4);
    for (int i = 0; i < 3; ++i) {
      for (int k = 0; k < (i == 1 ? 17 : 18); ++k)
        active[static_cast<std::size_t>(i)].push_back({2, "00000000:05:00.0"});
    }
    const auto links = gpu_detail::build_links(devices, levels, active);
    CHECK(gpu_link_name(links[0][2]) == "NV18");
    CHECK(gpu_link_name(links[0][1]) == "NV17");
    CHECK(gpu_link_name(links[0][3]) == "SYS");  // GPU 3 has no active link
  }
  SECTION("the fake probe's HGX board, narrowed by CUDA_VISIBLE_DEVICES") {
    const Inventory inventory = select_gpus(fake_system_gpus(8), {{"CUDA_VISIBLE_DEVICES", "6,1"}});
    REQUIRE(inventory.links.size() == 2);
    CHECK(gpu_link_name(inventory.links[0][1]) == "NV18");
    CHECK(inventory.nvswitch);
    CHECK(inventory.gpus[0].details.pcie_gen_max == 5);
  }
}

TEST_CASE("doctor: message sizes", "[doctor]") {
  const auto sizes = doctor_detail::sweep_sizes(8, 1ull << 30, 2);
  CHECK(sizes.size() == 28);
  CHECK(sizes.front() == 8);
  CHECK(sizes[1] == 16);
  CHECK(sizes.back() == (1ull << 30));
  CHECK(doctor_detail::sweep_sizes(16, 1ull << 30, 4) ==
        std::vector<std::uint64_t>{16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216,
                                   67108864, 268435456, 1073741824});
  CHECK(doctor_detail::sweep_sizes(8, 100, 4) == std::vector<std::uint64_t>{8, 32});
  CHECK(doctor_detail::parse_size("8") == 8);
  CHECK(doctor_detail::parse_size("64K") == 65536);
  CHECK(doctor_detail::parse_size("1M") == 1048576);
  CHECK(doctor_detail::parse_size("1G") == 1073741824);
  CHECK(doctor_detail::parse_size("1.5G") == 0);
  CHECK(doctor_detail::parse_size("G") == 0);
  CHECK(doctor_detail::parse_size("0") == 0);
  CHECK(doctor_detail::format_size(8) == "8 B");
  CHECK(doctor_detail::format_size(256ull << 10) == "256 KiB");
  CHECK(doctor_detail::format_size(1ull << 30) == "1 GiB");
  CHECK(doctor_detail::format_size(1536) == "1536 B");
}

TEST_CASE("doctor: where the CUDA runtime and NCCL are looked for", "[doctor]") {
  SECTION("an explicit path is the only candidate") {
    CHECK(doctor_detail::cudart_candidates({{"FLOWRUN_CUDART_LIBRARY", "/opt/cuda/libcudart.so.12"}}, 0) ==
          std::vector<std::string>{"/opt/cuda/libcudart.so.12"});
    CHECK(doctor_detail::nccl_candidates({{"FLOWRUN_NCCL_LIBRARY", "/opt/nccl/libnccl.so.2"}}) ==
          std::vector<std::string>{"/opt/nccl/libnccl.so.2"});
  }
  const testing::ScopedTempDir scratch("doctor-test");
  const std::string& venv = scratch.path();
  const std::string nccl_dir = venv + "/lib/python3.11/site-packages/nvidia/nccl/lib";
  const std::string cudart_dir = venv + "/lib/python3.11/site-packages/nvidia/cuda_runtime/lib";
  REQUIRE(std::filesystem::create_directories(nccl_dir));
  REQUIRE(std::filesystem::create_directories(cudart_dir));
  std::ofstream(nccl_dir + "/libnccl.so.2") << "";
  std::ofstream(cudart_dir + "/libcudart.so.12") << "";
  const EnvMap env = {{"VIRTUAL_ENV", venv}, {"CUDA_HOME", "/opt/cuda-12.8"}, {"HOME", "/nonexistent"}};
  SECTION("NCCL: the loader's search, CUDA_HOME, /usr/local/cuda, then the venv's nvidia-nccl package") {
    const auto candidates = doctor_detail::nccl_candidates(env);
    REQUIRE(candidates.size() >= 6);
    CHECK(std::vector<std::string>(candidates.begin(), candidates.begin() + 5) ==
          std::vector<std::string>{"libnccl.so.2", "/opt/cuda-12.8/lib64/libnccl.so.2",
                                   "/opt/cuda-12.8/lib/libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2",
                                   "/usr/local/cuda/lib/libnccl.so.2"});
    CHECK(candidates[5] == nccl_dir + "/libnccl.so.2");
  }
  SECTION("CUDA runtime: a driver of CUDA 12 puts the CUDA 13 runtimes last") {
    const auto candidates = doctor_detail::cudart_candidates(env, 12);
    CHECK(candidates.front() == "libcudart.so.12");
    CHECK(std::find(candidates.begin(), candidates.end(), cudart_dir + "/libcudart.so.12") !=
          candidates.end());
    std::size_t first13 = candidates.size();
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (candidates[i].ends_with(".so.13") && first13 == candidates.size()) first13 = i;
      if (first13 < candidates.size()) CHECK(candidates[i].ends_with(".so.13"));
    }
    CHECK(doctor_detail::cudart_candidates(env, 0).front() == "libcudart.so.13");
  }
}

TEST_CASE("doctor: NCCL's tuning lines", "[doctor]") {
  doctor_detail::TuningChoice choice;
  CHECK(
      doctor_detail::parse_tuning_line("node-01:631871:631871 [0] NCCL INFO AllReduce: 33554432 Bytes -> "
                                       "Algo RING proto SIMPLE channel{Lo..Hi}={0..31}",
                                       choice));
  CHECK(choice.bytes == 33554432);
  CHECK(choice.algorithm == "RING");
  CHECK(choice.protocol == "SIMPLE");
  CHECK(doctor_detail::parse_tuning_line(
      "gpu49:65234:65234 [0] NCCL INFO 1048576 Bytes -> Algo 4 proto 2 time 25.3", choice));
  CHECK(choice.bytes == 1048576);
  CHECK(choice.algorithm == "NVLS");
  CHECK(choice.protocol == "SIMPLE");
  CHECK(!doctor_detail::parse_tuning_line(
      "h:1:1 [0] NCCL INFO AllGather: 4096 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}", choice));
  CHECK(!doctor_detail::parse_tuning_line("h:1:1 [0] NCCL INFO Channel 00/24 : 0 1 2 3", choice));
  CHECK(!doctor_detail::parse_tuning_line("h:1:1 [0] NCCL INFO x Bytes -> Algo RING proto LL", choice));
}

TEST_CASE("doctor: the check child's findings and time limits", "[doctor]") {
  SECTION("findings, a line each, and 'done'") {
    const GpuCheckOutcome outcome = run_script(
        "printf 'cudart_tried\\tlibcudart.so.13\\ncudart\\t/usr/local/lib/libcudart.so.13\\n"
        "cuda_versions\\t13000\\t13000\\ncuda_count\\t2\\nnccl\\t/usr/lib/"
        "libnccl.so.2\\nnccl_version\\t22809\\n"
        "row\\t8\\t18520\\t0\\nrow\\t1073741824\\t4000000\\t0\\nalgo\\t8\\tRING\\tLL\\nallreduce\\tok\\t\\ndo"
        "ne\\n'",
        5);
    CHECK(outcome.cuda.library.found);
    CHECK(outcome.cuda.library.tried == std::vector<std::string>{"libcudart.so.13"});
    CHECK(outcome.cuda.device_count == 2);
    CHECK(outcome.cuda.runtime_version == 13000);
    CHECK(outcome.nccl.version == 22809);
    REQUIRE(outcome.allreduce.rows.size() == 2);
    CHECK(outcome.allreduce.rows[0].algorithm == "RING");
    CHECK(outcome.allreduce.rows[1].time_ns == 4000000);
    CHECK(outcome.allreduce.status == "ok");
  }
  SECTION("a child that falls silent is killed and reported as hung where it was") {
    const auto start = std::chrono::steady_clock::now();
    const GpuCheckOutcome outcome =
        run_script("printf 'row\\t8\\t18520\\t0\\nphase\\tthe all-reduce of 64 MiB\\n'; exec sleep 30", 1);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
    CHECK(outcome.allreduce.status == "hung");
    CHECK(outcome.allreduce.reason ==
          "no word from the check for 1 s while the all-reduce of 64 MiB; flowrun killed it");
    CHECK(outcome.allreduce.rows.size() == 1);
  }
  SECTION("a child that dies is reported with its signal") {
    const GpuCheckOutcome outcome =
        run_script("printf 'phase\\tsetting up NCCL communicators\\n'; kill -SEGV $$", 5);
    CHECK(outcome.allreduce.status == "failed");
    CHECK(outcome.allreduce.reason ==
          "the check process died of signal 11 (Segmentation fault) while setting up NCCL communicators");
  }
  SECTION("its own hang report stands") {
    const GpuCheckOutcome outcome = run_script(
        "printf 'allreduce\\thung\\tthe all-reduce of 1 GiB did not finish within 60 s\\n'; exit 3", 5);
    CHECK(outcome.allreduce.status == "hung");
    CHECK(outcome.allreduce.reason == "the all-reduce of 1 GiB did not finish within 60 s");
  }
  SECTION("the first hang is the one reported; what followed is a note") {
    const GpuCheckOutcome outcome = run_script(
        "printf 'allreduce\thung\tthe all-reduce of 1 GiB did not finish within 60 s\n"
        "allreduce\thung\tno progress for 75 s while aborting NCCL\n'; exit 3",
        5);
    CHECK(outcome.allreduce.reason == "the all-reduce of 1 GiB did not finish within 60 s");
    CHECK(outcome.allreduce.notes ==
          std::vector<std::string>{"then: no progress for 75 s while aborting NCCL"});
  }
  SECTION("a program that cannot start") {
    const GpuCheckOutcome outcome = doctor_detail::run_check_process({"/nonexistent/flowrun"}, 5);
    CHECK(outcome.allreduce.status == "failed");
    CHECK(outcome.allreduce.reason == "could not start /nonexistent/flowrun");
  }
  SECTION("the argv that asks for it") {
    GpuCheckRequest request;
    request.devices = {0, 3};
    request.memcpy = false;
    request.nccl = false;
    request.driver_cuda_major = 12;
    CHECK(doctor_detail::check_child_argv("/usr/bin/flowrun", request) ==
          std::vector<std::string>{"/usr/bin/flowrun", "doctor", "--check-child", "--devices", "0,3",
                                   "--sizes", "8:1073741824:2", "--warmup", "5", "--iters", "20", "--timeout",
                                   "60", "--driver-cuda", "12", "--no-nccl"});
  }
}

TEST_CASE("doctor: the check child without the libraries", "[doctor]") {
  if (!doctor_has_gpu_support()) {
    GpuCheckRequest request;
    CHECK(
        child_lines(request, {}) ==
        std::vector<std::string>{
            "allreduce\tskipped\tthis flowrun was built without GPU support (no CUDA headers at build time)",
            "done"});
    return;
  }
  GpuCheckRequest request;
  request.devices = {0};
  const auto lines = child_lines(request, {{"FLOWRUN_CUDART_LIBRARY", "/nonexistent/libcudart.so.12"},
                                           {"FLOWRUN_NCCL_LIBRARY", "/nonexistent/libnccl.so.2"}});
  CHECK(lines ==
        std::vector<std::string>{
            "phase\tloading the CUDA runtime", "cudart_tried\t/nonexistent/libcudart.so.12",
            "cudart_missing\t/nonexistent/libcudart.so.12: cannot open shared object file: No such file or "
            "directory",
            "allreduce\tskipped\tthe CUDA runtime was not found", "phase\tloading NCCL",
            "nccl_tried\t/nonexistent/libnccl.so.2",
            "nccl_missing\t/nonexistent/libnccl.so.2: cannot open shared object file: No such file or "
            "directory",
            "done"});
}

TEST_CASE("doctor: the real CUDA runtime on a host without a driver", "[doctor]") {
  // This host's own libcudart, when it has one and no driver (CI): exactly
  // what the report says there.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void* runtime = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
  if (runtime == nullptr) runtime = dlopen("libcudart.so.12", RTLD_NOW | RTLD_LOCAL);
  const bool applies = doctor_has_gpu_support() && driver == nullptr && runtime != nullptr;
  if (driver != nullptr) dlclose(driver);
  if (runtime != nullptr) dlclose(runtime);
  if (!applies) {
    WARN("skipped: needs a CUDA runtime and no NVIDIA driver");
    return;
  }
  GpuCheckRequest request;
  request.devices = {0};
  const auto lines = child_lines(request, {{"FLOWRUN_NCCL_LIBRARY", "/nonexistent/libnccl.so.2"}});
  GpuCheckOutcome outcome;
  std::string phase;
  for (const std::string& line : lines) doctor_detail::apply_check_line(line, outcome, phase);
  CHECK(outcome.cuda.library.found);
  CHECK(outcome.cuda.device_count == -1);
  CHECK(outcome.cuda.driver_version == 0);
  CHECK(outcome.cuda.error ==
        "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version");
  CHECK(outcome.allreduce.status == "skipped");
  CHECK(outcome.allreduce.reason == "CUDA cannot use the GPUs (see the cuda check)");
  CHECK(lines.back() == "done");
}

TEST_CASE("spec: preflight: true on a parallel step", "[doctor]") {
  auto parse = [](const std::string& parallel) {
    return parse_spec("steps:\n  - name: train\n    run: python3 train.py\n    parallel:\n" + parallel,
                      "flow.yaml", "/tmp");
  };
  {
    const SpecParse on = parse("      gpus: 8\n      preflight: true\n");
    REQUIRE(on.spec);
    CHECK(on.spec->steps[0].parallel->preflight);
    const SpecParse off = parse("      gpus: 8\n");
    REQUIRE(off.spec);
    CHECK_FALSE(off.spec->steps[0].parallel->preflight);
  }
  std::vector<std::string> errors;
  for (const Diagnostic& d : parse("      cpus: 2\n      preflight: true\n").diagnostics)
    errors.push_back(d.to_string());
  CHECK(errors ==
        std::vector<std::string>{
            "flow.yaml:6:7: steps.train.parallel.preflight: preflight checks the step's GPUs, and a step of "
            "CPU workers (cpus) has none; remove one of them"});
  errors.clear();
  for (const Diagnostic& d : parse("      preflight: yes please\n").diagnostics)
    errors.push_back(d.to_string());
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].starts_with("flow.yaml:5:18: steps.train.parallel.preflight: expected true or false"));
}

TEST_CASE("nvml probe: the topology from a stand-in NVML", "[doctor]") {
  struct Scenario {
    explicit Scenario(const char* name) { setenv("FAKE_NVML_SCENARIO", name, 1); }
    ~Scenario() { unsetenv("FAKE_NVML_SCENARIO"); }
  };
  SECTION("without topology, only the inventory") {
    Scenario scenario("bridges");
    const SystemGpus system = gpu_detail::probe_nvml_library(FLOWRUN_FAKE_NVML, false);
    CHECK(system.source == "nvml");
    CHECK(system.devices.size() == 4);
    CHECK(system.links.empty());
    CHECK(system.devices[0].details.compute_capability.empty());
  }
  SECTION("PCIe on two sockets, one NVLink bridge with a link down, a card at x8") {
    Scenario scenario("bridges");
    const SystemGpus system = gpu_detail::probe_nvml_library(FLOWRUN_FAKE_NVML, true);
    REQUIRE(system.devices.size() == 4);
    CHECK(system.driver_version == "550.54.15");
    CHECK(system.cuda_driver_version == "12.4");
    std::vector<std::string> rows;
    for (const auto& row : system.links) {
      std::vector<std::string> names;
      for (const GpuLink& link : row) names.push_back(gpu_link_name(link));
      rows.push_back(join(names, " "));
    }
    CHECK(rows ==
          std::vector<std::string>{"X NV3 SYS SYS", "NV3 X SYS SYS", "SYS SYS X NODE", "SYS SYS NODE X"});
    CHECK(system.devices[0].details.nvlinks == 3);
    CHECK(system.devices[0].details.nvswitch_links == 0);
    CHECK(system.devices[2].details.nvlinks == 0);
    CHECK(system.devices[3].details.pcie_width == 8);
    CHECK(system.devices[3].details.pcie_width_max == 16);
    CHECK(system.devices[3].details.pcie_gen_max == 4);
    CHECK(system.devices[1].details.compute_capability == "8.0");
    CHECK_FALSE(system.nvswitch);

    DoctorFacts facts;
    facts.inventory = select_gpus(system, {});
    facts.runtime_skipped = "not asked";
    const DoctorReport report = evaluate_doctor(facts);
    CHECK(find_check(report, "pcie")->message == "PCIe lanes missing: GPU 3 runs x8 of its x16");
    CHECK(find_check(report, "links")->status ==
          CheckStatus::warn);  // across sockets; a bridge is no NVSwitch
  }
  SECTION("an HGX board with one NVLink down") {
    Scenario scenario("hgx");
    const SystemGpus system = gpu_detail::probe_nvml_library(FLOWRUN_FAKE_NVML, true);
    REQUIRE(system.devices.size() == 8);
    CHECK(system.nvswitch);
    CHECK(gpu_link_name(system.links[0][1]) == "NV18");
    CHECK(gpu_link_name(system.links[0][6]) == "NV17");
    CHECK(gpu_link_name(system.links[6][7]) == "NV17");
    CHECK(system.devices[6].details.nvswitch_links == 17);
    DoctorFacts facts;
    facts.inventory = select_gpus(system, {{"CUDA_VISIBLE_DEVICES", "0,1,2,6"}});
    facts.runtime_skipped = "not asked";
    const DoctorReport report = evaluate_doctor(facts);
    CHECK(find_check(report, "links")->message ==
          "NVLinks down: most pairs have NV18, but 0-3 NV17, 1-3 NV17, 2-3 NV17");
  }
}

TEST_CASE("doctor: the check child's all-reduce on stand-in CUDA and NCCL", "[doctor]") {
  if (!doctor_has_gpu_support()) {
    WARN("skipped: this flowrun was built without GPU support");
    return;
  }
  GpuCheckRequest request;
  request.devices = {0, 1};
  request.sweep.max_bytes = 64 << 10;  // 8 B to 64 KiB: 14 sizes
  request.sweep.warmup = 1;
  request.sweep.iters = 3;
  request.sweep.timeout_s = 1;
  EnvMap env = {{"FLOWRUN_CUDART_LIBRARY", FLOWRUN_FAKE_CUDART},
                {"FLOWRUN_NCCL_LIBRARY", FLOWRUN_FAKE_NCCL},
                {"NCCL_DEBUG", ""},
                {"NCCL_DEBUG_FILE", ""},
                {"FAKE_CUDA_DEVICES", "2"},
                {"FAKE_NCCL", ""}};
  auto run = [&](int* status = nullptr) {
    GpuCheckOutcome outcome;
    std::string phase;
    for (const std::string& line : child_lines(request, env, status))
      doctor_detail::apply_check_line(line, outcome, phase);
    return outcome;
  };
  auto sizes_with_wrong = [](const GpuCheckOutcome& outcome) {
    std::vector<std::uint64_t> out;
    for (const AllReduceRow& row : outcome.allreduce.rows) {
      if (row.wrong > 0) out.push_back(row.bytes);
    }
    return out;
  };

  SECTION("every size, every sum checked, NCCL's algorithm from its debug file") {
    const GpuCheckOutcome outcome = run();
    CHECK(outcome.cuda.library.path == FLOWRUN_FAKE_CUDART);
    CHECK(outcome.cuda.device_count == 2);
    CHECK(outcome.cuda.runtime_version == 12080);
    CHECK(outcome.nccl.library.path == FLOWRUN_FAKE_NCCL);
    CHECK(outcome.nccl.version == 22809);
    CHECK(outcome.allreduce.status == "ok");
    REQUIRE(outcome.allreduce.rows.size() == 14);
    CHECK(outcome.allreduce.rows.front().bytes == 8);
    CHECK(outcome.allreduce.rows.back().bytes == 65536);
    CHECK(sizes_with_wrong(outcome).empty());
    for (const AllReduceRow& row : outcome.allreduce.rows) {
      CHECK(row.time_ns > 0);
      CHECK(row.algorithm == "RING");
      CHECK(row.protocol == "SIMPLE");
    }
    CHECK(outcome.memcpy.bytes == 0);
  }
  SECTION("one GPU: the all-reduce and a timed device-to-device copy") {
    request.devices = {1};
    request.memcpy = true;
    const GpuCheckOutcome outcome = run();
    CHECK(outcome.allreduce.status == "ok");
    CHECK(outcome.allreduce.rows.size() == 14);
    CHECK(outcome.memcpy.bytes == 65536);
    CHECK(outcome.memcpy.time_ns > 0);
  }
  SECTION("a wrong sum is counted at its size") {
    env["FAKE_NCCL"] = "wrong";
    const GpuCheckOutcome outcome = run();
    CHECK(sizes_with_wrong(outcome) ==
          std::vector<std::uint64_t>{1024, 2048, 4096, 8192, 16384, 32768, 65536});
    CHECK(outcome.allreduce.rows.back().wrong == 1);
  }
  SECTION("a collective that never finishes is aborted after the limit and reported where") {
    env["FAKE_NCCL"] = "hang";
    const auto start = std::chrono::steady_clock::now();
    const GpuCheckOutcome outcome = run();
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
    CHECK(outcome.allreduce.status == "hung");
    CHECK(outcome.allreduce.reason ==
          "the all-reduce of 1 KiB did not finish within 1 s; flowrun aborted NCCL");
    CHECK(outcome.allreduce.rows.size() == 7);  // 8 B to 512 B
    CHECK(outcome.allreduce.warnings == std::vector<std::string>{"fake: a collective that never finishes"});
  }
  SECTION("a set-up that never returns: the watchdog ends the child") {
    env["FAKE_NCCL"] = "init-hang";
    int status = -1;
    const GpuCheckOutcome outcome = run(&status);
    CHECK(status == 3);
    CHECK(outcome.allreduce.status == "hung");
    CHECK(outcome.allreduce.reason ==
          "no progress for 2 s while setting up NCCL communicators (ncclCommInitAll), inside a call that "
          "does not "
          "return; the check ended itself");
  }
  SECTION("CUDA sees fewer GPUs than flowrun selected") {
    env["FAKE_CUDA_DEVICES"] = "1";
    const GpuCheckOutcome outcome = run();
    CHECK(outcome.cuda.device_count == 1);
    CHECK(outcome.allreduce.status == "skipped");
    CHECK(outcome.allreduce.reason == "CUDA sees 1 GPU, fewer than the 2 flowrun selected");
  }
  SECTION("--no-nccl: the libraries are checked, nothing runs") {
    request.nccl = false;
    const GpuCheckOutcome outcome = run();
    CHECK(outcome.nccl.version == 22809);
    CHECK(outcome.allreduce.status == "skipped");
    CHECK(outcome.allreduce.reason == "--no-nccl");
    CHECK(outcome.allreduce.rows.empty());
  }
}

namespace {

// The stand-in libraries' C ABI as a multi-node check calls it: NCCL's
// ncclUniqueId is 128 bytes, passed by value to ncclCommInitRank.
struct FakeUniqueId {
  char internal[128];
};

constexpr int kNcclUint64 = 5, kNcclFloat = 7, kNcclSum = 0, kNcclMax = 2, kNcclMin = 3;
constexpr int kCudaNotReady = 600;

struct FakeGpuLibraries {
  int (*set_device)(int) = nullptr;
  int (*mem_get_info)(std::size_t*, std::size_t*) = nullptr;
  int (*malloc)(void**, std::size_t) = nullptr;
  int (*memcpy)(void*, const void*, std::size_t, int) = nullptr;
  int (*stream_create)(void**, unsigned) = nullptr;
  int (*stream_query)(void*) = nullptr;
  int (*stream_destroy)(void*) = nullptr;
  int (*get_unique_id)(FakeUniqueId*) = nullptr;
  int (*init_rank)(void**, int, FakeUniqueId, int) = nullptr;
  int (*init_all)(void**, int, const int*) = nullptr;
  int (*all_reduce)(const void*, void*, std::size_t, int, int, void*, void*) = nullptr;
  int (*group_start)() = nullptr;
  int (*group_end)() = nullptr;
  int (*destroy)(void*) = nullptr;
  int (*abort)(void*) = nullptr;

  // dlopen and dlsym; false when anything is missing.
  bool load() {
    void* cudart = dlopen(FLOWRUN_FAKE_CUDART, RTLD_NOW | RTLD_LOCAL);
    void* nccl = dlopen(FLOWRUN_FAKE_NCCL, RTLD_NOW | RTLD_LOCAL);
    if (cudart == nullptr || nccl == nullptr) return false;
    bool all = true;
    auto bind = [&all](void* library, const char* name, auto& fn) {
      void* symbol = dlsym(library, name);
      all = all && symbol != nullptr;
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(symbol);
    };
    bind(cudart, "cudaSetDevice", set_device);
    bind(cudart, "cudaMemGetInfo", mem_get_info);
    bind(cudart, "cudaMalloc", malloc);
    bind(cudart, "cudaMemcpy", memcpy);
    bind(cudart, "cudaStreamCreateWithFlags", stream_create);
    bind(cudart, "cudaStreamQuery", stream_query);
    bind(cudart, "cudaStreamDestroy", stream_destroy);
    bind(nccl, "ncclGetUniqueId", get_unique_id);
    bind(nccl, "ncclCommInitRank", init_rank);
    bind(nccl, "ncclCommInitAll", init_all);
    bind(nccl, "ncclAllReduce", all_reduce);
    bind(nccl, "ncclGroupStart", group_start);
    bind(nccl, "ncclGroupEnd", group_end);
    bind(nccl, "ncclCommDestroy", destroy);
    bind(nccl, "ncclCommAbort", abort);
    return all;
  }
};

// What a node process checks, and how it says what failed (its exit status).
struct FakeNode {
  int nranks = 4;
  int first_rank = 0;
  int gpus = 2;
  bool init_only = false;     // set up, then leave without a collective
  bool expect_hang = false;   // FAKE_NCCL=hang: the sum never finishes; abort
  bool expect_wrong = false;  // FAKE_NCCL=wrong: global rank 0's last float is one more
  bool destroy = true;        // ncclCommDestroy at the end
};

constexpr std::size_t kNodeFloats = 3000;

// The uint64 votes: the smallest and the largest come from ranks in different processes.
std::uint64_t min_vote(int rank) {
  constexpr std::uint64_t offsets[] = {40, 30, 10, 20};
  return (1ull << 40) + offsets[rank];
}
std::uint64_t max_vote(int rank) {
  constexpr std::uint64_t votes[] = {7, 3ull << 33, 5ull << 32, 11};
  return votes[rank];
}

enum NodeExit {
  kNodeOk = 0,
  kNodeSetup = 10,
  kNodeInit,
  kNodeSumCall,
  kNodeSumWrong,
  kNodeVoteCall,
  kNodeMinWrong,
  kNodeMaxWrong,
  kNodeDestroy,
  kNodeNotHung,
  kNodeAbort,
};

// One node's check child on the stand-ins: its GPUs' ranks of one
// communicator, a float sum, then a uint64 min and max in one group.
int run_fake_node(const FakeUniqueId& id, const FakeNode& node) {
  FakeGpuLibraries lib;
  if (!lib.load()) return kNodeSetup;
  const auto n = static_cast<std::size_t>(node.gpus);
  std::vector<void*> streams(n), comms(n);
  std::vector<float*> send(n), recv(n);
  std::vector<std::uint64_t*> votes(n);  // min send, max send, min result, max result
  std::vector<float> pattern(kNodeFloats);
  for (std::size_t i = 0; i < n; ++i) {
    const int rank = node.first_rank + static_cast<int>(i);
    for (std::size_t j = 0; j < kNodeFloats; ++j) pattern[j] = static_cast<float>(j % 251 + rank);
    const std::uint64_t ballots[] = {min_vote(rank), max_vote(rank), 0, 0};
    if (lib.set_device(static_cast<int>(i)) != 0 || lib.stream_create(&streams[i], 1) != 0 ||
        lib.malloc(reinterpret_cast<void**>(&send[i]), kNodeFloats * sizeof(float)) != 0 ||
        lib.malloc(reinterpret_cast<void**>(&recv[i]), kNodeFloats * sizeof(float)) != 0 ||
        lib.malloc(reinterpret_cast<void**>(&votes[i]), sizeof ballots) != 0 ||
        lib.memcpy(send[i], pattern.data(), kNodeFloats * sizeof(float), 1) != 0 ||
        lib.memcpy(votes[i], ballots, sizeof ballots, 1) != 0)
      return kNodeSetup;
  }
  bool ok = lib.group_start() == 0;
  for (std::size_t i = 0; i < n; ++i) {
    ok = ok && lib.set_device(static_cast<int>(i)) == 0 &&
         lib.init_rank(&comms[i], node.nranks, id, node.first_rank + static_cast<int>(i)) == 0;
  }
  if (!(lib.group_end() == 0 && ok)) return kNodeInit;
  if (node.init_only) return kNodeOk;

  ok = lib.group_start() == 0;
  for (std::size_t i = 0; i < n; ++i)
    ok = ok && lib.all_reduce(send[i], recv[i], kNodeFloats, kNcclFloat, kNcclSum, comms[i], streams[i]) == 0;
  if (!(lib.group_end() == 0 && ok)) return kNodeSumCall;
  if (node.expect_hang) {
    for (std::size_t i = 0; i < n; ++i) {
      if (lib.stream_query(streams[i]) != kCudaNotReady) return kNodeNotHung;
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (lib.abort(comms[i]) != 0) return kNodeAbort;
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (lib.stream_query(streams[i]) != 0) return kNodeAbort;
    }
    return kNodeOk;
  }
  const auto ranks = static_cast<std::size_t>(node.nranks);
  for (std::size_t i = 0; i < n; ++i) {
    if (lib.stream_query(streams[i]) != 0 ||
        lib.memcpy(pattern.data(), recv[i], kNodeFloats * sizeof(float), 2) != 0)
      return kNodeSumCall;
    for (std::size_t j = 0; j < kNodeFloats; ++j) {
      float expected = static_cast<float>(ranks * (j % 251) + ranks * (ranks - 1) / 2);
      if (node.expect_wrong && node.first_rank + static_cast<int>(i) == 0 && j + 1 == kNodeFloats)
        expected += 1;
      if (pattern[j] != expected) return kNodeSumWrong;
    }
  }

  ok = lib.group_start() == 0;
  for (std::size_t i = 0; i < n; ++i) {
    ok = ok && lib.all_reduce(votes[i], votes[i] + 2, 1, kNcclUint64, kNcclMin, comms[i], streams[i]) == 0 &&
         lib.all_reduce(votes[i] + 1, votes[i] + 3, 1, kNcclUint64, kNcclMax, comms[i], streams[i]) == 0;
  }
  if (!(lib.group_end() == 0 && ok)) return kNodeVoteCall;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t results[4];
    if (lib.memcpy(results, votes[i], sizeof results, 2) != 0) return kNodeVoteCall;
    if (results[2] != (1ull << 40) + 10) return kNodeMinWrong;
    if (results[3] != 3ull << 33) return kNodeMaxWrong;
  }
  for (std::size_t i = 0; node.destroy && i < n; ++i) {
    if (lib.destroy(comms[i]) != 0) return kNodeDestroy;
  }
  return kNodeOk;
}

// A node process; FAKE_NCCL as given (null: unset).
pid_t start_fake_node(const FakeUniqueId& id, const FakeNode& node, const char* fake_nccl = nullptr) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (fake_nccl != nullptr)
      setenv("FAKE_NCCL", fake_nccl, 1);
    else
      unsetenv("FAKE_NCCL");
    unsetenv("NCCL_DEBUG_FILE");
    _exit(run_fake_node(id, node));
  }
  return pid;
}

// How a node process ended, in words; one still running after `limit` is killed.
std::string fake_node_result(pid_t pid, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  REQUIRE(pid > 0);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return "still running after " + std::to_string(limit.count()) + " ms";
    }
    usleep(2000);
  }
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  switch (WEXITSTATUS(status)) {
    case kNodeOk: return "ok";
    case kNodeSetup: return "could not load the stand-ins or allocate";
    case kNodeInit: return "ncclCommInitRank failed";
    case kNodeSumCall: return "the float sum failed or did not finish";
    case kNodeSumWrong: return "a float sum is wrong";
    case kNodeVoteCall: return "the uint64 votes failed";
    case kNodeMinWrong: return "the uint64 min is wrong";
    case kNodeMaxWrong: return "the uint64 max is wrong";
    case kNodeDestroy: return "ncclCommDestroy failed";
    case kNodeNotHung: return "FAKE_NCCL=hang left a stream idle";
    case kNodeAbort: return "ncclCommAbort failed or left a stream busy";
    default: return "exit " + std::to_string(WEXITSTATUS(status));
  }
}

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A scratch $TMPDIR for the test, the old value back and the directory gone after.
class ScratchTmpdir {
 public:
  ScratchTmpdir() {
    if (const char* old = std::getenv("TMPDIR")) old_ = old;
    setenv("TMPDIR", path().c_str(), 1);
  }
  ~ScratchTmpdir() {
    if (old_)
      setenv("TMPDIR", old_->c_str(), 1);
    else
      unsetenv("TMPDIR");
  }
  ScratchTmpdir(const ScratchTmpdir&) = delete;
  ScratchTmpdir& operator=(const ScratchTmpdir&) = delete;
  const std::string& path() const { return dir_.path(); }

 private:
  testing::ScopedTempDir dir_{"fake-nccl-test"};
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("doctor: the stand-in NCCL runs one communicator across processes", "[doctor]") {
  ScratchTmpdir scratch;
  FakeGpuLibraries lib;
  REQUIRE(lib.load());
  auto new_id = [&] {
    FakeUniqueId id{};
    REQUIRE(lib.get_unique_id(&id) == 0);
    return id;
  };

  SECTION("two nodes of two GPUs: a float sum, a uint64 min and max, and nothing left after") {
    const FakeUniqueId id = new_id();
    const std::string dir = id.internal;
    CHECK(dir.starts_with(scratch.path() + "/fake-nccl-"));
    CHECK(dir.size() == scratch.path().size() + 17);
    CHECK(std::filesystem::is_directory(dir));
    const pid_t first = start_fake_node(id, {4, 0});
    const pid_t second = start_fake_node(id, {4, 2});
    CHECK(fake_node_result(first) == "ok");
    CHECK(fake_node_result(second) == "ok");
    CHECK(dir_entries(scratch.path()).empty());  // every op, init and done file, and the directory
  }
  SECTION(
      "a node that leaves without ncclCommDestroy: each rank's last op file and the others' done files "
      "stay") {
    const FakeUniqueId id = new_id();
    FakeNode second{4, 2};
    second.destroy = false;
    const pid_t a = start_fake_node(id, {4, 0});
    const pid_t b = start_fake_node(id, second);
    CHECK(fake_node_result(a) == "ok");
    CHECK(fake_node_result(b) == "ok");
    // Three collectives (op0 to op2): init.* and op0 and op1 were removed on the way.
    CHECK(dir_entries(id.internal) ==
          std::vector<std::string>{"done.0", "done.1", "op2.0", "op2.1", "op2.2", "op2.3"});
  }
  SECTION("FAKE_NCCL=wrong: only global rank 0's float result is off") {
    const FakeUniqueId id = new_id();
    FakeNode first{4, 0}, second{4, 2};
    first.expect_wrong = second.expect_wrong = true;
    const pid_t a = start_fake_node(id, first, "wrong");
    const pid_t b = start_fake_node(id, second, "wrong");
    CHECK(fake_node_result(a) == "ok");
    CHECK(fake_node_result(b) == "ok");
  }
  SECTION("FAKE_NCCL=hang: the streams stay busy, nothing is exchanged, ncclCommAbort ends it") {
    const FakeUniqueId id = new_id();
    FakeNode first{4, 0}, second{4, 2};
    first.expect_hang = second.expect_hang = true;
    const pid_t a = start_fake_node(id, first, "hang");
    const pid_t b = start_fake_node(id, second, "hang");
    CHECK(fake_node_result(a) == "ok");
    CHECK(fake_node_result(b) == "ok");
    CHECK(dir_entries(id.internal) == std::vector<std::string>{"init.0", "init.1", "init.2", "init.3"});
  }
  SECTION("a rank that never comes leaves the others waiting, in set-up and in a collective") {
    const FakeUniqueId never = new_id(), leaves = new_id();
    const auto start = std::chrono::steady_clock::now();
    const pid_t alone = start_fake_node(never, {3, 0});  // ranks 0 and 1 of 3; rank 2 never starts
    const pid_t stays = start_fake_node(leaves, {3, 0});
    FakeNode init_only{3, 2, 1};
    init_only.init_only = true;
    CHECK(fake_node_result(start_fake_node(leaves, init_only)) == "ok");
    std::this_thread::sleep_until(start + std::chrono::seconds(1));
    CHECK(fake_node_result(alone, std::chrono::milliseconds(0)) == "still running after 0 ms");
    CHECK(fake_node_result(stays, std::chrono::milliseconds(0)) == "still running after 0 ms");
    CHECK(dir_entries(never.internal) == std::vector<std::string>{"init.0", "init.1"});
    CHECK(dir_entries(leaves.internal) ==
          std::vector<std::string>{"init.0", "init.1", "init.2", "op0.0", "op0.1"});
  }
  SECTION("set-up refuses what NCCL refuses") {
    const FakeUniqueId id = new_id();
    void* comm = nullptr;
    CHECK(lib.init_rank(&comm, 0, id, 0) == 4);
    CHECK(lib.init_rank(&comm, 4, id, 4) == 4);
    CHECK(lib.init_rank(&comm, 4, id, -1) == 4);
    CHECK(lib.init_rank(&comm, 4, FakeUniqueId{"relative/dir"}, 0) == 4);
    FakeUniqueId unterminated;
    std::memset(unterminated.internal, '/', sizeof unterminated.internal);
    CHECK(lib.init_rank(&comm, 4, unterminated, 0) == 4);
    CHECK(comm == nullptr);
    FakeUniqueId unused{};
    setenv("TMPDIR", (scratch.path() + "/" + std::string(100, 'x')).c_str(), 1);
    CHECK(lib.get_unique_id(&unused) == 4);  // the path would not fit in 128 bytes
    setenv("TMPDIR", (scratch.path() + "/missing").c_str(), 1);
    CHECK(lib.get_unique_id(&unused) == 2);
    setenv("TMPDIR", scratch.path().c_str(), 1);
    CHECK(dir_entries(scratch.path()).size() == 1);  // only `id`'s directory
  }
  SECTION("one process's communicators (ncclCommInitAll): uint64 and float min, max, sum") {
    void* comms[2] = {nullptr, nullptr};
    void* streams[2] = {nullptr, nullptr};
    REQUIRE(lib.init_all(comms, 2, nullptr) == 0);
    for (void*& stream : streams) REQUIRE(lib.stream_create(&stream, 1) == 0);
    auto reduce = [&](auto send0, auto send1, int type, int op) {
      using T = decltype(send0);
      T send[2] = {send0, send1}, recv[2] = {0, 0};
      bool ok = lib.group_start() == 0;
      for (int r = 0; r < 2; ++r)
        ok = ok && lib.all_reduce(&send[r], &recv[r], 1, type, op, comms[r], streams[r]) == 0;
      ok = lib.group_end() == 0 && ok;
      CHECK(ok);
      CHECK(recv[0] == recv[1]);
      return recv[0];
    };
    CHECK(reduce(std::uint64_t{5} << 40, std::uint64_t{9}, kNcclUint64, kNcclMin) == 9);
    CHECK(reduce(std::uint64_t{5} << 40, std::uint64_t{9}, kNcclUint64, kNcclMax) == std::uint64_t{5} << 40);
    CHECK(reduce(std::uint64_t{5} << 40, std::uint64_t{9}, kNcclUint64, kNcclSum) ==
          (std::uint64_t{5} << 40) + 9);
    CHECK(reduce(2.5f, -1.0f, kNcclFloat, kNcclMin) == -1.0f);
    CHECK(reduce(2.5f, -1.0f, kNcclFloat, kNcclMax) == 2.5f);
    CHECK(reduce(2.5f, -1.0f, kNcclFloat, kNcclSum) == 1.5f);
    float value = 1, result = 0;
    CHECK(lib.all_reduce(&value, &result, 1, 2 /* ncclInt32 */, kNcclSum, comms[0], streams[0]) == 4);
    CHECK(lib.all_reduce(&value, &result, 1, kNcclFloat, 1 /* ncclProd */, comms[0], streams[0]) == 4);
    CHECK(lib.all_reduce(&value, &result, 1, kNcclFloat, 4 /* ncclAvg */, comms[0], streams[0]) == 4);
    for (void* comm : comms) CHECK(lib.destroy(comm) == 0);
    for (void* stream : streams) CHECK(lib.stream_destroy(stream) == 0);
  }
  SECTION("FAKE_CUDA_FREE_MIB sets the free memory cudaMemGetInfo reports") {
    std::size_t free_bytes = 0, total = 0;
    setenv("FAKE_CUDA_FREE_MIB", "3000", 1);
    CHECK(lib.mem_get_info(&free_bytes, &total) == 0);
    unsetenv("FAKE_CUDA_FREE_MIB");
    CHECK(free_bytes == std::size_t{3000} << 20);
    CHECK(total == std::size_t{80} << 30);
    CHECK(lib.mem_get_info(&free_bytes, &total) == 0);
    CHECK(free_bytes == std::size_t{80} << 30);
  }
}

TEST_CASE("doctor: a sweep that stopped early because it was too slow", "[doctor]") {
  // The check child stops before a size that would outlast half its time limit;
  // on NVLink that speed is itself the verdict.
  DoctorFacts facts = load_doctor_facts("h200x8-nvlink-healthy");
  auto& rows = facts.allreduce.rows;
  while (rows.back().bytes > (64ull << 20)) rows.pop_back();
  rows.back().time_ns = 4'000'000'000;  // 64 MiB in 4 s
  facts.allreduce.stopped_slow = true;
  DoctorReport report = evaluate_doctor(facts);
  const DoctorCheck* bandwidth = find_check(report, "bandwidth");
  REQUIRE(bandwidth != nullptr);
  CHECK(bandwidth->status == CheckStatus::fail);
  CHECK(bandwidth->message ==
        "the sweep stopped at 64 MiB, too slow to go on: bus bandwidth 0.03 GB/s there, against the 475 GB/s "
        "ceiling "
        "for NVLink 4 through NVSwitch, 8 GPUs, NVLS (H100/H200 SXM)");
  CHECK(bandwidth->advice.starts_with("check that every NVLink is up"));
  CHECK(report.exit_code == 1);

  // Round trip: the fact survives --json and --facts.
  const DoctorFacts again = parse_doctor_facts(format_doctor_json(facts, report), "facts.json");
  CHECK(again.allreduce.stopped_slow);
  CHECK(format_doctor_text(again, evaluate_doctor(again)) == format_doctor_text(facts, report));

  // Without stopped_slow the same rows are a sweep cut short by --sizes: not judged.
  facts.allreduce.stopped_slow = false;
  report = evaluate_doctor(facts);
  CHECK(find_check(report, "bandwidth")->status == CheckStatus::skip);
  CHECK(report.exit_code == 0);

  // Where no ceiling is known (GPUs across CPU sockets) the figure is shown, not judged.
  DoctorFacts sockets = load_doctor_facts("l40s-x4-pcie-two-sockets");
  while (sockets.allreduce.rows.back().bytes > (64ull << 20)) sockets.allreduce.rows.pop_back();
  sockets.allreduce.stopped_slow = true;
  const DoctorReport sockets_report = evaluate_doctor(sockets);
  const DoctorCheck* shown = find_check(sockets_report, "bandwidth");
  REQUIRE(shown != nullptr);
  CHECK(shown->status == CheckStatus::skip);
  CHECK(shown->message.find(
            ", where the sweep stopped (too slow to go on), not judged: the GPUs span CPU sockets") !=
        std::string::npos);
}
