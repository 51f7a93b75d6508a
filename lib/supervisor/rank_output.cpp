#include "flowrun/rank_output.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cstring>
#include <fmt/format.h>

#include "flowrun/supervisor.h"

namespace flowrun {

namespace {

// Console output waits for the end of the loop's current batch of ready
// pipes, so one write carries the lines of every rank that was ready, unless
// it grows past this.
constexpr std::size_t kConsoleBatch = 1 << 20;

}  // namespace

ConsoleBatch::ConsoleBatch(boost::asio::io_context& io, std::function<void(std::string&, std::string&)> write)
    : io_(io), write_(std::move(write)) {}

void ConsoleBatch::schedule() {
  if (out.size() + err.size() >= kConsoleBatch) {
    flush();
    return;
  }
  if (posted_ || (out.empty() && err.empty())) return;
  posted_ = true;
  boost::asio::post(io_, [this] {
    posted_ = false;
    flush();
  });
}

std::string log_write_error(const std::string& who, const std::string& path, int err) {
  const std::size_t slash = path.rfind('/');
  return fmt::format("cannot write {}{} in {}: {}", who, path.substr(slash + 1), path.substr(0, slash),
                     std::strerror(err));
}

std::string log_failed_message(const std::string& step, const std::string& write_error, bool stopping,
                               int err, const std::string& run_dir) {
  return fmt::format("flowrun: error: step '{}': {}; {}{}", step, write_error,
                     stopping ? "the step is stopping" : "stopping the step",
                     run_dir.empty() ? "" : write_failure_hint(err, run_dir));
}

}  // namespace flowrun
