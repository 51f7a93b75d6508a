// libFuzzer target for the JSON reader (lib/base/json_read.cpp), which reads
// files that workers and other programs write (torch's error files): any bytes
// give a value or nullopt, never a crash, an exception or a stack overflow.
// Replayed over tests/fuzz/corpus/json by the fuzz_json_corpus test.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "flowrun/json_read.h"

namespace {

// Depth of a parsed value; the reader refuses anything over kMaxJsonDepth.
int depth(const flowrun::JsonValue& v) {
  int deepest = 0;
  for (const auto& item : v.array) deepest = std::max(deepest, depth(item));
  for (const auto& member : v.object) deepest = std::max(deepest, depth(member.value));
  const bool nests = v.is_array() || v.is_object();
  return deepest + (nests ? 1 : 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto value = flowrun::parse_json(text);
  if (!value) return 0;
  if (depth(*value) > flowrun::kMaxJsonDepth) __builtin_trap();
  // Lookups the readers of error files make must hold on any object.
  if (value->is_object()) {
    for (const auto& member : value->object) {
      const flowrun::JsonValue* found = value->find(member.key);
      if (found == nullptr) __builtin_trap();
    }
    (void)value->find_string("message");
  } else if (value->find("message") != nullptr) {
    __builtin_trap();
  }
  // The same text parses the same way twice.
  const auto again = flowrun::parse_json(text);
  if (!again || again->type != value->type) __builtin_trap();
  return 0;
}
