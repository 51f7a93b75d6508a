#include "node_check.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <fmt/format.h>
#include <sys/statvfs.h>

#include "flowrun/child.h"
#include "flowrun/clock.h"
#include "flowrun/files.h"
#include "flowrun/reach.h"
#include "flowrun/text.h"

namespace flowrun::cluster {

namespace asio = boost::asio;

namespace {

// A whole number 0 or more, or -1.
int whole(const std::string& text) {
  int n = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  return ec == std::errc() && end == text.data() + text.size() && n >= 0 ? n : -1;
}

FreeSpace free_space(const std::string& path) {
  FreeSpace s;
  s.path = path;
  struct statvfs st {};
  if (statvfs(path.c_str(), &st) != 0) {
    s.error = file_error_text(errno);
    return s;
  }
  s.free_bytes = static_cast<std::int64_t>(st.f_bavail) * static_cast<std::int64_t>(st.f_frsize);
  return s;
}

int fake_gpus_of(int fake_gpus, const EnvMap& env) {
  if (fake_gpus >= 0) return fake_gpus;
  if (auto text = env_get(env, "FLOWRUN_FAKE_GPUS")) return whole(*text);
  return -1;
}

// `python -c "import torch"`; torch's import takes a second or two, the
// first time on a node up to a minute (a cold shared filesystem).
TorchImport import_torch(const std::string& python, const std::atomic<bool>* cancel) {
  TorchImport t;
  t.python = python;
  HelperRequest request;
  // Judged by the line it prints, not by its exit status: the agent's
  // supervisor reaps every child of the agent, and may reap this one first
  // (HelperEnd::vanished).
  request.argv = {python, "-c", "import torch; print('import torch: ok')"};
  request.stderr_to = HelperStderr::capture;
  request.deadline = std::chrono::seconds(120);
  request.cancel = cancel;
  request.done_line = "import torch: ok";
  const HelperOutcome out = run_helper(request);
  t.ok = out.done && (out.ok() || out.end == HelperEnd::vanished);
  if (t.ok) return t;
  std::string last = out.error_output;
  while (!last.empty() && (last.back() == '\n' || last.back() == '\r')) last.pop_back();
  if (const auto nl = last.rfind('\n'); nl != std::string::npos) last = last.substr(nl + 1);
  if (out.end == HelperEnd::not_started) last = out.error;
  if (out.end == HelperEnd::overran) last = "no answer within 120 s";
  if (last.empty()) last = fmt::format("it exited with status {}", out.code);
  t.error = printable(last);
  return t;
}

// A TCP connection to node 0's reach port (Assign::node0_port), within
// 5 s or until `*cancel`.
Node0Reach reach_node0(const Assign& a, const std::atomic<bool>* cancel) {
  Node0Reach r;
  r.name = a.node0_name;
  r.address = a.node0_address;
  r.port = a.node0_port;
  const Reach reach = reach_tcp(a.node0_address, a.node0_port, std::chrono::seconds(5), cancel);
  r.ok = reach.ok;
  r.ms = reach.ms;
  r.error = reach.error;
  return r;
}

}  // namespace

NodeFacts gather_node_facts(const Assign& a, const Inventory& inventory, int fake_gpus, const EnvMap& env,
                            const std::atomic<bool>* cancel) {
  NodeFacts f;
  f.expected_gpus = a.node_gpus;
  f.gpus_seen = static_cast<int>(inventory.gpus.size());
  f.gpus_unavailable = inventory.unavailable_reason;
  if (a.node_gpus >= 0) {
    // Only the GPUs this node's ranks may use: another job's, on a node
    // Slurm shares, is none of the step's business.
    f.gpus = probe_gpu_health(fake_gpus_of(fake_gpus, env));
    std::erase_if(f.gpus.gpus, [&](const GpuHealth& g) {
      return g.open_error.empty() && std::none_of(inventory.gpus.begin(), inventory.gpus.end(),
                                                  [&](const Gpu& mine) { return mine.uuid == g.uuid; });
    });
  }
  const auto tmpdir = env_get(env, "TMPDIR");
  f.scratch = free_space(scratch_parent(tmpdir ? tmpdir->c_str() : nullptr));
  f.workdir = free_space(a.workdir);
  if (auto text = env_get(env, "FLOWRUN_NODE_CHECK_MIN_FREE_MB"); text && whole(*text) >= 0)
    f.min_free_bytes = std::int64_t(whole(*text)) << 20;
  if (!a.python.empty()) f.torch = import_torch(a.python, cancel);
  if (a.node0_port > 0 && !a.node0_address.empty() && a.node_rank != 0) f.node0 = reach_node0(a, cancel);
  return f;
}

void NodeChecker::start(const Assign& a, const Inventory& inventory, int fake_gpus, const EnvMap& env,
                        std::function<void(std::vector<flowrun::NodeCheck>, std::int64_t ms)> on_done) {
  if (thread_.joinable()) return;  // one check at a time
  shared_ = std::make_shared<Shared>();
  thread_ = std::thread([this, shared = shared_, a, inventory, fake_gpus, env, on_done = std::move(on_done)] {
    const auto begin = std::chrono::steady_clock::now();
    std::vector<flowrun::NodeCheck> checks =
        judge_node(gather_node_facts(a, inventory, fake_gpus, env, &shared->cancel));
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - begin);
    // A checker that gave up on this thread (stop) may be gone: touch nothing of it.
    std::lock_guard lock(shared->mutex);
    if (shared->abandoned) return;
    shared->done = true;
    asio::post(io_, [this, on_done, checks = std::move(checks), ms = ms.count()]() mutable {
      if (thread_.joinable()) thread_.join();
      on_done(std::move(checks), ms);
    });
  });
}

void NodeChecker::answer(const Assign& a, Ready ready, std::function<void(const Ready&)> send) {
  if (!a.node_checks) {
    send(ready);
    return;
  }
  // Once a step (the head keeps an agent's first verdict of the step): a
  // node 0 that changes after (a spare in its seat) is not checked again.
  const std::string key = a.run_id + "\n" + a.step;
  if (checked_for_ == key) {
    ready.checks = checks_;
    ready.check_ms = check_ms_;
    send(ready);
    return;
  }
  start(a, inventory_, fake_gpus_, env_,
        [this, ready, key, send = std::move(send)](std::vector<flowrun::NodeCheck> checks,
                                                   std::int64_t ms) mutable {
          checked_for_ = key;
          checks_ = checks;
          check_ms_ = ms;
          ready.checks = std::move(checks);
          ready.check_ms = ms;
          send(ready);
        });
}

// A check that hangs (an NVML call on a GPU that fell off the bus, a
// filesystem that does not answer) must not keep the agent from ending: it
// gets 2 s, then its thread is left to the process's exit.
void NodeChecker::stop() {
  if (!thread_.joinable()) return;
  shared_->cancel = true;
  for (int i = 0; i < 200 && !shared_->done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::lock_guard lock(shared_->mutex);
  if (shared_->done) {
    thread_.join();
    return;
  }
  shared_->abandoned = true;
  thread_.detach();
}

}  // namespace flowrun::cluster
