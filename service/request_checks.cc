#include "service/request_checks.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "protocol/error_detail.h"
#include "storage/tiered_store.h"

namespace kvtier::service {

std::string KeyForMessage(std::string_view key) {
  return absl::BytesToHexString(Sv(key.substr(0, 32)));
}

absl::Status CheckKey(std::string_view key, std::string_view field) {
  if (key.empty() || key.size() > storage::kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(field), " must be 1..", storage::kMaxKeyBytes, " bytes, got ", key.size()));
  }
  return absl::OkStatus();
}

namespace {

// CheckKeys' checks, without the copy, over any range of keys.
template <typename Keys>
absl::Status ValidateKeys(const Keys& keys, const ServiceLimits& limits, bool allow_empty) {
  if (keys.empty() && !allow_empty) return absl::InvalidArgumentError("keys is empty");
  if (static_cast<uint64_t>(keys.size()) > limits.max_keys_per_request) {
    return absl::InvalidArgumentError(absl::StrCat("keys: ", keys.size(),
                                                   " keys exceed max_keys_per_request (",
                                                   limits.max_keys_per_request, ")"));
  }
  for (size_t i = 0; i < static_cast<size_t>(keys.size()); ++i) {
    const std::string_view key = keys[static_cast<int>(i)];
    // The field name is built only for the message: formatting it for every key cost
    // more than the store's lookup of that key.
    if (key.empty() || key.size() > storage::kMaxKeyBytes) {
      return CheckKey(key, absl::StrCat("keys[", i, "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> CheckKeys(
    const google::protobuf::RepeatedPtrField<std::string>& keys, const ServiceLimits& limits,
    bool allow_empty) {
  RETURN_IF_ERROR(ValidateKeys(keys, limits, allow_empty));
  return std::vector<std::string>(keys.begin(), keys.end());
}

absl::Status CheckKeyViews(std::span<const std::string_view> keys, const ServiceLimits& limits,
                           bool allow_empty) {
  return ValidateKeys(keys, limits, allow_empty);
}

absl::StatusOr<storage::NamespaceOptions> FindNamespace(ServiceContext& ctx,
                                                        storage::TieredStore& store,
                                                        const std::string& name,
                                                        const Caller& caller) {
  if (name.empty()) return absl::InvalidArgumentError("namespace is empty");
  if (auto cached = ctx.namespaces.Find(name)) {
    RETURN_IF_ERROR(CheckNamespaceAccess(caller, name, cached->tenant));
    return *cached;
  }
  auto ns = store.GetNamespace(name);
  if (!ns.ok() && absl::IsNotFound(ns.status())) {
    return absl::NotFoundError(absl::StrCat("namespace \"", name, "\" is not registered"));
  }
  if (!ns.ok()) return ns;
  ctx.namespaces.Insert(*ns);
  RETURN_IF_ERROR(CheckNamespaceAccess(caller, name, ns->tenant));
  return ns;
}

absl::StatusOr<std::shared_ptr<dataplane::ShmRegion>> FindShmSession(const ServiceContext& ctx,
                                                          const std::string& session,
                                                          std::string_view field,
                                                          const Caller& caller) {
  std::shared_ptr<dataplane::ShmRegion> region = ctx.shm == nullptr ? nullptr : ctx.shm->Find(session);
  if (region == nullptr) return ShmSessionUnknown(field);
  ctx.shm->Bind(session, CallerIdentity(caller));
  return region;
}

absl::Status ShmSessionUnknown(std::string_view field) {
  return protocol::WithErrorDetail(
      absl::FailedPreconditionError(
          absl::StrCat(Sv(field),
                       " names no open shared-memory session of this server (closed, or the "
                       "server restarted): reconnect, or send the payloads in the stream")),
      v1::SHM_SESSION_UNKNOWN, field);
}

absl::Status CompareLayouts(const kv::Layout& want, const kv::Layout& got, std::string_view field,
                            bool check_tokens) {
  std::optional<kv::LayoutDiff> diff = kv::FirstDifference(want, got, check_tokens);
  if (!diff.has_value()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(Sv(field), ".", diff->field, " is ",
                                                    diff->got, " but namespace layout has ",
                                                    diff->want));
}

}  // namespace kvtier::service
