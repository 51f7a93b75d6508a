#include "flowrun/protocol.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "flowrun/error.h"
#include "flowrun/util.h"

namespace flowrun {

namespace {

constexpr std::array<std::string_view, kLastMessageType + 1> kTypeNames = {
    "",           "hello",     "challenge",   "auth",      "welcome",     "refused",      "assign",
    "start",      "output",    "exited",      "heartbeat", "stop",        "upload_begin", "upload_chunk",
    "upload_end", "bye",       "ready",       "done",      "preflight",   "preflight_id", "preflight_done",
    "signal",     "stalled",   "take_stacks", "stacks",    "upload_hole", "ship_begin",   "ship_chunk",
    "ship_end",   "ship_done", "ship_ack",    "shares",    "sample_rate",
};

void put_u32(std::string& out, std::uint32_t value) {
  out.push_back(static_cast<char>((value >> 24) & 0xff));
  out.push_back(static_cast<char>((value >> 16) & 0xff));
  out.push_back(static_cast<char>((value >> 8) & 0xff));
  out.push_back(static_cast<char>(value & 0xff));
}

std::uint32_t get_u32(std::string_view bytes, std::size_t at) {
  std::uint32_t value = 0;
  for (std::size_t i = 0; i < 4; ++i) value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
  return value;
}

// Keys are quoted in errors; they are usually short names, but come from the peer.
std::string quoted_key(std::string_view key) {
  constexpr std::size_t kShown = 64;
  std::string out = "'";
  out.append(key.substr(0, kShown));
  if (key.size() > kShown) out += "...";
  out += "'";
  return out;
}

}  // namespace

std::string_view message_type_name(MessageType type) {
  auto index = static_cast<std::size_t>(type);
  return index < kTypeNames.size() ? kTypeNames[index] : std::string_view("unknown");
}

std::optional<MessageType> message_type_from_byte(std::uint8_t byte) {
  if (byte < kFirstMessageType || byte > kLastMessageType) return std::nullopt;
  return static_cast<MessageType>(byte);
}

void append_frame(std::string& out, MessageType type, std::string_view payload, std::size_t max_frame) {
  std::size_t length = payload.size() + 2;
  if (length > max_frame || length > UINT32_MAX) {
    throw Error("a " + std::string(message_type_name(type)) + " frame of " + std::to_string(length) +
                " bytes is over the limit of " + std::to_string(max_frame));
  }
  out.reserve(out.size() + 4 + length + kTagBytes);  // room to seal it in place
  put_u32(out, static_cast<std::uint32_t>(length));
  out.push_back(static_cast<char>(kProtocolVersion));
  out.push_back(static_cast<char>(type));
  out.append(payload);
}

std::string encode_frame(MessageType type, std::string_view payload, std::size_t max_frame) {
  std::string out;
  append_frame(out, type, payload, max_frame);
  return out;
}

std::string one_field_frame_to_fill(MessageType type, std::string_view key, std::size_t bytes,
                                    std::size_t max_frame) {
  if (key.empty()) throw Error("a field needs a non-empty key");
  const std::size_t payload = 8 + key.size() + bytes;
  const std::size_t length = payload + 2;
  if (length > max_frame || length > UINT32_MAX) {
    throw Error("a " + std::string(message_type_name(type)) + " frame of " + std::to_string(length) +
                " bytes is over the limit of " + std::to_string(max_frame));
  }
  std::string out;
  out.reserve(4 + length + kTagBytes);  // room to seal it in place
  put_u32(out, static_cast<std::uint32_t>(length));
  out.push_back(static_cast<char>(kProtocolVersion));
  out.push_back(static_cast<char>(type));
  put_u32(out, static_cast<std::uint32_t>(key.size()));
  out.append(key);
  put_u32(out, static_cast<std::uint32_t>(bytes));
  out.resize(out.size() + bytes);
  return out;
}

std::string encode_one_field_frame(MessageType type, std::string_view key, std::string_view value,
                                   std::size_t max_frame) {
  std::string out = one_field_frame_to_fill(type, key, value.size(), max_frame);
  value.copy(out.data() + (out.size() - value.size()), value.size());
  return out;
}

std::optional<std::string_view> one_field_view(std::string_view payload, std::string_view key) {
  if (payload.size() < 8 + key.size() || get_u32(payload, 0) != key.size() ||
      payload.substr(4, key.size()) != key)
    return std::nullopt;
  const std::size_t at = 4 + key.size();
  if (get_u32(payload, at) != payload.size() - at - 4) return std::nullopt;
  return payload.substr(at + 4);
}

namespace {

// `frame` (from its header on, maybe cut short) of another version, read
// through the parts every version keeps.
OtherVersion read_other_version(std::string_view frame) {
  OtherVersion other;
  other.protocol = static_cast<unsigned char>(frame[4]);
  if (frame.size() < kFrameHeaderBytes) return other;
  const std::size_t length = get_u32(frame, 0);
  if (length < 2 || length > kMaxHandshakeFrame || frame.size() < 4 + length) return other;
  std::string ignored;
  const auto fields = decode_fields(frame.substr(kFrameHeaderBytes, length - 2), &ignored);
  if (!fields) return other;
  auto field = [&](std::string_view key) {
    const std::string* value = find_field(*fields, key);
    return value ? *value : std::string();
  };
  const auto type = static_cast<unsigned char>(frame[5]);
  if (type == static_cast<unsigned char>(MessageType::hello)) {
    other.node = field("node");
    other.flowrun = field("flowrun");
  } else if (type == static_cast<unsigned char>(MessageType::refused)) {
    other.reason = field("reason");
  }
  return other;
}

}  // namespace

std::string refused_frame_in(std::uint8_t version, std::string_view reason) {
  std::string frame = encode_frame(MessageType::refused, encode_fields({{"reason", std::string(reason)}}));
  frame[4] = static_cast<char>(version);
  return frame;
}

FrameReader::FrameReader(std::string peer, std::size_t max_frame, std::size_t direct_bytes)
    : peer_(std::move(peer)), max_frame_(std::max<std::size_t>(max_frame, 2)), direct_bytes_(direct_bytes) {}

bool FrameReader::check_header(std::size_t at) {
  std::size_t have = buffer_.size() - at;
  if (have >= 4) {
    std::uint32_t length = get_u32(buffer_, at);
    if (length > max_frame_) {
      error_ = peer_ + " sent a frame of " + std::to_string(length) + " bytes, over the limit of " +
               std::to_string(max_frame_);
    } else if (length < 2) {
      error_ = peer_ + " sent a frame of " + std::to_string(length) +
               " bytes, shorter than its 2-byte version and type";
    }
  }
  if (error_.empty() && have >= 5) {
    auto version = static_cast<unsigned char>(buffer_[at + 4]);
    if (version != kProtocolVersion) {
      other_version_ = read_other_version(std::string_view(buffer_).substr(at));
      error_ = peer_ + " speaks protocol " + std::to_string(version) + ", this flowrun speaks " +
               std::to_string(kProtocolVersion) + ": run the same flowrun version on every node";
    }
  }
  if (error_.empty() && have >= 6) {
    auto type = static_cast<unsigned char>(buffer_[at + 5]);
    if (!message_type_from_byte(type)) {
      error_ = peer_ + " sent a message of unknown type " + std::to_string(type);
    }
  }
  return error_.empty();
}

void FrameReader::feed(std::string_view bytes) {
  if (failed() || bytes.empty()) return;
  if (big_) {  // the rest of a frame read in place, then what follows it
    const std::size_t n = std::min(bytes.size(), big_->payload.size() - big_have_);
    bytes.copy(big_->payload.data() + big_have_, n);
    big_have_ += n;
    bytes.remove_prefix(n);
    if (bytes.empty()) return;
  }
  buffer_.append(bytes);
  // Check every header that has arrived, so a bad one fails now rather than
  // after the caller fed up to a whole frame's worth of bytes behind it.
  while (true) {
    if (!check_header(checked_)) {
      // Keep the whole frames before the bad one for next(); drop the rest.
      buffer_.resize(checked_);
      buffer_.shrink_to_fit();
      return;
    }
    if (buffer_.size() - checked_ < kFrameHeaderBytes) return;
    std::size_t frame_end = checked_ + 4 + get_u32(buffer_, checked_);
    if (frame_end > buffer_.size()) return;
    checked_ = frame_end;
  }
}

namespace {

// Payloads given back (FrameReader::recycle), for the next large frames.
constexpr std::size_t kSpares = 4;
constexpr std::size_t kLargestSpare = 2 << 20;
thread_local std::vector<std::string> spare_payloads;

}  // namespace

void FrameReader::recycle(std::string&& payload) {
  if (payload.capacity() < kDirectFrameBytes || payload.capacity() > kLargestSpare ||
      spare_payloads.size() >= kSpares)
    return;
  spare_payloads.push_back(std::move(payload));
}

std::span<char> FrameReader::direct_space() {
  if (!big_) return {};
  return {big_->payload.data() + big_have_, big_->payload.size() - big_have_};
}

void FrameReader::direct_wrote(std::size_t n) {
  if (!big_ || n > big_->payload.size() - big_have_)
    throw Error("direct_wrote: past the frame read in place");
  big_have_ += n;
}

std::optional<Frame> FrameReader::next() {
  if (big_) {
    if (big_have_ < big_->payload.size()) return std::nullopt;
    Frame frame = std::move(*big_);
    big_.reset();
    big_have_ = 0;
    return frame;
  }
  std::size_t have = buffer_.size() - start_;
  if (have < kFrameHeaderBytes) return std::nullopt;
  std::size_t length = get_u32(buffer_, start_);
  if (start_ >= checked_) {
    // The frame at start_ is still coming, and feed() checked its whole
    // header. A large one's payload is made whole now and the rest of it is
    // read into it in place; every frame before it was returned.
    if (length - 2 >= direct_bytes_ && !failed()) {
      Frame frame;
      frame.type = static_cast<MessageType>(static_cast<unsigned char>(buffer_[start_ + 5]));
      if (!spare_payloads.empty()) {
        frame.payload = std::move(spare_payloads.back());
        spare_payloads.pop_back();
      }
      frame.payload.resize(length - 2);  // a spare's bytes are overwritten, not cleared first
      big_have_ = have - kFrameHeaderBytes;
      std::copy_n(buffer_.data() + start_ + kFrameHeaderBytes, big_have_, frame.payload.data());
      big_ = std::move(frame);
      buffer_.clear();
      start_ = checked_ = 0;
    }
    return std::nullopt;
  }
  Frame frame;
  frame.type = static_cast<MessageType>(static_cast<unsigned char>(buffer_[start_ + 5]));
  frame.payload.assign(buffer_, start_ + kFrameHeaderBytes, length - 2);
  start_ += 4 + length;
  if (start_ == buffer_.size()) {
    buffer_.clear();
    checked_ -= start_;
    start_ = 0;
  } else if (start_ > 64 * 1024 && start_ > buffer_.size() / 2) {
    buffer_.erase(0, start_);
    checked_ -= start_;
    start_ = 0;
  }
  return frame;
}

std::string encode_fields(const Fields& fields) {
  std::size_t total = 0;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto& [key, value] = fields[i];
    if (key.empty()) throw Error("field " + std::to_string(i + 1) + " has an empty key");
    for (std::size_t j = 0; j < i; ++j) {
      if (fields[j].first == key) throw Error("duplicate field " + quoted_key(key));
    }
    if (key.size() > UINT32_MAX || value.size() > UINT32_MAX) {
      throw Error("field " + quoted_key(key) + " is too large to encode");
    }
    total += 8 + key.size() + value.size();
  }
  std::string out;
  out.reserve(total);
  for (const auto& [key, value] : fields) {
    put_u32(out, static_cast<std::uint32_t>(key.size()));
    out.append(key);
    put_u32(out, static_cast<std::uint32_t>(value.size()));
    out.append(value);
  }
  return out;
}

std::optional<Fields> decode_fields(std::string_view payload, std::string* error, std::size_t max_fields) {
  Fields fields;
  std::size_t at = 0;
  // Reads one length-prefixed string at `at`; `what` names it in errors.
  auto read_string = [&](std::string_view what, std::string& into) {
    if (payload.size() - at < 4) {
      *error = "truncated payload at byte " + std::to_string(at) + ": a length needs 4 bytes, " +
               std::to_string(payload.size() - at) + " are left";
      return false;
    }
    std::size_t length = get_u32(payload, at);
    at += 4;
    if (payload.size() - at < length) {
      *error = "truncated payload at byte " + std::to_string(at) + ": " + std::string(what) + " needs " +
               std::to_string(length) + " bytes, " + std::to_string(payload.size() - at) + " are left";
      return false;
    }
    into.assign(payload.substr(at, length));
    at += length;
    return true;
  };
  while (at < payload.size()) {
    if (fields.size() == max_fields) {
      *error = "more than " + std::to_string(max_fields) + " fields";
      return std::nullopt;
    }
    std::string key;
    std::string value;
    if (!read_string("a key", key)) return std::nullopt;
    if (key.empty()) {
      *error = "field " + std::to_string(fields.size() + 1) + " has an empty key";
      return std::nullopt;
    }
    if (find_field(fields, key)) {
      *error = "duplicate field " + quoted_key(key);
      return std::nullopt;
    }
    if (!read_string(quoted_key(key), value)) return std::nullopt;
    fields.emplace_back(std::move(key), std::move(value));
  }
  return fields;
}

const std::string* find_field(const Fields& fields, std::string_view key) {
  for (const auto& [k, v] : fields) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::optional<std::string> safe_relative_path(std::string_view path, std::string* error) {
  auto fail = [&](std::string message) -> std::optional<std::string> {
    *error = std::move(message);
    return std::nullopt;
  };
  if (path.empty()) return fail("upload path is empty");
  if (path.find('\0') != std::string_view::npos) return fail("upload path contains a NUL byte");
  if (path.size() > kMaxPathBytes) {
    return fail("upload path is longer than " + std::to_string(kMaxPathBytes) + " bytes");
  }
  std::string shown = "upload path '" + printable(path) + "'";
  if (path.front() == '/') return fail(shown + " is absolute");
  std::string out;
  std::size_t begin = 0;
  while (true) {
    std::size_t end = std::min(path.find('/', begin), path.size());
    std::string_view component = path.substr(begin, end - begin);
    if (component.empty()) return fail(shown + " has an empty component");
    if (component == "..") return fail(shown + " has a '..' component");
    if (component != ".") {
      if (!out.empty()) out += '/';
      out.append(component);
    }
    if (end == path.size()) break;
    begin = end + 1;
  }
  if (out.empty()) return fail(shown + " names no file");
  return out;
}

namespace {

// The reflected Castagnoli polynomial, one byte at a time.
std::uint32_t crc32c_table_update(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  while (n-- > 0) crc = table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42_serial(std::uint32_t crc, const unsigned char* p,
                                                                    std::size_t n) {
  std::uint64_t c = crc;
  while (n >= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<std::uint32_t>(c);
  while (n-- > 0) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}

// The CRC instruction takes 3 cycles and can start every cycle: one chain
// of them runs at a third of its speed. A block of 3 x kCrcStripe bytes is
// hashed as three chains at once, then joined: the CRC state is linear, so
// update(c, A B) = shift(update(c, A)) ^ update(0, B), where shift is
// update by kCrcStripe zero bytes, a linear map of the 32-bit state, kept as
// four tables of a byte of it each.
constexpr std::size_t kCrcStripe = 4096;

struct CrcShift {
  std::array<std::array<std::uint32_t, 256>, 4> table{};
  std::uint32_t operator()(std::uint32_t c) const {
    return table[0][c & 0xFF] ^ table[1][(c >> 8) & 0xFF] ^ table[2][(c >> 16) & 0xFF] ^ table[3][c >> 24];
  }
};

const CrcShift& crc_stripe_shift() {
  static const CrcShift shift = [] {
    static const unsigned char zeros[kCrcStripe] = {};
    std::array<std::uint32_t, 32> bit{};  // the map of each state bit
    for (int i = 0; i < 32; ++i)
      bit[static_cast<std::size_t>(i)] = crc32c_sse42_serial(1u << i, zeros, kCrcStripe);
    CrcShift s;
    for (std::size_t k = 0; k < 4; ++k) {
      for (std::uint32_t b = 0; b < 256; ++b) {
        std::uint32_t v = 0;
        for (std::size_t i = 0; i < 8; ++i)
          if (b & (1u << i)) v ^= bit[8 * k + i];
        s.table[k][b] = v;
      }
    }
    return s;
  }();
  return shift;
}

__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42_update(std::uint32_t crc, const unsigned char* p,
                                                                    std::size_t n) {
  if (n >= 3 * kCrcStripe) {
    const CrcShift& shift = crc_stripe_shift();
    while (n >= 3 * kCrcStripe) {
      std::uint64_t a = crc, b = 0, c = 0;
      for (std::size_t i = 0; i < kCrcStripe; i += 8) {
        std::uint64_t wa, wb, wc;
        std::memcpy(&wa, p + i, 8);
        std::memcpy(&wb, p + kCrcStripe + i, 8);
        std::memcpy(&wc, p + 2 * kCrcStripe + i, 8);
        a = __builtin_ia32_crc32di(a, wa);
        b = __builtin_ia32_crc32di(b, wb);
        c = __builtin_ia32_crc32di(c, wc);
      }
      crc = shift(shift(static_cast<std::uint32_t>(a)) ^ static_cast<std::uint32_t>(b)) ^
            static_cast<std::uint32_t>(c);
      p += 3 * kCrcStripe;
      n -= 3 * kCrcStripe;
    }
  }
  return crc32c_sse42_serial(crc, p, n);
}
#endif

}  // namespace

void Crc32c::update(std::string_view data) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
#if defined(__x86_64__)
  static const bool hardware = __builtin_cpu_supports("sse4.2");
  if (hardware) {
    state_ = crc32c_sse42_update(state_, p, data.size());
    return;
  }
#endif
  state_ = crc32c_table_update(state_, p, data.size());
}

std::string Crc32c::hex() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(8, '0');
  std::uint32_t v = value();
  for (int i = 7; i >= 0; --i, v >>= 4) out[static_cast<std::size_t>(i)] = kHex[v & 15];
  return out;
}

}  // namespace flowrun
