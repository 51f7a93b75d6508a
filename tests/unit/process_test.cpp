// The process module on this machine: ports, spawn errors, finding processes
// by their environment and the guardian.
#include "flowrun/process.h"

#include <algorithm>
#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <cerrno>
#include <netinet/in.h>
#include <set>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

TEST_CASE("a held port refuses a plain bind until it is released", "[process]") {
  HeldPort held = hold_free_port("127.0.0.1");
  const int port = held.port;
  CHECK_FALSE(can_bind_plainly(port));
  held.release();
  CHECK(held.port == port);
  CHECK(can_bind_plainly(port));
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
  SpawnRequest request;
  request.env = {"PATH=/usr/bin:/bin"};
  request.argv = {"no-such-program-flowrun"};
  SpawnResult r = spawn_process(request);
  CHECK(r.pid == -1);
  CHECK(r.exit_code == 127);
  CHECK(r.error == "no-such-program-flowrun: command not found");

  char path[] = "/tmp/flowrun-not-a-program-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, "\x01\x02", 2) == 2);
  close(fd);
  chmod(path, 0755);  // executable, but not a program the kernel can run
  request.argv = {path};
  r = spawn_process(request);
  unlink(path);
  CHECK(r.pid == -1);
  CHECK(r.exit_code == 126);
  CHECK(r.error == std::string(path) + ": Exec format error");

  request.argv = {"true"};
  request.workdir = "/no/such/dir";
  r = spawn_process(request);
  CHECK(r.pid == -1);
  CHECK(r.error == "cannot enter its workdir /no/such/dir: No such file or directory");
}

TEST_CASE("a spawned process runs in its own group with the given environment", "[process]") {
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

TEST_CASE("the guardian kills the run's processes when its owner dies, and nothing when disarmed",
          "[process]") {
  // A stand-in for flowrun: a child that starts a guardian and a worker
  // whose own child called setsid (out of reach of the parent-death signal
  // and of the worker's process group), then dies by SIGKILL or disarms.
  for (bool disarm : {false, true}) {
    const std::string id = disarm ? "guardian-test-disarmed" : "guardian-test-killed";
    const std::string entry = "FLOWRUN_RUN_ID=" + id;
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    const pid_t owner = fork();
    REQUIRE(owner >= 0);
    if (owner == 0) {
      Guardian guardian;
      guardian.start(id);
      SpawnRequest request;
      request.argv = {"sh", "-c", "setsid sleep 30 & echo started; wait"};
      request.env = {"PATH=/usr/bin:/bin", entry};
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
