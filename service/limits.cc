#include "service/limits.h"

#include <algorithm>

namespace kvtier::service {

ServiceLimits ServiceLimits::FromConfig(const v1::ServerConfig& config) {
  ServiceLimits limits;
  limits.max_keys_per_request = config.max_keys_per_request();
  limits.max_put_bytes = config.max_put_bytes();
  limits.put_progress_timeout_ms = config.put_progress_timeout_ms();
  limits.max_puts_per_connection = config.max_puts_per_connection();
  limits.max_lease_ms = config.max_lease_ms();
  limits.prefetch_on_lookup = config.prefetch_on_lookup();
  limits.put_budget_bytes = std::max(config.memory_quota_bytes(), config.max_put_bytes());
  // A chunk frame plus its few framing bytes must fit the message limit.
  limits.chunk_bytes = std::min<uint64_t>(ServiceLimits().chunk_bytes,
                                          config.max_message_bytes() - 64);
  return limits;
}

}  // namespace kvtier::service
