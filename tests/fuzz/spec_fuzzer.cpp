// libFuzzer target for the spec parser: any bytes must give a result or
// diagnostics, never a crash, hang, leak or exception. Replayed over
// tests/fuzz/corpus/spec by the fuzz_spec_corpus test.
//
// The same bytes as one word of a run list, written by spec_word (as flowrun
// run and flowrun init write a command line's arguments), must read back as
// that word with its templates escaped, byte for byte.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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
  if (text.find('\0') == std::string_view::npos) {
    const std::string spec = "steps:\n  - name: t\n    run: [prog, " + flowrun::spec_word(text) + "]\n";
    flowrun::SpecParse word = flowrun::parse_spec(spec, "word.yaml", "/tmp");
    if (!word.spec ||
        word.spec->steps[0].argv != std::vector<std::string>{"prog", flowrun::escape_templates(text)})
      __builtin_trap();
  }
  return 0;
}
