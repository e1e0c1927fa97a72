// Checks shared by the handlers and reactors of the kvtier.v1 services: keys, namespaces
// and the caller's access to them, shared-memory sessions and layouts. Every error names
// the request field at fault. Thread-safe (they read ServiceContext's thread-safe parts).
#ifndef KVTIER_SERVICE_REQUEST_CHECKS_H_
#define KVTIER_SERVICE_REQUEST_CHECKS_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/shm_server.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "kv/layout.h"
#include "service/auth.h"
#include "service/kv_cache_service.h"
#include "service/limits.h"
#include "storage/tiered_store.h"

namespace kvtier::service {

// The first 32 bytes of `key` in hex, for messages and logs.
std::string KeyForMessage(std::string_view key);

// INVALID_ARGUMENT "<field> must be 1..32 bytes, got n" unless 1 <= key.size() <= 32.
absl::Status CheckKey(std::string_view key, std::string_view field);

// Checks the count (1..limits.max_keys_per_request, or 0 with allow_empty) and lengths of
// a request's `keys` and returns a copy. INVALID_ARGUMENT naming "keys" or "keys[i]".
absl::StatusOr<std::vector<std::string>> CheckKeys(
    const google::protobuf::RepeatedPtrField<std::string>& keys, const ServiceLimits& limits,
    bool allow_empty);

// CheckKeys' checks for keys viewed in the request's bytes (Lookup), without a copy.
absl::Status CheckKeyViews(std::span<const std::string_view> keys, const ServiceLimits& limits,
                           bool allow_empty);

// The namespace `name` if it exists and `caller` may use it: INVALID_ARGUMENT for an empty
// name, NOT_FOUND when it is not registered, PERMISSION_DENIED for another tenant's.
// Caches it in ctx.namespaces.
absl::StatusOr<storage::NamespaceOptions> FindNamespace(ServiceContext& ctx,
                                                        storage::TieredStore& store,
                                                        const std::string& name,
                                                        const Caller& caller);

// FAILED_PRECONDITION with ErrorDetail{SHM_SESSION_UNKNOWN, field}: request field `field`
// names no shared-memory session of this server (the client then sends the payloads in
// the stream, or the call over gRPC).
absl::Status ShmSessionUnknown(std::string_view field);

// The region of the shared-memory session named in request field `field`, which this
// call (as `caller`) binds to its identity when it has none yet (ShmServer::Bind: its
// socket calls then run as that caller). So only a caller that authenticated may call
// it. ShmSessionUnknown when the server has no such session.
absl::StatusOr<std::shared_ptr<dataplane::ShmRegion>> FindShmSession(const ServiceContext& ctx,
                                                          const std::string& session,
                                                          std::string_view field,
                                                          const Caller& caller);

// FAILED_PRECONDITION "<field>.<name> is <got> but namespace layout has <want>" naming
// the first field of `got` that differs from `want` (kv::FirstDifference).
absl::Status CompareLayouts(const kv::Layout& want, const kv::Layout& got, std::string_view field,
                            bool check_tokens);

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_REQUEST_CHECKS_H_
