// The control plane's wire protocol: how the head process and the
// `flowrun agent` on each node talk over one TCP connection. Pure: nothing
// here opens a socket, reads a clock or touches a file; the caller moves bytes
// and this module turns them into messages and back. Only auth.cpp uses
// OpenSSL (random numbers, HMAC-SHA256).
//
// Wire format (all integers big-endian):
//
//   frame   = length:u32  version:u8  type:u8  payload
//             `length` counts version + type + payload (so it is >= 2);
//             `version` is kProtocolVersion; `type` is a MessageType.
//   payload = field*      (encode_fields; the frame's length ends the list)
//   field   = key_len:u32  key  value_len:u32  value
//             keys are non-empty and unique; keys and values are raw bytes.
//
// The payload's fields of each message: flowrun/messages.h.
//
// Both sides must run the same flowrun version: a frame with another
// protocol version is refused with a message saying so, never guessed at.
// What a refusal needs is the same in every version, and must stay so: the
// frame header, the field encoding, the numbers of hello (1) and refused (5),
// hello's fields "node" and "flowrun" and refused's field "reason". From
// those the head names a peer of another version (FrameReader's
// other_version()), and answers it with a refused frame in the peer's
// version (refused_frame_in), which that peer reads and shows.
//
// Handshake (the agent connects to the head; the token is a secret the head
// makes per run and hands the agent on its stdin or in a private file; it
// never goes on the wire):
//
//   agent -> head  hello      (Hello: node, flowrun version, nonce: agent_nonce, ...)
//   head  -> agent challenge  (Challenge: nonce: head_nonce)
//   agent -> head  auth       (Auth: proof: auth_proof(token, head_nonce, "agent:" + node))
//   head  -> agent welcome    (Welcome: proof: auth_proof(token, agent_nonce, "head:" + node), ...)
//                  or refused (Refused: reason), after which the head closes.
//
// The head checks the agent's proof; the agent checks the head's proof in
// welcome before it acts on any message, since the head tells it what to run.
// The "agent:"/"head:" prefixes keep a proof made for one direction from being
// replayed in the other; fresh nonces keep an old proof from being replayed.
//
// Every frame after welcome, both ways, is sealed (protocol 3): its payload
// is AES-256-GCM ciphertext followed by a 16-byte tag,
//
//   sealed  = length:u32  version:u8  type:u8  ciphertext  tag:16
//
// with the 6-byte header as associated data, a key per direction
// (derive_frame_keys: HKDF-SHA256 of the token, both nonces and the node),
// and a 96-bit nonce = direction:u32 + sequence:u64 that both sides count
// (the first sealed frame each way is 0) and that never goes on the wire. A
// frame altered, forged without the token, replayed, reordered or dropped
// fails its tag, and the connection closes; this is the construction of
// TLS 1.3's record layer (RFC 8446 5.2-5.3), on this protocol's own frames.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flowrun {

// 4: messages are structs (messages.h): every field always sent and
// checked, the stall report its own message. 5: start carries the node's
// part of the plan, and the agent makes its ranks' environment from it.
// 6: start carries the role (ROLE_NAME) and the job id (TORCHELASTIC_RUN_ID).
// 7: start carries the step's forensics.nccl (NCCL's flight recorder); assign the
// forensics time; stop whether to take the stacks first; take_stacks and stacks.
// 8: upload_hole: an upload's holes are not sent as zeros.
// 9: a gang's agents: hello says the agent stays for the whole flow, bye
// whether the head keeps it for the next step or the flow's exit code;
// ship_*: the head ships a step's inputs to a node that does not share the
// workdir.
// 10: node checks: assign asks for them (node_checks, node_gpus, python),
// ready carries each check's verdict and how long they took. 11: shares
// (each node's tallies of its ranks' samples). 12: sample_rate (the head
// asks the agents to sample faster while it holds a suspect). 13: hello
// carries the agent's address and a port it listens on, assign node 0's,
// which the node checks reach (reach_node0). 14: shares carry each rank's
// blocked samples and its main thread's blocked time over its span.
// 15: ship_end carries the file's CRC-32C, not its SHA-256.
inline constexpr std::uint8_t kProtocolVersion = 16;

// length:u32 + version:u8 + type:u8.
inline constexpr std::size_t kFrameHeaderBytes = 6;

// Raw bytes carried by one output or upload_chunk message; senders cut longer
// data into chunks of at most this size.
inline constexpr std::size_t kMaxChunkBytes = 16 * 1024 * 1024;

// The default limit on a frame's `length`: one full chunk plus room for the
// other fields of its message.
inline constexpr std::size_t kMaxFrameSize = kMaxChunkBytes + 64 * 1024;

// A frame whose payload is at least this large is read in place
// (FrameReader::direct_space): bulk data, not copied from a read buffer.
inline constexpr std::size_t kDirectFrameBytes = 64 * 1024;

// The GCM tag a sealed frame's payload ends with.
inline constexpr std::size_t kTagBytes = 16;

// The limit on a sealed frame's `length`: kMaxFrameSize and its tag. The
// reader's default.
inline constexpr std::size_t kMaxSealedFrameSize = kMaxFrameSize + kTagBytes;

// The default limit on the number of fields decode_fields accepts.
inline constexpr std::size_t kMaxFields = 64;

// The largest frame the head reads from a peer that has not authenticated
// (hello, auth: a few hundred bytes), so that a stranger on the network cannot
// make it hold kMaxFrameSize per connection.
inline constexpr std::size_t kMaxHandshakeFrame = 16 * 1024;

// Every message. Each has a struct of the same name in flowrun/messages.h
// that says who sends it, when, and its fields; encode() and decode_message()
// there are the only code that writes or reads a payload's fields. The
// numbers are on the wire: never renumber, only append (and bump
// kProtocolVersion for any change to a message).
enum class MessageType : std::uint8_t {
  hello = 1,
  challenge = 2,
  auth = 3,
  welcome = 4,
  refused = 5,
  assign = 6,
  start = 7,
  output = 8,
  exited = 9,
  heartbeat = 10,
  stop = 11,
  upload_begin = 12,
  upload_chunk = 13,
  upload_end = 14,
  bye = 15,
  ready = 16,
  done = 17,
  preflight = 18,  // protocol 2
  preflight_id = 19,
  preflight_done = 20,
  signal = 21,
  stalled = 22,      // protocol 4 (before, a stop with a field "stalled")
  take_stacks = 23,  // protocol 7
  stacks = 24,
  upload_hole = 25,  // protocol 8
  ship_begin = 26,
  ship_chunk = 27,
  ship_end = 28,
  ship_done = 29,
  ship_ack = 30,
  shares = 31,       // protocol 11
  sample_rate = 32,  // protocol 12
};

inline constexpr std::uint8_t kFirstMessageType = 1;
inline constexpr std::uint8_t kLastMessageType = 32;

// "hello", "upload_chunk", ... as in the enum.
std::string_view message_type_name(MessageType type);

// The MessageType whose number is `byte`, or nullopt for an unknown one.
std::optional<MessageType> message_type_from_byte(std::uint8_t byte);

// ---- Frames ---------------------------------------------------------------

struct Frame {
  MessageType type{};
  std::string payload;
  friend bool operator==(const Frame&, const Frame&) = default;
};

// Appends one frame to `out` (so a sender can batch frames into one write).
// Throws flowrun::Error when 2 + payload.size() exceeds `max_frame`: the peer
// would refuse it, so it is a bug in the sender, not a runtime condition.
void append_frame(std::string& out, MessageType type, std::string_view payload,
                  std::size_t max_frame = kMaxFrameSize);

// One frame as a string.
std::string encode_frame(MessageType type, std::string_view payload, std::size_t max_frame = kMaxFrameSize);

// Turns a byte stream into frames. Bytes may arrive split anywhere: feed()
// whatever a read returned, then call next() until it returns nullopt.
//
// Memory: the reader holds only bytes fed and not yet returned. It checks each
// header as soon as its bytes arrive (the length after 4 bytes, the version
// after 5, the type after 6), so an oversized length fails before anything is
// reserved for it, and it never sizes a buffer from a length. A caller that
// drains next() after every feed() of at most N bytes holds at most
// max_frame + 4 + N bytes.
//
// Errors (error() is then non-empty, failed() true), each naming the peer:
//   "agent speaks protocol 2, this flowrun speaks 1: run the same flowrun version on every node"
//   "agent sent a frame of 4294967295 bytes, over the limit of 16777216"
//   "agent sent a frame of 1 bytes, shorter than its 2-byte version and type"
//   "agent sent a message of unknown type 99"
// After an error the reader stays failed: it ignores further bytes, and next()
// returns only the whole frames that came before the bad one, then nullopt.
// The caller should then close the connection.
// A peer's first frame of another protocol version, read through the parts
// every version keeps (see the top of this file); what it lacks stays empty.
struct OtherVersion {
  int protocol = 0;
  std::string node, flowrun;  // a hello's
  std::string reason;         // a refused's
};

// The refused frame, `reason` its reason, as a peer speaking protocol
// `version` reads it (wire bytes, unsealed).
std::string refused_frame_in(std::uint8_t version, std::string_view reason);

class FrameReader {
 public:
  // `peer` names the other side in errors ("agent", "head"). A frame whose
  // payload is `direct_bytes` or more is read in place (direct_space).
  explicit FrameReader(std::string peer = "peer", std::size_t max_frame = kMaxSealedFrameSize,
                       std::size_t direct_bytes = kDirectFrameBytes);

  void feed(std::string_view bytes);

  // Changes the limit for the frames whose length has not been read yet (the
  // head raises it from kMaxHandshakeFrame once a peer has authenticated).
  void set_max_frame(std::size_t max_frame) { max_frame_ = std::max<std::size_t>(max_frame, 2); }

  // The next whole frame, or nullopt when none is complete (yet, or ever after an error).
  std::optional<Frame> next();

  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  // Set when it failed because the peer speaks another protocol version:
  // that version, and who the peer said it is, when the frame arrived whole
  // in the bytes fed with its header.
  const std::optional<OtherVersion>& other_version() const { return other_version_; }

  // Bytes held and not yet returned by next() (for tests and diagnostics).
  std::size_t buffered() const {
    return buffer_.size() - start_ + (big_ ? kFrameHeaderBytes + big_have_ : 0);
  }

  // A large frame (by default a payload of kDirectFrameBytes or more: bulk data) is read
  // in place: once next() has met its header and not all its bytes, its
  // payload is made whole here, and the caller reads the rest of it straight
  // into direct_space() and says how much with direct_wrote(), rather than
  // feeding a copy; a later next() returns it without copying it again.
  // Empty when no frame is being read so.
  std::span<char> direct_space();
  void direct_wrote(std::size_t n);

  // Gives back a payload that next() returned, once its bytes are used: the
  // next large frame on this thread is read into it, not into new memory
  // (a few are kept per thread, none of over 2 MiB).
  static void recycle(std::string&& payload);

 private:
  // Checks the header at offset `at` of buffer_ as far as its bytes arrived;
  // sets error_ and returns false when it is bad.
  bool check_header(std::size_t at);

  std::string peer_;
  std::size_t max_frame_;
  std::size_t direct_bytes_;
  std::string buffer_;
  std::size_t start_ = 0;    // first byte not yet returned
  std::size_t checked_ = 0;  // offset of the first frame whose header is not fully checked
  std::string error_;
  std::optional<OtherVersion> other_version_;
  std::optional<Frame> big_;  // a large frame read in place (direct_space)
  std::size_t big_have_ = 0;  // the bytes of its payload that came
};

// ---- Payload fields -------------------------------------------------------

using Fields = std::vector<std::pair<std::string, std::string>>;

// The payload for `fields`, in the order given. Throws flowrun::Error for an
// empty or duplicate key (a bug in the sender).
std::string encode_fields(const Fields& fields);

// The fields of `payload`, or nullopt with *error set:
//   "truncated payload at byte 9: a length needs 4 bytes, 2 are left"
//   "truncated payload at byte 13: 'rank' needs 10 bytes, 3 are left"
//   "field 2 has an empty key"
//   "duplicate field 'rank'"
//   "more than 64 fields"
// The empty payload is zero fields.
std::optional<Fields> decode_fields(std::string_view payload, std::string* error,
                                    std::size_t max_fields = kMaxFields);

// A whole frame whose payload is the one field `key` = `value`, with `value`
// copied once (bulk data: upload chunks). Same bytes as
// encode_frame(type, encode_fields({{key, value}})).
std::string encode_one_field_frame(MessageType type, std::string_view key, std::string_view value,
                                   std::size_t max_frame = kMaxFrameSize);
// The same frame with a value of `bytes` zero bytes, its last bytes, for the
// sender to read its data into in place (one copy fewer than building it
// from a buffer).
std::string one_field_frame_to_fill(MessageType type, std::string_view key, std::size_t bytes,
                                    std::size_t max_frame = kMaxFrameSize);

// When `payload` is exactly one field named `key`, its value as a view into
// `payload` (no copy); nullopt for anything else.
std::optional<std::string_view> one_field_view(std::string_view payload, std::string_view key);

// The value of `key`, or nullptr when absent.
const std::string* find_field(const Fields& fields, std::string_view key);

// ---- Authentication (auth.cpp) ---------------------------------------------

// A new shared secret: 32 random bytes (OpenSSL RAND_bytes), as 64 lowercase
// hex characters. Throws flowrun::Error when no randomness is available.
std::string make_token();

// A new challenge: 16 random bytes as 32 lowercase hex characters (hex, so it
// never holds the NUL that separates auth_proof's inputs).
std::string make_nonce();

// HMAC-SHA256 keyed with `token` over
//   "flowrun-auth-v1" NUL nonce NUL role_and_node
// as 64 lowercase hex characters. role_and_node is "agent:<node>" or
// "head:<node>" (see the handshake above). Throws flowrun::Error for an
// empty token (it would authenticate anyone who guessed that).
std::string auth_proof(std::string_view token, std::string_view nonce, std::string_view role_and_node);

// Whether two proofs are equal, in time that does not depend on where they
// differ (CRYPTO_memcmp), so a peer cannot guess a proof byte by byte. Proofs
// of different lengths are unequal (their length is no secret).
bool proofs_equal(std::string_view a, std::string_view b);

// ---- Sealed frames (auth.cpp) ---------------------------------------------

// Which way a frame goes: part of its nonce, and which key seals it.
enum class Direction : std::uint8_t { agent_to_head = 1, head_to_agent = 2 };

// The two keys of one connection, 32 bytes each.
struct FrameKeys {
  std::string agent_to_head;
  std::string head_to_agent;
};

// HKDF-SHA256 (RFC 5869): PRK = HMAC(salt = "flowrun-frames-v1" NUL
// agent_nonce NUL head_nonce, token); each key = HMAC(PRK, "agent->head:" or
// "head->agent:" + node, 0x01). Fresh nonces make every connection's keys new,
// so a frame recorded on one connection fails on any other. Throws
// flowrun::Error for an empty token.
FrameKeys derive_frame_keys(std::string_view token, std::string_view agent_nonce, std::string_view head_nonce,
                            std::string_view node);

// One direction of one connection: the sender seals with it, the receiver
// opens with its own copy; each counts the frames it has handled, so both
// must see the same frames in the same order. Move-only (it owns an OpenSSL
// context).
class FrameCipher {
 public:
  // `key` is 32 bytes (derive_frame_keys); throws flowrun::Error otherwise
  // or when OpenSSL cannot set up AES-256-GCM.
  FrameCipher(std::string_view key, Direction direction, std::string peer = "peer");
  ~FrameCipher();
  FrameCipher(FrameCipher&& other) noexcept;
  FrameCipher& operator=(FrameCipher&& other) noexcept;
  FrameCipher(const FrameCipher&) = delete;
  FrameCipher& operator=(const FrameCipher&) = delete;

  // Seals a whole frame as encode_frame made it, in place: its length grows
  // by kTagBytes, its payload is encrypted, the tag is appended. Throws
  // flowrun::Error for a string that is not one frame or when the sequence
  // number would wrap (2^64 frames).
  void seal(std::string& frame);

  // Opens a frame FrameReader returned, in place: the payload becomes the
  // plaintext. False, with *error set and the frame's payload unspecified, when
  // its tag does not verify:
  //   "head sent frame 7 (output, 40 bytes) that fails authentication: it was
  //    altered, replayed, reordered or not sealed with this run's token"
  // After a failure every later frame fails too; the caller closes.
  bool open(Frame& frame, std::string* error);

  // Frames sealed or opened so far (the next frame's sequence number).
  std::uint64_t sequence() const { return sequence_; }

 private:
  struct Context;
  Context* ctx_ = nullptr;
  Direction direction_{};
  std::string peer_;
  std::uint64_t sequence_ = 0;
  bool broken_ = false;
};

// CRC-32C (Castagnoli, as iSCSI and ext4 use it), fed in pieces: the
// checksum of each file an upload or a shipment carries, which catches a
// file that is truncated, changed while it was read, or written wrong. Not
// a defence against a peer that lies: the token's handshake and the sealed
// frames are that (every byte of a frame is authenticated as its sender's,
// in order, by AES-GCM), so a cryptographic hash of the file would add
// nothing but its cost. Uses the CPU's crc32 instruction (SSE4.2) when it
// has one.
class Crc32c {
 public:
  void update(std::string_view data);
  std::uint32_t value() const { return ~state_; }
  std::string hex() const;  // 8 lowercase hex characters

 private:
  std::uint32_t state_ = 0xFFFFFFFFu;
};

// ---- Upload paths ----------------------------------------------------------

// The longest upload path accepted, in bytes (Linux's PATH_MAX).
inline constexpr std::size_t kMaxPathBytes = 4096;

// Checks a path an agent names in upload_begin, which the head will create
// under the run directory. Returns the normalised path (leading and inner "."
// components dropped: "./a/./b" -> "a/b"), or nullopt with *error set:
//   "upload path is empty"
//   "upload path '/etc/passwd' is absolute"
//   "upload path '../x' has a '..' component"
//   "upload path 'a//b' has an empty component"
//   "upload path '.' names no file"
//   "upload path contains a NUL byte"
//   "upload path is longer than 4096 bytes"
// Only the text is checked: the head must still refuse to write through a
// symlink (O_NOFOLLOW on every component) when it creates the file.
std::optional<std::string> safe_relative_path(std::string_view path, std::string* error);

}  // namespace flowrun
