#include "protocol/tls.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace kvtier::protocol {
namespace {

namespace gx = grpc::experimental;

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::unique_ptr<BIO, BioFree> MemBio(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

absl::Status Bad(const std::string& field, const std::string& path, const char* problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, " (", path, ") ", problem));
}

std::shared_ptr<gx::FileWatcherCertificateProvider> Provider(const TlsFiles& f, bool with_identity,
                                                             bool with_ca) {
  const unsigned interval =
      f.refresh_interval_s == 0 ? kDefaultTlsRefreshSeconds : f.refresh_interval_s;
  return std::make_shared<gx::FileWatcherCertificateProvider>(with_identity ? f.key_file : "",
                                                              with_identity ? f.cert_file : "",
                                                              with_ca ? f.ca_file : "", interval);
}

}  // namespace

absl::Status CheckTlsFiles(const TlsFiles& files, const std::string& field) {
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".cert_file and ", field, ".key_file go together"));
  }
  std::string pem;
  std::unique_ptr<X509, X509Free> cert;
  if (!files.cert_file.empty()) {
    const std::string f = absl::StrCat(field, ".cert_file");
    if (!ReadFile(files.cert_file, &pem)) return Bad(f, files.cert_file, "cannot be read");
    cert.reset(PEM_read_bio_X509(MemBio(pem).get(), nullptr, nullptr, nullptr));
    if (cert == nullptr) return Bad(f, files.cert_file, "is not a PEM certificate");
  }
  if (!files.key_file.empty()) {
    const std::string f = absl::StrCat(field, ".key_file");
    if (!ReadFile(files.key_file, &pem)) return Bad(f, files.key_file, "cannot be read");
    std::unique_ptr<EVP_PKEY, PkeyFree> key(
        PEM_read_bio_PrivateKey(MemBio(pem).get(), nullptr, nullptr, nullptr));
    if (key == nullptr) return Bad(f, files.key_file, "is not a PEM private key");
    if (X509_check_private_key(cert.get(), key.get()) != 1) {
      return Bad(f, files.key_file, "does not match cert_file");
    }
  }
  if (!files.ca_file.empty()) {
    const std::string f = absl::StrCat(field, ".ca_file");
    if (!ReadFile(files.ca_file, &pem)) return Bad(f, files.ca_file, "cannot be read");
    std::unique_ptr<X509, X509Free> ca(
        PEM_read_bio_X509(MemBio(pem).get(), nullptr, nullptr, nullptr));
    if (ca == nullptr) return Bad(f, files.ca_file, "holds no PEM certificate");
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::ServerCredentials> ServerTlsCredentials(const TlsFiles& files,
                                                              ClientCertPolicy policy) {
  const bool with_ca = policy != ClientCertPolicy::kNone && !files.ca_file.empty();
  gx::TlsServerCredentialsOptions options(Provider(files, true, with_ca));
  options.watch_identity_key_cert_pairs();
  if (with_ca) options.watch_root_certs();
  switch (policy) {
    case ClientCertPolicy::kNone:
      options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
      break;
    case ClientCertPolicy::kOptional:
      options.set_cert_request_type(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
      break;
    case ClientCertPolicy::kRequired:
      options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
      break;
  }
  return grpc::experimental::TlsServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelTlsCredentials(const TlsFiles& files) {
  gx::TlsChannelCredentialsOptions options;
  const bool with_identity = !files.cert_file.empty() && !files.key_file.empty();
  const bool with_ca = !files.ca_file.empty();
  if (with_identity || with_ca) {
    options.set_certificate_provider(Provider(files, with_identity, with_ca));
    if (with_identity) options.watch_identity_key_cert_pairs();
    if (with_ca) options.watch_root_certs();
  }
  options.set_verify_server_certs(true);
  options.set_certificate_verifier(std::make_shared<gx::HostNameCertificateVerifier>());
  return grpc::experimental::TlsCredentials(options);
}

}  // namespace kvtier::protocol
