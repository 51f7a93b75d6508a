// The GPU module: the fake probe, CUDA's and Slurm's selection rules, and the
// pure parts of the NVML probe.
#include "flowrun/gpu.h"

#include <catch2/catch.hpp>
#include <cerrno>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <vector>

#include "flowrun/error.h"

#include "testing.h"

using namespace flowrun;

namespace {

std::vector<std::string> tokens(const Inventory& inventory) {
  std::vector<std::string> out;
  for (const Gpu& gpu : inventory.gpus) out.push_back(gpu.select_token);
  return out;
}

std::vector<std::string> uuids(const Inventory& inventory) {
  std::vector<std::string> out;
  for (const Gpu& gpu : inventory.gpus) out.push_back(gpu.uuid);
  return out;
}

std::string fake_uuid(int index) {
  std::string digits = std::to_string(index);
  return "GPU-fa4e0000-0000-4000-8000-" + std::string(12 - digits.size(), '0') + digits;
}

GpuDevice device(int index, std::string name, std::string uuid) {
  GpuDevice d;
  d.nvml_index = index;
  d.name = std::move(name);
  d.uuid = std::move(uuid);
  return d;
}

// Two A100s and two H200s, alternating in PCI order; CUDA (fastest first)
// numbers the H200s first.
SystemGpus mixed_system() {
  SystemGpus system;
  system.source = "nvml";
  system.devices = {device(0, "NVIDIA A100-SXM4-80GB", "GPU-a0000000-0000-0000-0000-000000000000"),
                    device(1, "NVIDIA H200", "GPU-b1000000-0000-0000-0000-000000000000"),
                    device(2, "NVIDIA A100-SXM4-80GB", "GPU-a2000000-0000-0000-0000-000000000000"),
                    device(3, "NVIDIA H200", "GPU-b3000000-0000-0000-0000-000000000000")};
  system.cuda_order = {system.devices[1].uuid, system.devices[3].uuid, system.devices[0].uuid,
                       system.devices[2].uuid};
  return system;
}

Inventory select_fake(int count, const EnvMap& env) { return select_gpus(fake_system_gpus(count), env); }

}  // namespace

TEST_CASE("fake probe: stable H200s", "[gpu]") {
  SystemGpus system = fake_system_gpus(10);
  CHECK(system.source == "fake");
  CHECK(system.driver_version == "560.35.03");
  CHECK(system.cuda_driver_version == "12.6");
  CHECK(system.unavailable_reason.empty());
  CHECK(system.cuda_order.empty());
  REQUIRE(system.devices.size() == 10);
  const GpuDevice& third = system.devices[3];
  CHECK(third.nvml_index == 3);
  CHECK(third.name == "NVIDIA H200");
  CHECK(third.memory_bytes == 150754820096ull);
  CHECK(third.uuid == "GPU-fa4e0000-0000-4000-8000-000000000003");
  CHECK(third.pci_bus_id == "00000000:48:00.0");
  CHECK(system.devices[0].pci_bus_id == "00000000:18:00.0");
  CHECK(system.devices[7].pci_bus_id == "00000000:88:00.0");
  CHECK(system.devices[9].pci_bus_id == "00000001:28:00.0");
  CHECK(system.devices[9].uuid == "GPU-fa4e0000-0000-4000-8000-000000000009");

  SystemGpus none = fake_system_gpus(0);
  CHECK(none.source == "fake");
  CHECK(none.devices.empty());
  CHECK(none.driver_version.empty());
  CHECK(none.unavailable_reason == "a simulated host without GPUs: --fake-gpus 0 or FLOWRUN_FAKE_GPUS=0");

  CHECK(make_fake_probe(3)->probe().devices.size() == 3);
}

TEST_CASE("select: all GPUs when nothing narrows them", "[gpu]") {
  SystemGpus system = fake_system_gpus(8);
  system.unavailable_reason = "copied";
  Inventory inventory = select_gpus(system, {});
  CHECK(inventory.source == "fake");
  CHECK(inventory.system_count == 8);
  CHECK(inventory.driver_version == "560.35.03");
  CHECK(inventory.cuda_driver_version == "12.6");
  CHECK(inventory.unavailable_reason == "copied");
  CHECK(inventory.selected_by.empty());
  CHECK_FALSE(inventory.cuda_visible_devices_set);
  CHECK(inventory.notes.empty());
  CHECK(tokens(inventory) == std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7"});
  REQUIRE(inventory.gpus.size() == 8);
  const Gpu& gpu = inventory.gpus[5];
  CHECK(gpu.index == 5);
  CHECK(gpu.uuid == fake_uuid(5));
  CHECK(gpu.name == "NVIDIA H200");
  CHECK(gpu.memory_bytes == 150754820096ull);
  CHECK(gpu.pci_bus_id == "00000000:68:00.0");
}

TEST_CASE("select: no GPUs at all", "[gpu]") {
  SystemGpus system;
  system.source = "none";
  system.unavailable_reason = "libnvidia-ml.so.1 not found: no NVIDIA driver on this host";
  Inventory inventory = select_gpus(system, {});
  CHECK(inventory.source == "none");
  CHECK(inventory.gpus.empty());
  CHECK(inventory.system_count == 0);
  CHECK(inventory.unavailable_reason == system.unavailable_reason);
  CHECK(inventory.notes.empty());

  Inventory asked = select_gpus(system, {{"CUDA_VISIBLE_DEVICES", "0"}});
  CHECK(asked.gpus.empty());
  CHECK(asked.notes ==
        std::vector<std::string>{
            "CUDA_VISIBLE_DEVICES=0: entry '0' names no GPU (this host has no GPUs); CUDA ignores it, "
            "so no GPU is visible"});
}

TEST_CASE("select: CUDA_VISIBLE_DEVICES by ordinal", "[gpu]") {
  Inventory inventory = select_fake(8, {{"CUDA_VISIBLE_DEVICES", "3,1"}});
  CHECK(inventory.selected_by == "CUDA_VISIBLE_DEVICES");
  CHECK(inventory.cuda_visible_devices_set);
  CHECK(inventory.notes.empty());
  CHECK(inventory.system_count == 8);
  CHECK(tokens(inventory) == std::vector<std::string>{"3", "1"});
  CHECK(uuids(inventory) == std::vector<std::string>{fake_uuid(3), fake_uuid(1)});
  REQUIRE(inventory.gpus.size() == 2);
  CHECK(inventory.gpus[0].index == 0);
  CHECK(inventory.gpus[1].index == 1);

  SECTION("spaces around entries are ignored, tokens are trimmed") {
    Inventory spaced = select_fake(8, {{"CUDA_VISIBLE_DEVICES", " 3 , 1 "}});
    CHECK(tokens(spaced) == std::vector<std::string>{"3", "1"});
    CHECK(uuids(spaced) == std::vector<std::string>{fake_uuid(3), fake_uuid(1)});
    CHECK(spaced.notes.empty());
  }
}

TEST_CASE("select: CUDA_VISIBLE_DEVICES by UUID", "[gpu]") {
  SECTION("full UUID") {
    Inventory inventory = select_fake(8, {{"CUDA_VISIBLE_DEVICES", fake_uuid(5) + "," + fake_uuid(2)}});
    CHECK(uuids(inventory) == std::vector<std::string>{fake_uuid(5), fake_uuid(2)});
    CHECK(tokens(inventory) == std::vector<std::string>{fake_uuid(5), fake_uuid(2)});
    CHECK(inventory.notes.empty());
  }
  SECTION("unique prefix, mixed with an ordinal") {
    SystemGpus system = mixed_system();
    system.cuda_order.clear();
    Inventory inventory = select_gpus(system, {{"CUDA_VISIBLE_DEVICES", "GPU-b3,0"}});
    CHECK(uuids(inventory) == std::vector<std::string>{system.devices[3].uuid, system.devices[0].uuid});
    CHECK(tokens(inventory) == std::vector<std::string>{"GPU-b3", "0"});
    CHECK(inventory.notes.empty());

    Inventory two = select_gpus(system, {{"CUDA_VISIBLE_DEVICES", "GPU-b,0"}});
    CHECK(two.gpus.empty());
    CHECK(two.notes ==
          std::vector<std::string>{"CUDA_VISIBLE_DEVICES=GPU-b,0: entry 'GPU-b' names no GPU (it is the "
                                   "start of 2 GPUs' UUIDs); CUDA ignores it and every entry after it, "
                                   "so no GPU is visible"});
  }
  SECTION("ambiguous prefix names no GPU") {
    Inventory inventory = select_fake(8, {{"CUDA_VISIBLE_DEVICES", "GPU-fa4e"}});
    CHECK(inventory.gpus.empty());
    CHECK(inventory.notes ==
          std::vector<std::string>{
              "CUDA_VISIBLE_DEVICES=GPU-fa4e: entry 'GPU-fa4e' names no GPU (it is the start of "
              "8 GPUs' UUIDs); CUDA ignores it, so no GPU is visible"});
  }
  SECTION("unknown UUID") {
    Inventory inventory = select_fake(8, {{"CUDA_VISIBLE_DEVICES", "2,GPU-dead,3"}});
    CHECK(tokens(inventory) == std::vector<std::string>{"2"});
    CHECK(inventory.notes ==
          std::vector<std::string>{
              "CUDA_VISIBLE_DEVICES=2,GPU-dead,3: entry 'GPU-dead' names no GPU (no GPU's UUID "
              "starts with it); CUDA ignores it and every entry after it, so only 2 is visible"});
  }
}

TEST_CASE("select: CUDA stops at the first entry that names no GPU", "[gpu]") {
  SECTION("out of range") {
    Inventory inventory = select_fake(8, {{"CUDA_VISIBLE_DEVICES", "0,9,1"}});
    CHECK(tokens(inventory) == std::vector<std::string>{"0"});
    CHECK(inventory.notes ==
          std::vector<std::string>{
              "CUDA_VISIBLE_DEVICES=0,9,1: entry '9' names no GPU (this host has 8: 0-7); CUDA "
              "ignores it and every entry after it, so only 0 is visible"});
  }
  SECTION("out of range first, on a one-GPU host") {
    Inventory inventory = select_fake(1, {{"CUDA_VISIBLE_DEVICES", "99999999999999999999999,0"}});
    CHECK(inventory.gpus.empty());
    CHECK(inventory.notes ==
          std::vector<std::string>{
              "CUDA_VISIBLE_DEVICES=99999999999999999999999,0: entry '99999999999999999999999' "
              "names no GPU (this host has 1: 0); CUDA ignores it and every entry after it, so no "
              "GPU is visible"});
  }
  SECTION("garbage, last") {
    Inventory inventory = select_fake(8, {{"CUDA_VISIBLE_DEVICES", "1,4,abc"}});
    CHECK(tokens(inventory) == std::vector<std::string>{"1", "4"});
    CHECK(inventory.notes ==
          std::vector<std::string>{
              "CUDA_VISIBLE_DEVICES=1,4,abc: entry 'abc' names no GPU (expected a GPU ordinal or a "
              "UUID such as GPU-8f3a...); CUDA ignores it, so only 1,4 are visible"});
  }
  SECTION("an empty entry") {
    Inventory inventory = select_fake(8, {{"CUDA_VISIBLE_DEVICES", "0,,1"}});
    CHECK(tokens(inventory) == std::vector<std::string>{"0"});
    CHECK(inventory.notes.size() == 1);
  }
  SECTION("a duplicate, by ordinal") {
    Inventory inventory = select_fake(8, {{"CUDA_VISIBLE_DEVICES", "2,2,3"}});
    CHECK(tokens(inventory) == std::vector<std::string>{"2"});
    CHECK(inventory.notes ==
          std::vector<std::string>{
              "CUDA_VISIBLE_DEVICES=2,2,3: entry '2' names the same GPU as entry '2'; CUDA ignores "
              "it and every entry after it, so only 2 is visible"});
  }
  SECTION("a duplicate, by UUID") {
    Inventory inventory =
        select_fake(8, {{"CUDA_VISIBLE_DEVICES", "0,GPU-fa4e0000-0000-4000-8000-000000000000"}});
    CHECK(tokens(inventory) == std::vector<std::string>{"0"});
    CHECK(inventory.notes ==
          std::vector<std::string>{
              "CUDA_VISIBLE_DEVICES=0,GPU-fa4e0000-0000-4000-8000-000000000000: entry "
              "'GPU-fa4e0000-0000-4000-8000-000000000000' names the same GPU as entry '0'; CUDA "
              "ignores it, so only 0 is visible"});
  }
  SECTION("a MIG instance") {
    Inventory inventory = select_fake(8, {{"CUDA_VISIBLE_DEVICES", "0,MIG-4f1c,1"}});
    CHECK(tokens(inventory) == std::vector<std::string>{"0"});
    CHECK(inventory.notes ==
          std::vector<std::string>{
              "CUDA_VISIBLE_DEVICES=0,MIG-4f1c,1: entry 'MIG-4f1c' is a MIG instance, which flowrun "
              "does not support; flowrun ignores it and every entry after it, so only 0 is "
              "visible"});
  }
}

TEST_CASE("select: CUDA_VISIBLE_DEVICES hiding every GPU", "[gpu]") {
  for (std::string value : {"", "  "}) {
    Inventory inventory = select_fake(8, {{"CUDA_VISIBLE_DEVICES", value}});
    CHECK(inventory.gpus.empty());
    CHECK(inventory.cuda_visible_devices_set);
    CHECK(inventory.selected_by == "CUDA_VISIBLE_DEVICES");
    CHECK(inventory.notes ==
          std::vector<std::string>{"CUDA_VISIBLE_DEVICES is set but empty, which hides every GPU "
                                   "from CUDA, so no GPU is visible"});
  }
  Inventory minus_one = select_fake(8, {{"CUDA_VISIBLE_DEVICES", "-1"}});
  CHECK(minus_one.gpus.empty());
  CHECK(minus_one.notes ==
        std::vector<std::string>{"CUDA_VISIBLE_DEVICES=-1 hides every GPU from CUDA, so no GPU is visible"});
}

TEST_CASE("select: CUDA's order differs from NVML's on mixed nodes", "[gpu]") {
  const SystemGpus system = mixed_system();
  const std::string order_note =
      "CUDA numbers this host's GPUs fastest first, not in PCI bus order like nvidia-smi: CUDA ordinals "
      "0,1,2,3 are "
      "nvidia-smi GPUs 1,3,0,2 (set CUDA_DEVICE_ORDER=PCI_BUS_ID to number them alike)";

  SECTION("all, in CUDA's order") {
    Inventory inventory = select_gpus(system, {});
    CHECK(uuids(inventory) == system.cuda_order);
    CHECK(tokens(inventory) == std::vector<std::string>{"0", "1", "2", "3"});
    CHECK(inventory.notes == std::vector<std::string>{order_note});
    CHECK(inventory.summary() == "NVIDIA H200 x2, NVIDIA A100-SXM4-80GB x2");
  }
  SECTION("ordinals count in CUDA's order") {
    Inventory inventory = select_gpus(system, {{"CUDA_VISIBLE_DEVICES", "0,2"}});
    CHECK(uuids(inventory) == std::vector<std::string>{system.devices[1].uuid, system.devices[0].uuid});
    CHECK(tokens(inventory) == std::vector<std::string>{"0", "2"});
    CHECK(inventory.notes == std::vector<std::string>{order_note});
  }
  SECTION("UUIDs name the same GPU whatever the order") {
    Inventory inventory = select_gpus(system, {{"CUDA_VISIBLE_DEVICES", system.devices[2].uuid}});
    CHECK(uuids(inventory) == std::vector<std::string>{system.devices[2].uuid});
    CHECK(tokens(inventory) == std::vector<std::string>{system.devices[2].uuid});
  }
  SECTION("Slurm's ordinals are NVML's; the tokens are CUDA's") {
    Inventory inventory = select_gpus(system, {{"SLURM_JOB_GPUS", "0,1"}});
    CHECK(uuids(inventory) == std::vector<std::string>{system.devices[0].uuid, system.devices[1].uuid});
    CHECK(tokens(inventory) == std::vector<std::string>{"2", "0"});
  }
  SECTION("a cuda_order that does not match the devices is ignored") {
    SystemGpus broken = system;
    broken.cuda_order[0] = "GPU-ffffffff-0000-0000-0000-000000000000";
    Inventory inventory = select_gpus(broken, {});
    CHECK(uuids(inventory) == std::vector<std::string>{system.devices[0].uuid, system.devices[1].uuid,
                                                       system.devices[2].uuid, system.devices[3].uuid});
    CHECK(inventory.notes.empty());
  }
}

TEST_CASE("select: Slurm's GPU lists", "[gpu]") {
  SECTION("SLURM_STEP_GPUS") {
    Inventory inventory = select_fake(8, {{"SLURM_STEP_GPUS", "2,3"}});
    CHECK(inventory.selected_by == "SLURM_STEP_GPUS");
    CHECK_FALSE(inventory.cuda_visible_devices_set);
    CHECK(uuids(inventory) == std::vector<std::string>{fake_uuid(2), fake_uuid(3)});
    CHECK(tokens(inventory) == std::vector<std::string>{"2", "3"});
    CHECK(inventory.gpus[1].index == 1);
    CHECK(inventory.notes.empty());
  }
  SECTION("SLURM_JOB_GPUS, with a range, in the listed order") {
    Inventory inventory = select_fake(8, {{"SLURM_JOB_GPUS", "5,0-2"}});
    CHECK(inventory.selected_by == "SLURM_JOB_GPUS");
    CHECK(tokens(inventory) == std::vector<std::string>{"5", "0", "1", "2"});
    CHECK(inventory.notes.empty());
  }
  SECTION("the step's list wins over the job's") {
    Inventory inventory = select_fake(8, {{"SLURM_STEP_GPUS", "1"}, {"SLURM_JOB_GPUS", "0,1"}});
    CHECK(inventory.selected_by == "SLURM_STEP_GPUS");
    CHECK(tokens(inventory) == std::vector<std::string>{"1"});
  }
  SECTION("CUDA_VISIBLE_DEVICES wins over Slurm") {
    Inventory inventory = select_fake(
        8, {{"CUDA_VISIBLE_DEVICES", "4"}, {"SLURM_STEP_GPUS", "1"}, {"SLURM_GPUS_ON_NODE", "1"}});
    CHECK(inventory.selected_by == "CUDA_VISIBLE_DEVICES");
    CHECK(tokens(inventory) == std::vector<std::string>{"4"});
  }
  SECTION("an ordinal the host lacks") {
    Inventory inventory = select_fake(8, {{"SLURM_JOB_GPUS", "0,9,1"}});
    CHECK(tokens(inventory) == std::vector<std::string>{"0"});
    CHECK(inventory.notes ==
          std::vector<std::string>{
              "SLURM_JOB_GPUS=0,9,1: GPU 9 does not exist (this host has 8: 0-7); flowrun ignores "
              "it and every GPU listed after it, so only 0 is used"});
  }
  SECTION("a range past the last GPU") {
    Inventory inventory = select_fake(8, {{"SLURM_JOB_GPUS", "6-9"}});
    CHECK(tokens(inventory) == std::vector<std::string>{"6", "7"});
    CHECK(inventory.notes ==
          std::vector<std::string>{
              "SLURM_JOB_GPUS=6-9: GPU 8 does not exist (this host has 8: 0-7); flowrun ignores it "
              "and every GPU listed after it, so only 6,7 are used"});
  }
  SECTION("garbage") {
    Inventory inventory = select_fake(8, {{"SLURM_JOB_GPUS", "0,3-1"}});
    CHECK(tokens(inventory) == std::vector<std::string>{"0"});
    CHECK(inventory.notes ==
          std::vector<std::string>{
              "SLURM_JOB_GPUS=0,3-1: entry '3-1' is not a GPU ordinal or a range such as 0-3; "
              "flowrun ignores it, so only 0 is used"});
  }
  SECTION("a GPU listed twice") {
    Inventory inventory = select_fake(8, {{"SLURM_STEP_GPUS", "1,1"}});
    CHECK(tokens(inventory) == std::vector<std::string>{"1"});
    CHECK(inventory.notes ==
          std::vector<std::string>{
              "SLURM_STEP_GPUS=1,1: GPU 1 is listed twice; flowrun ignores it, so only 1 is used"});
  }
  SECTION("set but empty") {
    Inventory inventory = select_fake(8, {{"SLURM_STEP_GPUS", ""}});
    CHECK(inventory.gpus.empty());
    CHECK(inventory.notes == std::vector<std::string>{"SLURM_STEP_GPUS is set but empty, so no GPU is used"});
  }
  SECTION("a list wins over SLURM_GPUS_ON_NODE") {
    Inventory inventory = select_fake(8, {{"SLURM_JOB_GPUS", "3"}, {"SLURM_GPUS_ON_NODE", "2"}});
    CHECK(tokens(inventory) == std::vector<std::string>{"3"});
    CHECK(inventory.notes.empty());
  }
}

TEST_CASE("select: SLURM_GPUS_ON_NODE limits the count", "[gpu]") {
  SECTION("fewer than the host has: the first N") {
    Inventory inventory = select_fake(8, {{"SLURM_GPUS_ON_NODE", "2"}});
    CHECK(inventory.selected_by == "SLURM_GPUS_ON_NODE");
    CHECK(tokens(inventory) == std::vector<std::string>{"0", "1"});
    CHECK(inventory.notes ==
          std::vector<std::string>{"Slurm allocated 2 GPUs on this node (SLURM_GPUS_ON_NODE=2) "
                                   "without naming them; using the first 2: 0,1"});
  }
  SECTION("zero") {
    Inventory inventory = select_fake(8, {{"SLURM_GPUS_ON_NODE", "0"}});
    CHECK(inventory.gpus.empty());
    CHECK(inventory.notes ==
          std::vector<std::string>{"Slurm allocated 0 GPUs on this node (SLURM_GPUS_ON_NODE=0) "
                                   "without naming them; using none"});
  }
  SECTION("as many as the host has") {
    Inventory inventory = select_fake(8, {{"SLURM_GPUS_ON_NODE", "8"}});
    CHECK(inventory.gpus.size() == 8);
    CHECK(inventory.notes.empty());
  }
  SECTION("more than the host has") {
    Inventory inventory = select_fake(8, {{"SLURM_GPUS_ON_NODE", "16"}});
    CHECK(inventory.gpus.size() == 8);
    CHECK(inventory.notes ==
          std::vector<std::string>{"Slurm allocated 16 GPUs on this node (SLURM_GPUS_ON_NODE=16) "
                                   "but this host has 8; using all 8"});
  }
  SECTION("not a number") {
    Inventory inventory = select_fake(8, {{"SLURM_GPUS_ON_NODE", "2(x2)"}});
    CHECK(inventory.gpus.size() == 8);
    CHECK(inventory.selected_by.empty());
    CHECK(inventory.notes ==
          std::vector<std::string>{"SLURM_GPUS_ON_NODE='2(x2)' is not a count of GPUs; ignoring it"});
  }
}

TEST_CASE("Inventory::summary", "[gpu]") {
  CHECK(select_fake(8, {}).summary() == "NVIDIA H200 x8");
  CHECK(select_fake(0, {}).summary() == "no GPUs");
  Inventory mixed;
  for (const char* name : {"NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA H200", "NVIDIA H200",
                           "NVIDIA A100-SXM4-80GB", "NVIDIA H200"}) {
    Gpu gpu;
    gpu.name = name;
    mixed.gpus.push_back(gpu);
  }
  CHECK(mixed.summary() == "NVIDIA H200 x4, NVIDIA A100-SXM4-80GB x2");
}

TEST_CASE("make_probe: --fake-gpus, FLOWRUN_FAKE_GPUS, else NVML", "[gpu]") {
  CHECK(make_probe({}, 3)->probe().devices.size() == 3);
  CHECK(make_probe({{"FLOWRUN_FAKE_GPUS", "x"}}, 2)->probe().devices.size() == 2);  // the flag wins
  SystemGpus none = make_probe({}, 0)->probe();
  CHECK(none.source == "fake");
  CHECK(none.devices.empty());
  CHECK(make_probe({{"FLOWRUN_FAKE_GPUS", "4"}}, -1)->probe().devices.size() == 4);
  CHECK(make_probe({{"FLOWRUN_FAKE_GPUS", "0"}}, -1)->probe().source == "fake");
  CHECK(make_probe({{"FLOWRUN_FAKE_GPUS", "1024"}}, -1)->probe().devices.size() == 1024);
  CHECK(make_probe({}, -1)->probe().source != "fake");

  for (std::string bad : {"x", "", "-1", "1025", " 8", "8.0", "99999999999999999999"}) {
    INFO("FLOWRUN_FAKE_GPUS=" << bad);
    try {
      make_probe({{"FLOWRUN_FAKE_GPUS", bad}}, -1);
      FAIL("no exception");
    } catch (const Error& e) {
      CHECK(std::string(e.what()) ==
            "FLOWRUN_FAKE_GPUS='" + bad +
                "': expected a whole number of simulated GPUs, e.g. FLOWRUN_FAKE_GPUS=8");
      CHECK(e.exit_code() == kExitUsage);
    }
  }
}

TEST_CASE("NVML probe: reports why there are no GPUs, never fails", "[gpu]") {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  SystemGpus system = make_nvml_probe()->probe();
  if (nvml == nullptr) {
    CHECK(system.source == "none");
    CHECK(system.devices.empty());
    CHECK(system.cuda_order.empty());
    CHECK(system.unavailable_reason == "libnvidia-ml.so.1 not found: no NVIDIA driver on this host");
  } else {
    // A host with a driver: whatever it has must be well formed.
    dlclose(nvml);
    INFO("NVML probe: " << system.source << " " << system.unavailable_reason);
    CHECK((system.source == "nvml" || !system.unavailable_reason.empty()));
    for (const GpuDevice& device : system.devices) {
      CHECK(device.uuid.rfind("GPU-", 0) == 0);
      CHECK_FALSE(device.name.empty());
      CHECK(device.pci_bus_id.size() == 16);
    }
  }
}

TEST_CASE("NVML probe: a library that is missing or is not NVML", "[gpu]") {
  SystemGpus missing = gpu_detail::probe_nvml_library("libflowrun-no-such-library.so.1");
  CHECK(missing.source == "none");
  CHECK(missing.unavailable_reason ==
        "libflowrun-no-such-library.so.1 not found: no NVIDIA driver on this host");
  SystemGpus not_nvml = gpu_detail::probe_nvml_library("libc.so.6");
  CHECK(not_nvml.source == "none");
  CHECK(not_nvml.devices.empty());
  CHECK(not_nvml.unavailable_reason == "libc.so.6 has no nvmlInit_v2 (NVIDIA driver too old?)");
}

TEST_CASE("CUDA's order comes from a child that is always reaped", "[gpu]") {
  const std::string out = gpu_detail::cuda_uuids_from_child();
  errno = 0;
  CHECK(waitpid(-1, nullptr, WNOHANG) == -1);  // no child left behind, not even a zombie
  CHECK(errno == ECHILD);
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) {
    CHECK(out.empty());
  } else {
    // A host with a driver: one NVML UUID a line, every one of NVML's GPUs.
    dlclose(cuda);
    const SystemGpus system = make_nvml_probe()->probe();
    INFO("child wrote: " << out);
    std::string expected;
    for (const GpuDevice& device : system.devices) expected += device.uuid + "\n";
    if (gpu_detail::cuda_order_may_differ(system.devices, nullptr)) {
      CHECK(out.size() == expected.size());
    } else {
      CHECK(out == expected);  // one model: CUDA's order is NVML's
    }
  }
}

TEST_CASE("NVML probe helpers", "[gpu]") {
  using namespace gpu_detail;
  CHECK(format_cuda_version(12060) == "12.6");
  CHECK(format_cuda_version(12020) == "12.2");
  CHECK(format_cuda_version(11080) == "11.8");
  CHECK(format_cuda_version(13000) == "13.0");
  CHECK(format_cuda_version(0).empty());
  CHECK(format_cuda_version(-1).empty());

  const unsigned char bytes[16] = {0x8f, 0x3a, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc,
                                   0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab};
  CHECK(format_gpu_uuid(bytes) == "GPU-8f3a1234-5678-9abc-def0-0123456789ab");
  const unsigned char ones[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                  0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  CHECK(format_gpu_uuid(ones) == "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff");

  const SystemGpus mixed = mixed_system();
  const SystemGpus same = fake_system_gpus(4);
  CHECK(cuda_order_may_differ(mixed.devices, nullptr));
  CHECK(cuda_order_may_differ(mixed.devices, "FASTEST_FIRST"));
  CHECK_FALSE(cuda_order_may_differ(mixed.devices, "PCI_BUS_ID"));
  CHECK_FALSE(cuda_order_may_differ(same.devices, nullptr));
  CHECK_FALSE(cuda_order_may_differ({}, nullptr));

  const std::vector<GpuDevice>& d = mixed.devices;
  const std::string reordered = d[1].uuid + "\n" + d[3].uuid + "\n" + d[0].uuid + "\n" + d[2].uuid + "\n";
  CHECK(parse_cuda_order(reordered, d) == mixed.cuda_order);
  CHECK(
      parse_cuda_order(d[0].uuid + "\n" + d[1].uuid + "\n" + d[2].uuid + "\n" + d[3].uuid + "\n", d).empty());
  CHECK(parse_cuda_order(reordered.substr(0, reordered.size() - 1), d).empty());  // cut short
  CHECK(parse_cuda_order(d[1].uuid + "\n" + d[0].uuid + "\n", d).empty());        // too few
  CHECK(
      parse_cuda_order(d[1].uuid + "\n" + d[1].uuid + "\n" + d[0].uuid + "\n" + d[2].uuid + "\n", d).empty());
  CHECK(parse_cuda_order("GPU-x\n" + d[3].uuid + "\n" + d[0].uuid + "\n" + d[2].uuid + "\n", d).empty());
  CHECK(parse_cuda_order("", d).empty());
}

TEST_CASE("numa: a GPU's NUMA node and its CPUs from sysfs", "[gpu]") {
  testing::ScopedTempDir sys("sysfs");
  auto write = [&](const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(sys.path() + path).parent_path());
    std::ofstream(sys.path() + path) << text;
  };
  write("/bus/pci/devices/0000:9a:00.0/numa_node", "1\n");
  write("/bus/pci/devices/0000:18:00.0/numa_node", "-1\n");  // a host of one node
  write("/devices/system/node/node0/cpulist", "0-3,8\n");
  write("/devices/system/node/node1/cpulist", "4-7,9-10\n");
  NumaNode far = gpu_numa_node("00000000:9A:00.0", sys.path());
  CHECK(far.node == 1);
  CHECK(far.cpus == std::vector<int>{4, 5, 6, 7, 9, 10});
  NumaNode one = gpu_numa_node("00000000:18:00.0", sys.path());
  CHECK(one.node == 0);
  CHECK(one.cpus == std::vector<int>{0, 1, 2, 3, 8});
  CHECK_THROWS_WITH(
      gpu_numa_node("00000000:28:00.0", sys.path()),
      "cannot read " + sys.path() +
          "/bus/pci/devices/0000:28:00.0/numa_node (the GPU's NUMA node): No such file or directory");
  write("/bus/pci/devices/0000:28:00.0/numa_node", "2\n");
  CHECK_THROWS_WITH(
      gpu_numa_node("00000000:28:00.0", sys.path()),
      "cannot read " + sys.path() +
          "/devices/system/node/node2/cpulist (the CPUs of NUMA node 2): No such file or directory");
  CHECK(sysfs_root({}) == "/sys");
  CHECK(sysfs_root({{"FLOWRUN_FAKE_SYSFS", "/tmp/s"}}) == "/tmp/s");
}

TEST_CASE("numa: kernel CPU lists both ways", "[gpu]") {
  CHECK(parse_cpu_list("0-3,8,10-11\n") == std::vector<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(parse_cpu_list("") == std::vector<int>{});
  for (const char* bad : {"a", "3-1", "1,,2", "-1", "0-"}) CHECK_FALSE(parse_cpu_list(bad));
  CHECK(cpu_list_text({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(cpu_list_text({5}) == "5");
  CHECK(sysfs_pci_address("00000000:9A:00.0") == "0000:9a:00.0");
}

TEST_CASE("numa: node, socket and exclusive bindings as torch computes them", "[gpu]") {
  // Two sockets, each of two NUMA nodes of two cores with two hyperthreads
  // (cpu c and c+8 are siblings); GPUs 0, 1 and 2 on node 0, GPU 3 on node 2.
  testing::ScopedTempDir sys("sysfs");
  auto write = [&](const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(sys.path() + path).parent_path());
    std::ofstream(sys.path() + path) << text << "\n";
  };
  const std::vector<std::string> gpus = {"00000000:18:00.0", "00000000:28:00.0", "00000000:38:00.0",
                                         "00000000:48:00.0"};
  for (int g = 0; g < 4; ++g)
    write("/bus/pci/devices/" + sysfs_pci_address(gpus[static_cast<std::size_t>(g)]) + "/numa_node",
          g < 3 ? "0" : "2");
  write("/devices/system/node/possible", "0-3");
  for (int node = 0; node < 4; ++node) {
    const int first = 2 * node;
    write("/devices/system/node/node" + std::to_string(node) + "/cpulist",
          std::to_string(first) + "-" + std::to_string(first + 1) + "," + std::to_string(first + 8) + "-" +
              std::to_string(first + 9));
  }
  for (int cpu = 0; cpu < 16; ++cpu) {
    const std::string dir = "/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    write(dir + "physical_package_id", cpu % 8 < 4 ? "0" : "1");
    write(dir + "thread_siblings_list", std::to_string(cpu % 8) + "," + std::to_string(cpu % 8 + 8));
  }
  std::vector<int> all(16);
  for (int cpu = 0; cpu < 16; ++cpu) all[static_cast<std::size_t>(cpu)] = cpu;
  int node = -1;
  CHECK(numa_binding_cpus(NumaPolicy::node, gpus, 3, all, sys.path(), &node) ==
        std::vector<int>{4, 5, 12, 13});
  CHECK(node == 2);
  CHECK(numa_binding_cpus(NumaPolicy::node, gpus, 0, {0, 8, 10}, sys.path()) == std::vector<int>{0, 8});
  CHECK(numa_binding_cpus(NumaPolicy::socket, gpus, 3, all, sys.path()) ==
        std::vector<int>{4, 5, 6, 7, 12, 13, 14, 15});
  // node 0's two cores for its three GPUs: fewer than one each.
  CHECK_THROWS_WITH(numa_binding_cpus(NumaPolicy::exclusive, gpus, 0, all, sys.path()),
                    "NUMA node 0 has 2 physical cores for its 3 GPUs: fewer than one each");
  // Without GPU 2: GPU 0 takes core 0 (cpus 0 and 8), GPU 1 core 1.
  const std::vector<std::string> two(gpus.begin(), gpus.begin() + 2);
  CHECK(numa_binding_cpus(NumaPolicy::exclusive, two, 0, all, sys.path()) == std::vector<int>{0, 8});
  CHECK(numa_binding_cpus(NumaPolicy::exclusive, two, 1, all, sys.path()) == std::vector<int>{1, 9});
  // Five cores of one node for two GPUs: the lower GPU gets the odd one.
  write("/devices/system/node/node0/cpulist", "0-4");
  for (int cpu = 0; cpu < 5; ++cpu)
    write("/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list",
          std::to_string(cpu));
  CHECK(numa_binding_cpus(NumaPolicy::exclusive, two, 0, all, sys.path()) == std::vector<int>{0, 1, 2});
  CHECK(numa_binding_cpus(NumaPolicy::exclusive, two, 1, all, sys.path()) == std::vector<int>{3, 4});
}
