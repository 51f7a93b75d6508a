#include <array>
#include <climits>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "flowrun/error.h"
#include "flowrun/protocol.h"

namespace flowrun {

namespace {

// Bumped only with kProtocolVersion, and only if the proof itself changes.
constexpr std::string_view kAuthContext{"flowrun-auth-v1\0", 16};

std::string to_hex(const unsigned char* bytes, std::size_t size) {
  constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * size);
  for (std::size_t i = 0; i < size; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 0x0f]);
  }
  return out;
}

std::string openssl_error() {
  unsigned long code = ERR_get_error();
  if (code == 0) return "no error reported";
  std::array<char, 256> text{};
  ERR_error_string_n(code, text.data(), text.size());
  return text.data();
}

std::string random_hex(std::size_t size) {
  std::array<unsigned char, 64> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(size)) != 1) {
    throw Error("cannot get random bytes from OpenSSL: " + openssl_error());
  }
  return to_hex(bytes.data(), size);
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
  if (HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest.data(),
           &digest_size) == nullptr) {
    throw Error("cannot compute HMAC-SHA256 with OpenSSL: " + openssl_error());
  }
  return to_hex(digest.data(), digest_size);
}

bool proofs_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace flowrun
