// Tenant authentication and authorization for kvtierd (docs/design.md §5 Service, admission and limits).
//
// With ServerConfig.tenants and tls.identities both empty, authentication is off: every
// caller is an operator of every tenant (the single-team default). Otherwise a call names
// its tenant with `authorization: Bearer <token>` metadata naming a listed token (the
// token's SHA-256 selects the tenant, or "*", an operator), or with a verified client
// certificate whose subject CN or a subject alternative name is listed in tls.identities,
// or both; both must then name the same tenant. A tenant may only use namespaces whose
// NamespaceSpec.tenant is its own; listings and stats leave the others out.
#ifndef KVTIER_SERVICE_AUTH_H_
#define KVTIER_SERVICE_AUTH_H_

#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "kvtier/v1/kvtier.pb.h"

namespace kvtier::service {

// Who is calling.
struct Caller {
  std::string tenant;   // the caller's tenant ("" for operators)
  bool is_operator = true;  // may use every tenant's namespaces

  // True if this caller may use a namespace owned by `tenant`.
  bool MayUse(std::string_view tenant) const { return is_operator || tenant == this->tenant; }
};

// `caller` as one opaque string (what dataplane::ShmServer keeps per session) and back:
// CallerFromIdentity(CallerIdentity(c)) equals c.
std::string CallerIdentity(const Caller& caller);
Caller CallerFromIdentity(std::string_view identity);

// Lowercase hex SHA-256 of `text`.
std::string Sha256Hex(std::string_view text);

// Thread-safe once built.
class Authenticator {
 public:
  // Off: everyone is an operator.
  Authenticator() = default;
  // From ServerConfig.tenants and tls.identities. INVALID_ARGUMENT naming tenants[i] /
  // tls.identities[i] for a bad tenant name, token hash or certificate name, or a hash or
  // name listed twice.
  static absl::StatusOr<Authenticator> FromConfig(const v1::ServerConfig& config);

  bool enabled() const { return !tenants_.empty() || !identities_.empty(); }

  // The caller of a call with these client metadata and, under TLS, this peer (its
  // verified certificate's CN and SANs; null or unauthenticated: no certificate).
  // UNAUTHENTICATED when authentication is on and the call sends neither a listed token
  // nor a mapped certificate, sends an unknown token (naming `authorization`) or a
  // certificate whose names map to different tenants;
  // PERMISSION_DENIED when the token and the certificate name different tenants.
  absl::StatusOr<Caller> Authenticate(
      const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
      const grpc::AuthContext* peer = nullptr) const;

 private:
  // The tenant ("*" for an operator) tls.identities maps `peer`'s certificate to, or ""
  // (no certificate, or none of its names is listed); `names` gets the names seen.
  // UNAUTHENTICATED when two of its names map to different tenants.
  absl::StatusOr<std::string> CertificateTenant(const grpc::AuthContext* peer,
                                                std::string* names) const;

  absl::flat_hash_map<std::string, std::string> tenants_;     // token sha256 -> tenant / "*"
  absl::flat_hash_map<std::string, std::string> identities_;  // cert CN/SAN -> tenant / "*"
};

// PERMISSION_DENIED naming the namespace unless `caller` may use namespaces of `tenant`.
absl::Status CheckNamespaceAccess(const Caller& caller, const std::string& ns_name,
                                  const std::string& tenant);

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_AUTH_H_
