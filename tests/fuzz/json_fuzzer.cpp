// libFuzzer target for the JSON reader (parse_json, lib/base/json.cpp), which
// reads files that workers and other programs write (torch's error files):
// any bytes give a value or nullopt, never a crash, an exception or a stack
// overflow. Replayed over tests/fuzz/corpus/json by the fuzz_json_corpus test.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "flowrun/json.h"

namespace {

// Depth of a parsed value; the reader refuses anything over kMaxJsonDepth.
int depth(const flowrun::Json& v) {
  if (!v.is_structured()) return 0;
  int deepest = 0;
  for (const auto& item : v) deepest = std::max(deepest, depth(item));
  return deepest + 1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto value = flowrun::parse_json(text);
  if (!value) return 0;
  if (depth(*value) > flowrun::kMaxJsonDepth) __builtin_trap();
  // Lookups the readers of error files make must hold on any object.
  if (value->is_object()) {
    for (const auto& member : value->items()) {
      if (flowrun::find(*value, member.key()) == nullptr) __builtin_trap();
    }
    (void)flowrun::find_string(*value, "message");
  } else if (flowrun::find(*value, "message") != nullptr) {
    __builtin_trap();
  }
  // What flowrun would write of it reads back the same, and the same text
  // parses the same way twice.
  const auto again = flowrun::parse_json(flowrun::to_document(*value));
  if (!again || *again != *value) __builtin_trap();
  if (flowrun::parse_json(text) != value) __builtin_trap();
  return 0;
}
