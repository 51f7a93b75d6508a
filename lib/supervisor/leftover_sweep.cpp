#include "leftover_sweep.h"

#include <chrono>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include "flowrun/process.h"

namespace flowrun {

std::vector<pid_t> LeftoverSweep::find() const {
  std::vector<pid_t> found;
  for (pid_t pid : children_of(getpid())) {
    if (pid == guardian_) continue;
    bool worker = false;
    for (const auto& w : workers_) worker = worker || (w.pid == pid && w.alive);
    if (!worker) found.push_back(pid);
  }
  return found;
}

void LeftoverSweep::signal_tree(pid_t pid, int sig) {
  for (pid_t child : children_of(pid)) signal_tree(child, sig);
  if (getpgid(pid) == pid) kill(-pid, sig);
  kill(pid, sig);
}

std::vector<std::string> LeftoverSweep::signal_new(const std::vector<pid_t>& left, bool kill_now) {
  std::vector<std::string> named;
  for (pid_t pid : left) {
    std::string program = process_program(pid);
    const auto [seen, first] = seen_.try_emplace(pid, program);
    if (!first && seen->second == program) continue;
    if (first) named.push_back(fmt::format("{} ({})", pid, process_name(pid)));
    seen->second = std::move(program);
    signal_tree(pid, kill_now ? SIGKILL : SIGTERM);
    if (!kill_now) signal_tree(pid, SIGCONT);
  }
  return named;
}

void LeftoverSweep::recheck_soon() {
  timer_.expires_after(std::chrono::milliseconds(kRecheckMs));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) recheck_();
  });
}

}  // namespace flowrun
