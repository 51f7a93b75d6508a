// flowrun doctor: checks the GPUs, driver, CUDA and NCCL (docs/gpu.md).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <iostream>
#include <sstream>
#include <unistd.h>

#include "flowrun/doctor.h"
#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/host.h"

#include "commands.h"

namespace flowrun {

namespace {

struct DoctorCommand {
  DoctorOptions options;
  bool json = false;
  std::string sizes;
  std::string facts_file;
  // The check child's side (hidden): what the parent asks it to run.
  bool check_child = false;
  std::string devices;
  int driver_cuda = 0;
  bool memcpy = false;
  NcclPart nccl_part;
};

// "MIN:MAX" or "MIN:MAX:FACTOR" with sizes such as 8, 64K, 1M, 1G.
void parse_sizes(const std::string& text, DoctorOptions& options) {
  const std::size_t colon = text.find(':');
  const std::size_t second = colon == std::string::npos ? colon : text.find(':', colon + 1);
  auto bad = [&](const std::string& why) {
    return Error(
        "--sizes " + text + ": " + why + "; expected MIN:MAX or MIN:MAX:FACTOR, e.g. --sizes 8:1G or 1M:1G:4",
        kExitUsage);
  };
  if (colon == std::string::npos) throw bad("no ':'");
  const std::uint64_t min = doctor_detail::parse_size(text.substr(0, colon));
  const std::uint64_t max = doctor_detail::parse_size(
      text.substr(colon + 1, second == std::string::npos ? std::string::npos : second - colon - 1));
  if (min == 0 || max == 0) throw bad("sizes are whole numbers of bytes, with K, M or G for KiB, MiB, GiB");
  if (min > max) throw bad("MIN is larger than MAX");
  if (max > (16ull << 30)) throw bad("MAX is at most 16G");
  int factor = 2;
  if (second != std::string::npos) {
    const std::string f = text.substr(second + 1);
    if (f.empty() || f.size() > 3 || f.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(f) < 2)
      throw bad("FACTOR is a whole number of 2 or more");
    factor = std::stoi(f);
  }
  options.sweep.min_bytes = min;
  options.sweep.max_bytes = max;
  options.sweep.factor = factor;
}

std::vector<int> parse_devices(const std::string& text) {
  std::vector<int> devices;
  if (text == "none" || text.empty()) return devices;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty() || item.size() > 4 || item.find_first_not_of("0123456789") != std::string::npos)
      throw Error("--devices " + text + ": expected CUDA ordinals such as 0,1,2", kExitUsage);
    devices.push_back(std::stoi(item));
  }
  return devices;
}

int run_check_child(const DoctorCommand& command) {
  GpuCheckRequest request;
  request.devices = parse_devices(command.devices);
  request.sweep = command.options.sweep;
  request.nccl = command.options.nccl;
  request.memcpy = command.memcpy;
  request.driver_cuda_major = command.driver_cuda;
  request.part = command.nccl_part;
  if (request.part.nranks > 0 && request.part.nccl_id != "make" &&
      (request.part.nccl_id.size() != kNcclIdHexChars ||
       request.part.nccl_id.find_first_not_of("0123456789abcdef") != std::string::npos))
    throw Error("--nccl-id: expected 'make' or " + std::to_string(kNcclIdHexChars) + " hex digits",
                kExitUsage);
  if (request.part.nranks > 0 &&
      (request.part.first_rank < 0 ||
       request.part.first_rank + static_cast<int>(request.devices.size()) > request.part.nranks))
    throw Error("--nccl-first-rank: this node's ranks do not fit in --nccl-ranks", kExitUsage);
  // The findings go to the parent on stdout; whatever CUDA or NCCL print
  // themselves goes to stderr, which the parent shares with its user.
  std::cout.flush();
  const int findings = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  if (findings < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) return kExitFailure;
  const int status = run_gpu_check_child(request, findings);
  close(findings);
  return status;
}

int run_doctor(const DoctorCommand& command) {
  const EnvMap env = read_environ();
  DoctorFacts facts;
  if (!command.facts_file.empty()) {
    int err = 0;
    const auto text = try_read_given_file(command.facts_file, SIZE_MAX, &err);
    if (!text) throw Error("cannot read " + command.facts_file + ": " + file_error_text(err), kExitUsage);
    facts = parse_doctor_facts(*text, command.facts_file);
  } else {
    facts = collect_doctor_facts(command.options, env, host_name(env));
  }
  const DoctorReport report = evaluate_doctor(facts);
  std::cout << (command.json ? format_doctor_json(facts, report) : format_doctor_text(facts, report));
  return report.exit_code;
}

}  // namespace

int cmd_doctor(int argc, char** argv) {
  DoctorCommand command;
  CLI::App app{
      "Check this host's GPUs, driver, CUDA runtime and NCCL before a job spends GPU time: the inventory\n"
      "and how the GPUs are linked (NVML), then an NCCL all-reduce across them timed as nccl-tests does,\n"
      "judged against what such links reach.",
      "flowrun doctor"};
  app.add_flag("--json", command.json, "Print the facts and the verdict as JSON");
  app.add_option("--fake-gpus", command.options.fake_gpus,
                 "Simulate N GPUs (CUDA and NCCL are then not checked)")
      ->check(CLI::Range(0, 1024))
      ->type_name("N");
  app.add_option(
         "--sizes", command.sizes,
         "All-reduce message sizes per GPU, MIN:MAX[:FACTOR] (default 8:1G:2, as nccl-tests' -b -e -f)")
      ->type_name("MIN:MAX");
  app.add_option("--iters", command.options.sweep.iters, "Timed iterations of each size (default 20)")
      ->check(CLI::Range(1, 10000))
      ->type_name("N");
  app.add_option("--warmup", command.options.sweep.warmup, "Untimed iterations before them (default 5)")
      ->check(CLI::Range(0, 1000))
      ->type_name("N");
  app.add_option("--timeout", command.options.sweep.timeout_s,
                 "Seconds one step of the check may take before it counts as hung (default 60)")
      ->check(CLI::Range(1, 3600))
      ->type_name("SECONDS");
  bool no_nccl = false;
  app.add_flag("--no-nccl", no_nccl, "Check the driver, CUDA runtime and libraries only; no all-reduce");
  app.add_option("--facts", command.facts_file, "Report on recorded facts (a 'flowrun doctor --json' file)")
      ->group("")
      ->type_name("FILE");
  app.add_flag("--check-child", command.check_child)->group("");
  app.add_option("--devices", command.devices)->group("");
  app.add_option("--driver-cuda", command.driver_cuda)->group("");
  app.add_flag("--memcpy", command.memcpy)->group("");
  app.add_option("--nccl-ranks", command.nccl_part.nranks)->group("")->check(CLI::Range(1, 1 << 20));
  app.add_option("--nccl-first-rank", command.nccl_part.first_rank)->group("");
  app.add_option("--nccl-id", command.nccl_part.nccl_id)->group("");
  app.footer(
      "Exit codes: 0 healthy, 1 a check failed (each problem is said with what to do), 2 bad command line.\n"
      "CUDA and NCCL are loaded at run time: FLOWRUN_CUDART_LIBRARY and FLOWRUN_NCCL_LIBRARY name them\n"
      "explicitly. What each check means and the bandwidth ceilings: docs/gpu.md.\n"
      "This checks the host it runs on. To check every node of a multi-node step, across the nodes, before\n"
      "its ranks start: preflight: true under the step's parallel: (docs/gpu.md#across-nodes).");
  if (const auto done = parse_subcommand(app, "doctor", argc, argv)) return *done;
  return report_errors([&]() -> int {
    command.options.nccl = !no_nccl;
    if (!command.sizes.empty()) parse_sizes(command.sizes, command.options);
    if (command.check_child) return run_check_child(command);
    return run_doctor(command);
  });
}

}  // namespace flowrun
