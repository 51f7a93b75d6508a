// A path's parts, read from its text alone (no file system is asked), as
// the shell's basename and dirname read them for a path that does not end
// in '/'.
#pragma once

#include <string_view>

namespace flowrun {

// What follows the last '/': "b.py" for "a/b.py" and for "b.py"; "" for
// "a/".
std::string_view base_name(std::string_view path);

// What precedes the last '/': "a" for "a/b", "/" for "/b", and "" for a
// path without a '/' (where dirname says ".").
std::string_view dir_name(std::string_view path);

}  // namespace flowrun
