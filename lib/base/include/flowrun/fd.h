// File descriptors: one that closes itself, and the loops that write or
// read one whole.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace flowrun {

// A file descriptor that closes itself.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release();
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Writes all of `data` to `fd`: a write a signal interrupted is retried, and
// on a nonblocking descriptor that is full (EAGAIN) it waits in poll(2)
// until it takes more. Returns false, errno saying why, when the descriptor
// refuses (EPIPE, ENOSPC; EIO for a write that took nothing). Calls only
// write(2) and poll(2), so a signal handler may use it.
bool write_all(int fd, const char* data, std::size_t size);
bool write_all(int fd, std::string_view data);

// What `fd` holds, read to its end or to `limit` bytes, whichever comes
// first; reads a signal interrupted are retried. nullopt when a read fails,
// `err` (when given) then holding its errno. `fd` is left open.
std::optional<std::string> read_all(int fd, std::size_t limit, int* err = nullptr);

}  // namespace flowrun
