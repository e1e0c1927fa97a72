#include "events/config.h"

#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace kvtier::events {
namespace {

absl::Status CheckRange(std::string_view field, uint64_t value, uint64_t lo, uint64_t hi) {
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("events.", Sv(field), " must be in [", lo, ", ", hi, "], got ", value));
  }
  return absl::OkStatus();
}

absl::Status CheckEndpoint(std::string_view field, std::string_view endpoint) {
  if (!absl::StrContains(Sv(endpoint), "://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("events.", Sv(field), " must be a ZMQ endpoint like tcp://*:5557, got '",
                     Sv(endpoint), "'"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* BatchFormatName(BatchFormat format) {
  return format == BatchFormat::kMap ? "map" : "array";
}

absl::StatusOr<BatchFormat> ParseBatchFormat(std::string_view name) {
  if (name == "map") return BatchFormat::kMap;
  if (name == "array") return BatchFormat::kArray;
  return absl::InvalidArgumentError(
      absl::StrCat("events.format must be 'map' or 'array', got '", Sv(name), "'"));
}

absl::Status EventsConfig::Validate() const {
  if (endpoint.empty()) return absl::InvalidArgumentError("events.endpoint is empty");
  if (absl::Status s = CheckEndpoint("endpoint", endpoint); !s.ok()) return s;
  if (!replay_endpoint.empty()) {
    if (absl::Status s = CheckEndpoint("replay_endpoint", replay_endpoint); !s.ok()) return s;
  }
  if (format != BatchFormat::kMap && format != BatchFormat::kArray) {
    return absl::InvalidArgumentError("events.format is not map or array");
  }
  const std::pair<std::string_view, std::tuple<uint64_t, uint64_t, uint64_t>> ranges[] = {
      {"batch_ms", {batch_ms, 1, 10000}},
      {"max_batch_events", {max_batch_events, 1, 1000000}},
      {"queue_capacity_events", {queue_capacity_events, 1, 10000000}},
      {"replay_buffer_batches", {replay_buffer_batches, 1, 10000000}},
      {"send_hwm", {send_hwm, 1, 10000000}},
      {"parent_wait_ms", {parent_wait_ms, 0, 60000}},
  };
  for (const auto& [field, r] : ranges) {
    auto [value, lo, hi] = r;
    if (absl::Status s = CheckRange(field, value, lo, hi); !s.ok()) return s;
  }
  if (node_id.empty() || absl::StrContains(node_id, "@")) {
    return absl::InvalidArgumentError(
        absl::StrCat("events.pod_id (else cluster.node_id) must be non-empty and contain no "
                     "'@', got '",
                     node_id, "'"));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::events
