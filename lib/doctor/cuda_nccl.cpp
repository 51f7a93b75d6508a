// The check child (`flowrun doctor --check-child`): the CUDA runtime and NCCL
// through dlopen, then an all-reduce sweep as nccl-tests' all_reduce_perf
// runs one (one process driving every GPU, ncclCommInitAll, float sum, out
// of place, warmup then timed iterations, host timing after the streams
// finish), every call's result checked.
//
// The headers give the exact types and signatures (decltype of each
// function, in cuda_nccl_libs.h); the libraries are found at run time
// (cuda_nccl_libs.cpp), so one flowrun binary runs on hosts with and without
// them. Without the headers at build time this file only says so.
//
// Hangs are bounded twice in here: waits poll the streams and NCCL's
// asynchronous error with a deadline and abort the communicators when it
// passes (as nccl-tests does), and a watchdog thread ends the process when a
// blocking call (communicator set-up, an abort) outlives its phase. The
// parent kills the child if it falls silent all the same.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "flowrun/doctor.h"
#include "flowrun/text.h"

#include "cuda_nccl_libs.h"

namespace flowrun {

namespace {

using doctor_detail::Out;

}  // namespace

#ifndef FLOWRUN_HAVE_CUDA_HEADERS

bool doctor_has_gpu_support() { return false; }

int run_gpu_check_child(const GpuCheckRequest&, int out_fd) {
  Out out(out_fd);
  out.line(
      {"allreduce", "skipped", "this flowrun was built without GPU support (no CUDA headers at build time)"});
  out.line({"done"});
  return 0;
}

#else

bool doctor_has_gpu_support() { return true; }

namespace {

using doctor_detail::Cudart;
using doctor_detail::id_from_hex;
using doctor_detail::id_to_hex;
using doctor_detail::load_first;
using doctor_detail::Nccl;

using Clock = std::chrono::steady_clock;

constexpr int kWatchdogGraceS =
    15;  // beyond a phase's limit (at most the limit again) before the watchdog acts
constexpr std::size_t kChunkFloats = 1 << 20;  // the fill pattern repeats every 4 MiB
constexpr std::size_t kCheckFloats = 1 << 16;  // elements checked at each end of a result
constexpr std::uint64_t kMemcpyMaxBytes = 512ull << 20;
constexpr std::uint64_t kHeadroomBytes = 1ull << 30;  // left free for NCCL's own buffers

// Ends the child when a phase outlives its limit inside a call that blocks
// (the polling waits below catch the ordinary hang first).
class Watchdog {
 public:
  explicit Watchdog(Out& out) : out_(out), thread_([this] { run(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void arm(const std::string& phase, int limit_s) {
    out_.line({"phase", phase});
    std::lock_guard<std::mutex> lock(mutex_);
    phase_ = phase;
    limit_s_ = limit_s + std::min(kWatchdogGraceS, limit_s);
    deadline_ = Clock::now() + std::chrono::seconds(limit_s_);
    armed_ = true;
    wake_.notify_all();
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = false;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      if (!armed_) {
        wake_.wait(lock);
        continue;
      }
      const auto deadline = deadline_;
      wake_.wait_until(lock, deadline);
      if (!stop_ && armed_ && deadline_ == deadline && Clock::now() >= deadline) {
        out_.line({"allreduce", "hung",
                   "no progress for " + std::to_string(limit_s_) + " s while " + phase_ +
                       ", inside a call that does not return; the check ended itself"});
        _exit(3);  // the driver releases the GPUs with the process
      }
    }
  }

  Out& out_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false, armed_ = false;
  std::string phase_;
  int limit_s_ = 0;
  Clock::time_point deadline_;
  std::thread thread_;
};

// Sends NCCL's tuning choices and warnings to a file the child reads at the
// end, unless the user asked for NCCL's debug output themselves. The file is
// a memfd that NCCL opens as /proc/self/fd/N: nothing is made under TMPDIR,
// and nothing is left behind however the check child ends (flowrun kills it
// when it hangs).
class NcclDebugFile {
 public:
  NcclDebugFile() {
    if (std::getenv("NCCL_DEBUG") != nullptr || std::getenv("NCCL_DEBUG_FILE") != nullptr) return;
    fd_ = memfd_create("flowrun-nccl-debug", MFD_CLOEXEC);
    if (fd_ < 0) return;
    path_ = "/proc/self/fd/" + std::to_string(fd_);
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_SUBSYS", "INIT,NET,TUNING", 1);
    setenv("NCCL_DEBUG_FILE", path_.c_str(), 1);
  }
  ~NcclDebugFile() {
    if (fd_ >= 0) close(fd_);
  }
  NcclDebugFile(const NcclDebugFile&) = delete;
  NcclDebugFile& operator=(const NcclDebugFile&) = delete;

  // Algorithm and protocol of each size (rank 0's last word), the network
  // between nodes, and NCCL's warnings.
  void report(Out& out) const {
    if (path_.empty()) return;
    std::ifstream in(path_);
    std::map<std::uint64_t, doctor_detail::TuningChoice> choices;
    std::string line;
    int warnings = 0;
    while (std::getline(in, line)) {
      doctor_detail::TuningChoice choice;
      if (doctor_detail::parse_tuning_line(line, choice)) {
        choices[choice.bytes] = choice;
      } else if (const std::size_t net = line.find("NCCL INFO Using network "); net != std::string::npos) {
        out.line({"network", line.substr(net + 24)});
      } else if (const std::size_t at = line.find("NCCL WARN "); at != std::string::npos && warnings < 20) {
        out.line({"warn", line.substr(at + 10)});
        ++warnings;
      }
    }
    for (const auto& [bytes, choice] : choices)
      out.line({"algo", std::to_string(bytes), choice.algorithm, choice.protocol});
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// Everything allocated on the GPUs, freed on every way out.
struct GpuState {
  const Cudart& cu;
  std::vector<int> devices;
  std::vector<cudaStream_t> streams;
  std::vector<float*> send, recv;
  std::vector<std::uint64_t*> vote;  // across nodes: two elements each, what a GPU votes and the result
  std::vector<ncclComm_t> comms;
  bool aborted = false;

  ~GpuState() {
    if (aborted) return;  // after an abort, exiting frees what is left; touching it could block
    for (std::size_t i = 0; i < devices.size(); ++i) {
      cu.set_device(devices[i]);
      if (i < send.size() && send[i] != nullptr) cu.free(send[i]);
      if (i < recv.size() && recv[i] != nullptr) cu.free(recv[i]);
      if (i < vote.size() && vote[i] != nullptr) cu.free(vote[i]);
      if (i < streams.size() && streams[i] != nullptr) cu.stream_destroy(streams[i]);
    }
  }
};

class Check {
 public:
  Check(const Cudart& cu, const Nccl* nccl, const GpuCheckRequest& request, Out& out, Watchdog& dog)
      : cu_(cu), nccl_(nccl), rq_(request), out_(out), dog_(dog), gpu_{cu, request.devices,
                                                                       {}, {},
                                                                       {}, {},
                                                                       {}, false} {}

  // Buffers and streams on every GPU; false (after reporting) when that fails.
  bool prepare() {
    dog_.arm("allocating GPU memory", rq_.sweep.timeout_s);
    const std::size_t n = rq_.devices.size();
    max_bytes_ = rq_.sweep.max_bytes / 4 * 4;
    for (std::size_t i = 0; i < n; ++i) {
      if (!cuda_ok(cu_.set_device(rq_.devices[i]), "cudaSetDevice")) return false;
      std::size_t free_bytes = 0, total = 0;
      if (!cuda_ok(cu_.mem_get_info(&free_bytes, &total), "cudaMemGetInfo")) return false;
      std::uint64_t fits = max_bytes_;
      while (fits > 4 && 2 * fits + kHeadroomBytes > free_bytes) fits /= 2;
      if (fits < max_bytes_) {
        out_.line({"note", "sizes above " + doctor_detail::format_size(fits) + " left out: GPU " +
                               std::to_string(rq_.devices[i]) + " has " +
                               doctor_detail::format_size(free_bytes / (1 << 20) << 20) + " free"});
        max_bytes_ = fits / 4 * 4;
      }
    }
    gpu_.streams.assign(n, nullptr);
    gpu_.send.assign(n, nullptr);
    gpu_.recv.assign(n, nullptr);
    if (across_nodes()) gpu_.vote.assign(n, nullptr);
    std::vector<float> pattern(kChunkFloats);
    for (std::size_t i = 0; i < n; ++i) {
      if (!cuda_ok(cu_.set_device(rq_.devices[i]), "cudaSetDevice") ||
          !cuda_ok(cu_.stream_create(&gpu_.streams[i], cudaStreamNonBlocking), "cudaStreamCreateWithFlags") ||
          !cuda_ok(cu_.malloc(reinterpret_cast<void**>(&gpu_.send[i]), max_bytes_), "cudaMalloc") ||
          !cuda_ok(cu_.malloc(reinterpret_cast<void**>(&gpu_.recv[i]), max_bytes_), "cudaMalloc") ||
          !cuda_ok(cu_.memset(gpu_.recv[i], 0, max_bytes_), "cudaMemset") ||
          (across_nodes() &&
           !cuda_ok(cu_.malloc(reinterpret_cast<void**>(&gpu_.vote[i]), 2 * sizeof(std::uint64_t)),
                    "cudaMalloc")))
        return false;
      // Rank r sends (j mod 251) + r at position j of every 4 MiB chunk: small
      // whole numbers, so every sum is exact whatever order NCCL adds in.
      for (std::size_t j = 0; j < kChunkFloats; ++j) pattern[j] = static_cast<float>(j % 251 + rank_of(i));
      const std::uint64_t chunk = kChunkFloats * sizeof(float);
      for (std::uint64_t offset = 0; offset < max_bytes_; offset += chunk) {
        const std::uint64_t bytes = std::min(chunk, max_bytes_ - offset);
        if (!cuda_ok(cu_.memcpy(reinterpret_cast<char*>(gpu_.send[i]) + offset, pattern.data(), bytes,
                                cudaMemcpyHostToDevice),
                     "cudaMemcpy"))
          return false;
      }
    }
    dog_.disarm();
    return true;
  }

  // cudaMemcpy device to device on the first GPU, as CUDA's bandwidthTest times it.
  bool memcpy_bandwidth() {
    const std::uint64_t bytes = std::min(max_bytes_, kMemcpyMaxBytes);
    if (bytes == 0) return true;
    dog_.arm("timing cudaMemcpy on GPU " + std::to_string(rq_.devices[0]), rq_.sweep.timeout_s);
    if (!cuda_ok(cu_.set_device(rq_.devices[0]), "cudaSetDevice")) return false;
    auto copy = [&] {
      return cuda_ok(
          cu_.memcpy_async(gpu_.recv[0], gpu_.send[0], bytes, cudaMemcpyDeviceToDevice, gpu_.streams[0]),
          "cudaMemcpyAsync");
    };
    const auto deadline = Clock::now() + std::chrono::seconds(rq_.sweep.timeout_s);
    for (int i = 0; i < 2; ++i) {
      if (!copy()) return false;
    }
    if (!wait_streams(deadline, "cudaMemcpy")) return false;
    const auto start = Clock::now();
    for (int i = 0; i < rq_.sweep.iters; ++i) {
      if (!copy()) return false;
    }
    if (!wait_streams(deadline, "cudaMemcpy")) return false;
    const auto elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
    out_.line({"memcpy", std::to_string(bytes), std::to_string(elapsed / std::max(1, rq_.sweep.iters))});
    dog_.disarm();
    return true;
  }

  // The sweep; reports ok, failed or hung.
  void allreduce() {
    const Nccl& nc = *nccl_;
    if (!init_comms()) return;
    if (across_nodes()) {
      // Every node must run the same sizes: the largest that fits every GPU.
      std::uint64_t agreed = 0;
      if (!vote(max_bytes_, ncclMin, "agreeing on the sizes", agreed)) return;
      if (agreed < max_bytes_) {
        out_.line({"note", "sizes above " + doctor_detail::format_size(agreed) +
                               " left out: another node's GPUs have less free memory"});
        max_bytes_ = agreed;
      }
    }
    const std::vector<std::uint64_t> sizes =
        doctor_detail::sweep_sizes(rq_.sweep.min_bytes, max_bytes_, rq_.sweep.factor);
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      const std::uint64_t bytes = sizes[s];
      const std::string what = "the all-reduce of " + doctor_detail::format_size(bytes);
      dog_.arm(what, rq_.sweep.timeout_s);
      const auto deadline = Clock::now() + std::chrono::seconds(rq_.sweep.timeout_s);
      for (int i = 0; i < rq_.sweep.warmup; ++i) {
        if (!launch(bytes / 4)) return;
      }
      if (!wait_streams(deadline, what)) return;
      const auto start = Clock::now();
      for (int i = 0; i < rq_.sweep.iters; ++i) {
        if (!launch(bytes / 4)) return;
      }
      if (!wait_streams(deadline, what)) return;
      const std::int64_t per_iteration =
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count() /
          std::max(1, rq_.sweep.iters);
      std::uint64_t wrong = 0;
      if (!verify(bytes / 4, wrong)) return;
      out_.line({"row", std::to_string(bytes), std::to_string(per_iteration), std::to_string(wrong)});
      // Stop before a size that would outlast the time limit (a slow link
      // is reported, not called a hang); across nodes, every node stops if one would.
      const double next_s =
          static_cast<double>(per_iteration) * rq_.sweep.factor * (rq_.sweep.warmup + rq_.sweep.iters) / 1e9;
      std::uint64_t stop = s + 1 < sizes.size() && next_s > rq_.sweep.timeout_s * 0.5 ? 1 : 0;
      if (s + 1 < sizes.size() && across_nodes() && !vote(stop, ncclMax, "agreeing on the next size", stop))
        return;
      if (stop != 0) {
        out_.line({"slow"});
        out_.line({"note", "sizes above " + doctor_detail::format_size(bytes) +
                               " left out: at this speed they would take over " +
                               std::to_string(rq_.sweep.timeout_s / 2) + " s each"});
        break;
      }
    }
    dog_.arm("destroying NCCL communicators", rq_.sweep.timeout_s);
    for (ncclComm_t comm : gpu_.comms) {
      if (const ncclResult_t result = nc.destroy(comm); result != ncclSuccess) {
        gpu_.comms.clear();
        fail("ncclCommDestroy: " + nc.describe(result));
        return;
      }
    }
    gpu_.comms.clear();
    dog_.disarm();
    out_.line({"allreduce", "ok", ""});
  }

 private:
  bool across_nodes() const { return rq_.part.nranks > 0; }
  // The communicator's rank of the i-th local GPU, and how many ranks it has.
  int rank_of(std::size_t i) const {
    return (across_nodes() ? rq_.part.first_rank : 0) + static_cast<int>(i);
  }
  std::size_t total_ranks() const {
    return across_nodes() ? static_cast<std::size_t>(rq_.part.nranks) : rq_.devices.size();
  }

  // One communicator per local GPU: ncclCommInitAll in one process, or this
  // node's ranks of the communicator every node joins with the head's id.
  bool init_comms() {
    const Nccl& nc = *nccl_;
    gpu_.comms.assign(rq_.devices.size(), nullptr);
    if (!across_nodes()) {
      dog_.arm("setting up NCCL communicators (ncclCommInitAll)", rq_.sweep.timeout_s);
      const ncclResult_t result =
          nc.init_all(gpu_.comms.data(), static_cast<int>(rq_.devices.size()), rq_.devices.data());
      if (result != ncclSuccess) {
        gpu_.comms.clear();
        fail("ncclCommInitAll: " + nc.describe(result));
        return false;
      }
      return true;
    }
    dog_.arm(fmt_ranks("setting up the NCCL communicator across nodes (ncclCommInitRank"),
             rq_.sweep.timeout_s);
    ncclUniqueId id{};
    if (!id_from_hex(rq_.part.nccl_id, id)) {
      gpu_.comms.clear();
      fail("the NCCL unique id from the head is malformed");
      return false;
    }
    ncclResult_t result = nc.group_start();
    for (std::size_t i = 0; i < rq_.devices.size() && result == ncclSuccess; ++i) {
      if (!cuda_ok(cu_.set_device(rq_.devices[i]), "cudaSetDevice")) {
        nc.group_end();
        gpu_.comms.clear();
        return false;
      }
      result = nc.init_rank(&gpu_.comms[i], rq_.part.nranks, id, rank_of(i));
    }
    const ncclResult_t ended = nc.group_end();
    if (result == ncclSuccess) result = ended;
    if (result != ncclSuccess) {
      gpu_.comms.clear();
      fail("ncclCommInitRank: " + nc.describe(result));
      return false;
    }
    return true;
  }

  // "... (ncclCommInitRank, ranks 2-3 of 4)"
  std::string fmt_ranks(const std::string& what) const {
    const int last = rank_of(rq_.devices.size()) - 1;
    return what + ", rank" + (last > rq_.part.first_rank ? "s " : " ") + std::to_string(rq_.part.first_rank) +
           (last > rq_.part.first_rank ? "-" + std::to_string(last) : "") + " of " +
           std::to_string(rq_.part.nranks) + ")";
  }

  // Every rank's `mine` reduced with `op` across all nodes, in `agreed`.
  bool vote(std::uint64_t mine, ncclRedOp_t op, const std::string& what, std::uint64_t& agreed) {
    const Nccl& nc = *nccl_;
    dog_.arm(what, rq_.sweep.timeout_s);
    const auto deadline = Clock::now() + std::chrono::seconds(rq_.sweep.timeout_s);
    for (std::size_t i = 0; i < gpu_.vote.size(); ++i) {
      if (!cuda_ok(cu_.set_device(rq_.devices[i]), "cudaSetDevice") ||
          !cuda_ok(cu_.memcpy(gpu_.vote[i], &mine, sizeof mine, cudaMemcpyHostToDevice), "cudaMemcpy"))
        return false;
    }
    ncclResult_t result = nc.group_start();
    for (std::size_t i = 0; i < gpu_.comms.size() && result == ncclSuccess; ++i)
      result =
          nc.all_reduce(gpu_.vote[i], gpu_.vote[i] + 1, 1, ncclUint64, op, gpu_.comms[i], gpu_.streams[i]);
    const ncclResult_t ended = nc.group_end();
    if (result == ncclSuccess) result = ended;
    if (result != ncclSuccess) {
      fail("ncclAllReduce while " + what + ": " + nc.describe(result));
      return false;
    }
    if (!wait_streams(deadline, what)) return false;
    if (!cuda_ok(cu_.set_device(rq_.devices[0]), "cudaSetDevice") ||
        !cuda_ok(cu_.memcpy(&agreed, gpu_.vote[0] + 1, sizeof agreed, cudaMemcpyDeviceToHost), "cudaMemcpy"))
      return false;
    dog_.disarm();
    return true;
  }

  bool cuda_ok(cudaError_t error, const char* call) {
    if (error == cudaSuccess) return true;
    fail(std::string(call) + " failed: " + cu_.describe(error));
    return false;
  }

  void fail(const std::string& why) {
    out_.line({"allreduce", "failed", why});
    abort_comms();
  }

  void abort_comms() {
    if (gpu_.comms.empty() || nccl_ == nullptr) return;
    dog_.arm("aborting NCCL", rq_.sweep.timeout_s);
    for (ncclComm_t comm : gpu_.comms) nccl_->abort(comm);
    gpu_.comms.clear();
    gpu_.aborted = true;
  }

  bool launch(std::size_t count) {
    const Nccl& nc = *nccl_;
    ncclResult_t result = nc.group_start();
    if (result != ncclSuccess) {
      fail("ncclGroupStart: " + nc.describe(result));
      return false;
    }
    for (std::size_t i = 0; i < gpu_.comms.size(); ++i) {
      result = nc.all_reduce(gpu_.send[i], gpu_.recv[i], count, ncclFloat, ncclSum, gpu_.comms[i],
                             gpu_.streams[i]);
      if (result != ncclSuccess) {
        nc.group_end();
        fail("ncclAllReduce: " + nc.describe(result, gpu_.comms[i]));
        return false;
      }
    }
    if ((result = nc.group_end()) != ncclSuccess) {
      fail("ncclGroupEnd: " + nc.describe(result));
      return false;
    }
    return true;
  }

  // Spins on the streams as nccl-tests does, watching NCCL's asynchronous
  // errors and the deadline.
  bool wait_streams(Clock::time_point deadline, const std::string& what) {
    std::vector<bool> done(gpu_.streams.size(), false);
    for (std::size_t remaining = done.size(); remaining > 0;) {
      for (std::size_t i = 0; i < done.size(); ++i) {
        if (done[i]) continue;
        const cudaError_t state = cu_.stream_query(gpu_.streams[i]);
        if (state == cudaSuccess) {
          done[i] = true;
          --remaining;
          continue;
        }
        if (state != cudaErrorNotReady) {
          fail("cudaStreamQuery during " + what + ": " + cu_.describe(state));
          return false;
        }
        if (i < gpu_.comms.size()) {
          ncclResult_t async = ncclSuccess;
          const ncclResult_t result = nccl_->async_error(gpu_.comms[i], &async);
          if (result != ncclSuccess || async != ncclSuccess) {
            fail("NCCL reported an error during " + what + ": " +
                 nccl_->describe(result != ncclSuccess ? result : async, gpu_.comms[i]));
            return false;
          }
        }
      }
      if (remaining > 0 && Clock::now() > deadline) {
        out_.line({"allreduce", "hung",
                   what + " did not finish within " + std::to_string(rq_.sweep.timeout_s) +
                       " s; flowrun aborted NCCL"});
        abort_comms();
        return false;
      }
    }
    return true;
  }

  // The first and last elements of every GPU's result against the exact sums.
  bool verify(std::size_t count, std::uint64_t& wrong) {
    const std::size_t n = total_ranks();
    std::vector<float> host(std::min(count, kCheckFloats));
    auto expected = [&](std::size_t index) {
      return static_cast<float>(n * (index % kChunkFloats % 251) + n * (n - 1) / 2);
    };
    for (std::size_t i = 0; i < rq_.devices.size(); ++i) {
      for (std::size_t first :
           {std::size_t{0}, count > kCheckFloats ? count - kCheckFloats : std::size_t{0}}) {
        const std::size_t length = std::min(count - first, kCheckFloats);
        if (!cuda_ok(cu_.set_device(rq_.devices[i]), "cudaSetDevice") ||
            !cuda_ok(
                cu_.memcpy(host.data(), gpu_.recv[i] + first, length * sizeof(float), cudaMemcpyDeviceToHost),
                "cudaMemcpy"))
          return false;
        for (std::size_t k = 0; k < length; ++k) {
          if (host[k] != expected(first + k)) ++wrong;
        }
        if (count <= kCheckFloats) break;
      }
    }
    return true;
  }

  const Cudart& cu_;
  const Nccl* nccl_;
  const GpuCheckRequest& rq_;
  Out& out_;
  Watchdog& dog_;
  GpuState gpu_;
  std::uint64_t max_bytes_ = 0;
};

}  // namespace

int run_gpu_check_child(const GpuCheckRequest& asked, int out_fd) {
  Out out(out_fd);
  GpuCheckRequest request = asked;
  const EnvMap env = read_environ();
  NcclDebugFile debug;  // before NCCL is loaded: it reads its environment once

  Cudart cu;
  bool cuda_usable = false;
  out.line({"phase", "loading the CUDA runtime"});
  if (void* lib =
          load_first(doctor_detail::cudart_candidates(env, request.driver_cuda_major), "cudart", out)) {
    std::string missing;
    if (!cu.bind_all(lib, missing)) {
      out.line({"cuda_error", "the CUDA runtime has no " + missing});
      out.line({"allreduce", "skipped", "the CUDA runtime is incomplete"});
    } else {
      int runtime = 0, driver = 0;
      if (cu.runtime_version(&runtime) != cudaSuccess) runtime = 0;
      if (cu.driver_version(&driver) != cudaSuccess) driver = 0;
      out.line({"cuda_versions", std::to_string(runtime), std::to_string(driver)});
      out.line({"phase", "counting GPUs (cudaGetDeviceCount)"});
      int count = 0;
      const cudaError_t error = cu.get_device_count(&count);
      if (error == cudaSuccess) {
        out.line({"cuda_count", std::to_string(count)});
        cuda_usable = true;
        for (int device : request.devices) cuda_usable = cuda_usable && device >= 0 && device < count;
        if (!cuda_usable)
          out.line({"allreduce", "skipped",
                    "CUDA sees " + plural(count, "GPU") + ", fewer than the " +
                        std::to_string(request.devices.size()) + " flowrun selected"});
      } else {
        out.line({"cuda_error", cu.describe(error)});
        out.line({"allreduce", "skipped", "CUDA cannot use the GPUs (see the cuda check)"});
      }
    }
  } else {
    out.line({"allreduce", "skipped", "the CUDA runtime was not found"});
  }

  Nccl nccl;
  bool nccl_usable = false;
  out.line({"phase", "loading NCCL"});
  if (void* lib = load_first(doctor_detail::nccl_candidates(env), "nccl", out)) {
    std::string missing;
    if (!nccl.bind_all(lib, missing)) {
      out.line({"nccl_missing", "the library has no " + missing});
    } else {
      int version = 0;
      if (nccl.get_version(&version) == ncclSuccess) out.line({"nccl_version", std::to_string(version)});
      nccl_usable = true;
    }
  }

  // Node 0 of a check across nodes makes the communicator's id first, so the
  // head can hand it to the other nodes while this one allocates.
  if (request.part.nranks > 0 && request.part.nccl_id == "make" && cuda_usable && nccl_usable &&
      request.nccl && !request.devices.empty()) {
    ncclUniqueId id{};
    const ncclResult_t result = nccl.get_unique_id(&id);
    if (result != ncclSuccess) {
      out.line({"allreduce", "failed", "ncclGetUniqueId: " + nccl.describe(result)});
      cuda_usable = false;
    } else {
      request.part.nccl_id = id_to_hex(id);
      out.line({"nccl_id", request.part.nccl_id});
    }
  }

  if (cuda_usable) {
    std::string skipped;
    if (request.devices.empty())
      skipped = "no GPU to run it on";
    else if (!request.nccl)
      skipped = "--no-nccl";
    else if (!nccl_usable)
      skipped = "NCCL was not found";
    // GPU memory only for what runs: the all-reduce, the one-GPU copy.
    if (!request.devices.empty() && (skipped.empty() || request.memcpy)) {
      Watchdog dog(out);
      Check check(cu, nccl_usable ? &nccl : nullptr, request, out, dog);
      if (check.prepare() && (!request.memcpy || check.memcpy_bandwidth()) && skipped.empty())
        check.allreduce();
    }
    if (!skipped.empty()) out.line({"allreduce", "skipped", skipped});
  }
  debug.report(out);
  out.line({"done"});
  return 0;
}

#endif  // FLOWRUN_HAVE_CUDA_HEADERS

}  // namespace flowrun
