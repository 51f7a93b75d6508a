// Hang forensics, the pure parts: a rank's Python stack as py-spy prints it,
// where in the user's code it is, and the ranks grouped by identical stacks
// with the odd ones out named. The supervisor takes the stacks of its own
// ranks (stack_taker.h); an agent sends them to the head (the protocol's
// Stacks message), which groups every node's ranks together with the same
// functions, so a step on one host and one across nodes report alike.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

#include "flowrun/result.h"

namespace flowrun {

struct StackFrame {
  std::string function;
  std::string file;  // as py-spy gives it (--full-filenames)
  int line = 0;
  bool operator==(const StackFrame&) const = default;
};

// One rank's stack: its threads' frames, innermost first, in the order
// py-spy lists them; `main` is the index of the MainThread's (0 if none is
// named so). Thread ids, addresses and the header lines are left out.
struct ParsedStack {
  std::vector<std::vector<StackFrame>> threads;
  std::size_t main = 0;
  // py-spy found the main thread blocked in the kernel ("(idle)" in its
  // thread's line), not running or waiting for the GIL.
  bool main_idle = false;
};

// Reads `py-spy dump --full-filenames` text. No thread: nullopt.
std::optional<ParsedStack> parse_py_spy_dump(std::string_view text);

// Library code: the standard library, site-packages and dist-packages (torch
// among them), and the interpreter's own frames ("<frozen ...>").
bool is_library_file(std::string_view file);

// "all_reduce (train.py:88)": the innermost frame of user code in the main
// thread, named by the function it called when that is library code.
std::string where_in(const ParsedStack& stack);

// One rank's findings: a stack (py-spy's text in `dump`, parsed in
// `stack`), a kernel state (`kernel`, no frames), or why there is none
// (`missing`).
struct RankStack {
  int rank = -1;
  std::optional<ParsedStack> stack;
  std::string kernel;   // the kernel's words, when that is the source
  std::string missing;  // why no stack
  std::string dump;     // py-spy's output as it printed it (what stack.txt holds)
};

// The most of one rank's py-spy text that is kept and sent to the head;
// past it the text is cut at a line's end and says so.
inline constexpr std::size_t kMaxStackDumpBytes = 256 * 1024;

// `text` within kMaxStackDumpBytes, cut at a line's end with a last line
// "(cut: N bytes more)".
std::string cap_stack_dump(std::string text);

// What a rank's stack.txt holds: py-spy's text; or, from the kernel,
// "(py-spy missing: WHY)\nkernel: WORDS"; plus "(no stack: WHY)" when none.
// `looked`: why py-spy is missing ("" when it is not).
std::string stack_file_text(const RankStack& found, const std::string& looked);

// flowrun's line when py-spy is missing (`looked`: why, or where), with the
// command that installs it: "flowrun: cannot take the ranks' Python stacks:
// LOOKED (install it: pip install py-spy); saying what the kernel tells
// instead". Said once: by the host whose ranks they are, and at the head
// for a node whose stacks came from its kernel.
std::string py_spy_missing_line(const std::string& looked);

// Groups ranks by identical frames (or kernel state): the largest group
// first, then by lowest rank; ranks without a stack grouped by reason, last.
StackReport group_stacks(const std::vector<RankStack>& ranks, const std::string& source);

// "do_epoll_wait (state S, syscall 232)", read from /proc; "" if it is gone.
std::string kernel_state(pid_t pid);

}  // namespace flowrun
