// torchrun's --signals-to-handle, read into the signals that stop a group.
#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <signal.h>
#include <utility>

#include "flowrun/supervisor.h"

namespace flowrun {

std::optional<std::vector<int>> parse_signals_to_handle(const std::string& text, std::string* error) {
  static constexpr std::pair<const char*, int> kKnown[] = {{"SIGTERM", SIGTERM}, {"SIGINT", SIGINT},
                                                           {"SIGHUP", SIGHUP},   {"SIGQUIT", SIGQUIT},
                                                           {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}};
  std::vector<int> stops;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = std::min(text.find(',', pos), text.size());
    std::string name = text.substr(pos, end - pos);
    pos = end + 1;
    while (!name.empty() && name.front() == ' ') name.erase(0, 1);
    while (!name.empty() && name.back() == ' ') name.pop_back();
    if (name.empty()) continue;
    for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (name.rfind("SIG", 0) != 0) name = "SIG" + name;
    int sig = 0;
    for (const auto& [known, number] : kKnown) {
      if (name == known) sig = number;
    }
    if (sig == 0) {
      *error = fmt::format(
          "'{}': flowrun handles SIGTERM, SIGINT, SIGHUP and SIGQUIT (stop signals) and forwards SIGUSR1 "
          "and SIGUSR2",
          name);
      return std::nullopt;
    }
    if (sig != SIGUSR1 && sig != SIGUSR2 && std::find(stops.begin(), stops.end(), sig) == stops.end())
      stops.push_back(sig);
  }
  return stops;
}

}  // namespace flowrun
