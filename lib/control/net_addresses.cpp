// This host's IPv4 addresses and routes, and HOST:PORT endpoint lists: what
// the control plane's sockets are bound to and dial.
#include "flowrun/net_addresses.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdint>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace flowrun::cluster {

bool is_loopback(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1" || address == "localhost";
}

std::string destination_host(const std::string& destination) {
  const auto at = destination.rfind('@');
  return at == std::string::npos ? destination : destination.substr(at + 1);
}

std::optional<std::string> resolve_ipv4(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return std::nullopt;
  char text[INET_ADDRSTRLEN] = {};
  const auto* in = reinterpret_cast<const sockaddr_in*>(found->ai_addr);
  inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
  freeaddrinfo(found);
  return std::string(text);
}

std::optional<std::string> interface_of(const std::string& address) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> name;
  for (ifaddrs* i = list; i != nullptr && !name; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    if (address == text) name = i->ifa_name;
  }
  freeifaddrs(list);
  return name;
}

std::optional<std::string> route_source(const std::string& host) {
  const auto target = resolve_ipv4(destination_host(host));
  if (!target) return std::nullopt;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);
  inet_pton(AF_INET, target->c_str(), &to.sin_addr);
  std::optional<std::string> source;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0) {
    sockaddr_in local{};
    socklen_t size = sizeof local;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &size) == 0) {
      char text[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &local.sin_addr, text, sizeof text);
      source = text;
    }
  }
  close(fd);
  return source;
}

std::vector<LocalAddress> local_addresses() {
  std::vector<LocalAddress> found;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return found;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    found.push_back({i->ifa_name, text, (i->ifa_flags & IFF_UP) != 0, (i->ifa_flags & IFF_LOOPBACK) != 0});
  }
  freeifaddrs(list);
  return found;
}

std::optional<std::vector<Endpoint>> parse_endpoints(const std::string& list, std::string* error) {
  std::vector<Endpoint> endpoints;
  std::size_t pos = 0;
  while (true) {
    const std::size_t comma = list.find(',', pos);
    const std::string text = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == text.size() ||
        text.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
      *error = "'" + text + "': expected HOST:PORT";
      return std::nullopt;
    }
    std::string host = text.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    endpoints.push_back({host, text.substr(colon + 1), text});
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return endpoints;
}

bool is_this_host(const std::string& host, const std::string& hostname) {
  if (host == "localhost" || host == hostname) return true;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  ifaddrs* ifs = nullptr;
  bool local = false;
  if (getifaddrs(&ifs) == 0) {
    for (addrinfo* a = found; a && !local; a = a->ai_next) {
      if (a->ai_family == AF_INET) {
        const auto want = reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr.s_addr;
        if ((ntohl(want) >> 24) == 127) local = true;
        for (ifaddrs* i = ifs; i && !local; i = i->ifa_next) {
          if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
              reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == want)
            local = true;
        }
      }
    }
    freeifaddrs(ifs);
  }
  freeaddrinfo(found);
  return local;
}

int listen_on_port(const std::string& addr, int port, int* err) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  if (!addr.empty() && inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) {
    close(fd);
    *err = EADDRNOTAVAIL;
    return -1;
  }
  // Two that bind at once both may (SO_REUSEADDR, neither listens yet);
  // then only one listen succeeds.
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(fd, 4096) != 0) {
    *err = errno;
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace flowrun::cluster
