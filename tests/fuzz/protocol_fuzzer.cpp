// libFuzzer target for the control plane's decoder: whatever bytes a peer
// sends, the head and the agent must get frames or one clean error, never a
// crash, an exception or an allocation sized by the peer. The input is cut
// into pieces at the positions its first byte chooses, as TCP may cut it.
// Replayed over tests/fuzz/corpus/protocol by the fuzz_protocol_corpus test.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "flowrun/protocol.h"

namespace {
constexpr std::size_t kMaxFrame = 4096;  // small, so oversized lengths are common
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t step = 1 + data[0] % 17;
  std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  flowrun::FrameReader reader("agent", kMaxFrame);
  std::size_t frames = 0;
  for (std::size_t pos = 0; pos < bytes.size(); pos += step) {
    reader.feed(bytes.substr(pos, step));
    // Never more held than a frame and one piece past it.
    if (reader.buffered() > kMaxFrame + 4 + step) __builtin_trap();
    while (auto frame = reader.next()) {
      ++frames;
      if (frame->payload.size() + 2 > kMaxFrame) __builtin_trap();
      std::string error;
      auto fields = flowrun::decode_fields(frame->payload, &error);
      if (fields.has_value() == !error.empty()) __builtin_trap();
      if (!fields) continue;
      if (fields->size() > flowrun::kMaxFields) __builtin_trap();
      // What an agent names as an upload must never leave its directory.
      if (const std::string* path = flowrun::find_field(*fields, "path")) {
        std::string why;
        auto safe = flowrun::safe_relative_path(*path, &why);
        if (safe) {
          if (safe->empty() || safe->front() == '/' || safe->find('\0') != std::string::npos)
            __builtin_trap();
          if (*safe == ".." || safe->rfind("../", 0) == 0 || safe->find("/../") != std::string::npos ||
              (safe->size() >= 3 && safe->compare(safe->size() - 3, 3, "/..") == 0))
            __builtin_trap();
        } else if (why.empty()) {
          __builtin_trap();
        }
      }
    }
    if (reader.failed() && reader.error().empty()) __builtin_trap();
  }
  (void)frames;
  return 0;
}
