#include "flowrun/clock.h"

#include <ctime>

namespace flowrun {

namespace {

std::int64_t now_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

class SystemTime final : public TimeSource {
 public:
  std::int64_t steady_ns() const override { return monotonic_now_ns(); }
  std::int64_t wall_ns() const override { return unix_now_ns(); }
};

}  // namespace

std::int64_t monotonic_now_ns() { return now_ns(CLOCK_MONOTONIC); }

std::int64_t unix_now_ns() { return now_ns(CLOCK_REALTIME); }

const TimeSource& system_time() {
  static const SystemTime kSystem;
  return kSystem;
}

}  // namespace flowrun
