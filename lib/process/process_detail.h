// What the process module's files share and no other module sees.
#pragma once

#include <csignal>
#include <cstring>
#include <string>
#include <vector>

namespace flowrun::process_detail {

inline std::string errno_text(int err) { return std::strerror(err); }

// Set by Guardian::start: the mark every spawned child gets ("KEY=SECRET").
extern std::string guardian_mark;

// Returns once the guardian Guardian::start forked is in a session of its own
// and named (or gone); at once when there is none or it was already waited
// for. spawn_process calls it before every child.
void wait_for_guardian();

// Whether a child may share this process's memory until it execs (clone with
// CLONE_VM | CLONE_VFORK). Not in a build with a sanitizer: its run-time does
// not know a thread that shares memory without being one, and its
// interceptors running in the child corrupt its state (ThreadSanitizer then
// reports races that are not there).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool can_share_memory = false;
#else
inline constexpr bool can_share_memory = true;
#endif

// spawn_process starts its children with fork(2) instead: where the memory
// cannot be shared, and in the tests of both ways (always true where
// can_share_memory is false).
extern bool spawn_by_fork;

// The execve environment of a child: `env` ("NAME=VALUE") with the
// guardian's mark first (within what processes_with_env reads of a huge
// environment), replacing any entry of the same name; null-terminated. The
// pointers are into `env` and the mark.
std::vector<char*> marked_envp(const std::vector<std::string>& env);

// The signals a child gets back at their default disposition before it execs
// (flowrun ignores or handles them).
inline constexpr int kResetSignals[] = {SIGPIPE, SIGINT, SIGTERM, SIGCHLD, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2};

// In a child between fork and exec (async-signal-safe): close-on-exec on
// every descriptor from 3 up, whatever flag it was made with, so that the
// program gets fds 0-2 and nothing of flowrun's: not the console (a dup()
// without O_CLOEXEC would hold the caller's `$(flowrun ...)` or `| tee` open
// for as long as the rank or its children live), not an agent's ssh channel.
// A report pipe to the parent is closed by the exec, as it should be. Where
// close_range cannot set the flag (Linux before 5.11), one descriptor at a
// time up to the open-files limit.
void cloexec_above_stdio();

}  // namespace flowrun::process_detail
