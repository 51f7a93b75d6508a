// What the process module's files share and no other module sees.
#pragma once

#include <csignal>
#include <string>
#include <vector>

namespace flowrun::process_detail {

// Set by Guardian::start: the mark every spawned child gets ("KEY=SECRET").
extern std::string guardian_mark;

// The execve environment of a child: `env` ("NAME=VALUE") with the
// guardian's mark first (within what processes_with_env reads of a huge
// environment), replacing any entry of the same name; null-terminated. The
// pointers are into `env` and the mark.
std::vector<char*> marked_envp(const std::vector<std::string>& env);

// The signals a child gets back at their default disposition before it execs
// (flowrun ignores or handles them).
inline constexpr int kResetSignals[] = {SIGPIPE, SIGINT, SIGTERM, SIGCHLD, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2};

}  // namespace flowrun::process_detail
