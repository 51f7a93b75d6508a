// torchrun's --redirects / --tee values and what the console shows of each
// local rank's streams under them and --local-ranks-filter.
#include "flowrun/console_streams.h"

#include <catch2/catch.hpp>

using namespace flowrun;

namespace {

StdMap parsed(const std::string& text) {
  std::string error;
  auto map = parse_std_map(text, &error);
  INFO(text << ": " << error);
  REQUIRE(map);
  return *map;
}

}  // namespace

TEST_CASE("a Std value is every local rank's; a map gives each its own, 0 for one left out",
          "[console_streams]") {
  for (unsigned v = 0; v <= 3; ++v) {
    const StdMap all = parsed(std::to_string(v));
    CHECK(all.of(0) == v);
    CHECK(all.of(7) == v);
  }
  const StdMap map = parsed("0:3,1:0,2:1,3:2");
  CHECK(map.of(0) == kStdAll);
  CHECK(map.of(1) == kStdNone);
  CHECK(map.of(2) == kStdOut);
  CHECK(map.of(3) == kStdErr);
  CHECK(map.of(4) == kStdNone);
  CHECK(parsed("0:1,0:2").of(0) == kStdErr);  // a repeated rank: the last wins, as in torchrun
  CHECK(parsed("12:3").of(12) == kStdAll);    // torchrun takes one digit; flowrun any rank
}

TEST_CASE("anything but torchrun's forms is refused, saying what is expected", "[console_streams]") {
  for (const char* bad : {"", "4", "13", "-1", "a", "0:", ":1", "0:4", "0:1,", ",0:1", "0:1;1:2", "0-1:3",
                          "-1:3", "0:1:2", " 3", "0 :1"}) {
    std::string error;
    INFO(bad);
    CHECK_FALSE(parse_std_map(bad, &error));
    CHECK(
        error ==
        "expected 0, 1, 2 or 3 (none, stdout, stderr, both) for every local rank, or LOCAL_RANK:VALUE pairs "
        "such as 0:3,1:2");
  }
}

TEST_CASE("the console shows what is not redirected, and what is teed", "[console_streams]") {
  ConsoleStreams streams;
  CHECK(streams.shown(0) == kStdAll);  // nothing given: both
  // Every redirects x tee pair: tee wins for a stream both name (torchrun
  // tees by redirecting to the file and tailing it to the console).
  for (unsigned redirect = 0; redirect <= 3; ++redirect) {
    for (unsigned tee = 0; tee <= 3; ++tee) {
      streams.redirects = parsed(std::to_string(redirect));
      streams.tee = parsed(std::to_string(tee));
      INFO("redirects " << redirect << " tee " << tee);
      const bool out = !(redirect & kStdOut) || (tee & kStdOut);
      const bool err = !(redirect & kStdErr) || (tee & kStdErr);
      CHECK(streams.shown(0) == ((out ? kStdOut : 0) | (err ? kStdErr : 0)));
    }
  }
  streams.redirects = parsed("3");
  streams.tee = parsed("3");
  CHECK(streams.shown(1) == kStdAll);  // --redirects 3 --tee 3: shown, and the files have it
  streams.redirects = parsed("0:1,1:2");
  streams.tee = parsed("0");
  CHECK(streams.shown(0) == kStdErr);
  CHECK(streams.shown(1) == kStdOut);
  CHECK(streams.shown(2) == kStdAll);
}

TEST_CASE("a local rank out of --local-ranks-filter shows nothing, teed or not", "[console_streams]") {
  ConsoleStreams streams;
  streams.local_ranks = std::set<int>{1};
  streams.tee = parsed("3");
  CHECK(streams.shown(0) == kStdNone);
  CHECK(streams.shown(1) == kStdAll);
  streams.redirects = parsed("1:1");
  streams.tee = parsed("0");
  CHECK(streams.shown(1) == kStdErr);
}
