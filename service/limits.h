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
  // Payload bytes all Put streams may buffer at once, charged as they arrive (a stream
  // that sent only its header holds none); a Put whose next chunk would exceed it fails
  // with RESOURCE_EXHAUSTED "server busy". Default: 1 GiB
  // (ServerConfig.memory_quota_bytes, at least max_put_bytes).
  uint64_t put_budget_bytes = 1ull << 30;
  // A Put stream that waits this long for its client's next message is finished with
  // DEADLINE_EXCEEDED naming put_progress_timeout_ms. Default: 30 s.
  uint32_t put_progress_timeout_ms = 30000;
  // Put streams one client connection may have open at once; one more is refused with
  // RESOURCE_EXHAUSTED naming max_puts_per_connection. Default: 128.
  uint32_t max_puts_per_connection = 128;
  // Longest lease a Lookup may ask (LookupRequest.lease_ms); longer is INVALID_ARGUMENT
  // naming lease_ms. Default: 60 s.
  uint32_t max_lease_ms = 60000;
  // Whether a Lookup that leaves LookupRequest.prefetch at PREFETCH_DEFAULT prefetches its
  // cold prefix (ServerConfig.prefetch_on_lookup, docs/prefetch.md). Default: false.
  bool prefetch_on_lookup = false;

  // The limits of a defaulted, validated config.
  static ServiceLimits FromConfig(const v1::ServerConfig& config);
};

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_LIMITS_H_
