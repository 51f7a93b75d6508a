#include <algorithm>
#include <array>
#include <climits>
#include <utility>

#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/protocol.h"
#include "flowrun/text.h"

#include "openssl_api.h"

namespace flowrun {

namespace {

// Bumped only with kProtocolVersion, and only if the proof itself changes.
constexpr std::string_view kAuthContext{"flowrun-auth-v1\0", 16};

std::string openssl_error() {
  unsigned long code = openssl::api().ERR_get_error();
  if (code == 0) return "no error reported";
  std::array<char, 256> text{};
  openssl::api().ERR_error_string_n(code, text.data(), text.size());
  return text.data();
}

}  // namespace

std::string make_token() { return random_hex(32); }

std::string make_nonce() { return random_hex(16); }

std::string auth_proof(std::string_view token, std::string_view nonce, std::string_view role_and_node) {
  if (token.empty()) throw Error("authentication token is empty");
  if (token.size() > INT_MAX) throw Error("authentication token is too long");
  std::string message;
  message.reserve(kAuthContext.size() + nonce.size() + 1 + role_and_node.size());
  message.append(kAuthContext);
  message.append(nonce);
  message.push_back('\0');
  message.append(role_and_node);
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int digest_size = 0;
  if (openssl::api().HMAC(openssl::api().EVP_sha256(), token.data(), static_cast<int>(token.size()),
                          reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                          digest.data(), &digest_size) == nullptr) {
    throw Error("cannot compute HMAC-SHA256 with OpenSSL: " + openssl_error());
  }
  return hex(digest.data(), digest_size);
}

namespace {

std::string hmac_sha256(std::string_view key, std::string_view message) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int digest_size = 0;
  if (openssl::api().HMAC(openssl::api().EVP_sha256(), key.data(), static_cast<int>(key.size()),
                          reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                          digest.data(), &digest_size) == nullptr) {
    throw Error("cannot compute HMAC-SHA256 with OpenSSL: " + openssl_error());
  }
  return std::string(reinterpret_cast<const char*>(digest.data()), digest_size);
}

constexpr std::string_view kFramesContext{"flowrun-frames-v1\0", 18};

std::uint32_t frame_length(std::string_view frame) {
  std::uint32_t value = 0;
  for (std::size_t i = 0; i < 4; ++i) value = (value << 8) | static_cast<unsigned char>(frame[i]);
  return value;
}

void put_length(char* at, std::uint32_t value) {
  for (int i = 3; i >= 0; --i, value >>= 8) at[i] = static_cast<char>(value & 0xff);
}

}  // namespace

FrameKeys derive_frame_keys(std::string_view token, std::string_view agent_nonce, std::string_view head_nonce,
                            std::string_view node) {
  if (token.empty()) throw Error("authentication token is empty");
  if (token.size() > INT_MAX) throw Error("authentication token is too long");
  std::string salt(kFramesContext);
  salt.append(agent_nonce);
  salt.push_back('\0');
  salt.append(head_nonce);
  // HKDF-Extract, then one block of HKDF-Expand per key (32 bytes = one SHA-256).
  const std::string prk = hmac_sha256(salt, token);
  auto expand = [&](std::string_view label) {
    std::string info(label);
    info.append(node);
    info.push_back('\x01');
    return hmac_sha256(prk, info);
  };
  return {expand("agent->head:"), expand("head->agent:")};
}

struct FrameCipher::Context {
  EVP_CIPHER_CTX* ctx = nullptr;
  bool encrypting = false;
  bool primed = false;
  std::string key;
};

FrameCipher::FrameCipher(std::string_view key, Direction direction, std::string peer)
    : direction_(direction), peer_(std::move(peer)) {
  if (key.size() != 32) throw Error("a frame key is 32 bytes, not " + std::to_string(key.size()));
  ctx_ = new Context;
  ctx_->key.assign(key);
  ctx_->ctx = openssl::api().EVP_CIPHER_CTX_new();
  if (ctx_->ctx == nullptr) {
    delete ctx_;
    ctx_ = nullptr;
    throw Error("cannot set up AES-256-GCM with OpenSSL: " + openssl_error());
  }
}

FrameCipher::~FrameCipher() {
  if (ctx_ == nullptr) return;
  openssl::api().EVP_CIPHER_CTX_free(ctx_->ctx);
  openssl::api().OPENSSL_cleanse(ctx_->key.data(), ctx_->key.size());
  delete ctx_;
}

FrameCipher::FrameCipher(FrameCipher&& other) noexcept
    : ctx_(std::exchange(other.ctx_, nullptr)),
      direction_(other.direction_),
      peer_(std::move(other.peer_)),
      sequence_(other.sequence_),
      broken_(other.broken_) {}

FrameCipher& FrameCipher::operator=(FrameCipher&& other) noexcept {
  if (this != &other) {
    FrameCipher gone(std::move(*this));
    ctx_ = std::exchange(other.ctx_, nullptr);
    direction_ = other.direction_;
    peer_ = std::move(other.peer_);
    sequence_ = other.sequence_;
    broken_ = other.broken_;
  }
  return *this;
}

namespace {

// The key is set once; each frame sets only its nonce (direction, sequence).
bool begin_frame(EVP_CIPHER_CTX* ctx, bool encrypt, bool& primed, bool& encrypting, const std::string& key,
                 Direction direction, std::uint64_t sequence) {
  std::array<unsigned char, 12> iv{};
  iv[3] = static_cast<unsigned char>(direction);
  for (int i = 0; i < 8; ++i)
    iv[static_cast<std::size_t>(11 - i)] = static_cast<unsigned char>(sequence >> (8 * i));
  const auto* k = reinterpret_cast<const unsigned char*>(key.data());
  if (!primed || encrypting != encrypt) {
    primed = true;
    encrypting = encrypt;
    // Fetched once: an implicit fetch (EVP_aes_256_gcm()) per connection costs
    // as much as the rest of its setup.
    static EVP_CIPHER* const cipher = openssl::api().EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
    if (cipher == nullptr) return false;
    return openssl::api().EVP_CipherInit_ex(ctx, cipher, nullptr, k, iv.data(), encrypt ? 1 : 0) == 1;
  }
  return openssl::api().EVP_CipherInit_ex(ctx, nullptr, nullptr, nullptr, iv.data(), encrypt ? 1 : 0) == 1;
}

}  // namespace

void FrameCipher::seal(std::string& frame) {
  if (ctx_ == nullptr) throw Error("sealing with a moved-from frame cipher");
  if (frame.size() < kFrameHeaderBytes || frame_length(frame) + 4 != frame.size())
    throw Error("seal: the string is not one whole frame");
  if (sequence_ == UINT64_MAX) throw Error("this connection has sealed 2^64 frames; reconnect");
  const std::size_t length = frame.size() - 4 + kTagBytes;
  if (length > UINT32_MAX) throw Error("seal: the frame is too long");
  put_length(frame.data(), static_cast<std::uint32_t>(length));
  auto* ctx = ctx_->ctx;
  auto* bytes = reinterpret_cast<unsigned char*>(frame.data());
  std::array<unsigned char, 16> tail{};  // GCM's final step writes nothing
  int n = 0;
  const int payload = static_cast<int>(frame.size() - kFrameHeaderBytes);
  if (!begin_frame(ctx, true, ctx_->primed, ctx_->encrypting, ctx_->key, direction_, sequence_) ||
      openssl::api().EVP_EncryptUpdate(ctx, nullptr, &n, bytes, static_cast<int>(kFrameHeaderBytes)) != 1 ||
      (payload > 0 && openssl::api().EVP_EncryptUpdate(ctx, bytes + kFrameHeaderBytes, &n,
                                                       bytes + kFrameHeaderBytes, payload) != 1) ||
      openssl::api().EVP_EncryptFinal_ex(ctx, tail.data(), &n) != 1)
    throw Error("cannot seal a frame with AES-256-GCM: " + openssl_error());
  std::array<unsigned char, kTagBytes> tag{};
  if (openssl::api().EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTagBytes),
                                         tag.data()) != 1)
    throw Error("cannot seal a frame with AES-256-GCM: " + openssl_error());
  frame.append(reinterpret_cast<const char*>(tag.data()), tag.size());
  ++sequence_;
}

bool FrameCipher::open(Frame& frame, std::string* error) {
  const std::uint64_t number = sequence_;
  auto fail = [&](std::string_view why) {
    broken_ = true;
    *error = peer_ + " sent frame " + std::to_string(number) + " (" +
             std::string(message_type_name(frame.type)) + ", " + std::to_string(frame.payload.size() + 2) +
             " bytes) that " + std::string(why);
    return false;
  };
  if (broken_ || ctx_ == nullptr) return fail("follows one that failed authentication");
  if (frame.payload.size() < kTagBytes)
    return fail("is shorter than its authentication tag: it was not sealed with this run's token");
  const std::size_t text = frame.payload.size() - kTagBytes;
  std::array<unsigned char, kFrameHeaderBytes> header{};
  put_length(reinterpret_cast<char*>(header.data()), static_cast<std::uint32_t>(frame.payload.size() + 2));
  header[4] = kProtocolVersion;
  header[5] = static_cast<unsigned char>(frame.type);
  auto* ctx = ctx_->ctx;
  auto* bytes = reinterpret_cast<unsigned char*>(frame.payload.data());
  std::array<unsigned char, kTagBytes> tag{};
  std::copy_n(bytes + text, kTagBytes, tag.data());
  std::array<unsigned char, 16> tail{};
  int n = 0;
  if (!begin_frame(ctx, false, ctx_->primed, ctx_->encrypting, ctx_->key, direction_, sequence_) ||
      openssl::api().EVP_DecryptUpdate(ctx, nullptr, &n, header.data(), static_cast<int>(header.size())) !=
          1 ||
      (text > 0 && openssl::api().EVP_DecryptUpdate(ctx, bytes, &n, bytes, static_cast<int>(text)) != 1) ||
      openssl::api().EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTagBytes),
                                         tag.data()) != 1 ||
      openssl::api().EVP_DecryptFinal_ex(ctx, tail.data(), &n) != 1) {
    openssl::api().ERR_clear_error();
    return fail(
        "fails authentication: it was altered, replayed, reordered or not sealed with this run's token");
  }
  frame.payload.resize(text);
  ++sequence_;
  return true;
}

bool proofs_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return openssl::api().CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace flowrun
