// SHA-256 (OpenSSL's libcrypto), for replica identity and checkpoint checksums.
//
// Threads: a Sha256 is one thread's at a time; the functions any thread.
// Errors: none.
#ifndef RECKON_CODEC_SHA256_H_
#define RECKON_CODEC_SHA256_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace reckon::codec {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental hashing. Not thread-safe; one object per hash.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* data, size_t size);
  Sha256Digest Finish();

 private:
  void* ctx_;  // EVP_MD_CTX*
};

Sha256Digest Sha256Of(std::string_view bytes);
std::string ToHex(const Sha256Digest& digest);

}  // namespace reckon::codec

#endif  // RECKON_CODEC_SHA256_H_
