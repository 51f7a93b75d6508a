// The libcrypto functions lib/protocol calls, through one table.
//
// In a build with shared libraries (the default) libcrypto is not linked:
// api() dlopens it (libcrypto.so.<OPENSSL_SHLIB_VERSION>, the soname of the
// OpenSSL the headers are from) at the first call, so a run on one node, which
// never authenticates a connection, neither loads it nor pays for its
// relocations (about 1.4 MiB of memory and 0.2 ms of start-up). With
// FLOWRUN_STATIC_DEPS the table holds the linked functions.
#pragma once

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

namespace flowrun::openssl {

#define FLOWRUN_OPENSSL_FUNCTIONS(X) \
  X(CRYPTO_memcmp)                   \
  X(ERR_clear_error)                 \
  X(ERR_error_string_n)              \
  X(ERR_get_error)                   \
  X(EVP_CIPHER_CTX_ctrl)             \
  X(EVP_CIPHER_CTX_free)             \
  X(EVP_CIPHER_CTX_new)              \
  X(EVP_CIPHER_fetch)                \
  X(EVP_CipherInit_ex)               \
  X(EVP_DecryptFinal_ex)             \
  X(EVP_DecryptUpdate)               \
  X(EVP_EncryptFinal_ex)             \
  X(EVP_EncryptUpdate)               \
  X(EVP_sha256)                      \
  X(HMAC)                            \
  X(OPENSSL_cleanse)

struct Api {
#define FLOWRUN_OPENSSL_MEMBER(name) decltype(&::name) name = nullptr;
  FLOWRUN_OPENSSL_FUNCTIONS(FLOWRUN_OPENSSL_MEMBER)
#undef FLOWRUN_OPENSSL_MEMBER
};

// The table, loaded at the first call. Throws Error when libcrypto cannot be
// loaded or lacks a function (the message names the file and the package).
const Api& api();

}  // namespace flowrun::openssl
