#include "codec/sha256.h"

#include <openssl/evp.h>

#include "absl/strings/str_cat.h"

namespace reckon::codec {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr);
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::Update(const void* data, size_t size) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, size);
}

Sha256Digest Sha256::Finish() {
  Sha256Digest digest{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), digest.data(), &len);
  return digest;
}

Sha256Digest Sha256Of(std::string_view bytes) {
  Sha256 h;
  h.Update(bytes.data(), bytes.size());
  return h.Finish();
}

std::string ToHex(const Sha256Digest& digest) {
  std::string hex;
  for (const uint8_t b : digest) absl::StrAppend(&hex, absl::Hex(b, absl::kZeroPad2));
  return hex;
}

}  // namespace reckon::codec
