// Reading and writing message fields: what the head and the agent share
// beyond the wire format itself. Internal to lib/cluster.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flowrun/protocol.h"

namespace flowrun::cluster {

inline std::string field_or(const Fields& fields, std::string_view key, std::string fallback = {}) {
  const std::string* value = find_field(fields, key);
  return value ? *value : std::move(fallback);
}

inline int int_field(const Fields& fields, std::string_view key, int fallback) {
  const std::string* value = find_field(fields, key);
  if (value == nullptr || value->empty() || value->size() > 10) return fallback;
  try {
    return std::stoi(*value);
  } catch (...) {
    return fallback;
  }
}

inline std::int64_t int64_field(const Fields& fields, std::string_view key) {
  const std::string* value = find_field(fields, key);
  if (value == nullptr || value->empty() || value->size() > 20) return 0;
  try {
    return std::stoll(*value);
  } catch (...) {
    return 0;
  }
}

inline std::string join_nul(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += '\0';
    out += items[i];
  }
  return out;
}

inline std::vector<std::string> split_nul(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t end = text.find('\0', pos);
    out.push_back(text.substr(pos, end == std::string::npos ? std::string::npos : end - pos));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return out;
}

}  // namespace flowrun::cluster
