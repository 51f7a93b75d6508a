// flowrun doctor: whether this host's GPUs, driver, CUDA runtime and NCCL
// work together, and as fast as their links allow, before a job spends GPU
// time on them.
//
// Two halves, like the GPU inventory. collect_doctor_facts() asks the system:
// NVML for the inventory and how every pair of GPUs is linked, then a child
// process (this binary again, `flowrun doctor --check-child`) that loads the
// CUDA runtime and NCCL with dlopen, counts devices, and times an NCCL
// all-reduce across the selected GPUs the way nccl-tests' all_reduce_perf
// does. Everything learnt is a DoctorFacts value, which is written as JSON
// (`--json`) and read back (`--facts FILE`). evaluate_doctor() and the
// formatters are pure functions of those facts, so every verdict and every
// report format is unit-tested from recorded fixtures on hosts without GPUs.
//
// The child keeps the launcher free of CUDA state and bounds every hang: it
// aborts NCCL (ncclCommAbort) when a collective passes its time limit, a
// watchdog thread ends it when a blocking call does, and the parent kills it
// when it falls silent. docs/gpu.md describes the checks and the report.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flowrun/gpu.h"
#include "flowrun/util.h"

namespace flowrun {

// A shared library looked for with dlopen.
struct LibraryFacts {
  bool found = false;
  std::string path;                // the file loaded
  std::string error;               // when not found: the first candidate's dlopen error
  std::vector<std::string> tried;  // the candidates, in the order tried
};

struct CudaFacts {
  LibraryFacts library;     // libcudart
  int runtime_version = 0;  // cudaRuntimeGetVersion: 12080 is 12.8
  int driver_version = 0;   // cudaDriverGetVersion: 0 without a driver
  int device_count = -1;    // cudaGetDeviceCount; -1 when it failed or did not run
  std::string error;        // "cudaErrorInsufficientDriver: CUDA driver version is ..." when it failed
};

struct NcclFacts {
  LibraryFacts library;  // libnccl.so.2
  int version = 0;       // ncclGetVersion: 22809 is 2.28.9
};

// One message size of the all-reduce sweep.
struct AllReduceRow {
  std::uint64_t bytes = 0;   // per GPU, floats
  std::int64_t time_ns = 0;  // one all-reduce, the mean over the timed iterations
  std::string algorithm;     // NCCL's choice ("RING", "NVLS", ...); "" when unknown
  std::string protocol;      // "LL", "LL128", "SIMPLE"; "" when unknown
  std::uint64_t wrong = 0;   // result elements checked and found wrong
};

struct AllReduceFacts {
  // "ok", "failed" (an error: `reason`), "hung" (past its time limit:
  // `reason` says where), "skipped" (--no-nccl, one of the checks before it
  // failed, ...: `reason`), "not_run".
  std::string status = "not_run";
  std::string reason;
  int gpus = 0;
  int warmup = 0;
  int iters = 0;
  int timeout_s = 0;
  std::vector<AllReduceRow> rows;
  std::vector<std::string> notes;     // e.g. sizes left out and why
  std::vector<std::string> warnings;  // NCCL's own WARN lines
  // The sweep stopped before its largest sizes because at the speed measured
  // they would have outlasted the time limit: itself a sign of a broken link.
  bool stopped_slow = false;
  // Across nodes: NCCL's network between them ("IB", "Socket", ...: its
  // "Using network" line); "" when unknown or within one node.
  std::string network;
};

// cudaMemcpy device to device on one GPU (the single-GPU check).
struct MemcpyFacts {
  std::uint64_t bytes = 0;   // copied per iteration; 0 = not measured
  std::int64_t time_ns = 0;  // one copy, the mean
};

struct DoctorFacts {
  std::string hostname;
  bool gpu_support = true;  // this flowrun was built with the CUDA and NCCL headers
  Inventory inventory;      // with links (the topology probe)
  // Why the CUDA, NCCL and all-reduce checks did not run at all ("simulated
  // GPUs", "built without GPU support"); empty when they ran.
  std::string runtime_skipped;
  CudaFacts cuda;
  NcclFacts nccl;
  AllReduceFacts allreduce;
  MemcpyFacts memcpy;
};

enum class CheckStatus { ok, warn, fail, skip };

// One line of the verdict: what was checked, what was found, what to do.
struct DoctorCheck {
  std::string name;  // "driver", "gpus", "links", "cuda", "nccl", "all-reduce", "bandwidth", "memory"
  CheckStatus status = CheckStatus::ok;
  std::string message;
  std::string advice;  // for warn and fail: what to do
};

// A row of the ceilings table (docs/gpu.md): the large-message all-reduce bus
// bandwidth a healthy node of that kind reaches.
struct LinkCeiling {
  std::string id;      // "nvlink4-nvls"
  std::string link;    // in words: "NVLink 4 through NVSwitch, 8 GPUs, NVLS"
  double busbw_gbps;   // GB/s, 10^9 bytes a second
  std::string source;  // where the figure comes from
};

struct DoctorReport {
  std::vector<DoctorCheck> checks;
  std::optional<LinkCeiling> ceiling;  // what the bandwidth was judged against
  double large_busbw_gbps = 0;         // the figure judged (0 = none)
  int exit_code = 0;                   // 0 healthy, 1 a check failed
};

// The bandwidth verdict's threshold: below this share of the ceiling is a problem.
inline constexpr double kCeilingShare = 0.85;
// Bus bandwidth is judged on sizes from this up (smaller ones are latency bound).
inline constexpr std::uint64_t kLargeMessageBytes = 256ull << 20;

// Every row of the ceilings table.
const std::vector<LinkCeiling>& link_ceilings();

// nccl-tests' all_reduce arithmetic: algbw = bytes / time (GB/s) and busbw =
// algbw * 2 (n-1) / n.
double algbw_gbps(std::uint64_t bytes, std::int64_t time_ns);
double busbw_gbps(std::uint64_t bytes, std::int64_t time_ns, int gpus);

// The checks and their verdict. Pure.
DoctorReport evaluate_doctor(const DoctorFacts& facts);

// The report for people, and for machines: {"format": "flowrun.doctor/1",
// "facts": ..., "checks": ..., "verdict": ...}; `--facts` reads the latter
// back, with or without "format" (reports of older flowruns have none).
std::string format_doctor_text(const DoctorFacts& facts, const DoctorReport& report);
std::string format_doctor_json(const DoctorFacts& facts, const DoctorReport& report);

// Facts from JSON: a `flowrun doctor --json` report or its "facts" object.
// Throws flowrun::Error naming `file` and the key at fault.
DoctorFacts parse_doctor_facts(std::string_view json, const std::string& file);

// The check across the nodes of a multi-node step (its preflight): every
// node's check child joined one NCCL communicator, made from the id node 0's
// child made and the head handed to the others.
struct NodeDoctorFacts {
  int node_rank = 0;
  int first_rank = 0;       // the communicator's rank of the node's first GPU
  std::string not_checked;  // why its facts never came (lost, never started); "" when they did
  DoctorFacts facts;        // its GPUs, driver, CUDA, NCCL and its side of the all-reduce
};

struct ClusterDoctorFacts {
  std::vector<NodeDoctorFacts> nodes;  // by node rank
  int ranks = 0;                       // GPUs in the communicator, every node's
};

// Each node's own checks (driver, GPUs, links, CUDA, NCCL), then one
// all-reduce verdict for the communicator: the first node whose side failed
// or hung is named, and each size's time is the slowest node's. Bandwidth is
// shown but not judged (no ceiling is known for the network between nodes).
// Pure, like evaluate_doctor.
DoctorReport evaluate_cluster_doctor(const ClusterDoctorFacts& facts);
std::string format_cluster_doctor_text(const ClusterDoctorFacts& facts, const DoctorReport& report);

// The sweep of every node combined: its sizes, each with the slowest node's
// time and every node's wrong elements; empty when the nodes' sizes differ.
AllReduceFacts combine_node_allreduce(const ClusterDoctorFacts& facts);

// The all-reduce sweep: its sizes and pace. `flowrun doctor`'s flags set it,
// a multi-node step's preflight runs a quicker one (preflight_sweep), and a
// check child is asked to run it.
struct AllReduceSweep {
  std::uint64_t min_bytes = 8;
  std::uint64_t max_bytes = 1ull << 30;
  int factor = 2;  // sizes grow by this factor, as nccl-tests' -f
  int warmup = 5;
  int iters = 20;
  int timeout_s = 60;  // one phase (communicator set-up, one size) may take this long
  friend bool operator==(const AllReduceSweep&, const AllReduceSweep&) = default;
};

// Across nodes (a multi-node step's preflight): a check child's devices are
// ranks first_rank, first_rank + 1, ... of one communicator of `nranks` that
// every node's check child joins with ncclCommInitRank. nranks 0: one host
// alone, with ncclCommInitAll.
struct NcclPart {
  int nranks = 0;
  int first_rank = 0;
  // The communicator's ncclUniqueId as hex (kNcclIdHexChars), or "make":
  // ncclGetUniqueId here (node 0) and report it (an "nccl_id" line) for the
  // head to hand to the other nodes.
  std::string nccl_id;
  friend bool operator==(const NcclPart&, const NcclPart&) = default;
};

struct DoctorOptions {
  int fake_gpus = -1;  // --fake-gpus: simulate the inventory; CUDA and NCCL are not checked
  AllReduceSweep sweep;
  bool nccl = true;  // --no-nccl: CUDA and the libraries only, no all-reduce
  // The binary that runs `doctor --check-child`; empty: /proc/self/exe.
  std::string self_exe;
  NcclPart part;
  // Sees the check child's lines as they come (node 0 forwards its "nccl_id").
  std::function<void(std::string_view line)> on_line;
  // Set by another thread: kill the check child and report it stopped.
  const std::atomic<bool>* cancel = nullptr;
};

// What a check child is asked to do (`flowrun doctor --check-child`).
struct GpuCheckRequest {
  std::vector<int> devices;  // CUDA ordinals as this process sees them
  AllReduceSweep sweep;
  bool nccl = true;
  bool memcpy = false;        // also time cudaMemcpy device to device on devices[0]
  int driver_cuda_major = 0;  // the driver's CUDA major version from NVML (0 unknown)
  NcclPart part;
};

// The reason of a check child stopped by run_check_process's `cancel`.
inline constexpr std::string_view kCheckStoppedReason = "stopped before it finished";

// An ncclUniqueId (128 bytes) as lowercase hex.
inline constexpr std::size_t kNcclIdHexChars = 256;

// What a check child found.
struct GpuCheckOutcome {
  std::string nccl_id;  // made by this child (request.nccl_id "make")
  CudaFacts cuda;
  NcclFacts nccl;
  AllReduceFacts allreduce;
  MemcpyFacts memcpy;
};

// Everything `flowrun doctor` reports: the inventory with topology, then
// (unless simulated) the CUDA, NCCL and all-reduce checks in a child process.
DoctorFacts collect_doctor_facts(const DoctorOptions& options, const EnvMap& env,
                                 const std::string& hostname);

// The preflight of a parallel step with `preflight: true`: the NCCL check on
// `gpus` (indices into inventory.gpus, i.e. CUDA ordinals as flowrun sees
// them) before any worker starts. `ok` false means refuse the step and show
// `report` (the doctor's text report). A simulated inventory passes without
// running anything.
struct PreflightResult {
  bool ok = true;
  std::string report;
  DoctorFacts facts;
};
// A passing preflight in a few words: "passed: " and the all-reduce check's
// message, and the bandwidth's when there is one; for a check that did not
// run (simulated GPUs) the all-reduce's "not run: why".
std::string preflight_summary(const DoctorReport& report);

// The preflight's sweep: 1 MiB to 256 MiB (the smallest size the bandwidth
// verdict judges), fewer iterations than flowrun doctor's.
AllReduceSweep preflight_sweep();

PreflightResult run_preflight(const Inventory& inventory, const std::vector<int>& gpus,
                              const DoctorOptions& options = {}, const std::string& hostname = {});

// The child's side: runs the request and writes its findings to `out_fd`,
// one line each (the protocol below). Returns the child's exit status.
// Without the CUDA headers at build time it reports that and does nothing.
int run_gpu_check_child(const GpuCheckRequest& request, int out_fd);

// Whether this build has the CUDA and NCCL checks (FLOWRUN_HAVE_CUDA_HEADERS).
bool doctor_has_gpu_support();

// The parts of the check that need no GPU, exposed for unit tests.
namespace doctor_detail {

// Message sizes min, min*factor, ... up to max, each a multiple of 4 (floats).
std::vector<std::uint64_t> sweep_sizes(std::uint64_t min_bytes, std::uint64_t max_bytes, int factor);

// "8", "64K", "1M", "1G" (binary units, as nccl-tests reads them) to bytes;
// 0 when malformed.
std::uint64_t parse_size(std::string_view text);

// "8 B", "256 KiB", "1 GiB"; sizes that are not a whole unit in bytes.
std::string format_size(std::uint64_t bytes);

// Where to look for the CUDA runtime and NCCL, in order. An explicit path in
// FLOWRUN_CUDART_LIBRARY / FLOWRUN_NCCL_LIBRARY is the only candidate;
// otherwise the loader's own search (plain sonames), then CUDA_HOME,
// /usr/local/cuda, NCCL_HOME, and the lib directories of NVIDIA's Python
// packages (nvidia-nccl-cu12/13, nvidia-cuda-runtime) under VIRTUAL_ENV,
// CONDA_PREFIX, ~/.local, /usr/local and /usr. With the driver's CUDA major
// version known, runtimes newer than the driver come last.
std::vector<std::string> cudart_candidates(const EnvMap& env, int driver_cuda_major);
std::vector<std::string> nccl_candidates(const EnvMap& env);

// One NCCL_DEBUG_SUBSYS=TUNING line: "AllReduce: 1048576 Bytes -> Algo RING
// proto SIMPLE channel{Lo..Hi}={0..31}" (NCCL 2.24+) or "1048576 Bytes ->
// Algo 1 proto 2 time 12.5" (2.21-2.23). False for other lines.
struct TuningChoice {
  std::uint64_t bytes = 0;
  std::string algorithm, protocol;
};
bool parse_tuning_line(std::string_view line, TuningChoice& choice);

// The child-to-parent protocol: one finding a line, tab-separated fields.
// apply_check_line() folds a line into `outcome`; unknown lines are ignored.
// The last "phase" line says what the child was doing.
void apply_check_line(std::string_view line, GpuCheckOutcome& outcome, std::string& phase);

// Runs `argv` as the check child and folds its lines into an outcome. A child
// silent for longer than `silence_limit_s` is killed and reported as hung in
// its last phase; one that dies is reported with its signal or exit status.
// `on_line`, when set, sees every line as it arrives (on the caller's thread):
// the agent forwards node 0's "nccl_id" while the check goes on.
// `cancel`, when set by another thread, kills the child; the outcome is then
// "skipped", its reason starting with kCheckStoppedReason.
GpuCheckOutcome run_check_process(const std::vector<std::string>& argv, int silence_limit_s,
                                  const std::function<void(std::string_view line)>& on_line = {},
                                  const std::atomic<bool>* cancel = nullptr);

// The argv that runs `request` in `self_exe doctor --check-child`, and back.
std::vector<std::string> check_child_argv(const std::string& self_exe, const GpuCheckRequest& request);

}  // namespace doctor_detail

}  // namespace flowrun
