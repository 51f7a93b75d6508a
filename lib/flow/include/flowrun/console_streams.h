// Which of a rank's two streams flowrun's console shows, in torchrun's terms
// (`flowrun run --redirects --tee --local-ranks-filter`). flowrun always
// keeps both streams of every rank in its log files; these options only
// decide what the console shows, as they do for torchrun:
//
//   redirects  the stream goes to the log file only (off the console)
//   tee        the stream goes to the console and the log file
//   filter     a local rank not in --local-ranks-filter shows nothing
//
// A stream both redirected and teed is shown: torchrun tees by redirecting
// to the file and tailing it back to the console, so tee wins. Each value is
// torchrun's Std: 0 none, 1 stdout, 2 stderr, 3 both; for every local rank
// ("3") or per local rank ("0:1,1:2"; a local rank left out is 0).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace flowrun {

// torchrun's Std bits.
inline constexpr unsigned kStdNone = 0, kStdOut = 1, kStdErr = 2, kStdAll = 3;

// A parsed --redirects or --tee value.
struct StdMap {
  std::optional<unsigned> all;            // "3": every local rank
  std::map<int, unsigned> by_local_rank;  // "0:1,1:2"; the last of a repeated rank wins
  unsigned of(int local_rank) const;      // a rank the map leaves out: kStdNone
  bool operator==(const StdMap&) const = default;
};

// "0".."3", or LOCAL_RANK:VALUE pairs joined by commas ("0:3,1:0"). torchrun
// takes single-digit local ranks only; flowrun takes any. nullopt for
// anything else, `error` then saying what was expected.
std::optional<StdMap> parse_std_map(std::string_view text, std::string* error);

struct ConsoleStreams {
  StdMap redirects, tee;
  std::optional<std::set<int>> local_ranks;  // --local-ranks-filter; nullopt: every local rank

  // The streams (kStdOut | kStdErr) of `local_rank` that the console shows.
  unsigned shown(int local_rank) const;
};

}  // namespace flowrun
