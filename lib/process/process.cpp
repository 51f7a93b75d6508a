#include "flowrun/process.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <iterator>
#include <memory>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string_view>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flowrun/error.h"
#include "flowrun/files.h"

#include "process_detail.h"

namespace flowrun {

namespace {

using process_detail::errno_text;

// The limit on open files flowrun started with, for the processes it starts
// once raise_open_file_limit raised it.
rlimit g_started_nofile{RLIM_INFINITY, RLIM_INFINITY};
bool g_nofile_raised = false;

// Why a child did not reach its program; stage -1 while nothing failed.
struct ChildFailure {
  int stage = -1;  // 0 chdir, 1 exec, 2 setup, 3 CPU affinity
  int err = 0;
};

// Everything the child needs between its start and execve, made before it
// exists: from its start to execve it may only make async-signal-safe calls.
struct ChildSetup {
  const char* program = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const cpu_set_t* cpus = nullptr;
  std::size_t cpus_size = 0;
  bool idle = false;
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;
  const char* workdir = nullptr;
  pid_t parent = 0;
  bool shares_memory = false;  // started by clone(CLONE_VM | CLONE_VFORK): `failure` is the parent's
  int report_fd = -1;          // a forked child's end of the report pipe
  ChildFailure failure;
};

[[noreturn]] void child_fail(ChildSetup& setup, int stage) {
  const ChildFailure failure{stage, errno};
  if (setup.shares_memory) {
    setup.failure = failure;
  } else {
    [[maybe_unused]] ssize_t n = write(setup.report_fd, &failure, sizeof failure);
  }
  _exit(127);
}

bool reset_signal(int sig) {
  return std::find(std::begin(process_detail::kResetSignals), std::end(process_detail::kResetSignals), sig) !=
         std::end(process_detail::kResetSignals);
}

[[noreturn]] void run_child(ChildSetup& setup) {
  if (setup.shares_memory) {
    // Every handler flowrun installed goes back to the default before any
    // signal is let in: a handler run here would run on the parent's memory.
    for (int sig = 1; sig < NSIG; ++sig) {
      struct sigaction now {};
      if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, nullptr, &now) != 0) continue;
      const bool handled = now.sa_handler != SIG_DFL && now.sa_handler != SIG_IGN;
      if (handled || reset_signal(sig)) signal(sig, SIG_DFL);
    }
  } else {
    for (int sig : process_detail::kResetSignals) signal(sig, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  process_detail::cloexec_above_stdio();  // before the limit drops below flowrun's open descriptors
  if (g_nofile_raised) setrlimit(RLIMIT_NOFILE, &g_started_nofile);
  if (setpgid(0, 0) != 0) child_fail(setup, 2);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(setup, 2);
  if (getppid() != setup.parent) _exit(127);  // flowrun died before the line above
  if (setup.cpus && sched_setaffinity(0, setup.cpus_size, setup.cpus) != 0) child_fail(setup, 3);
  if (setup.idle) {
    const sched_param param{};
    if (sched_setscheduler(0, SCHED_IDLE, &param) != 0) setpriority(PRIO_PROCESS, 0, 19);
  }
  // Under Yama's ptrace_scope 1 only an ancestor may trace: name flowrun,
  // so that the py-spy it starts (its child, the rank's sibling) may take
  // the rank's stack before a stall's or a timeout's signals. The relation
  // outlives execve (Yama drops it when the process ends); without Yama
  // the call fails (EINVAL) and nothing is needed.
  prctl(PR_SET_PTRACER, static_cast<unsigned long>(setup.parent), 0, 0, 0);
  if (dup2(setup.stdin_fd, STDIN_FILENO) < 0) child_fail(setup, 2);
  if (setup.stdout_fd >= 0 && dup2(setup.stdout_fd, STDOUT_FILENO) < 0) child_fail(setup, 2);
  if (setup.stderr_fd >= 0 && dup2(setup.stderr_fd, STDERR_FILENO) < 0) child_fail(setup, 2);
  if (setup.workdir != nullptr && chdir(setup.workdir) != 0) child_fail(setup, 0);
  execve(setup.program, setup.argv, setup.envp);
  child_fail(setup, 1);
}

int child_entry(void* setup) { run_child(*static_cast<ChildSetup*>(setup)); }

// fork(2): the child copies the parent's page tables, and the parent's every
// page it then writes is copied once more; a failure comes back through a
// close-on-exec pipe.
pid_t start_forked(ChildSetup& setup) {
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return -1;
  setup.report_fd = report[1];
  const pid_t pid = fork();
  if (pid == 0) run_child(setup);
  const int err = errno;
  close(report[1]);
  if (pid > 0) {
    ChildFailure failure;
    ssize_t n;
    do {
      n = read(report[0], &failure, sizeof failure);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof failure)) setup.failure = failure;
  }
  close(report[0]);
  errno = err;
  return pid;
}

// clone(CLONE_VM | CLONE_VFORK), as posix_spawn starts a process: the child
// runs in the parent's memory, which sleeps until the child has exec'ed or
// exited, so nothing is copied; a failure is written straight into `setup`.
// Its stack is an array in this frame, as musl's posix_spawn has it: the
// parent uses none of it while it sleeps, and no system call is spent on it.
// Every signal stays blocked in the parent's thread until the child is gone
// from its memory; the child lets them in once its handlers are the defaults.
pid_t start_sharing(ChildSetup& setup) {
  alignas(64) std::array<char, 32 * 1024> stack;  // run_child's frames and the system calls' wrappers
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  setup.shares_memory = true;
  const pid_t pid = clone(child_entry, stack.data() + stack.size(), CLONE_VM | CLONE_VFORK | SIGCHLD, &setup);
  const int err = errno;
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  errno = err;
  return pid;
}

}  // namespace

namespace process_detail {

std::string guardian_mark;

bool spawn_by_fork = !can_share_memory;

std::vector<char*> marked_envp(const std::vector<std::string>& env) {
  // The guardian's mark, whatever the caller's environment says (a step's
  // env: cannot take a worker out of its reach).
  const std::string& mark = guardian_mark;
  const std::string_view mark_key = std::string_view(mark).substr(0, mark.find('=') + 1);
  std::vector<char*> envp;
  envp.reserve(env.size() + 2);
  if (!mark.empty()) envp.push_back(const_cast<char*>(mark.c_str()));
  for (const auto& entry : env) {
    if (mark_key.empty() || !entry.starts_with(mark_key)) envp.push_back(const_cast<char*>(entry.c_str()));
  }
  envp.push_back(nullptr);
  return envp;
}

void cloexec_above_stdio() {
  if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
  rlimit limit{};
  int top = 1 << 16;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    top = static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 20));
  for (int fd = 3; fd < top; ++fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
}

}  // namespace process_detail

// The PATH of the worker's environment, not flowrun's: a step's env may set it.
std::string find_program(const std::string& name, const std::vector<std::string>& env, int* err_out) {
  int unused = 0;
  int* err = err_out != nullptr ? err_out : &unused;
  *err = ENOENT;
  if (name.find('/') != std::string::npos) {
    if (access(name.c_str(), X_OK) == 0) return name;
    *err = errno;
    return {};
  }
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& entry : env) {
    if (entry.rfind("PATH=", 0) == 0) path = entry.substr(5);
  }
  std::size_t begin = 0;
  while (begin <= path.size()) {
    std::size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(begin, end - begin);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + name;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
      *err = EACCES;
    }
    begin = end + 1;
  }
  return {};
}

SpawnResult spawn_process(const SpawnRequest& request) {
  SpawnResult result;
  if (request.argv.empty()) throw Error("internal: spawn_process with an empty argv");
  int err = 0;
  const std::string program = find_program(request.argv[0], request.env, &err);
  if (program.empty()) {
    result.error = request.argv[0] + ": " +
                   (err == ENOENT && request.argv[0].find('/') == std::string::npos ? "command not found"
                                                                                    : errno_text(err));
    result.exit_code = err == EACCES ? 126 : 127;
    return result;
  }
  result.program = program;

  std::vector<char*> argv;
  argv.reserve(request.argv.size() + 1);
  for (const auto& arg : request.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp = process_detail::marked_envp(request.env);

  // Made before the child exists: it may only make async-signal-safe calls.
  std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> cpus(nullptr, [](cpu_set_t* set) { CPU_FREE(set); });
  std::size_t cpus_size = 0;
  if (!request.cpus.empty()) {
    const int count = *std::max_element(request.cpus.begin(), request.cpus.end()) + 1;
    cpus.reset(CPU_ALLOC(count));
    if (!cpus) throw Error("cannot allocate a CPU set of " + std::to_string(count) + " CPUs");
    cpus_size = CPU_ALLOC_SIZE(count);
    CPU_ZERO_S(cpus_size, cpus.get());
    for (int cpu : request.cpus) CPU_SET_S(static_cast<std::size_t>(cpu), cpus_size, cpus.get());
  }

  process_detail::wait_for_guardian();
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) throw Error("cannot open /dev/null: " + errno_text(errno));
  ChildSetup setup{};
  setup.program = program.c_str();
  setup.argv = argv.data();
  setup.envp = envp.data();
  setup.cpus = cpus.get();
  setup.cpus_size = cpus_size;
  setup.idle = request.idle;
  setup.stdin_fd = request.stdin_fd >= 0 ? request.stdin_fd : devnull;
  setup.stdout_fd = request.stdout_fd;
  setup.stderr_fd = request.stderr_fd;
  setup.workdir = request.workdir.empty() ? nullptr : request.workdir.c_str();
  setup.parent = getpid();
  const pid_t pid = process_detail::spawn_by_fork ? start_forked(setup) : start_sharing(setup);
  const int start_err = errno;
  close(devnull);
  if (pid < 0) throw Error("cannot start a process: " + errno_text(start_err));
  result.pid = pid;
  const ChildFailure failure = setup.failure;
  if (failure.stage >= 0) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    switch (failure.stage) {
      case 0:
        result.error = "cannot enter its workdir " + request.workdir + ": " + errno_text(failure.err);
        break;
      case 1: result.error = request.argv[0] + ": " + errno_text(failure.err); break;
      case 3: result.error = "cannot set its CPU affinity: " + errno_text(failure.err); break;
      default: result.error = "cannot set up the process: " + errno_text(failure.err); break;
    }
    // As a shell reports it: 126 found but cannot be run, 127 not found.
    result.exit_code = failure.stage == 1 && (failure.err == EACCES || failure.err == ENOEXEC) ? 126 : 127;
    result.pid = -1;
  }
  return result;
}

namespace {
volatile sig_atomic_t held_forward_signal = 0;
extern "C" void note_forward_signal(int sig) { held_forward_signal = sig; }
}  // namespace

void hold_forward_signals() {
  struct sigaction action {};
  action.sa_handler = note_forward_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
  sigaction(SIGUSR2, &action, nullptr);
}

int take_held_forward_signal() {
  const int sig = held_forward_signal;
  held_forward_signal = 0;
  return sig;
}

void signal_group(pid_t pgid, int signal) {
  if (pgid > 0) kill(-pgid, signal);
}

std::string read_proc_file(const std::string& path, std::size_t limit) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return {};
  std::string text;
  char buf[4096];
  while (text.size() < limit) {
    const ssize_t n = read(fd, buf, std::min(sizeof buf, limit - text.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  return text;
}

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> children;
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = opendir(task_dir.c_str());
  if (dir == nullptr) return children;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    std::string text = read_proc_file(task_dir + "/" + entry->d_name + "/children", 1 << 20);
    std::size_t pos = 0;
    while (pos < text.size()) {
      std::size_t end = text.find(' ', pos);
      if (end == std::string::npos) end = text.size();
      if (end > pos) children.push_back(static_cast<pid_t>(std::stol(text.substr(pos, end - pos))));
      pos = end + 1;
    }
  }
  closedir(dir);
  return children;
}

std::vector<pid_t> processes_with_env(const std::string& entry) {
  std::vector<pid_t> found;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return found;
  const pid_t self = getpid();
  while (dirent* item = readdir(proc)) {
    const char* name = item->d_name;
    if (name[0] < '1' || name[0] > '9') continue;
    const pid_t pid = static_cast<pid_t>(std::atol(name));
    if (pid == self) continue;
    const std::string dir = std::string("/proc/") + name;
    std::string environ = read_proc_file(dir + "/environ", 4 << 20);
    // A process inside execve() shows an empty environment for an instant:
    // read it again, so that the guardian's sweep cannot miss it. Kernel
    // threads (no executable) have none at all and are not read again.
    char exe[8];
    for (int again = 0; environ.empty() && again < 5 && readlink((dir + "/exe").c_str(), exe, sizeof exe) > 0;
         ++again) {
      usleep(1000);
      environ = read_proc_file(dir + "/environ", 4 << 20);
    }
    std::size_t pos = 0;
    while (pos < environ.size()) {
      std::size_t end = environ.find('\0', pos);
      if (end == std::string::npos) end = environ.size();
      if (std::string_view(environ).substr(pos, end - pos) == entry) {
        found.push_back(pid);
        break;
      }
      pos = end + 1;
    }
  }
  closedir(proc);
  return found;
}

int kill_processes_with_env(const std::string& entry, int rounds) {
  int killed = 0;
  std::vector<pid_t> guardians;  // seen once, left alone after
  for (int round = 0; round < rounds; ++round) {
    bool any = false;
    for (pid_t pid : processes_with_env(entry)) {
      if (std::find(guardians.begin(), guardians.end(), pid) != guardians.end()) continue;
      if (is_guardian(pid)) {
        guardians.push_back(pid);
        continue;
      }
      any = true;
      if (kill(pid, SIGKILL) == 0) ++killed;
    }
    if (!any) break;
    usleep(20'000);
  }
  return killed;
}

bool is_guardian(pid_t pid) {
  if (process_name(pid) != "flowrun-guard") return false;
  const std::string self = process_program(0);
  return !self.empty() && self == process_program(pid);
}

std::string make_secret() { return random_hex(16); }

bool sanitize_standard_fds() {
  // Only async-signal-safe calls: this runs first thing in main.
  int null = -1;
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    if (null < 0) {
      null = open("/dev/null", O_RDWR | O_NOCTTY);
      if (null < 0) return false;
      if (null == fd) continue;  // the lowest free descriptor: this one
    }
    if (dup2(null, fd) < 0) return false;
  }
  if (null > 2) close(null);
  return true;
}

void raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  const rlimit started = limit;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  g_started_nofile = started;
  g_nofile_raised = true;
}

void become_subreaper() { prctl(PR_SET_CHILD_SUBREAPER, 1); }

char process_state(pid_t pid) {
  // "PID (COMM) S ...": COMM may hold spaces and parentheses, the state
  // follows the last ')'.
  const std::string stat = read_proc_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  const std::size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return 0;
  return stat[paren + 2];
}

std::string process_name(pid_t pid) {
  std::string name = read_proc_file("/proc/" + std::to_string(pid) + "/comm", 256);
  while (!name.empty() && name.back() == '\n') name.pop_back();
  return name;
}

std::string process_program(pid_t pid) {
  char target[4096];
  const std::string link = pid == 0 ? "/proc/self/exe" : "/proc/" + std::to_string(pid) + "/exe";
  const ssize_t n = readlink(link.c_str(), target, sizeof target);
  return n > 0 ? std::string(target, static_cast<std::size_t>(n)) : std::string();
}

}  // namespace flowrun
