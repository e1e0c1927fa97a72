// ServiceLimits: the per-request and server-wide limits the kvtier.v1 services enforce
// (docs/design.md §5 Service, admission and limits). The one place their defaults live:
// service/config.cc ApplyDefaults fills ServerConfig from a default-constructed
// ServiceLimits, and FromConfig reads them back.
#ifndef KVTIER_SERVICE_LIMITS_H_
#define KVTIER_SERVICE_LIMITS_H_

#include <cstdint>

#include "kvtier/v1/kvtier.pb.h"

namespace kvtier::service {

// Thread-compatible value type; constant once the server is built.
struct ServiceLimits {
  // Keys one request may name (Lookup, Get, Pin, ...; blocks of one Put). Default: 4096.
  uint32_t max_keys_per_request = 4096;
  // Payload bytes one Put stream may carry. Default: 1 GiB.
  uint64_t max_put_bytes = 1ull << 30;
  // Payload bytes per Get chunk message. Default: 1 MiB (less when max_message_bytes is
  // smaller: a chunk frame plus its framing bytes must fit one message).
  uint64_t chunk_bytes = 1ull << 20;
  // Payload bytes all Put streams may buffer at once (their declared totals); a Put
  // whose header would exceed it is refused with RESOURCE_EXHAUSTED. Default: 1 GiB
  // (ServerConfig.memory_quota_bytes, at least max_put_bytes).
  uint64_t put_budget_bytes = 1ull << 30;

  // The limits of a defaulted, validated config.
  static ServiceLimits FromConfig(const v1::ServerConfig& config);
};

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_LIMITS_H_
