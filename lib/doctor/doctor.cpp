// The doctor's collection half: the inventory with topology, and the check
// child that loads the CUDA runtime and NCCL, run with a time limit.
#include "flowrun/doctor.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <glob.h>
#include <string>
#include <vector>

#include "flowrun/child.h"
#include "flowrun/error.h"

namespace flowrun {

namespace {

std::vector<std::string_view> split_tabs(std::string_view line) {
  std::vector<std::string_view> fields;
  for (;;) {
    const std::size_t tab = line.find('\t');
    fields.push_back(line.substr(0, tab));
    if (tab == std::string_view::npos) return fields;
    line.remove_prefix(tab + 1);
  }
}

template <typename T>
bool parse_number(std::string_view text, T& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

// Every existing path matching `pattern`, sorted (glob's order).
std::vector<std::string> glob_paths(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t matches{};
  if (glob(pattern.c_str(), 0, nullptr, &matches) == 0) {
    for (std::size_t i = 0; i < matches.gl_pathc; ++i) out.emplace_back(matches.gl_pathv[i]);
  }
  globfree(&matches);
  return out;
}

// The roots under which pip puts NVIDIA's Python packages ("nvidia/...").
std::vector<std::string> python_package_roots(const EnvMap& env) {
  std::vector<std::string> prefixes;
  for (const char* variable : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    if (auto value = env_get(env, variable); value && !value->empty()) prefixes.push_back(*value);
  }
  if (auto home = env_get(env, "HOME"); home && !home->empty()) prefixes.push_back(*home + "/.local");
  prefixes.push_back("/usr/local");
  prefixes.push_back("/usr");
  std::vector<std::string> roots;
  for (const std::string& prefix : prefixes) {
    for (const char* kind : {"site-packages", "dist-packages"}) {
      for (std::string& dir : glob_paths(prefix + "/lib/python3*/" + kind + "/nvidia"))
        roots.push_back(std::move(dir));
    }
  }
  for (std::string& dir : glob_paths("/usr/lib/python3/dist-packages/nvidia"))
    roots.push_back(std::move(dir));
  return roots;
}

void add_unique(std::vector<std::string>& list, std::string item) {
  if (std::find(list.begin(), list.end(), item) == list.end()) list.push_back(std::move(item));
}

// The CUDA major version of a runtime's file name: "libcudart.so.12" -> 12, 0 unknown.
int soname_major(const std::string& path) {
  const std::size_t at = path.rfind(".so.");
  int major = 0;
  if (at == std::string::npos || !parse_number(std::string_view(path).substr(at + 4), major)) return 0;
  return major;
}

std::string signal_text(int signal) {
  const char* name = strsignal(signal);
  return "signal " + std::to_string(signal) + (name != nullptr ? std::string(" (") + name + ")" : "");
}

}  // namespace

namespace doctor_detail {

std::vector<std::uint64_t> sweep_sizes(std::uint64_t min_bytes, std::uint64_t max_bytes, int factor) {
  std::vector<std::uint64_t> sizes;
  std::uint64_t size = std::max<std::uint64_t>(4, min_bytes / 4 * 4);
  if (factor < 2) factor = 2;
  while (size <= max_bytes) {
    sizes.push_back(size);
    if (size > max_bytes / static_cast<std::uint64_t>(factor)) break;
    size = size * static_cast<std::uint64_t>(factor) / 4 * 4;
  }
  return sizes;
}

std::uint64_t parse_size(std::string_view text) {
  if (text.empty()) return 0;
  std::uint64_t unit = 1;
  switch (text.back()) {
    case 'K':
    case 'k': unit = 1ull << 10; break;
    case 'M':
    case 'm': unit = 1ull << 20; break;
    case 'G':
    case 'g': unit = 1ull << 30; break;
    default: break;
  }
  if (unit != 1) text.remove_suffix(1);
  std::uint64_t value = 0;
  if (!parse_number(text, value) || value == 0 || value > (1ull << 40) / unit) return 0;
  return value * unit;
}

std::string format_size(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  std::uint64_t value = bytes;
  while (unit < 4 && value >= 1024 && value % 1024 == 0) {
    value /= 1024;
    ++unit;
  }
  return std::to_string(value) + " " + kUnits[unit];
}

std::vector<std::string> cudart_candidates(const EnvMap& env, int driver_cuda_major) {
  if (auto explicit_path = env_get(env, "FLOWRUN_CUDART_LIBRARY"); explicit_path && !explicit_path->empty())
    return {*explicit_path};
  std::vector<std::string> names = {"libcudart.so.13", "libcudart.so.12"};
  std::vector<std::string> out = names;
  std::vector<std::string> dirs;
  for (const char* variable : {"CUDA_HOME", "CUDA_PATH"}) {
    if (auto home = env_get(env, variable); home && !home->empty()) {
      dirs.push_back(*home + "/lib64");
      dirs.push_back(*home + "/lib");
    }
  }
  dirs.push_back("/usr/local/cuda/lib64");
  dirs.push_back("/usr/local/cuda/lib");
  for (const std::string& dir : dirs) {
    for (const std::string& name : names) add_unique(out, dir + "/" + name);
  }
  for (const std::string& root : python_package_roots(env)) {
    for (std::string& path : glob_paths(root + "/cu13/lib/libcudart.so.13")) add_unique(out, std::move(path));
    for (std::string& path : glob_paths(root + "/cuda_runtime/lib/libcudart.so.1[23]"))
      add_unique(out, std::move(path));
  }
  add_unique(out, "libcudart.so");
  // A runtime newer than the driver only answers cudaErrorInsufficientDriver.
  if (driver_cuda_major > 0) {
    std::stable_partition(out.begin(), out.end(),
                          [&](const std::string& path) { return soname_major(path) <= driver_cuda_major; });
  }
  return out;
}

std::vector<std::string> nccl_candidates(const EnvMap& env) {
  if (auto explicit_path = env_get(env, "FLOWRUN_NCCL_LIBRARY"); explicit_path && !explicit_path->empty())
    return {*explicit_path};
  std::vector<std::string> out = {"libnccl.so.2"};
  std::vector<std::string> dirs;
  if (auto home = env_get(env, "NCCL_HOME"); home && !home->empty()) {
    dirs.push_back(*home + "/lib");
    dirs.push_back(*home + "/lib64");
  }
  for (const char* variable : {"CUDA_HOME", "CUDA_PATH"}) {
    if (auto home = env_get(env, variable); home && !home->empty()) {
      dirs.push_back(*home + "/lib64");
      dirs.push_back(*home + "/lib");
    }
  }
  dirs.push_back("/usr/local/cuda/lib64");
  dirs.push_back("/usr/local/cuda/lib");
  for (const std::string& dir : dirs) add_unique(out, dir + "/libnccl.so.2");
  for (const std::string& root : python_package_roots(env)) {
    for (std::string& path : glob_paths(root + "/nccl/lib/libnccl.so.2")) add_unique(out, std::move(path));
  }
  return out;
}

bool parse_tuning_line(std::string_view line, TuningChoice& choice) {
  static constexpr const char* kAlgorithms[] = {
      "TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"};
  static constexpr const char* kProtocols[] = {"LL", "LL128", "SIMPLE"};
  const std::size_t arrow = line.find(" Bytes -> Algo ");
  if (arrow == std::string_view::npos) return false;
  // The byte count is the word before " Bytes", after "AllReduce: " (2.24+)
  // or straight after NCCL's "host:pid:tid [dev] NCCL INFO " (2.21-2.23,
  // which do not name the collective; the doctor runs only all-reduces).
  const std::string_view prefix = line.substr(0, arrow);
  const std::size_t space = prefix.rfind(' ');
  const std::string_view number = space == std::string_view::npos ? prefix : prefix.substr(space + 1);
  std::string_view before = space == std::string_view::npos ? std::string_view() : prefix.substr(0, space);
  if (before.ends_with(':')) {
    before.remove_suffix(1);
    const std::size_t name = before.rfind(' ');
    if (before.substr(name == std::string_view::npos ? 0 : name + 1) != "AllReduce") return false;
  }
  std::uint64_t bytes = 0;
  if (!parse_number(number, bytes)) return false;
  std::string_view rest = line.substr(arrow + std::string_view(" Bytes -> Algo ").size());
  const std::size_t proto = rest.find(" proto ");
  if (proto == std::string_view::npos) return false;
  std::string_view algorithm = rest.substr(0, proto);
  rest.remove_prefix(proto + std::string_view(" proto ").size());
  std::string_view protocol = rest.substr(0, rest.find(' '));
  auto by_number = [](std::string_view text, const auto& names) -> std::string {
    std::size_t index = 0;
    if (parse_number(text, index) && index < std::size(names)) return names[index];
    return std::string(text);
  };
  choice.bytes = bytes;
  choice.algorithm = by_number(algorithm, kAlgorithms);
  choice.protocol = by_number(protocol, kProtocols);
  return !choice.algorithm.empty() && !choice.protocol.empty();
}

void apply_check_line(std::string_view line, GpuCheckOutcome& outcome, std::string& phase) {
  const std::vector<std::string_view> f = split_tabs(line);
  const std::string_view kind = f[0];
  auto text = [&](std::size_t i) { return i < f.size() ? std::string(f[i]) : std::string(); };
  if (kind == "phase") {
    phase = text(1);
  } else if (kind == "cudart_tried") {
    outcome.cuda.library.tried.push_back(text(1));
  } else if (kind == "cudart") {
    outcome.cuda.library.found = true;
    outcome.cuda.library.path = text(1);
  } else if (kind == "cudart_missing") {
    outcome.cuda.library.error = text(1);
  } else if (kind == "cuda_versions" && f.size() == 3) {
    parse_number(f[1], outcome.cuda.runtime_version);
    parse_number(f[2], outcome.cuda.driver_version);
  } else if (kind == "cuda_count" && f.size() == 2) {
    parse_number(f[1], outcome.cuda.device_count);
  } else if (kind == "cuda_error") {
    outcome.cuda.error = text(1);
  } else if (kind == "nccl_tried") {
    outcome.nccl.library.tried.push_back(text(1));
  } else if (kind == "nccl") {
    outcome.nccl.library.found = true;
    outcome.nccl.library.path = text(1);
  } else if (kind == "nccl_missing") {
    outcome.nccl.library.error = text(1);
  } else if (kind == "nccl_version" && f.size() == 2) {
    parse_number(f[1], outcome.nccl.version);
  } else if (kind == "row" && f.size() == 4) {
    AllReduceRow row;
    if (parse_number(f[1], row.bytes) && parse_number(f[2], row.time_ns) && parse_number(f[3], row.wrong))
      outcome.allreduce.rows.push_back(std::move(row));
  } else if (kind == "algo" && f.size() == 4) {
    std::uint64_t bytes = 0;
    if (!parse_number(f[1], bytes)) return;
    for (AllReduceRow& row : outcome.allreduce.rows) {
      if (row.bytes == bytes) {
        row.algorithm = text(2);
        row.protocol = text(3);
      }
    }
  } else if (kind == "nccl_id" && f.size() == 2) {
    outcome.nccl_id = text(1);
  } else if (kind == "network" && f.size() == 2) {
    outcome.allreduce.network = text(1);
  } else if (kind == "slow") {
    outcome.allreduce.stopped_slow = true;
  } else if (kind == "note") {
    outcome.allreduce.notes.push_back(text(1));
  } else if (kind == "warn") {
    outcome.allreduce.warnings.push_back(text(1));
  } else if (kind == "memcpy" && f.size() == 3) {
    parse_number(f[1], outcome.memcpy.bytes);
    parse_number(f[2], outcome.memcpy.time_ns);
  } else if (kind == "allreduce" && f.size() >= 2) {
    // The first failure or hang is the one to report; a later one (a hang
    // while aborting NCCL after a hang) is a consequence.
    const std::string& status = outcome.allreduce.status;
    if (status == "failed" || status == "hung") {
      outcome.allreduce.notes.push_back("then: " + text(2));
      return;
    }
    outcome.allreduce.status = text(1);
    outcome.allreduce.reason = text(2);
  }
}

GpuCheckOutcome run_check_process(const std::vector<std::string>& argv, int silence_limit_s,
                                  const std::function<void(std::string_view line)>& on_line,
                                  const std::atomic<bool>* cancel) {
  GpuCheckOutcome outcome;
  auto failed = [&](const std::string& why) {
    outcome.allreduce.status = "failed";
    outcome.allreduce.reason = why;
    return outcome;
  };
  if (argv.empty()) return failed("no check program");
  std::string phase = "starting";
  HelperRequest request;
  request.argv = argv;
  request.silence_limit = std::chrono::seconds(silence_limit_s);
  // After "done" the child only has to exit; give it a short while.
  request.done_line = "done";
  request.silence_after_done = std::chrono::seconds(10);
  request.cancel = cancel;
  request.output_limit = 0;  // the lines are what counts
  request.on_line = [&](std::string_view line) {
    if (on_line) on_line(line);
    if (line != "done") apply_check_line(line, outcome, phase);
  };
  const HelperOutcome child = run_helper(request);
  if (child.end == HelperEnd::not_started)
    return failed(child.exec_failed ? "could not start " + argv[0] : child.error);
  if (child.end == HelperEnd::cancelled && !child.done) {
    outcome.allreduce.status = "skipped";
    outcome.allreduce.reason = std::string(kCheckStoppedReason) + ", while " + phase;
    return outcome;
  }
  if (child.done || outcome.allreduce.status == "hung") return outcome;
  if (child.end == HelperEnd::silent) {
    outcome.allreduce.status = "hung";
    outcome.allreduce.reason = "no word from the check for " + std::to_string(silence_limit_s) + " s while " +
                               phase + "; flowrun killed it";
    return outcome;
  }
  // A status another waiter took reads as 0, as it always did.
  const int code = child.end == HelperEnd::vanished ? 0 : child.code;
  if (child.end != HelperEnd::signalled && code == 127 && phase == "starting")
    return failed("could not start " + argv[0]);
  const std::string how = child.end == HelperEnd::signalled ? "died of " + signal_text(code)
                                                            : "exited with status " + std::to_string(code);
  return failed("the check process " + how + " while " + phase);
}

std::vector<std::string> check_child_argv(const std::string& self_exe, const GpuCheckRequest& request) {
  std::vector<std::string> devices;
  for (int device : request.devices) devices.push_back(std::to_string(device));
  std::vector<std::string> argv = {self_exe.empty() ? std::string("/proc/self/exe") : self_exe,
                                   "doctor",
                                   "--check-child",
                                   "--devices",
                                   devices.empty() ? std::string("none") : join(devices, ","),
                                   "--sizes",
                                   std::to_string(request.sweep.min_bytes) + ":" +
                                       std::to_string(request.sweep.max_bytes) + ":" +
                                       std::to_string(request.sweep.factor),
                                   "--warmup",
                                   std::to_string(request.sweep.warmup),
                                   "--iters",
                                   std::to_string(request.sweep.iters),
                                   "--timeout",
                                   std::to_string(request.sweep.timeout_s),
                                   "--driver-cuda",
                                   std::to_string(request.driver_cuda_major)};
  if (!request.nccl) argv.push_back("--no-nccl");
  if (request.memcpy) argv.push_back("--memcpy");
  if (request.part.nranks > 0) {
    for (std::string arg :
         {std::string("--nccl-ranks"), std::to_string(request.part.nranks), std::string("--nccl-first-rank"),
          std::to_string(request.part.first_rank), std::string("--nccl-id"), request.part.nccl_id})
      argv.push_back(std::move(arg));
  }
  return argv;
}

}  // namespace doctor_detail

namespace {

constexpr int kSilenceGraceS = 30;  // beyond the child's own limit, before flowrun kills it

GpuCheckRequest request_for(const Inventory& inventory, const std::vector<int>& gpus,
                            const DoctorOptions& options) {
  GpuCheckRequest request;
  request.devices = gpus;
  request.sweep = options.sweep;
  request.nccl = options.nccl;
  request.memcpy = gpus.size() == 1 && options.part.nranks == 0;
  request.part = options.part;
  int major = 0;
  const std::string& version = inventory.cuda_driver_version;
  std::from_chars(version.data(), version.data() + version.size(), major);
  request.driver_cuda_major = major;
  return request;
}

void run_checks(DoctorFacts& facts, const std::vector<int>& gpus, const DoctorOptions& options) {
  if (facts.inventory.source == "fake") {
    facts.runtime_skipped = "simulated GPUs (--fake-gpus or FLOWRUN_FAKE_GPUS)";
    return;
  }
  if (!facts.gpu_support) {
    facts.runtime_skipped = "this flowrun was built without GPU support (no CUDA headers at build time)";
    return;
  }
  const GpuCheckRequest request = request_for(facts.inventory, gpus, options);
  GpuCheckOutcome outcome = doctor_detail::run_check_process(
      doctor_detail::check_child_argv(options.self_exe, request), request.sweep.timeout_s + kSilenceGraceS,
      options.on_line, options.cancel);
  facts.cuda = std::move(outcome.cuda);
  facts.nccl = std::move(outcome.nccl);
  facts.allreduce = std::move(outcome.allreduce);
  facts.memcpy = outcome.memcpy;
  facts.allreduce.gpus = static_cast<int>(gpus.size());
  facts.allreduce.warmup = request.sweep.warmup;
  facts.allreduce.iters = request.sweep.iters;
  facts.allreduce.timeout_s = request.sweep.timeout_s;
}

}  // namespace

DoctorFacts collect_doctor_facts(const DoctorOptions& options, const EnvMap& env,
                                 const std::string& hostname) {
  DoctorFacts facts;
  facts.hostname = hostname;
  facts.gpu_support = doctor_has_gpu_support();
  facts.inventory = select_gpus(make_probe(env, options.fake_gpus, /*topology=*/true)->probe(), env);
  std::vector<int> gpus;
  for (const Gpu& gpu : facts.inventory.gpus) gpus.push_back(gpu.index);
  run_checks(facts, gpus, options);
  return facts;
}

AllReduceSweep preflight_sweep() {
  AllReduceSweep quick;
  quick.min_bytes = 1ull << 20;
  quick.max_bytes = kLargeMessageBytes;
  quick.factor = 4;
  quick.warmup = 2;
  quick.iters = 5;
  return quick;
}

PreflightResult run_preflight(const Inventory& inventory, const std::vector<int>& gpus,
                              const DoctorOptions& options, const std::string& hostname) {
  PreflightResult result;
  DoctorFacts& facts = result.facts;
  facts.hostname = hostname;
  facts.gpu_support = doctor_has_gpu_support();
  // The step's GPUs only, renumbered as the check child sees them.
  facts.inventory = inventory;
  facts.inventory.gpus.clear();
  facts.inventory.links.clear();
  for (int index : gpus) {
    if (index < 0 || static_cast<std::size_t>(index) >= inventory.gpus.size())
      throw Error("preflight: GPU " + std::to_string(index) + " is not one of this host's " +
                  std::to_string(inventory.gpus.size()) + " GPUs");
    facts.inventory.gpus.push_back(inventory.gpus[static_cast<std::size_t>(index)]);
  }
  if (inventory.links.size() == inventory.gpus.size()) {
    for (int i : gpus) {
      std::vector<GpuLink> row;
      for (int j : gpus)
        row.push_back(inventory.links[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)]);
      facts.inventory.links.push_back(std::move(row));
    }
  }
  run_checks(facts, gpus, options);
  // The child counts every GPU this process may use; the step uses `gpus` of them.
  if (facts.cuda.device_count >= static_cast<int>(gpus.size()))
    facts.cuda.device_count = static_cast<int>(gpus.size());
  const DoctorReport report = evaluate_doctor(facts);
  result.ok = report.exit_code == 0;
  result.report = format_doctor_text(facts, report);
  return result;
}

}  // namespace flowrun
