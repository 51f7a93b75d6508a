// libFuzzer target for the spec parser: any bytes must give a result or
// diagnostics, never a crash, hang, leak or exception. Replayed over
// tests/fuzz/corpus/spec by the fuzz_spec_corpus test.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "flowrun/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  flowrun::SpecParse result = flowrun::parse_spec(text, "fuzz.yaml", "/tmp");
  // A spec comes back exactly when there is nothing to report.
  if (result.spec.has_value() == !result.diagnostics.empty()) __builtin_trap();
  for (const auto& d : result.diagnostics) {
    // Every message is one line.
    if (d.message.empty() || d.message.find('\n') != std::string::npos) __builtin_trap();
  }
  if (result.spec && result.spec->order.size() != result.spec->steps.size()) __builtin_trap();
  return 0;
}
