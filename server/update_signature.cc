#include "server/update_signature.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/tls.h"

namespace reckon::server {
namespace {

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

}  // namespace

// Named, not anonymous: UpdateSigner::Key and CertificateBook::Entry
// (declared in the header) hold a Pkey, and a member whose type has
// internal linkage is a -Wsubobject-linkage error once this file is
// compiled inside a unity batch.
namespace update_signature_internal {
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
}  // namespace update_signature_internal
using update_signature_internal::MdCtxFree;
using update_signature_internal::Pkey;

std::string SignedBytes(const v1::Update& u) {
  std::string out = "reckon-update-v1";
  out.reserve(out.size() + 64 + u.origin().node_id().size() + u.payload().size());
  PutU32(&out, static_cast<uint32_t>(u.origin().node_id().size()));
  out += u.origin().node_id();
  PutU64(&out, u.origin().incarnation());
  PutU64(&out, u.seq());
  PutU32(&out, static_cast<uint32_t>(u.codec()));
  PutU64(&out, u.param_count());
  PutU32(&out, u.count());
  PutU32(&out, u.rice_k());
  PutU64(&out, static_cast<uint64_t>(u.step_quanta()));
  PutU32(&out, u.crc32c());
  PutU64(&out, u.checksum_delta());
  PutU64(&out, u.payload().size());
  out += u.payload();
  return out;
}

struct UpdateSigner::Key {
  Pkey pkey;
};

UpdateSigner::UpdateSigner(std::unique_ptr<Key> key) : key_(std::move(key)) {}
UpdateSigner::~UpdateSigner() = default;

absl::StatusOr<std::unique_ptr<UpdateSigner>> UpdateSigner::Create(const std::string& key_pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())), &BIO_free);
  Pkey pkey(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!pkey || EVP_PKEY_id(pkey.get()) != EVP_PKEY_ED25519) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the signing key is not an Ed25519 private key (PEM)");
  }
  auto key = std::make_unique<Key>();
  key->pkey = std::move(pkey);
  return std::unique_ptr<UpdateSigner>(new UpdateSigner(std::move(key)));
}

void UpdateSigner::Sign(v1::Update* update) const {
  update->clear_signature();
  const std::string bytes = SignedBytes(*update);
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  unsigned char signature[64];
  size_t length = sizeof signature;
  if (EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key_->pkey.get()) != 1 ||
      EVP_DigestSign(ctx.get(), signature, &length,
                     reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()) != 1) {
    ERR_clear_error();
    return;  // unsigned: every peer refuses it, and says so
  }
  update->set_signature(signature, length);
}

struct CertificateBook::Entry {
  std::string pem;
  Pkey key;
};

CertificateBook::CertificateBook(std::string ca_pem) : ca_pem_(std::move(ca_pem)) {}
CertificateBook::~CertificateBook() = default;
CertificateBook::CertificateBook(CertificateBook&&) noexcept = default;
CertificateBook& CertificateBook::operator=(CertificateBook&&) noexcept = default;

absl::StatusOr<std::string> CertificateBook::Add(const std::string& pem) {
  if (auto known = pem_to_node_.find(pem); known != pem_to_node_.end()) return known->second;
  absl::StatusOr<std::string> node = VerifyCertificate(ca_pem_, pem);
  if (!node.ok()) return node.status();
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), &X509_free);
  auto entry = std::make_shared<Entry>();
  entry->pem = pem;
  entry->key.reset(cert ? X509_get_pubkey(cert.get()) : nullptr);
  if (!entry->key || EVP_PKEY_id(entry->key.get()) != EVP_PKEY_ED25519) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("the certificate of '", *node, "' has no Ed25519 key"));
  }
  if (!by_node_.count(*node) && by_node_.size() >= kMaxMembers) {
    return absl::ResourceExhaustedError("too many members' certificates");
  }
  auto& entries = by_node_[*node];
  entries.push_back(std::move(entry));
  if (entries.size() > kMaxPerMember) {
    pem_to_node_.erase(entries.front()->pem);
    entries.erase(entries.begin());
  }
  pem_to_node_[pem] = *node;
  return node;
}

bool CertificateBook::Knows(const std::string& node_id) const {
  return by_node_.count(node_id) > 0;
}

std::vector<std::string> CertificateBook::All() const {
  std::vector<std::string> out;
  for (const auto& [node, entries] : by_node_) {
    for (const auto& e : entries) out.push_back(e->pem);
  }
  return out;
}

absl::Status CertificateBook::Verify(const v1::Update& update) const {
  if (update.signature().empty()) return absl::UnauthenticatedError("it is not signed");
  auto it = by_node_.find(update.origin().node_id());
  if (it == by_node_.end()) {
    return absl::NotFoundError(absl::StrCat("no certificate of its origin '",
                                            update.origin().node_id().substr(0, 64), "' is known"));
  }
  const std::string bytes = SignedBytes(update);
  for (const auto& entry : it->second) {
    std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
    if (EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, entry->key.get()) == 1 &&
        EVP_DigestVerify(ctx.get(),
                         reinterpret_cast<const unsigned char*>(update.signature().data()),
                         update.signature().size(),
                         reinterpret_cast<const unsigned char*>(bytes.data()),
                         bytes.size()) == 1) {
      return absl::OkStatus();
    }
    ERR_clear_error();
  }
  return absl::UnauthenticatedError(absl::StrCat(
      "its signature is not its origin's ('", update.origin().node_id().substr(0, 64), "')"));
}

namespace {

// The book under a reader-writer lock: verifications (the many) share it,
// a certificate learned (rare) takes it alone.
class CertificateSignatures final : public UpdateSignatures {
 public:
  CertificateSignatures(std::unique_ptr<UpdateSigner> signer, CertificateBook book)
      : signer_(std::move(signer)), book_(std::move(book)) {}

  void Sign(v1::Update* update) const override { signer_->Sign(update); }
  absl::Status Verify(const v1::Update& update) const override {
    absl::ReaderMutexLock l(&mu_);
    return book_.Verify(update);
  }
  absl::StatusOr<Learned> Learn(const std::string& pem) override {
    absl::MutexLock l(&mu_);
    const bool known = book_.Has(pem);
    absl::StatusOr<std::string> id = book_.Add(pem);
    if (!id.ok()) return id.status();
    return Learned{*std::move(id), !known};
  }
  std::vector<std::string> Certificates() const override {
    absl::ReaderMutexLock l(&mu_);
    return book_.All();
  }

 private:
  const std::unique_ptr<UpdateSigner> signer_;  // immutable, shared for signing
  mutable absl::Mutex mu_;
  CertificateBook book_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::shared_ptr<UpdateSignatures>> MakeUpdateSignatures(const TlsConfig& tls) {
  absl::StatusOr<std::unique_ptr<UpdateSigner>> signer = UpdateSigner::Create(tls.key_pem);
  if (!signer.ok()) return signer.status();
  CertificateBook book(tls.ca_pem);
  if (absl::StatusOr<std::string> own = book.Add(tls.cert_pem); !own.ok()) return own.status();
  return std::make_shared<CertificateSignatures>(*std::move(signer), std::move(book));
}

}  // namespace reckon::server
