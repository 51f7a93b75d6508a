#include "flowrun/console_streams.h"

#include <charconv>

namespace flowrun {

namespace {

std::optional<unsigned> std_value(std::string_view text) {
  if (text.size() != 1 || text[0] < '0' || text[0] > '3') return std::nullopt;
  return static_cast<unsigned>(text[0] - '0');
}

}  // namespace

unsigned StdMap::of(int local_rank) const {
  if (all) return *all;
  const auto it = by_local_rank.find(local_rank);
  return it == by_local_rank.end() ? kStdNone : it->second;
}

std::optional<StdMap> parse_std_map(std::string_view text, std::string* error) {
  StdMap map;
  if (auto value = std_value(text)) {
    map.all = value;
    return map;
  }
  auto fail = [&]() -> std::optional<StdMap> {
    *error =
        "expected 0, 1, 2 or 3 (none, stdout, stderr, both) for every local rank, or LOCAL_RANK:VALUE pairs "
        "such as 0:3,1:2";
    return std::nullopt;
  };
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view pair = text.substr(pos, end - pos);
    const std::size_t colon = pair.find(':');
    if (colon == std::string_view::npos || colon == 0 || colon > 6 || pair[0] < '0' || pair[0] > '9')
      return fail();
    int rank = 0;
    const auto [stop, ec] = std::from_chars(pair.data(), pair.data() + colon, rank);
    const auto value = std_value(pair.substr(colon + 1));
    if (ec != std::errc() || stop != pair.data() + colon || !value) return fail();
    map.by_local_rank[rank] = *value;
    pos = end + 1;
  }
  return map;
}

unsigned ConsoleStreams::shown(int local_rank) const {
  if (local_ranks && local_ranks->count(local_rank) == 0) return kStdNone;
  return (~redirects.of(local_rank) | tee.of(local_rank)) & kStdAll;
}

}  // namespace flowrun
