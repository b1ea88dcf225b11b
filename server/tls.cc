#include "server/tls.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/files.h"

namespace reckon::server {
namespace {

// OpenSSL objects, freed on every path.
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "unknown OpenSSL error";
  char text[256];
  ERR_error_string_n(e, text, sizeof text);
  ERR_clear_error();
  return text;
}

Cert ParseCert(const std::string& pem) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return Cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

Key ParseKey(const std::string& pem) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return Key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

std::string CommonName(X509* cert) {
  char cn[256] = {0};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn) <= 0) {
    return "";
  }
  return cn;
}

// A PEM file named by `flag`; errors name both. PEM files are small: a
// megabyte is already not one.
absl::StatusOr<std::string> ReadPem(const std::string& path, const std::string& flag) {
  absl::StatusOr<std::string> text = base::ReadFile(path, 1 << 20);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat(flag, " ", path, ": ", text.status().message()));
  }
  return text;
}

std::string ToPem(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string ToPem(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

bool AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A certificate for `key`, named `common_name`, signed by `issuer_key`
// (self-signed when `issuer` is null).
absl::StatusOr<Cert> MakeCertificate(EVP_PKEY* key, const std::string& common_name, X509* issuer,
                                     EVP_PKEY* issuer_key, int days,
                                     const std::vector<std::pair<int, std::string>>& extensions) {
  Cert cert(X509_new());
  uint64_t serial = 0;
  RAND_bytes(reinterpret_cast<unsigned char*>(&serial), sizeof serial);
  if (!X509_set_version(cert.get(), 2) ||
      !ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert.get()), serial >> 1) ||
      !X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) ||
      !X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days) * 86400) ||
      !X509_set_pubkey(cert.get(), key)) {
    return absl::InternalError(absl::StrCat("certificate for ", common_name, ": ", OpenSslError()));
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509_set_issuer_name(cert.get(), issuer != nullptr ? X509_get_subject_name(issuer) : name);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  for (const auto& [nid, value] : extensions) {
    if (!AddExtension(cert.get(), signer, nid, value)) {
      return absl::InternalError(
          absl::StrCat("extension ", value, " for ", common_name, ": ", OpenSslError()));
    }
  }
  // Ed25519 signs the whole message: no separate digest.
  if (X509_sign(cert.get(), issuer_key, nullptr) <= 0) {
    return absl::InternalError(absl::StrCat("signing ", common_name, ": ", OpenSslError()));
  }
  return cert;
}

}  // namespace

absl::StatusOr<TlsConfig> CheckTls(TlsConfig config, const std::string& what) {
  Cert ca = ParseCert(config.ca_pem);
  if (!ca) return absl::InvalidArgumentError(absl::StrCat(what, ": the CA is not a PEM certificate"));
  Cert cert = ParseCert(config.cert_pem);
  if (!cert) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the certificate is not PEM"));
  }
  Key key = ParseKey(config.key_pem);
  if (!key) return absl::InvalidArgumentError(absl::StrCat(what, ": the key is not a PEM key"));
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the key is not the certificate's key"));
  }
  if (EVP_PKEY_id(key.get()) != EVP_PKEY_ED25519) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the key must be Ed25519 (it also signs Updates); make one with "
                           "`reckonctl certs`"));
  }
  absl::StatusOr<std::string> identity = VerifyCertificate(config.ca_pem, config.cert_pem);
  if (!identity.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", identity.status().message()));
  }
  config.identity = *std::move(identity);
  return config;
}

absl::StatusOr<std::string> VerifyCertificate(const std::string& ca_pem,
                                              const std::string& cert_pem) {
  Cert ca = ParseCert(ca_pem);
  Cert cert = ParseCert(cert_pem);
  if (!ca || !cert) {
    ERR_clear_error();
    return absl::InvalidArgumentError("not a PEM certificate");
  }
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  X509_STORE_add_cert(store.get(), ca.get());
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr);
  if (X509_verify_cert(ctx.get()) != 1) {
    const std::string why = X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("the certificate is not valid under the CA: ", why));
  }
  std::string name = CommonName(cert.get());
  if (name.empty()) return absl::InvalidArgumentError("the certificate has no common name");
  return name;
}

absl::StatusOr<TlsConfig> LoadTls(const std::string& ca_path, const std::string& cert_path,
                                  const std::string& key_path) {
  TlsConfig config;
  absl::StatusOr<std::string> ca = ReadPem(ca_path, "--tls-ca");
  if (!ca.ok()) return ca.status();
  absl::StatusOr<std::string> cert = ReadPem(cert_path, "--tls-cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(key_path, "--tls-key");
  if (!key.ok()) return key.status();
  config.ca_pem = *std::move(ca);
  config.cert_pem = *std::move(cert);
  config.key_pem = *std::move(key);
  return CheckTls(std::move(config),
                  absl::StrCat("--tls-cert ", cert_path, " --tls-key ", key_path, " --tls-ca ",
                               ca_path));
}

absl::StatusOr<KeyAndCertificate> MakeCertificateAuthority(const std::string& name, int days) {
  Key key(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"));
  if (!key) return absl::InternalError(absl::StrCat("Ed25519 key: ", OpenSslError()));
  absl::StatusOr<Cert> cert =
      MakeCertificate(key.get(), name, nullptr, key.get(), days,
                      {{NID_basic_constraints, "critical,CA:TRUE"},
                       {NID_key_usage, "critical,keyCertSign,cRLSign"},
                       {NID_subject_key_identifier, "hash"}});
  if (!cert.ok()) return cert.status();
  return KeyAndCertificate{ToPem(key.get()), ToPem(cert->get())};
}

absl::StatusOr<KeyAndCertificate> IssueCertificate(const KeyAndCertificate& ca,
                                                   const std::string& common_name,
                                                   const std::vector<std::string>& hosts,
                                                   int days) {
  Cert ca_cert = ParseCert(ca.cert_pem);
  Key ca_key = ParseKey(ca.key_pem);
  if (!ca_cert || !ca_key) return absl::InvalidArgumentError("the CA's certificate or key is not PEM");
  Key key(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"));
  if (!key) return absl::InternalError(absl::StrCat("Ed25519 key: ", OpenSslError()));
  std::vector<std::string> names = {absl::StrCat("DNS:", common_name)};
  for (const std::string& h : hosts) {
    unsigned char address[16];
    const bool ip = inet_pton(AF_INET, h.c_str(), address) == 1 ||
                    inet_pton(AF_INET6, h.c_str(), address) == 1;
    names.push_back(absl::StrCat(ip ? "IP:" : "DNS:", h));
  }
  absl::StatusOr<Cert> cert = MakeCertificate(
      key.get(), common_name, ca_cert.get(), ca_key.get(), days,
      {{NID_basic_constraints, "critical,CA:FALSE"},
       {NID_key_usage, "critical,digitalSignature"},
       {NID_ext_key_usage, "serverAuth,clientAuth"},
       {NID_subject_alt_name, absl::StrJoin(names, ",")},
       {NID_authority_key_identifier, "keyid:always"}});
  if (!cert.ok()) return cert.status();
  return KeyAndCertificate{ToPem(key.get()), ToPem(cert->get())};
}

}  // namespace reckon::server
