// The control plane's wire protocol: frames, the incremental reader and its
// errors, payload fields, authentication proofs and upload path checks.
#include "flowrun/protocol.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "flowrun/error.h"

using namespace flowrun;
using namespace std::string_literals;

namespace {

std::vector<MessageType> all_types() {
  std::vector<MessageType> types;
  for (int b = kFirstMessageType; b <= kLastMessageType; ++b) types.push_back(static_cast<MessageType>(b));
  return types;
}

// A frame header with any length, version and type, for malformed input.
std::string raw_header(std::uint32_t length, std::uint8_t version, std::uint8_t type) {
  std::string out;
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((length >> shift) & 0xff));
  out.push_back(static_cast<char>(version));
  out.push_back(static_cast<char>(type));
  return out;
}

std::vector<Frame> drain(FrameReader& reader) {
  std::vector<Frame> frames;
  while (auto frame = reader.next()) frames.push_back(std::move(*frame));
  return frames;
}

}  // namespace

TEST_CASE("a frame is big-endian length, version, type, payload", "[protocol]") {
  std::string frame = encode_frame(MessageType::heartbeat, "abc");
  const std::string version(1, static_cast<char>(kProtocolVersion));
  CHECK(frame == "\x00\x00\x00\x05"s + version + "\x0a" + "abc");
  CHECK(encode_frame(MessageType::bye, "") == "\x00\x00\x00\x02"s + version + "\x0f");
  std::string batch;
  append_frame(batch, MessageType::start, "");
  append_frame(batch, MessageType::bye, "x");
  CHECK(batch == encode_frame(MessageType::start, "") + encode_frame(MessageType::bye, "x"));
}

TEST_CASE("every message type round-trips through a frame and fields", "[protocol]") {
  std::set<std::string_view> names;
  for (MessageType type : all_types()) {
    INFO(message_type_name(type));
    names.insert(message_type_name(type));
    Fields fields = {{"type", std::string(message_type_name(type))}, {"data", "\0\xff\n"s}};
    FrameReader reader("agent");
    reader.feed(encode_frame(type, encode_fields(fields)));
    auto frame = reader.next();
    REQUIRE(frame);
    CHECK(frame->type == type);
    std::string error;
    auto decoded = decode_fields(frame->payload, &error);
    REQUIRE(decoded);
    CHECK(*decoded == fields);
    CHECK_FALSE(reader.next());
    CHECK(reader.buffered() == 0);
    CHECK(message_type_from_byte(static_cast<std::uint8_t>(type)) == type);
  }
  CHECK(names.size() == 32);
  CHECK(message_type_name(MessageType::upload_chunk) == "upload_chunk");
  CHECK(message_type_name(MessageType::preflight_done) == "preflight_done");
  CHECK(message_type_name(MessageType::signal) == "signal");
  CHECK(message_type_name(MessageType::stalled) == "stalled");
  CHECK_FALSE(message_type_from_byte(0));
  CHECK(message_type_name(MessageType::stacks) == "stacks");
  CHECK(message_type_name(MessageType::upload_hole) == "upload_hole");
  CHECK(message_type_name(MessageType::ship_ack) == "ship_ack");
  CHECK(message_type_name(MessageType::sample_rate) == "sample_rate");
  CHECK_FALSE(message_type_from_byte(33));
}

TEST_CASE("a frame fed byte by byte comes out once, whole", "[protocol]") {
  std::string payload = encode_fields({{"rank", "3"}, {"stream", "stdout"}, {"data", "loss 0.12\n"}});
  std::string bytes = encode_frame(MessageType::output, payload);
  FrameReader reader("agent");
  for (std::size_t i = 0; i + 1 < bytes.size(); ++i) {
    reader.feed(bytes.substr(i, 1));
    REQUIRE_FALSE(reader.next());
  }
  reader.feed(bytes.substr(bytes.size() - 1));
  auto frame = reader.next();
  REQUIRE(frame);
  CHECK(*frame == Frame{MessageType::output, payload});
  CHECK_FALSE(reader.next());
  CHECK_FALSE(reader.failed());
}

TEST_CASE("a large frame is read in place, in order with the frames around it", "[protocol]") {
  std::string data(3 * kDirectFrameBytes, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 % 251);
  const std::string big = encode_frame(MessageType::ship_chunk, data);
  const std::string after = encode_frame(MessageType::heartbeat, "");
  FrameReader reader("the head");
  CHECK(reader.direct_space().empty());
  reader.feed(encode_frame(MessageType::bye, "x") + big.substr(0, 1000));
  auto frames = drain(reader);
  REQUIRE(frames.size() == 1);
  CHECK(frames[0] == Frame{MessageType::bye, "x"});
  // The rest goes straight into the frame's payload, in two reads.
  std::span<char> space = reader.direct_space();
  REQUIRE(space.size() == big.size() - 1000);
  CHECK(reader.buffered() == 1000);
  big.copy(space.data(), 5000, 1000);
  reader.direct_wrote(5000);
  CHECK_FALSE(reader.next());
  CHECK(reader.buffered() == 6000);
  space = reader.direct_space();
  REQUIRE(space.size() == big.size() - 6000);
  big.copy(space.data(), space.size(), 6000);
  reader.direct_wrote(space.size());
  CHECK_THROWS(reader.direct_wrote(1));
  reader.feed(after);
  frames = drain(reader);
  REQUIRE(frames.size() == 2);
  CHECK(frames[0] == Frame{MessageType::ship_chunk, data});
  CHECK(frames[1] == Frame{MessageType::heartbeat, ""});
  CHECK(reader.buffered() == 0);
  CHECK(reader.direct_space().empty());
}

TEST_CASE("a large frame's rest fed rather than read in place comes out the same", "[protocol]") {
  const std::string data(kDirectFrameBytes, 'd');
  const std::string big = encode_frame(MessageType::upload_chunk, data);
  FrameReader reader("agent");
  reader.feed(big.substr(0, 10));
  CHECK_FALSE(reader.next());
  REQUIRE_FALSE(reader.direct_space().empty());
  // A blocking handshake feeds whatever it read: the rest and the next frame at once.
  reader.feed(big.substr(10) + encode_frame(MessageType::bye, ""));
  const auto frames = drain(reader);
  REQUIRE(frames.size() == 2);
  CHECK(frames[0] == Frame{MessageType::upload_chunk, data});
  CHECK(frames[1] == Frame{MessageType::bye, ""});
}

TEST_CASE("a payload given back holds the next large frame read on the thread", "[protocol]") {
  const std::string big = encode_frame(MessageType::ship_chunk, std::string(kDirectFrameBytes + 10, 'a'));
  // Readers that take whatever the thread's earlier connections gave back.
  std::vector<FrameReader> holders(4, FrameReader("the head"));
  for (FrameReader& holder : holders) {
    holder.feed(big.substr(0, 6));
    CHECK_FALSE(holder.next());
  }
  FrameReader reader("the head");
  reader.feed(big.substr(0, 6));
  CHECK_FALSE(reader.next());
  std::string given(kDirectFrameBytes + 100, 'z');
  const char* storage = given.data();
  FrameReader::recycle(std::move(given));
  reader.feed(big.substr(6, 20));
  CHECK_FALSE(reader.next());  // the payload was made before the spare came
  FrameReader other("the head");
  other.feed(big.substr(0, 6));
  CHECK_FALSE(other.next());
  REQUIRE(other.direct_space().data() == storage);
  other.feed(big.substr(6));
  auto frame = other.next();
  REQUIRE(frame);
  CHECK(frame->payload == std::string(kDirectFrameBytes + 10, 'a'));
}

TEST_CASE("a large frame over the limit fails before a place is made for it", "[protocol]") {
  FrameReader reader("agent", kMaxHandshakeFrame);
  reader.feed(raw_header(static_cast<std::uint32_t>(kMaxHandshakeFrame + 1), kProtocolVersion,
                         static_cast<std::uint8_t>(MessageType::ship_chunk)));
  CHECK_FALSE(reader.next());
  CHECK(reader.failed());
  CHECK(reader.direct_space().empty());
}

TEST_CASE("two frames in one feed, and a third split across feeds", "[protocol]") {
  std::string third = encode_frame(MessageType::exited, "code");
  FrameReader reader("agent");
  reader.feed(encode_frame(MessageType::heartbeat, "") + encode_frame(MessageType::stop, "now") +
              third.substr(0, 7));
  auto frames = drain(reader);
  REQUIRE(frames.size() == 2);
  CHECK(frames[0] == Frame{MessageType::heartbeat, ""});
  CHECK(frames[1] == Frame{MessageType::stop, "now"});
  CHECK(reader.buffered() == 7);
  reader.feed(third.substr(7));
  frames = drain(reader);
  REQUIRE(frames.size() == 1);
  CHECK(frames[0] == Frame{MessageType::exited, "code"});
  CHECK(reader.buffered() == 0);
}

TEST_CASE("an oversized length fails as soon as its four bytes arrive", "[protocol]") {
  FrameReader reader("agent", 16 * 1024 * 1024);
  reader.feed("\xff\xff\xff");
  CHECK_FALSE(reader.failed());
  reader.feed("\xff");
  REQUIRE(reader.failed());
  CHECK(reader.error() == "agent sent a frame of 4294967295 bytes, over the limit of 16777216");
  CHECK(reader.buffered() == 0);
  CHECK_FALSE(reader.next());
  // Failed for good: a valid frame afterwards is ignored.
  reader.feed(encode_frame(MessageType::bye, ""));
  CHECK_FALSE(reader.next());
  CHECK(reader.buffered() == 0);
}

TEST_CASE("the frame limit is the reader's, inclusive", "[protocol]") {
  FrameReader reader("head", 10);
  reader.feed(encode_frame(MessageType::output, "12345678", 10));
  CHECK(reader.next() == Frame{MessageType::output, "12345678"});
  reader.feed(raw_header(11, kProtocolVersion, 8));
  CHECK(reader.error() == "head sent a frame of 11 bytes, over the limit of 10");
  CHECK_THROWS_WITH(encode_frame(MessageType::output, "123456789", 10),
                    "a output frame of 11 bytes is over the limit of 10");
}

TEST_CASE("set_max_frame raises the limit for frames not yet read, as after a handshake", "[protocol]") {
  FrameReader reader("agent", kMaxHandshakeFrame);
  const std::string big(64 * 1024, 'x');
  reader.feed(encode_frame(MessageType::hello, "small"));
  CHECK(reader.next() == Frame{MessageType::hello, "small"});
  reader.set_max_frame(kMaxFrameSize);
  reader.feed(encode_frame(MessageType::output, big));
  CHECK(reader.next() == Frame{MessageType::output, big});

  FrameReader stranger("agent", kMaxHandshakeFrame);
  stranger.feed(encode_frame(MessageType::output, big));
  CHECK(stranger.error() == "agent sent a frame of 65538 bytes, over the limit of 16384");
  CHECK(stranger.buffered() == 0);
}

TEST_CASE("a frame from another protocol version is refused with what to do", "[protocol]") {
  FrameReader reader("agent");
  reader.feed(raw_header(2, 1, 1));
  REQUIRE(reader.failed());
  CHECK(reader.other_version());
  CHECK(reader.error() == "agent speaks protocol 1, this flowrun speaks " + std::to_string(kProtocolVersion) +
                              ": run the same flowrun version on every node");
}

TEST_CASE("a peer of another protocol is named from the parts every version keeps", "[protocol]") {
  // A hello of a later protocol, with fields this one does not have.
  std::string hello = encode_frame(MessageType::hello,
                                   encode_fields({{"node", "node-b"}, {"flowrun", "0.9.0"}, {"new", "x"}}));
  hello[4] = static_cast<char>(kProtocolVersion + 1);
  FrameReader reader("agent");
  reader.feed(hello);
  REQUIRE(reader.other_version());
  CHECK(reader.other_version()->protocol == kProtocolVersion + 1);
  CHECK(reader.other_version()->node == "node-b");
  CHECK(reader.other_version()->flowrun == "0.9.0");
  // A refused frame of another version: its reason.
  FrameReader head("the head at h:1");
  head.feed(refused_frame_in(kProtocolVersion - 1, "it speaks protocol 5, the head speaks protocol 4"));
  REQUIRE(head.other_version());
  CHECK(head.other_version()->protocol == kProtocolVersion - 1);
  CHECK(head.other_version()->reason == "it speaks protocol 5, the head speaks protocol 4");
  CHECK(head.error() == "the head at h:1 speaks protocol " + std::to_string(kProtocolVersion - 1) +
                            ", this flowrun speaks " + std::to_string(kProtocolVersion) +
                            ": run the same flowrun version on every node");
  // Only a header: the version, nothing else.
  FrameReader cut("agent");
  cut.feed(hello.substr(0, 5));
  REQUIRE(cut.other_version());
  CHECK(cut.other_version()->node.empty());
}

TEST_CASE("unknown types and frames too short for their header are refused", "[protocol]") {
  FrameReader unknown("agent");
  unknown.feed(raw_header(2, kProtocolVersion, 99));
  CHECK(unknown.error() == "agent sent a message of unknown type 99");
  CHECK_FALSE(unknown.other_version());
  FrameReader zero("head");
  zero.feed(raw_header(0, kProtocolVersion, 1).substr(0, 4));
  CHECK(zero.error() == "head sent a frame of 0 bytes, shorter than its 2-byte version and type");
  FrameReader one("head");
  one.feed(raw_header(1, kProtocolVersion, 1));
  CHECK(one.error() == "head sent a frame of 1 bytes, shorter than its 2-byte version and type");
}

TEST_CASE("whole frames before a bad one are still returned, then nothing", "[protocol]") {
  FrameReader reader("agent");
  reader.feed(encode_frame(MessageType::exited, "r0") + raw_header(2, kProtocolVersion, 0) + "trailing");
  CHECK(reader.error() == "agent sent a message of unknown type 0");
  CHECK(reader.next() == Frame{MessageType::exited, "r0"});
  CHECK_FALSE(reader.next());
  CHECK(reader.buffered() == 0);
}

TEST_CASE("a bad header behind a pending frame fails on arrival", "[protocol]") {
  // The first frame is incomplete; the second header cannot be seen yet, so
  // only the first frame's header is checked.
  std::string first = encode_frame(MessageType::output, std::string(100, 'x'));
  FrameReader reader("agent");
  reader.feed(first.substr(0, 50));
  CHECK_FALSE(reader.failed());
  reader.feed(first.substr(50) + raw_header(2, static_cast<std::uint8_t>(kProtocolVersion + 1), 1));
  CHECK(reader.error() == "agent speaks protocol " + std::to_string(kProtocolVersion + 1) +
                              ", this flowrun speaks " + std::to_string(kProtocolVersion) +
                              ": run the same flowrun version on every node");
  CHECK(reader.next() == Frame{MessageType::output, std::string(100, 'x')});
  CHECK_FALSE(reader.next());
}

TEST_CASE("many frames in random splits come out unchanged", "[protocol]") {
  std::string stream;
  std::vector<Frame> sent;
  for (int i = 0; i < 200; ++i) {
    Frame frame{static_cast<MessageType>(1 + i % 15),
                std::string(static_cast<std::size_t>(i * 7 % 300), 'a' + i % 26)};
    append_frame(stream, frame.type, frame.payload);
    sent.push_back(frame);
  }
  for (std::size_t chunk : {1u, 3u, 64u, 1000u, 100000u}) {
    INFO("chunk " << chunk);
    FrameReader reader("agent");
    std::vector<Frame> got;
    for (std::size_t at = 0; at < stream.size(); at += chunk) {
      reader.feed(std::string_view(stream).substr(at, chunk));
      for (auto& frame : drain(reader)) got.push_back(std::move(frame));
    }
    CHECK_FALSE(reader.failed());
    CHECK(got == sent);
    CHECK(reader.buffered() == 0);
  }
}

TEST_CASE("fields are length-prefixed and binary-safe", "[protocol]") {
  CHECK(encode_fields({{"k", "vv"}}) == "\x00\x00\x00\x01k\x00\x00\x00\x02vv"s);
  CHECK(encode_fields({}).empty());
  std::string error;
  auto none = decode_fields("", &error);
  REQUIRE(none);
  CHECK(none->empty());
  Fields fields = {{"a", ""}, {"b\0c"s, std::string(1000, '\0')}};
  auto decoded = decode_fields(encode_fields(fields), &error);
  REQUIRE(decoded);
  CHECK(*decoded == fields);
  REQUIRE(find_field(*decoded, "a"));
  CHECK(find_field(*decoded, "a")->empty());
  CHECK(find_field(*decoded, "missing") == nullptr);
}

TEST_CASE("decode_fields rejects truncation, empty and duplicate keys, too many fields", "[protocol]") {
  std::string payload = encode_fields({{"node", "n1"}, {"rank", "0123456789"}});
  std::string error;
  // Cut inside the second key's length (offset 10 + 4 = 14 bytes for the first field).
  CHECK_FALSE(decode_fields(payload.substr(0, 16), &error));
  CHECK(error == "truncated payload at byte 14: a length needs 4 bytes, 2 are left");
  // Cut inside the second value: key "rank" is at 18..22, its value length at 22..26.
  CHECK_FALSE(decode_fields(payload.substr(0, 33), &error));
  CHECK(error == "truncated payload at byte 26: 'rank' needs 10 bytes, 7 are left");
  // A key length past the end.
  CHECK_FALSE(
      decode_fields("\x00\x00\x00\x09"
                    "ab"s,
                    &error));
  CHECK(error == "truncated payload at byte 4: a key needs 9 bytes, 2 are left");

  CHECK_FALSE(decode_fields(encode_fields({{"a", "1"}}) + "\x00\x00\x00\x00\x00\x00\x00\x00"s, &error));
  CHECK(error == "field 2 has an empty key");
  CHECK_FALSE(decode_fields(encode_fields({{"rank", "1"}}) + encode_fields({{"rank", "2"}}), &error));
  CHECK(error == "duplicate field 'rank'");

  Fields many;
  for (int i = 0; i < 65; ++i) many.emplace_back("k" + std::to_string(i), "");
  CHECK_FALSE(decode_fields(encode_fields(many), &error));
  CHECK(error == "more than 64 fields");
  many.pop_back();
  CHECK(decode_fields(encode_fields(many), &error));
  CHECK_FALSE(decode_fields(encode_fields({{"a", ""}, {"b", ""}}), &error, 1));
  CHECK(error == "more than 1 fields");

  CHECK_THROWS_WITH(encode_fields({{"a", "1"}, {"a", "2"}}), "duplicate field 'a'");
  CHECK_THROWS_WITH(encode_fields({{"", "1"}}), "field 1 has an empty key");
}

TEST_CASE("auth proofs match only for the same token, nonce and role", "[protocol]") {
  std::string token = make_token();
  std::string nonce = make_nonce();
  CHECK(token.size() == 64);
  CHECK(nonce.size() == 32);
  CHECK(token.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(nonce.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(make_token() != token);
  CHECK(make_nonce() != nonce);

  std::string proof = auth_proof(token, nonce, "agent:node1");
  CHECK(proof.size() == 64);
  CHECK(proof.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(proofs_equal(proof, auth_proof(token, nonce, "agent:node1")));
  CHECK_FALSE(proofs_equal(proof, auth_proof(make_token(), nonce, "agent:node1")));
  CHECK_FALSE(proofs_equal(proof, auth_proof(token, make_nonce(), "agent:node1")));
  CHECK_FALSE(proofs_equal(proof, auth_proof(token, nonce, "agent:node2")));
  CHECK_FALSE(proofs_equal(proof, auth_proof(token, nonce, "head:node1")));
  CHECK_FALSE(proofs_equal(proof, proof.substr(0, 63)));
  CHECK_FALSE(proofs_equal(proof, ""));
  CHECK(proofs_equal("", ""));
  CHECK_THROWS_WITH(auth_proof("", nonce, "agent:node1"), "authentication token is empty");
}

TEST_CASE("auth proof is HMAC-SHA256 over the documented message", "[protocol]") {
  // Independently computed: printf 'flowrun-auth-v1\0n1\0agent:x' |
  //   openssl dgst -sha256 -hmac secret
  CHECK(auth_proof("secret", "n1", "agent:x") ==
        "c90765ada0376a8d186df9d9203c5a5e7b998aaf901842da70ef36ae4b270bf0");
}

TEST_CASE("upload paths: relative, normal components only", "[protocol]") {
  struct Case {
    std::string path;
    std::string want;  // the normalised path, or the error
    bool ok;
  };
  std::vector<Case> cases = {
      {"a/b.pt", "a/b.pt", true},
      {"./a", "a", true},
      {"././a/./b", "a/b", true},
      {"ckpt", "ckpt", true},
      {"..a/b..", "..a/b..", true},
      {"../x", "upload path '../x' has a '..' component", false},
      {"a/../../x", "upload path 'a/../../x' has a '..' component", false},
      {"a/..", "upload path 'a/..' has a '..' component", false},
      {"/etc/passwd", "upload path '/etc/passwd' is absolute", false},
      {"a//b", "upload path 'a//b' has an empty component", false},
      {"a/", "upload path 'a/' has an empty component", false},
      {"", "upload path is empty", false},
      {".", "upload path '.' names no file", false},
      {"./", "upload path './' has an empty component", false},
      {"a\0b"s, "upload path contains a NUL byte", false},
      {std::string(4097, 'a'), "upload path is longer than 4096 bytes", false},
  };
  for (const auto& c : cases) {
    INFO("path '" << c.path << "'");
    std::string error;
    auto got = safe_relative_path(c.path, &error);
    if (c.ok) {
      REQUIRE(got);
      CHECK(*got == c.want);
    } else {
      CHECK_FALSE(got);
      CHECK(error == c.want);
    }
  }
}

TEST_CASE("Crc32c gives the standard check value, fed whole or in pieces of any size", "[protocol]") {
  Crc32c whole;
  whole.update("123456789");
  CHECK(whole.value() == 0xE3069283u);  // the CRC-32C check value (RFC 3720, B.4)
  CHECK(whole.hex() == "e3069283");
  // 32 bytes of zeros and of 0xFF, from RFC 3720 B.4.
  Crc32c zeros;
  zeros.update(std::string(32, '\0'));
  CHECK(zeros.value() == 0x8A9136AAu);
  Crc32c ones;
  ones.update(std::string(32, '\xff'));
  CHECK(ones.value() == 0x62A8AB43u);
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>(i * 7 + 3);
  Crc32c all;
  all.update(text);
  for (std::size_t step : {1, 3, 8, 13, 999}) {
    Crc32c pieces;
    for (std::size_t i = 0; i < text.size(); i += step) pieces.update(std::string_view(text).substr(i, step));
    CHECK(pieces.value() == all.value());
  }
  CHECK(Crc32c().hex() == "00000000");
}

TEST_CASE("Crc32c of large pieces, hashed three stripes at a time, equals the same bytes fed small",
          "[protocol]") {
  // Pieces of 12 KiB and more take the three-chain path; pieces below it one chain.
  std::string data(200 * 1024 + 77, '\0');
  std::uint32_t x = 2463534242u;
  for (char& c : data) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<char>(x);
  }
  Crc32c small;
  for (std::size_t i = 0; i < data.size(); i += 1000) small.update(std::string_view(data).substr(i, 1000));
  for (std::size_t offset : {0, 1, 5}) {
    for (std::size_t length : {std::size_t{12 * 1024 - 1}, std::size_t{12 * 1024}, std::size_t{12 * 1024 + 9},
                               std::size_t{100 * 1024 + 3}, data.size() - offset}) {
      const std::string_view piece = std::string_view(data).substr(offset, length);
      Crc32c whole, reference;
      whole.update(piece);
      for (std::size_t i = 0; i < piece.size(); i += 999) reference.update(piece.substr(i, 999));
      CHECK(whole.value() == reference.value());
    }
  }
  Crc32c whole;
  whole.update(std::string_view(data).substr(0, 150 * 1024));
  whole.update(std::string_view(data).substr(150 * 1024));
  CHECK(whole.value() == small.value());
}

TEST_CASE("a one-field frame is the same bytes as the general encoding, and its value reads in place",
          "[protocol]") {
  const std::string data = std::string("chunk\0with NUL", 14);
  const std::string frame = encode_one_field_frame(MessageType::upload_chunk, "data", data);
  CHECK(frame == encode_frame(MessageType::upload_chunk, encode_fields({{"data", data}})));
  FrameReader reader("agent");
  reader.feed(frame);
  auto got = reader.next();
  REQUIRE(got);
  auto view = one_field_view(got->payload, "data");
  REQUIRE(view);
  CHECK(*view == data);
  CHECK(view->data() >= got->payload.data());  // a view into the payload, not a copy
  CHECK_FALSE(one_field_view(got->payload, "path"));
  CHECK_FALSE(one_field_view(encode_fields({{"data", "x"}, {"more", "y"}}), "data"));
  CHECK_FALSE(one_field_view("", "data"));
  CHECK_FALSE(one_field_view(std::string("\x00\x00\x00\x04"
                                         "data\x00\x00\x00\x09"
                                         "short",
                                         17),
                             "data"));
  CHECK(one_field_view(encode_fields({{"data", ""}}), "data") == std::string_view());
  CHECK_THROWS_AS(encode_one_field_frame(MessageType::upload_chunk, "data", std::string(100, 'x'), 50),
                  Error);
}

// ---- sealed frames ----------------------------------------------------------

namespace {

struct Link {
  FrameKeys keys = derive_frame_keys("token", "agent-nonce-0123", "head-nonce-4567", "node1");
  FrameCipher seal{keys.agent_to_head, Direction::agent_to_head};
  FrameCipher open{keys.agent_to_head, Direction::agent_to_head, "agent"};
};

// `wire` as FrameReader hands it on.
Frame read_one(const std::string& wire) {
  FrameReader reader("agent");
  reader.feed(wire);
  auto frame = reader.next();
  REQUIRE(frame);
  return *frame;
}

std::string sealed(FrameCipher& cipher, MessageType type, const Fields& fields) {
  std::string frame = encode_frame(type, encode_fields(fields));
  cipher.seal(frame);
  return frame;
}

const std::string kFailed =
    " that fails authentication: it was altered, replayed, reordered or not sealed with this run's token";

}  // namespace

TEST_CASE("frame keys differ per direction, nonce, node and token", "[protocol][seal]") {
  const FrameKeys keys = derive_frame_keys("token", "a", "h", "node1");
  CHECK(keys.agent_to_head.size() == 32);
  CHECK(keys.head_to_agent.size() == 32);
  CHECK(keys.agent_to_head != keys.head_to_agent);
  CHECK(derive_frame_keys("token", "a", "h", "node1").agent_to_head == keys.agent_to_head);
  CHECK(derive_frame_keys("token", "b", "h", "node1").agent_to_head != keys.agent_to_head);
  CHECK(derive_frame_keys("token", "a", "i", "node1").agent_to_head != keys.agent_to_head);
  CHECK(derive_frame_keys("token", "a", "h", "node2").agent_to_head != keys.agent_to_head);
  CHECK(derive_frame_keys("other", "a", "h", "node1").agent_to_head != keys.agent_to_head);
  CHECK_THROWS_WITH(derive_frame_keys("", "a", "h", "node1"), "authentication token is empty");
  CHECK_THROWS_WITH(FrameCipher("short", Direction::agent_to_head), "a frame key is 32 bytes, not 5");
}

TEST_CASE("sealed frames round-trip in order, and hide their payload", "[protocol][seal]") {
  Link link;
  const std::string secret(100000, 's');
  std::string wire;
  for (const auto& fields : std::vector<Fields>{{{"cmd", secret}}, {}, {{"k", "v"}}})
    wire += sealed(link.seal, MessageType::assign, fields);
  CHECK(wire.find("sss") == std::string::npos);
  FrameReader reader("agent");
  reader.feed(wire);
  const auto frames = drain(reader);
  REQUIRE(frames.size() == 3);
  std::vector<std::string> plain;
  for (Frame f : frames) {
    std::string error;
    REQUIRE(link.open.open(f, &error));
    CHECK(f.type == MessageType::assign);
    plain.push_back(f.payload);
  }
  CHECK(plain == std::vector<std::string>{encode_fields({{"cmd", secret}}), "", encode_fields({{"k", "v"}})});
  CHECK(link.seal.sequence() == 3);
  CHECK(link.open.sequence() == 3);
  // A sealed frame is the plain one's length plus the tag.
  CHECK(sealed(link.seal, MessageType::bye, {}).size() == kFrameHeaderBytes + kTagBytes);
}

TEST_CASE("a tampered payload, tag or header fails, and every frame after it", "[protocol][seal]") {
  for (std::size_t at : {std::size_t{1}, kFrameHeaderBytes + 2, std::size_t{0}}) {
    Link link;
    std::string wire = sealed(link.seal, MessageType::start, {{"ranks", "2"}});
    if (at == 0) {
      wire[5] = static_cast<char>(MessageType::stop);  // the type, in the associated data
    } else {
      wire[at == 1 ? wire.size() - 1 : at] ^= 0x01;  // the tag's last byte, or the ciphertext
    }
    Frame f = read_one(wire);
    std::string error;
    CHECK_FALSE(link.open.open(f, &error));
    CHECK(error ==
          "agent sent frame 0 (" + std::string(at == 0 ? "stop" : "start") + ", 32 bytes)" + kFailed);
    Frame good = read_one(sealed(link.seal, MessageType::bye, {}));
    CHECK_FALSE(link.open.open(good, &error));
    CHECK(error == "agent sent frame 0 (bye, 18 bytes) that follows one that failed authentication");
  }
}

TEST_CASE("a replayed, reordered or dropped frame fails", "[protocol][seal]") {
  std::string error;
  SECTION("replayed") {
    Link link;
    const std::string first = sealed(link.seal, MessageType::heartbeat, {});
    Frame a = read_one(first), again = read_one(first);
    REQUIRE(link.open.open(a, &error));
    CHECK_FALSE(link.open.open(again, &error));
    CHECK(error == "agent sent frame 1 (heartbeat, 18 bytes)" + kFailed);
  }
  SECTION("reordered or dropped") {
    Link link;
    const std::string first = sealed(link.seal, MessageType::heartbeat, {});
    const std::string second = sealed(link.seal, MessageType::heartbeat, {});
    Frame b = read_one(second);
    CHECK_FALSE(link.open.open(b, &error));
    CHECK(error == "agent sent frame 0 (heartbeat, 18 bytes)" + kFailed);
  }
  SECTION("from the other direction, with its own key") {
    const FrameKeys keys = derive_frame_keys("token", "a", "h", "node1");
    FrameCipher head(keys.head_to_agent, Direction::head_to_agent);
    FrameCipher agent_reads_own(keys.agent_to_head, Direction::agent_to_head, "head");
    Frame reflected = read_one(sealed(head, MessageType::stop, {}));
    CHECK_FALSE(agent_reads_own.open(reflected, &error));
  }
}

TEST_CASE("a frame sealed with another key, or not sealed, or cut short, fails", "[protocol][seal]") {
  std::string error;
  Link link;
  FrameCipher stranger(
      derive_frame_keys("guess", "agent-nonce-0123", "head-nonce-4567", "node1").agent_to_head,
      Direction::agent_to_head);
  Frame forged = read_one(sealed(stranger, MessageType::assign, {{"cmd", "rm -rf /"}}));
  CHECK_FALSE(link.open.open(forged, &error));
  CHECK(error.find(kFailed) != std::string::npos);

  Link plain_link;
  Frame plain = read_one(encode_frame(MessageType::start, encode_fields({{"ranks", "2"}, {"r0", "rank 0"}})));
  CHECK_FALSE(plain_link.open.open(plain, &error));
  CHECK(error.find(kFailed) != std::string::npos);

  Link short_link;
  Frame tiny = read_one(encode_frame(MessageType::bye, "abc"));
  CHECK_FALSE(short_link.open.open(tiny, &error));
  CHECK(
      error ==
      "agent sent frame 0 (bye, 5 bytes) that is shorter than its authentication tag: it was not sealed with "
      "this run's token");

  // A sealed frame cut short on the wire never comes out of the reader.
  Link cut_link;
  std::string wire = sealed(cut_link.seal, MessageType::output, {{"data", "abc"}});
  FrameReader reader("agent");
  reader.feed(wire.substr(0, wire.size() - 1));
  CHECK_FALSE(reader.next());
  std::string cut = encode_frame(MessageType::bye, "x");
  cut.pop_back();
  CHECK_THROWS_WITH(cut_link.seal.seal(cut), "seal: the string is not one whole frame");
}

TEST_CASE("a one-field frame seals in place like any other", "[protocol][seal]") {
  Link link;
  const std::string data(1 << 20, 'd');
  std::string frame = encode_one_field_frame(MessageType::upload_chunk, "data", data);
  link.seal.seal(frame);
  Frame f = read_one(frame);
  std::string error;
  REQUIRE(link.open.open(f, &error));
  CHECK(one_field_view(f.payload, "data") == data);
}
