// Tenant authentication and authorization for kvtierd (docs/design.md §5 Service, admission and limits).
//
// With ServerConfig.tenants empty, authentication is off: every caller is an operator of
// every tenant (the single-team default). Otherwise each call must carry
// `authorization: Bearer <token>` metadata naming a listed token; the token's SHA-256
// selects the tenant (or "*", an operator). A tenant may only use namespaces whose
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

// Lowercase hex SHA-256 of `text`.
std::string Sha256Hex(std::string_view text);

// Thread-safe once built.
class Authenticator {
 public:
  // Off: everyone is an operator.
  Authenticator() = default;
  // From ServerConfig.tenants. INVALID_ARGUMENT naming tenants[i] for a bad tenant name
  // or token hash, or a hash listed twice.
  static absl::StatusOr<Authenticator> FromConfig(const v1::ServerConfig& config);

  bool enabled() const { return !tenants_.empty(); }

  // The caller of a call with these client metadata. UNAUTHENTICATED (naming the
  // `authorization` metadata) when authentication is on and no listed token was sent.
  absl::StatusOr<Caller> Authenticate(
      const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;

 private:
  absl::flat_hash_map<std::string, std::string> tenants_;  // token sha256 -> tenant / "*"
};

// PERMISSION_DENIED naming the namespace unless `caller` may use namespaces of `tenant`.
absl::Status CheckNamespaceAccess(const Caller& caller, const std::string& ns_name,
                                  const std::string& tenant);

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_AUTH_H_
