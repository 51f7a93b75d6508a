// libFuzzer target for the control plane's decoders: whatever bytes a peer
// sends, the head and the agent must get frames or one clean error, never a
// crash, an exception or an allocation sized by the peer. The input is cut
// into pieces at the positions its first byte chooses, as TCP may cut it.
//
// Each frame's payload is then decoded as every message (decode_message with
// each MessageType, flowrun/messages.h): a message or a reason, never both or
// neither; a message decoded encodes to one that decodes to itself; an
// upload_begin's path, once checked, never leaves its directory.
//
// When the first byte's second bit (0x40) is set, the rest of a large frame
// (here: a payload of 32 bytes or more) is written straight into the space
// the reader offers for it (direct_space), as a connection reads it; the
// rest of each piece is fed.
//
// When the first byte's high bit is set, each frame read is also sent
// through the post-handshake path: sealed (FrameCipher) as a peer holding the
// keys would, read back by a second FrameReader and opened. A frame nobody
// touched must open to the same type and payload; one byte flipped (where the
// input's last byte says, in the frame its second byte picks) must never
// open, nor any frame after it.
// Replayed over tests/fuzz/corpus/protocol by the fuzz_protocol_corpus test.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "flowrun/messages.h"
#include "flowrun/protocol.h"

namespace {

constexpr std::size_t kMaxFrame = 4096;   // small, so oversized lengths are common
constexpr std::size_t kDirectBytes = 32;  // small, so frames are often read in place

// The sealed path: a sender and a receiver of one direction.
struct SealedLink {
  flowrun::FrameKeys keys = flowrun::derive_frame_keys("fuzz-token", "agent-nonce", "head-nonce", "node");
  flowrun::FrameCipher seal{keys.agent_to_head, flowrun::Direction::agent_to_head};
  flowrun::FrameCipher open{keys.agent_to_head, flowrun::Direction::agent_to_head, "agent"};
  flowrun::FrameReader reader{"agent", kMaxFrame + flowrun::kTagBytes};
  std::size_t tamper_frame = 0;
  std::size_t tamper_at = 0;
  std::size_t sent = 0;
  bool tampered = false;

  void pass(const flowrun::Frame& frame) {
    if (tampered) return;  // the stream is out of step from here; the check below is done
    std::string wire = flowrun::encode_frame(frame.type, frame.payload, kMaxFrame);
    seal.seal(wire);
    if (wire.size() != 4 + frame.payload.size() + 2 + flowrun::kTagBytes) __builtin_trap();
    const bool flip = sent++ == tamper_frame;
    if (flip) {
      wire[tamper_at % wire.size()] ^= 0x01;
      tampered = true;
    }
    reader.feed(wire);
    auto got = reader.next();
    if (!flip) {
      // Untouched: it comes out whole, opens, and is what was sent.
      if (!got || reader.failed()) __builtin_trap();
      std::string error;
      if (!open.open(*got, &error) || !error.empty()) __builtin_trap();
      if (got->type != frame.type || got->payload != frame.payload) __builtin_trap();
      return;
    }
    // Flipped: the reader may refuse the header or wait for bytes that never
    // come; whatever comes out must not open, nor anything after it.
    while (got) {
      std::string error;
      if (open.open(*got, &error) || error.empty()) __builtin_trap();
      got = reader.next();
    }
  }
};

// What an agent names as an upload must never leave its directory.
void check_upload_path(const std::string& path) {
  std::string why;
  auto safe = flowrun::safe_relative_path(path, &why);
  if (safe) {
    if (safe->empty() || safe->front() == '/' || safe->find('\0') != std::string::npos) __builtin_trap();
    if (*safe == ".." || safe->rfind("../", 0) == 0 || safe->find("/../") != std::string::npos ||
        (safe->size() >= 3 && safe->compare(safe->size() - 3, 3, "/..") == 0))
      __builtin_trap();
  } else if (why.empty()) {
    __builtin_trap();
  }
}

// The payload as each message in turn.
void decode_as_every_message(const std::string& payload) {
  for (int t = flowrun::kFirstMessageType; t <= flowrun::kLastMessageType; ++t) {
    const flowrun::Frame frame{static_cast<flowrun::MessageType>(t), payload};
    std::string why;
    auto message = flowrun::decode_message(frame, &why);
    if (message.has_value() == !why.empty()) __builtin_trap();
    if (!message) continue;
    if (flowrun::type_of(*message) != frame.type) __builtin_trap();
    std::string again_why;
    auto again = flowrun::decode_message(flowrun::encode(*message), &again_why);
    if (!again || *again != *message) __builtin_trap();
    if (const auto* begin = std::get_if<flowrun::UploadBegin>(&*message)) check_upload_path(begin->path);
    if (t == static_cast<int>(flowrun::MessageType::upload_chunk)) {
      const auto view = flowrun::upload_chunk_data(payload);
      if (!view || *view != std::get<flowrun::UploadChunk>(*message).data) __builtin_trap();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t step = 1 + (data[0] & 0x3f) % 17;
  const bool direct = (data[0] & 0x40) != 0;
  const bool sealed = (data[0] & 0x80) != 0;
  std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  flowrun::FrameReader reader("agent", kMaxFrame, kDirectBytes);
  SealedLink link;
  if (size > 1) link.tamper_frame = data[1] % 8;
  link.tamper_at = data[size - 1];
  std::size_t frames = 0;
  for (std::size_t pos = 0; pos < bytes.size(); pos += step) {
    std::string_view piece = bytes.substr(pos, step);
    if (direct) {
      const std::span<char> space = reader.direct_space();
      if (space.size() > kMaxFrame) __builtin_trap();  // never sized past the limit by the peer
      const std::size_t n = std::min(space.size(), piece.size());
      if (n > 0) {
        piece.copy(space.data(), n);
        reader.direct_wrote(n);
        piece.remove_prefix(n);
      }
    }
    reader.feed(piece);
    // Never more held than a frame and one piece past it.
    if (reader.buffered() > kMaxFrame + 4 + step) __builtin_trap();
    while (auto frame = reader.next()) {
      ++frames;
      if (frame->payload.size() + 2 > kMaxFrame) __builtin_trap();
      if (!reader.direct_space().empty()) __builtin_trap();  // a frame read in place came out whole
      if (sealed) link.pass(*frame);
      decode_as_every_message(frame->payload);
      std::string error;
      auto fields = flowrun::decode_fields(frame->payload, &error);
      if (fields.has_value() == !error.empty()) __builtin_trap();
      if (!fields) continue;
      if (fields->size() > flowrun::kMaxFields) __builtin_trap();
      if (const std::string* path = flowrun::find_field(*fields, "path")) check_upload_path(*path);
    }
    if (reader.failed() && reader.error().empty()) __builtin_trap();
  }
  (void)frames;
  return 0;
}
