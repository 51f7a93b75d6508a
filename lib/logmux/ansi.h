// The terminal colours the logmux module's files share and no other module sees.
#pragma once

#include <string_view>

namespace flowrun::ansi {

// Bright blue: the prefix of a step's lines that are not a rank's (log_prefix's
// plain steps), and the mark of a folded line.
inline constexpr std::string_view kPlainColor = "\x1b[94m";
inline constexpr std::string_view kReset = "\x1b[0m";

}  // namespace flowrun::ansi
