// lib/base/clock: the real clocks, and a fake one a test steps.
#include "flowrun/clock.h"

#include <catch2/catch.hpp>
#include <ctime>

using namespace flowrun;

TEST_CASE("The real clocks: the steady one never goes back, the wall one is since the epoch",
          "[base][clock]") {
  const TimeSource& time = system_time();
  const std::int64_t a = time.steady_ns();
  const std::int64_t b = monotonic_now_ns();
  CHECK(a > 0);
  CHECK(b >= a);
  // The wall clock agrees with time(2) to the second.
  const std::int64_t seconds = static_cast<std::int64_t>(std::time(nullptr));
  CHECK(time.wall_ns() / 1'000'000'000 >= seconds);
  CHECK(unix_now_ns() / 1'000'000'000 <= seconds + 1);
}

TEST_CASE("FakeTime stands still until it is stepped; the wall clock can be set alone", "[base][clock]") {
  FakeTime time(5, 1'000);
  const TimeSource& source = time;
  CHECK(source.steady_ns() == 5);
  CHECK(source.wall_ns() == 1'000);
  CHECK(source.steady_ns() == 5);
  time.advance_ns(10);
  CHECK(source.steady_ns() == 15);
  CHECK(source.wall_ns() == 1'010);
  time.set_wall_ns(0);  // set back, as an administrator may
  CHECK(source.wall_ns() == 0);
  CHECK(source.steady_ns() == 15);
}
