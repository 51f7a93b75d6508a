#include "flowrun/fd.h"

#include <algorithm>
#include <cerrno>
#include <poll.h>
#include <unistd.h>

namespace flowrun {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int UniqueFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, -1);
    } else {
      if (n == 0) errno = EIO;
      return false;
    }
  }
  return true;
}

bool write_all(int fd, std::string_view data) { return write_all(fd, data.data(), data.size()); }

std::optional<std::string> read_all(int fd, std::size_t limit, int* err) {
  std::string text;
  char buf[65536];
  while (text.size() < limit) {
    const ssize_t n = read(fd, buf, std::min(sizeof buf, limit - text.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (err != nullptr) *err = errno;
      return std::nullopt;
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

}  // namespace flowrun
