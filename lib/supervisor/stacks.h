// Hang forensics: where each live rank is when flowrun stops a step for a
// stall, a timeout or a failure. Before any signal, py-spy dumps every live
// rank's Python stack, all ranks at once, as children whose end the event
// loop waits for, within a total time; without py-spy the kernel tells
// (/proc/PID/wchan, /proc/PID/syscall, the state letter of /proc/PID/stat).
// Each rank's whole stack goes to its stack.txt; the ranks are grouped by
// identical frames and each group named by its innermost frame of user code.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

#include "flowrun/result.h"

namespace flowrun {

struct Worker;

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
};

// Reads `py-spy dump --full-filenames` text. No thread: nullopt.
std::optional<ParsedStack> parse_py_spy_dump(std::string_view text);

// Library code: the standard library, site-packages and dist-packages (torch
// among them), and the interpreter's own frames ("<frozen ...>").
bool is_library_file(std::string_view file);

// "all_reduce (train.py:88)": the innermost frame of user code in the main
// thread, named by the function it called when that is library code.
std::string where_in(const ParsedStack& stack);

// One rank's findings: a stack (py-spy), a kernel state (`key` and `where`
// set, no frames), or why there is none (`missing`).
struct RankStack {
  int rank = -1;
  std::optional<ParsedStack> stack;
  std::string kernel;   // the kernel's words, when that is the source
  std::string missing;  // why no stack
};

// Groups ranks by identical frames (or kernel state): the largest group
// first, then by lowest rank; ranks without a stack grouped by reason, last.
StackReport group_stacks(const std::vector<RankStack>& ranks, const std::string& source);

// "do_epoll_wait (state S, syscall 232)", read from /proc; "" if it is gone.
std::string kernel_state(pid_t pid);

// Takes the live workers' stacks on `io`, then calls `done` (on the loop).
class StackTaker {
 public:
  explicit StackTaker(boost::asio::io_context& io);
  ~StackTaker();
  StackTaker(const StackTaker&) = delete;
  StackTaker& operator=(const StackTaker&) = delete;

  // False (and `done` not called) when no worker is alive. `say` gets
  // flowrun's one line about a missing py-spy (once per process).
  bool start(const std::vector<Worker>& workers, double timeout_s,
             std::function<void(const std::string&)> say, std::function<void()> done);
  // What was found, once `done` ran; nullopt when nothing was taken.
  std::optional<StackReport> take();

 private:
  struct Job;
  // `cut_short`: nullptr when py-spy ended; else it is killed, and the
  // stack is missing for that reason ("": the time ran out).
  void finish_one(Job& job, const char* cut_short);
  void maybe_done();

  boost::asio::io_context& io_;
  boost::asio::steady_timer deadline_;
  std::vector<std::unique_ptr<Job>> jobs_;
  std::function<void()> done_;
  std::optional<StackReport> report_;
  std::string source_;
  double timeout_s_ = 0;
  bool running_ = false;
};

}  // namespace flowrun
