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
  return a;
}

absl::StatusOr<Caller> Authenticator::Authenticate(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  if (!enabled()) return Caller{};
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("authorization: missing (send \"Bearer <token>\")");
  }
  const std::string_view value(it->second.data(), it->second.size());
  constexpr std::string_view kBearer = "Bearer ";
  if (value.substr(0, kBearer.size()) != kBearer) {
    return absl::UnauthenticatedError("authorization: expected \"Bearer <token>\"");
  }
  auto t = tenants_.find(Sha256Hex(value.substr(kBearer.size())));
  if (t == tenants_.end()) return absl::UnauthenticatedError("authorization: unknown token");
  if (t->second == "*") return Caller{};
  return Caller{.tenant = t->second, .is_operator = false};
}

absl::Status CheckNamespaceAccess(const Caller& caller, const std::string& ns_name,
                                  const std::string& tenant) {
  if (caller.MayUse(tenant)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("namespace \"", ns_name, "\" belongs to another tenant than \"",
                   caller.tenant, "\""));
}

}  // namespace kvtier::service
