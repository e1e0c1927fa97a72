#include "service/auth.h"

#include <openssl/sha.h>

#include <cctype>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace kvtier::service {
namespace {

bool ValidTenantName(const std::string& name) {
  if (name == "*") return true;
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

bool ValidSha256Hex(const std::string& hex) {
  if (hex.size() != 64) return false;
  for (char c : hex) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

}  // namespace

std::string CallerIdentity(const Caller& caller) {
  return absl::StrCat(caller.is_operator ? "1" : "0", caller.tenant);
}

Caller CallerFromIdentity(std::string_view identity) {
  Caller caller;
  caller.is_operator = !identity.empty() && identity[0] == '1';
  if (!identity.empty()) identity.remove_prefix(1);
  caller.tenant = std::string(identity);
  return caller;
}

std::string Sha256Hex(std::string_view text) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
}

absl::StatusOr<Authenticator> Authenticator::FromConfig(const v1::ServerConfig& config) {
  Authenticator a;
  for (int i = 0; i < config.tenants_size(); ++i) {
    const v1::TenantCredential& t = config.tenants(i);
    if (!ValidTenantName(t.tenant())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tenants[", i, "].tenant \"", t.tenant(), "\" must be \"*\" or 1..64 of [A-Za-z0-9._-]"));
    }
    if (!ValidSha256Hex(t.token_sha256())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tenants[", i, "].token_sha256 must be 64 lowercase hex characters (sha256sum of "
          "the token)"));
    }
    if (!a.tenants_.emplace(t.token_sha256(), t.tenant()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tenants[", i, "].token_sha256 is listed twice"));
    }
  }
  for (int i = 0; i < config.tls().identities_size(); ++i) {
    const v1::TlsIdentity& id = config.tls().identities(i);
    if (!ValidTenantName(id.tenant())) {
      return absl::InvalidArgumentError(
          absl::StrCat("tls.identities[", i, "].tenant \"", id.tenant(),
                       "\" must be \"*\" or 1..64 of [A-Za-z0-9._-]"));
    }
    if (id.cert_name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tls.identities[", i, "].cert_name is empty"));
    }
    if (!a.identities_.emplace(id.cert_name(), id.tenant()).second) {
      return absl::InvalidArgumentError(absl::StrCat("tls.identities[", i, "].cert_name \"",
                                                     id.cert_name(), "\" is listed twice"));
    }
  }
  return a;
}

absl::StatusOr<std::string> Authenticator::CertificateTenant(const grpc::AuthContext* peer,
                                                             std::string* names) const {
  if (peer == nullptr || identities_.empty() || !peer->IsPeerAuthenticated()) return "";
  // gRPC's TLS auth context: the subject CN, and every SAN (DNS, URI, email, IP).
  std::string found;
  for (const char* property : {GRPC_X509_CN_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME}) {
    for (const grpc::string_ref& v : peer->FindPropertyValues(property)) {
      const std::string name(v.data(), v.size());
      absl::StrAppend(names, names->empty() ? "" : ", ", name);
      auto it = identities_.find(name);
      if (it == identities_.end()) continue;
      if (!found.empty() && found != it->second) {
        return absl::UnauthenticatedError(absl::StrCat(
            "the client certificate's names map to two tenants (\"", found, "\" and \"",
            it->second, "\") in tls.identities"));
      }
      found = it->second;
    }
  }
  return found;
}

absl::StatusOr<Caller> Authenticator::Authenticate(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
    const grpc::AuthContext* peer) const {
  if (!enabled()) return Caller{};
  std::string cert_names;
  absl::StatusOr<std::string> cert = CertificateTenant(peer, &cert_names);
  if (!cert.ok()) return cert.status();
  const std::string& cert_tenant = *cert;
  std::string token_tenant;
  auto it = metadata.find("authorization");
  if (it != metadata.end()) {
    const std::string_view value(it->second.data(), it->second.size());
    constexpr std::string_view kBearer = "Bearer ";
    if (value.substr(0, kBearer.size()) != kBearer) {
      return absl::UnauthenticatedError("authorization: expected \"Bearer <token>\"");
    }
    auto t = tenants_.find(Sha256Hex(value.substr(kBearer.size())));
    if (t == tenants_.end()) return absl::UnauthenticatedError("authorization: unknown token");
    token_tenant = t->second;
  }
  if (token_tenant.empty() && cert_tenant.empty()) {
    if (identities_.empty()) {
      return absl::UnauthenticatedError("authorization: missing (send \"Bearer <token>\")");
    }
    return absl::UnauthenticatedError(absl::StrCat(
        "no tenant: send \"authorization: Bearer <token>\" or a client certificate listed in "
        "tls.identities (this connection's certificate names: ",
        cert_names.empty() ? "none" : cert_names, ")"));
  }
  if (!token_tenant.empty() && !cert_tenant.empty() && token_tenant != cert_tenant) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the bearer token is tenant \"", token_tenant, "\" but the client certificate is tenant \"",
        cert_tenant, "\"; they must agree"));
  }
  const std::string& tenant = token_tenant.empty() ? cert_tenant : token_tenant;
  if (tenant == "*") return Caller{};
  return Caller{.tenant = tenant, .is_operator = false};
}

absl::Status CheckNamespaceAccess(const Caller& caller, const std::string& ns_name,
                                  const std::string& tenant) {
  if (caller.MayUse(tenant)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("namespace \"", ns_name, "\" belongs to another tenant than \"",
                   caller.tenant, "\""));
}

}  // namespace kvtier::service
