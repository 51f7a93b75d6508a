#include "rank_sampler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#include <signal.h>
#include <string_view>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flowrun/clock.h"
#include "flowrun/files.h"
#include "flowrun/process.h"
#include "flowrun/stacks.h"

#include "stack_taker.h"
#include "worker_pipes.h"

namespace flowrun {

namespace asio = boost::asio;

namespace {

// py-spy reads a rank's memory in milliseconds of CPU; it runs only on CPU
// the ranks leave idle, so it may wait for some on a machine they keep busy,
// but one that takes longer than this is stuck and is not waited for.
constexpr double kSampleTimeoutS = 30;
// After this many samples in a row that gave no stack, flowrun says why once.
constexpr std::int64_t kFailuresBeforeSaying = 5;
// How long a step runs before flowrun says that it cannot sample.
constexpr double kSayMissingAfterS = 60;
// How often a step's shares.json is rewritten while its ranks are sampled.
constexpr std::int64_t kSharesWriteIntervalNs = 5'000'000'000;

bool sampled(const Worker& w) { return w.alive && w.pid > 0 && w.record.rank >= 0; }

bool is_python(pid_t pid) {
  const std::string path = process_program(pid);
  if (path.empty()) return false;
  const std::string_view name = std::string_view(path).substr(path.rfind('/') + 1);
  return name.rfind("python", 0) == 0 || name.rfind("pypy", 0) == 0;
}

// The Python process of a rank: its main process, or the first Python among
// its descendants (a shell or a wrapper that runs python3), breadth first,
// a few levels down; -1 when none runs (a rank that is not Python is not
// sampled, and is not a failure to sample).
pid_t python_of(pid_t pid) {
  std::vector<pid_t> level{pid};
  for (int depth = 0; depth < 4 && !level.empty(); ++depth) {
    std::vector<pid_t> next;
    for (pid_t p : level) {
      if (is_python(p)) return p;
      const std::string children = read_proc_file(fmt::format("/proc/{}/task/{}/children", p, p));
      for (std::size_t at = 0; at < children.size();) {
        const std::size_t end = std::min(children.find(' ', at), children.size());
        if (end > at) next.push_back(static_cast<pid_t>(std::atoi(children.substr(at, end - at).c_str())));
        at = end + 1;
      }
    }
    level = std::move(next);
  }
  return -1;
}

// A rank's main thread's times now, as the kernel counts them (pid 0 where
// /proc has no schedstat, a kernel without CONFIG_SCHED_INFO).
ThreadTimes thread_times(pid_t pid) {
  ThreadTimes times;
  const std::string text = read_proc_file(fmt::format("/proc/{}/task/{}/schedstat", pid, pid), 256);
  long long on_cpu = 0, runnable = 0;
  if (std::sscanf(text.c_str(), "%lld %lld", &on_cpu, &runnable) != 2) return times;
  times.pid = pid;
  times.at_ns = monotonic_now_ns();
  times.on_cpu_ns = on_cpu;
  times.runnable_ns = runnable;
  return times;
}

std::size_t live_ranks(const WorkerList& workers) {
  return static_cast<std::size_t>(std::count_if(workers.begin(), workers.end(), sampled));
}

}  // namespace

RankSampler::RankSampler(asio::io_context& io, const WorkerList& workers, Links links)
    : io_(io),
      workers_(workers),
      links_(std::move(links)),
      timer_(io),
      deadline_(io),
      random_(static_cast<std::minstd_rand::result_type>(unix_now_ns() ^ getpid())) {}

RankSampler::~RankSampler() { stop(); }

void RankSampler::start(double sample_s) {
  stop();
  sample_s_ = sample_s;
  if (sample_s_ <= 0) return;
  py_spy_.clear();
  looked_up_ = false;
  started_ns_ = monotonic_now_ns();
  running_ = true;
  next_ = 0;
  rate_ = 1;
  arm();
}

bool RankSampler::look_up() {
  looked_up_ = true;
  std::string looked;
  py_spy_ = find_py_spy(workers_, &looked);
  if (!py_spy_.empty()) return true;
  running_ = false;
  // Said once the step has run for a minute, when the slow rank would be
  // named by then: a short step (a test, an example) says nothing.
  const double ran_s = static_cast<double>(monotonic_now_ns() - started_ns_) / 1e9;
  timer_.expires_after(steady_seconds(std::max(0.0, std::max(sample_s_, kSayMissingAfterS) - ran_s)));
  timer_.async_wait([this, looked](const boost::system::error_code& ec) {
    // Said only where a rank runs Python: a step of other programs has no
    // Python stacks to sample.
    const bool python = std::any_of(workers_.begin(), workers_.end(),
                                    [](const Worker& w) { return sampled(w) && python_of(w.pid) > 0; });
    if (ec || said_ || !python) return;
    said_ = true;
    links_.say(fmt::format(
        "flowrun: cannot sample the ranks' stacks to name a slow rank: {} (install it: pip install py-spy; "
        "or forensics: {{sample: off}})",
        looked));
  });
  return false;
}

void RankSampler::stop() {
  running_ = false;
  timer_.cancel();
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    finished(true);
  }
}

void RankSampler::arm() {
  const std::size_t live = live_ranks(workers_);
  if (!running_ || live == 0) return;
  // The mean gap gives each live rank one sample per sample_s; drawn
  // between half and one and a half of it.
  const double mean = sample_s_ / rate_ / static_cast<double>(live);
  std::uniform_real_distribution<double> spread(0.5 * mean, 1.5 * mean);
  timer_.expires_after(steady_seconds(spread(random_)));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) sample_next();
  });
}

void RankSampler::sample_next() {
  if (!running_) return;
  if (paused_ || live_ranks(workers_) == 0) return arm();
  if (!looked_up_ && !look_up()) return;
  for (std::size_t tried = 0; tried < workers_.size(); ++tried) {
    const Worker& w = workers_[next_ % workers_.size()];
    ++next_;
    const pid_t python = sampled(w) ? python_of(w.pid) : -1;
    if (python > 0) {
      rank_ = w.record.rank;
      times_ = thread_times(python);
      out_ = memfd_create("flowrun-sample-out", MFD_CLOEXEC);
      err_ = memfd_create("flowrun-sample-err", MFD_CLOEXEC);
      // Below the ranks and their data loaders: on CPU they leave idle.
      if (out_ < 0 || err_ < 0 ||
          spawn_py_spy(py_spy_, python, {"--nonblocking"}, out_, err_, &pid_, SpyPriority::idle) != 0) {
        pid_ = -1;
        close_run();
        return arm();
      }
      const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
      if (fd >= 0) {
        watch_ = std::make_unique<asio::posix::stream_descriptor>(io_, fd);
        watch_->async_wait(asio::posix::stream_descriptor::wait_read,
                           [this](const boost::system::error_code& e) {
                             if (!e) finished(false);
                           });
      }
      deadline_.expires_after(steady_seconds(kSampleTimeoutS));
      deadline_.async_wait([this](const boost::system::error_code& e) {
        if (!e && pid_ > 0) {
          kill(pid_, SIGKILL);
          finished(true);
        }
      });
      return;
    }
  }
  arm();
}

void RankSampler::finished(bool timed_out) {
  if (pid_ <= 0) return;
  deadline_.cancel();
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  const std::string out = read_back(out_), err = read_back(err_);
  close_run();
  const auto stack = timed_out ? std::nullopt : parse_py_spy_dump(out);
  if (stack) {
    failed_in_a_row_ = 0;
    ++taken_;
    RankSample sample = sample_of(rank_, *stack);
    sample.times = times_;
    links_.sample(sample);
  } else if (running_ && ++failed_in_a_row_ == kFailuresBeforeSaying && taken_ == 0 && !said_) {
    said_ = true;
    const std::string why =
        timed_out ? fmt::format("it took over {:g} s", kSampleTimeoutS) : err.substr(0, err.find('\n'));
    links_.say(fmt::format("flowrun: cannot sample rank {}'s stack to name a slow rank: py-spy: {}", rank_,
                           why.empty() ? "it printed no stack" : why));
  }
  arm();
}

void RankSampler::close_run() {
  if (watch_) {
    watch_->close();
    watch_.reset();
  }
  for (int* fd : {&out_, &err_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

// --- the supervisor's tally -----------------------------------------------

SlowRankWatch::SlowRankWatch(asio::io_context& io, const WorkerList& workers, Links links)
    : sampler_(io, workers,
               {[this](const RankSample& s) { on_sample(s); },
                [this](const std::string& text) { links_.say(text); }}),
      links_(std::move(links)) {}

void SlowRankWatch::start(const std::string& step, int restart_count, double sample_s,
                          const std::string& shares_file) {
  tally_.clear();
  said_ = forwarded_ = false;
  written_mono_ = 0;
  step_ = step;
  restart_count_ = restart_count;
  sample_s_ = sample_s;
  shares_file_ = shares_file;
  hurried_ = 1;
  sampler_.set_rate(1);
  sampler_.start(sample_s);
}

void SlowRankWatch::on_sample(const RankSample& sample) {
  // Tallied here also when the observer takes it: a suspect among this
  // host's ranks makes the sampler hurry on an agent too.
  tally_.add(sample);
  forwarded_ = links_.forward(sample) || forwarded_;
  if (!said_ && !forwarded_) {
    if (const auto slow = tally_.slow()) {
      said_ = true;
      tally_.keep_named(*slow);
      links_.say("flowrun: " + slow_ranks_line(step_, *slow, nullptr));
    }
  }
  sampler_.set_rate(std::max(rate_now(), hurried_));
  // The shares so far, for flowrun status: a few times a minute at most.
  if (const std::int64_t now = monotonic_now_ns();
      !forwarded_ && now - written_mono_ >= kSharesWriteIntervalNs) {
    written_mono_ = now;
    write_file();
  }
}

void SlowRankWatch::write_file() {
  if (shares_file_.empty() || tally_.empty()) return;
  // Whole or not at all, and never through a link or FIFO a rank left.
  (void)try_write_file(shares_file_, wait_shares_document(step_, restart_count_,
                                                          wait_shares(tally_, sample_s_), unix_now_ns()));
}

std::optional<WaitShares> SlowRankWatch::end_of_group() {
  sampler_.stop();
  if (tally_.empty() || forwarded_) return std::nullopt;
  write_file();
  return wait_shares(tally_, sample_s_);
}

}  // namespace flowrun
