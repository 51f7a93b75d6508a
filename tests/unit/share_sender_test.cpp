// An agent's tallies for the head (lib/agent/share_sender.h): every few
// seconds while samples come, more often while the head hurries the
// sampling, and at once before a rank's exit.
#include "share_sender.h"

#include <catch2/catch.hpp>
#include <vector>

#include "testing.h"

namespace flowrun {

namespace {

using testing::kSecond;

RankSample waiting(int rank) { return {rank, true, ""}; }

}  // namespace

TEST_CASE("ShareSender: tallies go every 2 s, every 0.5 s while the head hurries, and back at rate 1",
          "[shares]") {
  std::vector<std::int64_t> sent;  // each send's time
  std::int64_t now = 100 * kSecond;
  ShareSender sender([&](const Shares& m) {
    CHECK(m.attempt == 3);
    sent.push_back(now);
  });
  sender.reset(3);
  // A sample every 250 ms for 4 s: sent at the first, then every 2 s.
  for (int i = 0; i < 16; ++i, now += kSecond / 4) sender.add(waiting(0), now);
  CHECK(sent == std::vector<std::int64_t>{100 * kSecond, 102 * kSecond});
  sent.clear();
  sender.hurry(8);  // 2 s / 8 is under the floor: every 0.5 s
  for (int i = 0; i < 8; ++i, now += kSecond / 4) sender.add(waiting(0), now);
  CHECK(sent == std::vector<std::int64_t>{104 * kSecond, 104 * kSecond + kSecond / 2, 105 * kSecond,
                                          105 * kSecond + kSecond / 2});
  sent.clear();
  sender.hurry(1);
  for (int i = 0; i < 8; ++i, now += kSecond / 4) sender.add(waiting(0), now);
  CHECK(sent == std::vector<std::int64_t>{107 * kSecond + kSecond / 2});  // 2 s after the last
  // A new attempt starts at the base interval again.
  sender.hurry(8);
  sender.reset(3);
  sent.clear();
  for (int i = 0; i < 8; ++i, now += kSecond / 4) sender.add(waiting(0), now);
  CHECK(sent.size() == 1);
}

}  // namespace flowrun
