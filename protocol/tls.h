// TLS credentials for both ends of the kvtier wire (docs/design.md §5 Service, admission
// and limits): the server's, the client's and the ones a node uses to call its peers.
//
// Every credential built here reads its PEM files through gRPC's
// FileWatcherCertificateProvider, which re-reads them every refresh_interval_s: a file
// replaced in place (cert-manager renewing a Secret) is used by the next handshake, with
// no restart, and connections already established keep their session. A file that cannot
// be read or parsed at a refresh leaves the previous certificates in use.
#ifndef KVTIER_PROTOCOL_TLS_H_
#define KVTIER_PROTOCOL_TLS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace kvtier::protocol {

inline constexpr unsigned kDefaultTlsRefreshSeconds = 60;

// PEM files of one TLS endpoint. Empty paths are "not given".
struct TlsFiles {
  std::string cert_file;  // this end's certificate chain
  std::string key_file;   // its private key
  std::string ca_file;    // roots the other end's certificate must chain to
  unsigned refresh_interval_s = kDefaultTlsRefreshSeconds;  // 0 = the default
};

// Checks the files as a handshake would use them, without gRPC: the certificate and the
// key parse and the key matches the certificate (both or neither given), and the CA
// bundle holds at least one certificate. INVALID_ARGUMENT naming `field` + ".cert_file" /
// ".key_file" / ".ca_file" and the problem ("cannot be read", "is not a PEM
// certificate", "does not match cert_file").
absl::Status CheckTlsFiles(const TlsFiles& files, const std::string& field);

// How a server treats client certificates.
enum class ClientCertPolicy {
  kNone,      // not asked for
  kOptional,  // asked for; verified against ca_file when sent
  kRequired,  // a verified certificate is needed to connect
};

// Server credentials from cert_file + key_file (required) and, unless `policy` is kNone,
// ca_file for client certificates. REQUIRES: CheckTlsFiles(files).ok().
std::shared_ptr<grpc::ServerCredentials> ServerTlsCredentials(const TlsFiles& files,
                                                              ClientCertPolicy policy);

// Channel credentials: the server's certificate must chain to ca_file (empty: the system
// roots) and name the target host (or the GRPC_SSL_TARGET_NAME_OVERRIDE_ARG channel
// argument) in its subject alternative names; cert_file + key_file, when given, are
// presented as this end's certificate (mutual TLS).
std::shared_ptr<grpc::ChannelCredentials> ChannelTlsCredentials(const TlsFiles& files);

}  // namespace kvtier::protocol

#endif  // KVTIER_PROTOCOL_TLS_H_
