// The time, read in one place: the clocks themselves, and the source of
// "now" that code measuring silences, durations and deadlines is handed,
// so that a test steps a fake one instead of waiting.
#pragma once

#include <chrono>
#include <cstdint>

namespace flowrun {

// CLOCK_MONOTONIC in nanoseconds: for durations and deadlines (it never
// jumps when the wall clock is set).
std::int64_t monotonic_now_ns();

// CLOCK_REALTIME in nanoseconds since the epoch: for times written down.
std::int64_t unix_now_ns();

// `seconds` (a decimal number, as flowrun's options and spec keys give
// them) as a steady clock duration: what a timer on the loop waits.
inline std::chrono::steady_clock::duration steady_seconds(double seconds) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(seconds));
}

// Where a piece of code asks for the time.
class TimeSource {
 public:
  virtual ~TimeSource() = default;
  virtual std::int64_t steady_ns() const = 0;  // as monotonic_now_ns()
  virtual std::int64_t wall_ns() const = 0;    // as unix_now_ns()
};

// The real clocks: monotonic_now_ns() and unix_now_ns().
const TimeSource& system_time();

// A time that stands still until it is told to move: both clocks step
// together by advance_ns(); the wall clock alone can be set (as an
// administrator or NTP sets it).
class FakeTime final : public TimeSource {
 public:
  explicit FakeTime(std::int64_t steady_ns = 0, std::int64_t wall_ns = 0)
      : steady_(steady_ns), wall_(wall_ns) {}
  std::int64_t steady_ns() const override { return steady_; }
  std::int64_t wall_ns() const override { return wall_; }
  void advance_ns(std::int64_t ns) {
    steady_ += ns;
    wall_ += ns;
  }
  void set_wall_ns(std::int64_t ns) { wall_ = ns; }

 private:
  std::int64_t steady_;
  std::int64_t wall_;
};

}  // namespace flowrun
