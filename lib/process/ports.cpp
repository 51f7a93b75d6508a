// The ranks' MASTER_PORT, held bound (never listening, never connecting)
// until they start; and who listens on a port that is taken. The one file
// outside lib/control with a socket (tests/layers checks it).
#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <dirent.h>
#include <netinet/in.h>
#include <random>
#include <sys/socket.h>
#include <unistd.h>

#include "flowrun/error.h"
#include "flowrun/process.h"

namespace flowrun {

namespace {

// The whitespace-separated words of `line`.
std::vector<std::string_view> words_of(std::string_view line) {
  std::vector<std::string_view> words;
  std::size_t pos = 0;
  while (pos < line.size()) {
    while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
    const std::size_t start = pos;
    while (pos < line.size() && line[pos] != ' ' && line[pos] != '\t') ++pos;
    if (pos > start) words.push_back(line.substr(start, pos - start));
  }
  return words;
}

template <typename T>
bool number(std::string_view text, T& value, int base) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  return ec == std::errc() && end == text.data() + text.size();
}

// A process of this user with `inode` among its descriptors (socket:[INODE]); 0: none.
pid_t holder_of(unsigned long inode) {
  const std::string want = "socket:[" + std::to_string(inode) + "]";
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return 0;
  pid_t found = 0;
  while (dirent* entry = readdir(proc)) {
    pid_t pid = 0;
    if (!number(std::string_view(entry->d_name), pid, 10) || pid <= 0) continue;
    const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
    DIR* fds = opendir(fd_dir.c_str());  // another user's: not readable
    if (fds == nullptr) continue;
    while (dirent* fd = readdir(fds)) {
      char target[64] = {};
      const std::string link = fd_dir + "/" + fd->d_name;
      const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
      if (n > 0 && std::string_view(target, static_cast<std::size_t>(n)) == want) {
        found = pid;
        break;
      }
    }
    closedir(fds);
    if (found != 0) break;
  }
  closedir(proc);
  return found;
}

}  // namespace

std::vector<std::pair<unsigned long, unsigned>> listening_sockets(std::string_view proc_net_tcp, int port) {
  std::vector<std::pair<unsigned long, unsigned>> found;
  std::size_t pos = proc_net_tcp.find('\n');  // the header
  while (pos != std::string_view::npos && pos < proc_net_tcp.size()) {
    const std::size_t end = std::min(proc_net_tcp.find('\n', pos + 1), proc_net_tcp.size());
    const auto words = words_of(proc_net_tcp.substr(pos + 1, end - pos - 1));
    pos = end;
    if (words.size() < 10 || words[3] != "0A") continue;  // TCP_LISTEN
    const std::string_view local = words[1];
    const std::size_t colon = local.rfind(':');
    int local_port = 0;
    unsigned uid = 0;
    unsigned long inode = 0;
    if (colon == std::string_view::npos || !number(local.substr(colon + 1), local_port, 16) ||
        local_port != port || !number(words[7], uid, 10) || !number(words[9], inode, 10))
      continue;
    found.emplace_back(inode, uid);
  }
  return found;
}

std::optional<PortListener> port_listener(int port) {
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    const std::string text = read_proc_file(table, 64 << 20);
    for (const auto& [inode, uid] : listening_sockets(text, port)) {
      PortListener listener;
      listener.uid = uid;
      listener.pid = inode != 0 ? holder_of(inode) : 0;
      if (listener.pid != 0) listener.name = process_name(listener.pid);
      return listener;
    }
  }
  return std::nullopt;
}

HeldPort::HeldPort(HeldPort&& other) noexcept : port(other.port), fd(other.fd) {
  other.fd = -1;
  other.port = 0;
}

HeldPort& HeldPort::operator=(HeldPort&& other) noexcept {
  if (this != &other) {
    release();
    port = other.port;
    fd = other.fd;
    other.fd = -1;
    other.port = 0;
  }
  return *this;
}

HeldPort::~HeldPort() { release(); }

void HeldPort::release() {
  if (fd >= 0) close(fd);
  fd = -1;
}

namespace {

// The ports connect() takes its local ports from
// (net.ipv4.ip_local_port_range); Linux's default when it cannot be read.
std::pair<int, int> ephemeral_ports() {
  const std::string text = read_proc_file("/proc/sys/net/ipv4/ip_local_port_range", 64);
  const std::string_view line = std::string_view(text).substr(0, text.find('\n'));
  const auto words = words_of(line);  // views into `text`
  int lo = 0, hi = 0;
  if (words.size() == 2 && number(words[0], lo, 10) && number(words[1], hi, 10) && 0 < lo && lo <= hi)
    return {lo, hi};
  return {32768, 60999};
}

// `addr` as a socket address with `port`: any address when it is not IPv4.
sockaddr_in address(const std::string& addr, int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) sa.sin_addr.s_addr = htonl(INADDR_ANY);
  return sa;
}

int new_socket() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error("cannot create a socket for MASTER_PORT: " + std::string(std::strerror(errno)));
  return fd;
}

// A port outside `ephemeral`, bound by `held` alone; 0 when none of a few
// random ones was free or too few ports lie outside. It binds without
// SO_REUSEADDR, so that a port anyone holds (even in TIME_WAIT, or held by
// another flowrun) is passed over, and sets it after, so that a rank's store
// (SO_REUSEADDR, as torch's) could bind and listen there even while it is
// held, as on a port the kernel chose.
int hold_outside(HeldPort& held, const std::string& addr, std::pair<int, int> ephemeral) {
  // From 10000 up, less the ephemeral range and torch's own defaults
  // (29400 for c10d rendezvous, 29500 for MASTER_PORT), which another
  // launcher on the host may take without asking.
  std::vector<std::pair<int, int>> spans;  // [first, last]
  const auto add = [&spans](int first, int last) {
    if (first <= last) spans.emplace_back(first, last);
  };
  const int lo = std::max(ephemeral.first, 10000), hi = std::max(ephemeral.second, 10000 - 1);
  add(10000, std::min(lo - 1, 29399));
  add(std::max(10000, 29600), lo - 1);
  add(hi + 1, 65535);
  std::size_t total = 0;
  for (const auto& [first, last] : spans) total += static_cast<std::size_t>(last - first + 1);
  if (total < 1000) return 0;
  std::mt19937_64 random(std::random_device{}() ^ static_cast<std::uint64_t>(getpid()));
  for (int attempt = 0; attempt < 64; ++attempt) {
    std::size_t k = random() % total;
    int port = 0;
    for (const auto& [first, last] : spans) {
      const auto size = static_cast<std::size_t>(last - first + 1);
      if (k < size) {
        port = first + static_cast<int>(k);
        break;
      }
      k -= size;
    }
    held.fd = new_socket();
    const sockaddr_in sa = address(addr, port);
    if (bind(held.fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0) {
      int one = 1;
      setsockopt(held.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      return held.port = port;
    }
    held.release();
  }
  return 0;
}

}  // namespace

HeldPort hold_free_port(const std::string& addr) {
  HeldPort held;
  if (hold_outside(held, addr, ephemeral_ports()) != 0) return held;
  // A host whose ephemeral range leaves too few ports outside: the kernel's
  // choice.
  held.fd = new_socket();
  int one = 1;
  setsockopt(held.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa = address(addr, 0);
  if (bind(held.fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    throw Error("cannot find a free port on " + addr +
                " for MASTER_PORT: " + std::string(std::strerror(errno)));
  socklen_t len = sizeof sa;
  if (getsockname(held.fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    throw Error("cannot read the port chosen for MASTER_PORT: " + std::string(std::strerror(errno)));
  held.port = ntohs(sa.sin_port);
  return held;
}

}  // namespace flowrun
