#include <algorithm>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <sched.h>
#include <set>
#include <signal.h>
#include <sstream>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>

#include "flowrun/clock.h"
#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/path.h"
#include "flowrun/process.h"
#include "flowrun/supervisor.h"
#include "flowrun/util.h"

#include "stack_taker.h"
#include "worker_pipes.h"

extern char** environ;

namespace flowrun {

namespace asio = boost::asio;

namespace {

bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

// "    load_batch (/work/data.py:41)" -> the frame; a line without the
// "(file:line)" end (a local variable with --locals) is none.
std::optional<StackFrame> parse_frame(std::string_view line) {
  line = trim(line);
  if (line.size() < 4 || line.back() != ')') return std::nullopt;
  const std::size_t open = line.rfind(" (");
  if (open == std::string_view::npos || open == 0) return std::nullopt;
  std::string_view where = line.substr(open + 2, line.size() - open - 3);
  StackFrame frame;
  frame.function = std::string(line.substr(0, open));
  const std::size_t colon = where.rfind(':');
  if (colon != std::string_view::npos && colon + 1 < where.size() &&
      std::all_of(where.begin() + static_cast<std::ptrdiff_t>(colon) + 1, where.end(),
                  [](char c) { return c >= '0' && c <= '9'; })) {
    frame.file = std::string(where.substr(0, colon));
    frame.line = std::atoi(std::string(where.substr(colon + 1)).c_str());
  } else {
    frame.file = std::string(where);
  }
  return frame;
}

// A small file of the kernel's under /proc/PID, trimmed.
std::string read_small(const std::string& path) { return std::string(trim(read_proc_file(path))); }

bool executable(const std::string& path) { return !path.empty() && access(path.c_str(), X_OK) == 0; }

// The file `name` in the directory of the absolute path `path`; "" for none.
std::string beside(const std::string& path, const std::string& name) {
  const std::size_t slash = path.rfind('/');
  return path.empty() || path.front() != '/' || slash == std::string::npos ? std::string()
                                                                           : path.substr(0, slash + 1) + name;
}

// The rank's stack.txt beside its logs; "" for a rank without log files
// (an agent's: the head writes its stack.txt from the Stacks message).
std::string stack_file(const Worker& w) {
  const std::string& log = w.record.stdout_log;
  const std::size_t slash = log.rfind('/');
  return slash == std::string::npos ? std::string() : log.substr(0, slash + 1) + "stack.txt";
}

bool is_wrapper(std::string_view function) {
  return function == "wrapper" || function == "inner" || function == "_fn" ||
         function == "decorate_context" || function == "_call_impl" || function == "_wrapped_call_impl";
}

bool warned_missing = false;  // once per flowrun process: once per run

}  // namespace

// FLOWRUN_PY_SPY when set (nothing else then), else py-spy on flowrun's
// PATH, on the rank's PATH, beside the program the rank runs (the Python of a
// virtual environment named in the step's run: or python:, which is not on
// PATH when the environment is not activated, as on a node reached over ssh),
// or beside python3 on its PATH.
std::string find_py_spy(const WorkerList& workers, std::string* looked) {
  if (const char* chosen = std::getenv("FLOWRUN_PY_SPY"); chosen != nullptr && *chosen != '\0') {
    *looked = fmt::format("FLOWRUN_PY_SPY={} is not an executable file", chosen);
    return executable(chosen) ? std::string(chosen) : std::string();
  }
  *looked = "no py-spy on PATH or beside the step's python3";
  // Each PATH and each file looked at once: the ranks of a step mostly
  // share both, and a failing step's stacks wait for this.
  std::set<std::string> seen;
  const auto on_path = [&seen](const std::vector<std::string>& env) {
    std::string path = "PATH";  // find_program's default when env has none
    for (const auto& entry : env) {
      if (entry.rfind("PATH=", 0) == 0) path = entry;
    }
    if (!seen.insert(path).second) return std::string();
    std::string found = find_program("py-spy", env);
    return executable(found) ? found : std::string();
  };
  const auto file = [&seen](const std::string& path) {
    return !path.empty() && seen.insert(path).second && executable(path) ? path : std::string();
  };
  std::vector<std::string> own;
  if (const char* path = std::getenv("PATH")) own.push_back(std::string("PATH=") + path);
  if (std::string found = on_path(own); !found.empty()) return found;
  for (const auto& w : workers) {
    if (w.launch != nullptr) {
      if (std::string found = on_path(w.launch->env); !found.empty()) return found;
    }
    // A live worker's python3 is looked up only now (ExitWatch::on_exit does
    // it for a worker that failed).
    const std::string python = !w.record.path_python.empty() || w.launch == nullptr
                                   ? w.record.path_python
                                   : find_program("python3", w.launch->env);
    for (const std::string* program : {&w.record.program, &python}) {
      if (std::string found = file(beside(*program, "py-spy")); !found.empty()) return found;
    }
  }
  return {};
}

std::string read_back(int fd) {
  std::string text;
  char buf[65536];
  for (off_t at = 0;;) {
    const ssize_t n = pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    at += n;
  }
  return std::string(trim(text));
}

int spawn_py_spy(const std::string& py_spy, pid_t target, const std::vector<std::string>& options, int out,
                 int err, pid_t* pid, SpyPriority priority) {
  SpawnRequest request;
  request.argv = {py_spy, "dump"};
  request.argv.insert(request.argv.end(), options.begin(), options.end());
  request.argv.insert(request.argv.end(), {"--full-filenames", "--pid", std::to_string(target)});
  for (char** entry = environ; *entry != nullptr; ++entry) request.env.emplace_back(*entry);
  request.stdout_fd = out;
  request.stderr_fd = err;
  // The sampler's py-spy is lowered in the child, before its exec: lowered
  // by flowrun once posix_spawn had returned, it ran its start (reading the
  // rank's memory maps and symbols, most of its work) at flowrun's priority
  // until then, and a sample could be taken before.
  request.idle = priority == SpyPriority::idle;
  try {
    const SpawnResult started = spawn_process(request);
    if (started.pid <= 0) return started.exit_code == 126 ? EACCES : ENOENT;
    *pid = started.pid;
    return 0;
  } catch (const Error&) {
    return EAGAIN;
  }
}

std::optional<ParsedStack> parse_py_spy_dump(std::string_view text) {
  ParsedStack stack;
  bool in_thread = false;
  while (!text.empty()) {
    const std::size_t end = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    if (line.rfind("Thread ", 0) == 0) {
      // "Thread 4242 (idle): "MainThread"": the first thread is the main
      // one unless another is named so.
      const bool idle = line.find(" (idle)") != std::string_view::npos;
      if (line.find("\"MainThread\"") != std::string_view::npos) {
        stack.main = stack.threads.size();
        stack.main_idle = idle;
      } else if (stack.threads.empty()) {
        stack.main_idle = idle;
      }
      stack.threads.emplace_back();
      in_thread = true;
    } else if (in_thread && !line.empty() && (line.front() == ' ' || line.front() == '\t')) {
      if (auto frame = parse_frame(line)) stack.threads.back().push_back(std::move(*frame));
    } else if (!trim(line).empty()) {
      in_thread = false;
    }
  }
  if (stack.threads.empty()) return std::nullopt;
  return stack;
}

bool is_library_file(std::string_view file) {
  if (file.empty() || file.front() == '<') return true;
  for (std::string_view part : {"/site-packages/", "/dist-packages/", "/lib/python"}) {
    if (file.find(part) != std::string_view::npos) return true;
  }
  return false;
}

std::string where_in(const ParsedStack& stack) {
  if (stack.threads.empty()) return "no frames";
  const auto& frames = stack.threads[std::min(stack.main, stack.threads.size() - 1)];
  if (frames.empty()) return "no frames";
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (is_library_file(frames[i].file)) continue;
    // The call it made, past a decorator's frame (torch 2's collectives are
    // wrapped: all_reduce runs inside c10d_logger's `wrapper`).
    std::size_t callee = i;
    if (callee > 0) --callee;
    while (callee > 0 && is_wrapper(frames[callee].function)) --callee;
    const std::string& name = frames[callee].function;
    return printable(fmt::format("{} ({}:{})", name, base_name(frames[i].file), frames[i].line));
  }
  // A rank's file names reach the console, status and the page: control
  // bytes there are shown escaped, never sent to a terminal.
  const StackFrame& top = frames.front();
  return printable(fmt::format("{} ({}:{})", top.function, base_name(top.file), top.line));
}

StackReport group_stacks(const std::vector<RankStack>& ranks, const std::string& source) {
  struct Key {
    std::vector<std::vector<StackFrame>> frames;
    std::string kernel, missing;
    bool operator==(const Key&) const = default;
  };
  std::vector<std::pair<Key, StackGroup>> groups;
  for (const auto& r : ranks) {
    Key key{r.stack ? r.stack->threads : std::vector<std::vector<StackFrame>>{}, r.kernel, r.missing};
    auto same = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (same == groups.end()) {
      StackGroup g;
      g.where = !r.missing.empty() ? std::string() : r.stack ? where_in(*r.stack) : r.kernel;
      g.missing = r.missing;
      groups.emplace_back(std::move(key), std::move(g));
      same = groups.end() - 1;
    }
    same->second.ranks.push_back(r.rank);
  }
  std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
    const bool a_missing = !a.second.missing.empty(), b_missing = !b.second.missing.empty();
    if (a_missing != b_missing) return b_missing;
    if (a.second.ranks.size() != b.second.ranks.size()) return a.second.ranks.size() > b.second.ranks.size();
    return a.second.ranks.front() < b.second.ranks.front();
  });
  StackReport report;
  report.source = source;
  report.ranks = static_cast<int>(ranks.size());
  for (auto& g : groups) report.groups.push_back(std::move(g.second));
  return report;
}

namespace {

// Whether `pid` still runs: it is there and not a zombie (Z) or dead (X).
// A rank that ended is not sampled: its stack would say nothing but its end.
bool still_running(pid_t pid) {
  const std::string stat = read_small(fmt::format("/proc/{}/stat", pid));
  const std::size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace

std::string kernel_state(pid_t pid) {
  const std::string dir = fmt::format("/proc/{}/", pid);
  const std::string stat = read_small(dir + "stat");
  const std::size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return {};
  const char state = stat[paren + 2];
  std::string wchan = read_small(dir + "wchan");
  if (wchan.empty() || wchan == "0") wchan = state == 'R' ? "running" : "unknown";
  const std::string syscall = read_small(dir + "syscall");
  std::string number = syscall.substr(0, syscall.find(' '));
  std::string where = fmt::format("{} (state {}", wchan, state);
  if (!number.empty() && number != "running" && number.front() != '-') where += ", syscall " + number;
  return where + ")";
}

// --- taking them ----------------------------------------------------------

std::string cap_stack_dump(std::string text) {
  if (text.size() <= kMaxStackDumpBytes) return text;
  std::size_t cut = text.rfind('\n', kMaxStackDumpBytes - 64);
  if (cut == std::string::npos) cut = kMaxStackDumpBytes - 64;
  const std::size_t more = text.size() - cut;
  text.resize(cut);
  text += fmt::format("\n(cut: {} bytes more)\n", more);
  return text;
}

std::string py_spy_missing_line(const std::string& looked) {
  return fmt::format(
      "flowrun: cannot take the ranks' Python stacks: {} (install it: pip install py-spy); saying what the "
      "kernel tells instead",
      looked);
}

std::string stack_file_text(const RankStack& found, const std::string& looked) {
  std::string text = found.dump;
  if (!looked.empty()) text = fmt::format("(py-spy missing: {})\nkernel: {}\n", looked, found.kernel);
  if (!text.empty() && text.back() != '\n') text += '\n';
  if (!found.missing.empty()) text += "(no stack: " + found.missing + ")\n";
  return text;
}

// py-spy's stdout and stderr go to memory files, read once it has ended: no
// file needs a place on the node, and py-spy never waits for a reader.
struct StackTaker::Job {
  pid_t pid = -1;          // py-spy's
  std::string stack_path;  // the rank's stack.txt; "": none on this host
  int out = -1, err = -1;  // memfds
  std::unique_ptr<asio::posix::stream_descriptor> watch;
  bool finished = false;
  bool unwritten = false;  // its stack.txt is written by maybe_done
  RankStack found;

  ~Job() {
    if (out >= 0) close(out);
    if (err >= 0) close(err);
  }
  // py-spy's stack (the kernel's are written by maybe_done, after the stop).
  void write_stack_file() const {
    // Whole or not at all, and never through a link or FIFO a rank left.
    if (!stack_path.empty()) (void)try_write_file(stack_path, stack_file_text(found, ""));
  }
};

StackTaker::StackTaker(asio::io_context& io) : io_(io), deadline_(io) {}

StackTaker::~StackTaker() {
  for (auto& job : jobs_) {
    if (!job->finished && job->pid > 0) {
      kill(job->pid, SIGKILL);
      waitpid(job->pid, nullptr, 0);
    }
  }
}

bool StackTaker::start(const WorkerList& workers, double timeout_s,
                       std::function<void(const std::string&)> say, std::function<void()> done) {
  const auto sampled = [](const Worker& w) {
    return w.alive && w.pid > 0 && w.record.rank >= 0 && still_running(w.pid);
  };
  if (running_ || std::none_of(workers.begin(), workers.end(), sampled)) return false;
  jobs_.clear();
  found_.clear();
  const std::string py_spy = find_py_spy(workers, &looked_);
  if (!py_spy.empty()) looked_.clear();
  source_ = py_spy.empty() ? "kernel" : "py-spy";
  timeout_s_ = timeout_s;
  if (py_spy.empty() && !warned_missing) {
    warned_missing = true;
    say(py_spy_missing_line(looked_));
  }
  for (const auto& w : workers) {
    if (!sampled(w)) continue;
    auto job = std::make_unique<Job>();
    job->found.rank = w.record.rank;
    job->stack_path = stack_file(w);
    if (py_spy.empty()) {
      // Read now, written once whoever waits has them (maybe_done): a stop
      // that waits for them signals the ranks first.
      job->found.kernel = kernel_state(w.pid);
      if (job->found.kernel.empty()) job->found.missing = "it had ended";
      job->finished = true;
      job->unwritten = true;
      jobs_.push_back(std::move(job));
      continue;
    }
    job->out = memfd_create("flowrun-py-spy-out", MFD_CLOEXEC);
    job->err = memfd_create("flowrun-py-spy-err", MFD_CLOEXEC);
    int err = job->out < 0 || job->err < 0 ? errno : 0;
    if (err == 0) err = spawn_py_spy(py_spy, w.pid, {}, job->out, job->err, &job->pid);
    if (err != 0) {
      job->found.missing = fmt::format("cannot start {}: {}", py_spy, std::strerror(err));
      job->finished = true;
      job->write_stack_file();
    } else {
      const int fd = static_cast<int>(syscall(SYS_pidfd_open, job->pid, 0));
      if (fd >= 0) {
        job->watch = std::make_unique<asio::posix::stream_descriptor>(io_, fd);
        Job* raw = job.get();
        job->watch->async_wait(asio::posix::stream_descriptor::wait_read,
                               [this, raw](const boost::system::error_code& ec) {
                                 if (!ec) finish_one(*raw, nullptr);
                               });
      }
    }
    jobs_.push_back(std::move(job));
  }
  if (jobs_.empty()) return false;
  done_ = std::move(done);
  running_ = true;
  deadline_.expires_after(steady_seconds(timeout_s));
  deadline_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    for (auto& job : jobs_) {
      if (!job->finished) finish_one(*job, "");
    }
  });
  asio::post(io_, [this] { maybe_done(); });
  return true;
}

void StackTaker::finish_one(Job& job, const char* cut_short) {
  if (job.finished) return;
  job.finished = true;
  const bool timed_out = cut_short != nullptr;
  if (timed_out) kill(job.pid, SIGKILL);
  int status = 0;
  const bool reaped = waitpid(job.pid, &status, 0) == job.pid;  // ECHILD: the exit watch reaped it
  if (job.watch) job.watch->close();
  std::string out = read_back(job.out);
  const std::string err = read_back(job.err);
  if (timed_out) {
    job.found.missing = *cut_short != '\0' ? std::string(cut_short)
                                           : fmt::format("py-spy did not finish within {:g} s", timeout_s_);
  } else if (auto stack = parse_py_spy_dump(out)) {
    job.found.stack = std::move(stack);
    job.found.dump = cap_stack_dump(std::move(out));
  } else {
    std::string why = err.substr(0, err.find('\n'));
    if (why.empty())
      why = reaped ? fmt::format("py-spy ended with status {}", status) : "py-spy printed no stack";
    job.found.missing = "py-spy: " + why;
  }
  job.write_stack_file();
  maybe_done();
}

void StackTaker::maybe_done() {
  if (!running_) return;
  if (!std::all_of(jobs_.begin(), jobs_.end(), [](const auto& job) { return job->finished; })) return;
  running_ = false;
  deadline_.cancel();
  std::vector<std::pair<std::string, std::string>> files;  // stack.txt not yet written, and its text
  for (const auto& job : jobs_) {
    if (job->unwritten && !job->stack_path.empty())
      files.emplace_back(job->stack_path, stack_file_text(job->found, looked_));
  }
  found_.clear();
  for (auto& job : jobs_) found_.push_back(std::move(job->found));
  std::sort(found_.begin(), found_.end(),
            [](const RankStack& a, const RankStack& b) { return a.rank < b.rank; });
  if (done_) {
    auto done = std::move(done_);
    done_ = nullptr;
    done();
  }
  // Whole or not at all, and never through a link or FIFO a rank left.
  for (const auto& [path, text] : files) (void)try_write_file(path, text);
}

void StackTaker::cut_short() {
  if (!running_) return;
  done_ = nullptr;
  for (auto& job : jobs_) {
    if (!job->finished) finish_one(*job, "the step ended before py-spy did");
  }
}

// --- who waits for them ---------------------------------------------------

void StackRounds::reset() {
  requests_.clear();
  stop_after_ = false;
  stop_stacks_.reset();
}

void StackRounds::request(int request, bool stopping, double timeout_s) {
  if (requests_.empty() && !stop_after_) requested_ns_ = unix_now_ns();
  requests_.push_back(request);
  if (taker_.running()) return;
  // No rank is alive, or they are being stopped: an empty answer, at once.
  if ((stopping && !stop_after_) || !start(timeout_s)) answer({}, "");
}

bool StackRounds::before_stop(double timeout_s) {
  if (!start(timeout_s)) return false;
  if (requests_.empty()) requested_ns_ = unix_now_ns();
  stop_after_ = true;
  return true;
}

bool StackRounds::start(double timeout_s) {
  if (taker_.running()) return true;  // its stacks are seconds old: they serve
  return taker_.start(workers_, timeout_s, links_.say, [this] { taken(); });
}

void StackRounds::taken() {
  answer(taker_.found(), taker_.source());
  if (!stop_after_) return;
  stop_after_ = false;
  if (!links_.deliver(kStacksBeforeStop, taker_.found(), taker_.source()))
    stop_stacks_ = group_stacks(taker_.found(), taker_.source());
  links_.stop();
}

void StackRounds::answer(const std::vector<RankStack>& found, const std::string& source) {
  const std::vector<int> requests = std::exchange(requests_, {});
  for (int request : requests) {
    if (!links_.deliver(request, found, source)) links_.report(group_stacks(found, source), requested_ns_);
  }
}

std::optional<StackReport> StackRounds::end_of_group() {
  if (taker_.running()) {
    taker_.cut_short();
    if (stop_after_) stop_stacks_ = group_stacks(taker_.found(), taker_.source());
  }
  std::optional<StackReport> stacks = std::move(stop_stacks_);
  reset();
  return stacks;
}

}  // namespace flowrun
