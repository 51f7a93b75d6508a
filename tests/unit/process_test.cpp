// The process module on this machine: ports, spawn errors, finding processes
// by their environment and the guardian.
#include "flowrun/process.h"

#include <algorithm>
#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <cerrno>
#include <fcntl.h>
#include <fstream>
#include <netinet/in.h>
#include <sched.h>
#include <set>
#include <signal.h>
#include <sstream>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "flowrun/net_addresses.h"

#include "process_detail.h"
#include "testing.h"

using namespace flowrun;

namespace {

// What torch's TCPStore does with MASTER_PORT: SO_REUSEADDR, bind, listen.
bool can_listen_on(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 && listen(fd, 1) == 0;
  close(fd);
  return ok;
}

// A plain bind() without SO_REUSEADDR, as a hand-written server does.
bool can_bind_plainly(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  close(fd);
  return ok;
}

// Each spawn test runs once with either way of starting a child: clone with
// CLONE_VM | CLONE_VFORK (the default) and fork (builds with a sanitizer,
// which run the fork way alone: process_detail::can_share_memory).
// 1: by fork; 0: by clone (Catch2's from_range takes no bool).
std::vector<int> spawn_ways() {
  if (!process_detail::can_share_memory) return {1};
  return {0, 1};
}

struct SpawnWay {
  explicit SpawnWay(bool fork) : before(process_detail::spawn_by_fork) {
    process_detail::spawn_by_fork = fork;
  }
  ~SpawnWay() { process_detail::spawn_by_fork = before; }
  SpawnWay(const SpawnWay&) = delete;
  SpawnWay& operator=(const SpawnWay&) = delete;
  bool before;
};

void reap(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
}

}  // namespace

TEST_CASE("held ports are distinct and a worker can still listen on its port", "[process]") {
  std::vector<HeldPort> held;
  std::set<int> ports;
  for (int i = 0; i < 10; ++i) {
    held.push_back(hold_free_port("127.0.0.1"));
    ports.insert(held.back().port);
  }
  CHECK(ports.size() == 10);
  CHECK(std::all_of(ports.begin(), ports.end(), [](int p) { return p > 0 && p < 65536; }));
  CHECK(can_listen_on(held.front().port));
}

TEST_CASE("a held port is none that connect() can take as its local port", "[process]") {
  // The kernel gives each connect() a local port from ip_local_port_range: a
  // MASTER_PORT in it could be taken by any outgoing connection between its
  // release and rank 0's bind.
  std::istringstream range(read_proc_file("/proc/sys/net/ipv4/ip_local_port_range"));
  int lo = 0, hi = 0;
  REQUIRE(range >> lo >> hi);
  REQUIRE(hi - lo < 50000);  // this host leaves ports outside
  for (int i = 0; i < 20; ++i) {
    HeldPort held = hold_free_port("127.0.0.1");
    INFO("port " << held.port << ", ephemeral " << lo << "-" << hi);
    CHECK((held.port < lo || held.port > hi));
    CHECK(held.port >= 1024);
    CHECK((held.port < 29400 || held.port >= 29600));  // torch's defaults
  }
}

TEST_CASE("a held port refuses a plain bind until it is released", "[process]") {
  HeldPort held = hold_free_port("127.0.0.1");
  const int port = held.port;
  CHECK_FALSE(can_bind_plainly(port));
  held.release();
  CHECK(held.port == port);
  CHECK(can_bind_plainly(port));
}

TEST_CASE("of two that listen on one port, the second finds it in use and sees who holds it", "[process]") {
  HeldPort free = hold_free_port("127.0.0.1");
  const int port = free.port;
  free.release();
  int err = 0;
  const int first = cluster::listen_on_port("", port, &err);
  REQUIRE(first >= 0);
  CHECK((fcntl(first, F_GETFD) & FD_CLOEXEC) != 0);  // no worker inherits it
  CHECK(cluster::listen_on_port("", port, &err) == -1);
  CHECK(err == EADDRINUSE);
  CHECK(cluster::listen_on_port("127.0.0.1", port, &err) == -1);  // one address of every address
  CHECK(err == EADDRINUSE);
  const auto holder = port_listener(port);
  REQUIRE(holder);
  CHECK(holder->uid == getuid());
  CHECK(holder->pid == getpid());
  CHECK(holder->name == process_name(getpid()));
  close(first);
  CHECK_FALSE(port_listener(port));
  const int again = cluster::listen_on_port("127.0.0.1", port, &err);
  CHECK(again >= 0);
  close(again);
  CHECK(cluster::listen_on_port("not-an-address", port, &err) == -1);
  CHECK(err == EADDRNOTAVAIL);
}

TEST_CASE("listening_sockets reads /proc/net/tcp's listening sockets on a port", "[process]") {
  const std::string text =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
      "   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0\n"
      "   1: 0100007F:1F90 0100007F:A0B2 01 00000000:00000000 00:00000000 00000000  1000        0 77 1 0\n"
      "   2: 0100007F:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 99 1 0\n"
      "   3: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A "
      "00000000:00000000 "
      "00:00000000 00000000  1001        0 5151 1 0\n"
      "   4: garbage\n";
  using Found = std::vector<std::pair<unsigned long, unsigned>>;
  CHECK(listening_sockets(text, 8080) == Found{{4242, 1000}, {5151, 1001}});  // not the connection (01)
  CHECK(listening_sockets(text, 80) == Found{{99, 0}});
  CHECK(listening_sockets(text, 81).empty());
  CHECK(listening_sockets("", 80).empty());
}

TEST_CASE("find_program looks a name up on the PATH of the given environment", "[process]") {
  CHECK(find_program("sh", {"PATH=/nonexistent:/bin"}) == "/bin/sh");
  CHECK(find_program("/bin/sh", {"PATH=/nonexistent"}) == "/bin/sh");
  int err = 0;
  CHECK(find_program("sh", {"PATH=/nonexistent"}, &err).empty());
  CHECK(err == ENOENT);
  SpawnRequest request;
  request.argv = {"true"};
  request.env = {"PATH=/nonexistent:/bin"};
  SpawnResult r = spawn_process(request);
  REQUIRE(r.pid > 0);
  CHECK(r.program == "/bin/true");
  reap(r.pid);
}

TEST_CASE("spawn says why a command cannot start", "[process]") {
  const bool fork = GENERATE(from_range(spawn_ways())) != 0;
  SpawnWay way(fork);
  INFO("by fork: " << fork);
  SpawnRequest request;
  request.env = {"PATH=/usr/bin:/bin"};
  request.argv = {"no-such-program-flowrun"};
  SpawnResult r = spawn_process(request);
  CHECK(r.pid == -1);
  CHECK(r.exit_code == 127);
  CHECK(r.error == "no-such-program-flowrun: command not found");

  testing::ScopedTempDir dir("process");
  const std::string path = dir.path() + "/not-a-program";
  std::ofstream(path) << "\x01\x02";
  REQUIRE(chmod(path.c_str(), 0755) == 0);  // executable, but not a program the kernel can run
  request.argv = {path};
  r = spawn_process(request);
  CHECK(r.pid == -1);
  CHECK(r.exit_code == 126);
  CHECK(r.error == path + ": Exec format error");

  request.argv = {"true"};
  request.workdir = "/no/such/dir";
  r = spawn_process(request);
  CHECK(r.pid == -1);
  CHECK(r.error == "cannot enter its workdir /no/such/dir: No such file or directory");
}

TEST_CASE("a spawned process runs in its own group with the given environment", "[process]") {
  const bool fork = GENERATE(from_range(spawn_ways())) != 0;
  SpawnWay way(fork);
  INFO("by fork: " << fork);
  SpawnRequest request;
  request.argv = {"sleep", "30"};
  request.env = {"PATH=/usr/bin:/bin", "FLOWRUN_RUN_ID=process-test-marker"};
  SpawnResult r = spawn_process(request);
  REQUIRE(r.pid > 0);
  CHECK(getpgid(r.pid) == r.pid);
  auto found = processes_with_env("FLOWRUN_RUN_ID=process-test-marker");
  CHECK(std::find(found.begin(), found.end(), r.pid) != found.end());
  auto children = children_of(getpid());
  CHECK(std::find(children.begin(), children.end(), r.pid) != children.end());
  CHECK(process_name(r.pid) == "sleep");
  signal_group(r.pid, SIGKILL);
  reap(r.pid);
  CHECK(processes_with_env("FLOWRUN_RUN_ID=process-test-marker").empty());
}

// A /proc/PID/status line's mask of signals ("SigBlk:\t0000000000000000").
unsigned long long signal_mask(pid_t pid, const std::string& field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1), nullptr, 16);
  }
  return ~0ULL;
}

TEST_CASE("a spawned process starts with no signal blocked or ignored, and the caller's mask is kept",
          "[process]") {
  const bool fork = GENERATE(from_range(spawn_ways())) != 0;
  SpawnWay way(fork);
  INFO("by fork: " << fork);
  struct sigaction ignore {
  }, pipe_before{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &pipe_before);
  sigset_t blocked, mask_before, mask_after;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &blocked, &mask_before);
  pthread_sigmask(SIG_BLOCK, nullptr, &mask_before);
  SpawnRequest request;
  request.argv = {"sleep", "30"};
  request.env = {"PATH=/usr/bin:/bin"};
  SpawnResult r = spawn_process(request);
  pthread_sigmask(SIG_BLOCK, nullptr, &mask_after);
  REQUIRE(r.pid > 0);
  CHECK(signal_mask(r.pid, "SigBlk") == 0);
  CHECK(signal_mask(r.pid, "SigIgn") == 0);
  CHECK(sigismember(&mask_after, SIGUSR2) == 1);
  CHECK(sigismember(&mask_after, SIGTERM) == sigismember(&mask_before, SIGTERM));
  CHECK(sigismember(&mask_after, SIGCHLD) == sigismember(&mask_before, SIGCHLD));
  pthread_sigmask(SIG_UNBLOCK, &blocked, nullptr);
  sigaction(SIGPIPE, &pipe_before, nullptr);
  signal_group(r.pid, SIGKILL);
  reap(r.pid);
}

TEST_CASE("a spawned process runs on the CPUs it was given", "[process]") {
  const bool fork = GENERATE(from_range(spawn_ways())) != 0;
  SpawnWay way(fork);
  INFO("by fork: " << fork);
  cpu_set_t mine;
  CPU_ZERO(&mine);
  REQUIRE(sched_getaffinity(0, sizeof mine, &mine) == 0);
  int last = -1;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &mine)) last = cpu;
  }
  SpawnRequest request;
  request.argv = {"sleep", "30"};
  request.env = {"PATH=/usr/bin:/bin"};
  request.cpus = {last};
  SpawnResult r = spawn_process(request);
  REQUIRE(r.pid > 0);
  cpu_set_t theirs;
  CPU_ZERO(&theirs);
  CHECK(sched_getaffinity(r.pid, sizeof theirs, &theirs) == 0);
  CHECK(CPU_COUNT(&theirs) == 1);
  CHECK(CPU_ISSET(last, &theirs));
  signal_group(r.pid, SIGKILL);
  reap(r.pid);
  request.cpus = {CPU_SETSIZE + 7};  // no such CPU: the kernel refuses the set
  r = spawn_process(request);
  CHECK(r.pid == -1);
  CHECK(r.error == "cannot set its CPU affinity: Invalid argument");
}

TEST_CASE("the guardian kills the run's processes when its owner dies, and nothing when disarmed",
          "[process]") {
  // A stand-in for flowrun: a child that starts a guardian and a worker
  // whose own child called setsid (out of reach of the parent-death signal
  // and of the worker's process group), then dies by SIGKILL or disarms.
  // The worker's environment lacks the mark, and a step's env: that sets
  // the same name does not take it away: spawn_process puts it in.
  for (bool disarm : {false, true}) {
    const std::string secret = make_secret();
    const std::string entry = "FLOWRUN_INVOCATION=" + secret;
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    const pid_t owner = fork();
    REQUIRE(owner >= 0);
    if (owner == 0) {
      Guardian guardian;
      guardian.start("FLOWRUN_INVOCATION", secret);
      SpawnRequest request;
      request.argv = {"sh", "-c", "setsid sleep 30 & echo started; wait"};
      request.env = {"PATH=/usr/bin:/bin", "FLOWRUN_INVOCATION=chosen-by-the-user"};
      request.stdout_fd = ready[1];
      spawn_process(request);
      if (disarm) {
        usleep(200'000);
        guardian.disarm();
      }
      pause();
      _exit(0);
    }
    close(ready[1]);
    char line[16] = {};
    REQUIRE(read(ready[0], line, sizeof line) > 0);  // the setsid child exists
    close(ready[0]);
    usleep(disarm ? 300'000 : 50'000);
    kill(owner, SIGKILL);
    reap(owner);
    std::vector<pid_t> left;
    for (int i = 0; i < (disarm ? 10 : 100); ++i) {
      left = processes_with_env(entry);
      if (left.empty()) break;
      usleep(20'000);
    }
    if (disarm) {
      // Disarmed, the guardian left the setsid grandchild alone; clean it up here.
      CHECK(left.size() == 1);
      for (pid_t pid : left) kill(pid, SIGKILL);
    } else {
      CHECK(left.empty());
    }
  }
}

TEST_CASE(
    "the guardian is gone once disarm returns, and once an armed one's owner let it go it stopped the run's "
    "processes first",
    "[process]") {
  // A stand-in for flowrun's two ways out that run code: disarm() (a normal
  // exit) and the Guardian going out of scope armed (an exception). Right
  // after either, with no wait of the test's own, the owner looks: its
  // guardian is no process any more (not even a zombie), the directory it
  // was given is removed, and after the second the worker's setsid child,
  // which carries the mark, is gone too.
  for (bool disarm : {true, false}) {
    const std::string secret = make_secret();
    const std::string entry = "FLOWRUN_INVOCATION=" + secret;
    const testing::ScopedTempDir tmp("guardian-gone");
    const std::string dir = tmp.path() + "/private";
    REQUIRE(mkdir(dir.c_str(), 0700) == 0);
    int said[2];
    REQUIRE(pipe(said) == 0);
    const pid_t owner = fork();
    REQUIRE(owner >= 0);
    if (owner == 0) {
      close(said[0]);
      pid_t g = -1;
      {
        Guardian guardian;
        guardian.start("FLOWRUN_INVOCATION", secret);
        guardian.remove_on_exit(dir);
        g = guardian.pid();
        int ready[2];
        if (pipe(ready) != 0) _exit(2);
        SpawnRequest request;
        request.argv = {"sh", "-c", "setsid sleep 30 & echo started; wait"};
        request.env = {"PATH=/usr/bin:/bin"};
        request.stdout_fd = ready[1];
        spawn_process(request);
        close(ready[1]);
        char line[16];
        if (read(ready[0], line, sizeof line) <= 0) _exit(3);  // the setsid child exists
        if (disarm) guardian.disarm();
      }
      const std::string verdict = std::string(kill(g, 0) == 0 ? "guardian-left" : "guardian-gone") + " " +
                                  (testing::exists(dir) ? "dir-left" : "dir-gone") + " " +
                                  std::to_string(processes_with_env(entry).size());
      _exit(write(said[1], verdict.data(), verdict.size()) == static_cast<ssize_t>(verdict.size()) ? 0 : 4);
    }
    close(said[1]);
    std::string verdict(64, '\0');
    const ssize_t n = read(said[0], verdict.data(), verdict.size());
    close(said[0]);
    reap(owner);
    verdict.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    INFO("disarmed: " << disarm);
    // Disarmed, the guardian left the worker and its setsid child alone.
    CHECK(verdict == (disarm ? "guardian-gone dir-gone 2" : "guardian-gone dir-gone 0"));
    for (pid_t pid : processes_with_env(entry)) kill(pid, SIGKILL);
  }
}

namespace {

// Waits (up to 10 s) until `pid`, not our child, is gone.
bool wait_ended(pid_t pid) {
  for (int i = 0; i < 500; ++i) {
    const char state = process_state(pid);
    if (state == 0 || state == 'Z') return true;
    usleep(20'000);
  }
  return false;
}

using testing::exists;

}  // namespace

TEST_CASE("the guardian survives a kill of its owner's process group and touches only its own mark",
          "[process]") {
  // Two owners, each in a process group of its own like a shell's job, with
  // the same run id but their own secrets; each starts a worker and hands
  // its guardian a directory. Owner A's whole group is SIGKILLed: its
  // guardian (in a session of its own) kills A's worker and removes A's
  // directory; B's worker and directory are untouched.
  const testing::ScopedTempDir scratch_a("guardian-test-a"), scratch_b("guardian-test-b");
  const std::string& dir_a = scratch_a.path();
  const std::string& dir_b = scratch_b.path();
  REQUIRE(mkdir((dir_a + "/rank0").c_str(), 0700) == 0);
  struct Owner {
    pid_t pid = -1;
    pid_t guardian = -1;
    std::string entry;
  };
  auto start_owner = [](const std::string& dir) {
    Owner o;
    const std::string secret = make_secret();
    o.entry = "FLOWRUN_INVOCATION=" + secret;
    int ready[2], told[2];
    REQUIRE(pipe(ready) == 0);
    REQUIRE(pipe(told) == 0);
    o.pid = fork();
    REQUIRE(o.pid >= 0);
    if (o.pid == 0) {
      setpgid(0, 0);
      Guardian guardian;
      guardian.start("FLOWRUN_INVOCATION", secret);
      guardian.remove_on_exit(dir);
      SpawnRequest request;
      request.argv = {"sh", "-c", "setsid sleep 30 & echo started; wait"};
      request.env = {"PATH=/usr/bin:/bin", "FLOWRUN_RUN_ID=same-run-id"};
      request.stdout_fd = ready[1];
      spawn_process(request);
      const pid_t g = guardian.pid();
      [[maybe_unused]] ssize_t n = write(told[1], &g, sizeof g);
      pause();
      _exit(0);
    }
    close(ready[1]);
    close(told[1]);
    char line[16] = {};
    REQUIRE(read(ready[0], line, sizeof line) > 0);  // the setsid child exists
    REQUIRE(read(told[0], &o.guardian, sizeof o.guardian) == sizeof o.guardian);
    close(ready[0]);
    close(told[0]);
    return o;
  };
  const Owner a = start_owner(dir_a);
  const Owner b = start_owner(dir_b);
  CHECK(getsid(a.guardian) == a.guardian);  // a session of its own
  CHECK(getpgid(a.guardian) != a.pid);
  CHECK(is_guardian(a.guardian));
  CHECK_FALSE(is_guardian(a.pid));
  CHECK(processes_with_env(a.entry).size() == 2);  // the worker and its setsid child
  const auto b_before = processes_with_env(b.entry);
  CHECK(b_before.size() == 2);
  kill(-a.pid, SIGKILL);
  reap(a.pid);
  CHECK(wait_ended(a.guardian));
  CHECK(processes_with_env(a.entry).empty());
  CHECK_FALSE(exists(dir_a));
  CHECK(processes_with_env(b.entry).size() == b_before.size());
  CHECK(exists(dir_b));
  // B ends by an exception (its guardian's pipe closes unannounced): the same.
  kill(b.pid, SIGKILL);
  reap(b.pid);
  CHECK(wait_ended(b.guardian));
  CHECK(processes_with_env(b.entry).empty());
  CHECK_FALSE(exists(dir_b));
}

TEST_CASE("no child starts before its guardian is in a session of its own and named", "[process]") {
  // On one CPU, with the guardian at the lowest priority, the owner goes on
  // after the fork before the guardian has run a line; its first spawn must
  // still find the guardian out of the owner's process group (a kill of the
  // group cannot take it) and known as one.
  for (int round = 0; round < 20; ++round) {
    int told[2];
    REQUIRE(pipe(told) == 0);
    const pid_t owner = fork();
    REQUIRE(owner >= 0);
    if (owner == 0) {
      close(told[0]);
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(sched_getcpu(), &one);
      sched_setaffinity(0, sizeof one, &one);
      setpgid(0, 0);
      Guardian guardian;
      guardian.start("FLOWRUN_INVOCATION", make_secret());
      setpriority(PRIO_PROCESS, static_cast<id_t>(guardian.pid()), 19);
      SpawnRequest request;
      request.argv = {"true"};
      request.env = {"PATH=/usr/bin:/bin"};
      const SpawnResult child = spawn_process(request);
      const pid_t g = guardian.pid();
      const char verdict = child.pid < 0 ? 'x' : !is_guardian(g) ? 'n' : getsid(g) != g ? 's' : 'y';
      if (child.pid > 0) reap(child.pid);
      [[maybe_unused]] ssize_t n = write(told[1], &verdict, 1);
      guardian.disarm();
      _exit(0);
    }
    close(told[1]);
    char verdict = 0;
    CHECK(read(told[0], &verdict, 1) == 1);
    close(told[0]);
    reap(owner);
    INFO("round " << round << ": 'n' not yet named, 's' still in the owner's session");
    REQUIRE(verdict == 'y');
  }
}

TEST_CASE("fds 0-2 closed at start are given /dev/null, so no file opened later lands on them", "[process]") {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(STDOUT_FILENO);
    close(STDERR_FILENO);
    if (!sanitize_standard_fds()) _exit(2);
    char target[64] = {};
    for (int fd : {1, 2}) {
      const ssize_t n = readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), target, sizeof target - 1);
      if (n <= 0 || std::string(target, static_cast<std::size_t>(n)) != "/dev/null") _exit(3);
    }
    const int fd = open("/proc/self/stat", O_RDONLY);
    _exit(fd > 2 ? 0 : 4);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("secrets are 32 hex digits and never repeat", "[process]") {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string s = make_secret();
    CHECK(s.size() == 32);
    CHECK(s.find_first_not_of("0123456789abcdef") == std::string::npos);
    seen.insert(s);
  }
  CHECK(seen.size() == 100);
}
