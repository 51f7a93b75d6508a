// lib/base/fd: the descriptor that closes itself, and writing or reading
// one whole, through pipes (a nonblocking one that fills up included).
#include "flowrun/fd.h"

#include <catch2/catch.hpp>
#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <string>
#include <sys/ioctl.h>
#include <thread>
#include <unistd.h>

using namespace flowrun;

namespace {

bool is_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

}  // namespace

TEST_CASE("UniqueFd closes its descriptor when it goes, or is reset, and not once released", "[base][fd]") {
  int fds[2];
  REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
  {
    UniqueFd a(fds[0]);
    UniqueFd b(std::move(a));
    CHECK_FALSE(a);
    CHECK(b.get() == fds[0]);
  }
  CHECK_FALSE(is_open(fds[0]));
  UniqueFd c(fds[1]);
  const int kept = c.release();
  CHECK_FALSE(c);
  CHECK(is_open(kept));
  c.reset(kept);
  c.reset();
  CHECK_FALSE(is_open(kept));
}

TEST_CASE("write_all and read_all: a pipe written whole and read to its end or to the limit", "[base][fd]") {
  int fds[2];
  REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
  UniqueFd in(fds[0]), out(fds[1]);
  // Four times what the pipe holds, on a nonblocking descriptor: write_all
  // waits whenever the pipe is full instead of giving up. It is read only
  // once it has filled up, so the wait is certain to happen.
  REQUIRE(fcntl(out.get(), F_SETFL, O_NONBLOCK) == 0);
  const int capacity = fcntl(out.get(), F_GETPIPE_SZ);
  REQUIRE(capacity > 0);
  std::string text;
  for (int i = 0; text.size() < 4 * static_cast<std::size_t>(capacity); ++i) text += std::to_string(i) + "\n";
  bool written = false;
  std::thread writer([&] {
    written = write_all(out.get(), text);
    out.reset();
  });
  int queued = 0;
  while (queued < capacity && ioctl(in.get(), FIONREAD, &queued) == 0) {
  }
  REQUIRE(queued == capacity);
  const std::optional<std::string> read = read_all(in.get(), 1 << 20);
  writer.join();
  CHECK(written);
  REQUIRE(read.has_value());
  CHECK(*read == text);

  REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
  in.reset(fds[0]);
  out.reset(fds[1]);
  CHECK(write_all(out.get(), "0123456789", 10));
  CHECK(read_all(in.get(), 4) == "0123");  // at the limit, without waiting for the end
  out.reset();
  CHECK(read_all(in.get(), 100) == "456789");
}

TEST_CASE("write_all and read_all say why they fail", "[base][fd]") {
  int fds[2];
  REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
  UniqueFd in(fds[0]), out(fds[1]);
  in.reset();
  auto old = signal(SIGPIPE, SIG_IGN);
  errno = 0;
  CHECK_FALSE(write_all(out.get(), "x"));
  CHECK(errno == EPIPE);
  signal(SIGPIPE, old);
  int err = 0;
  CHECK_FALSE(read_all(out.get(), 10, &err).has_value());  // the write end
  CHECK(err == EBADF);
}
