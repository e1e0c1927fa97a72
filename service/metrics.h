// Request latency histograms of kvtierd and their export: into StatsResponse (admin
// Stats RPC) and, when --metrics-port is set, a Prometheus pull endpoint whose gauges are
// computed from TieredStore::Stats() at scrape time (no duplicated counters).
#ifndef KVTIER_SERVICE_METRICS_H_
#define KVTIER_SERVICE_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "events/config.h"
#include "kvtier/v1/kvtier.pb.h"
#include "storage/tiered_store.h"

namespace prometheus {
class Collectable;
class Exposer;
}  // namespace prometheus

namespace kvtier::service {

// RPCs whose latency is recorded.
enum class Op : int {
  kRegisterNamespace = 0,
  kPut,
  kGet,
  kLookup,
  kPin,
  kUnpin,
  kReportScores,
  kDelete,
  kCompact,
  kStats,
  kEvict,
  kFlush,
  kReleaseLease,
  kCount,  // number of ops
};
const char* OpName(Op op);  // "register_namespace", "put", "get", ...

// A fixed-bucket latency histogram. Thread-safe (relaxed atomics; readers may see a
// bucket incremented before the count).
class LatencyHistogram {
 public:
  // Bucket upper bounds in microseconds.
  static constexpr std::array<double, 16> kBoundsUs = {
      50,    100,   250,    500,    1000,   2500,    5000,    10000,
      25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 10000000};

  void Record(int64_t micros);
  // Fills `out` (operation not set).
  void Snapshot(v1::LatencyHistogram* out) const;

 private:
  std::array<std::atomic<uint64_t>, kBoundsUs.size() + 1> counts_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_us_{0};
};

// Request latency histograms, one per Op, plus per-op error counts. Thread-safe.
class ServiceMetrics {
 public:
  void Record(Op op, int64_t micros, bool ok);
  // Appends one LatencyHistogram per op that has samples.
  void AppendLatencies(v1::StatsResponse* out) const;
  uint64_t errors(Op op) const { return errors_[static_cast<int>(op)].load(); }
  const LatencyHistogram& histogram(Op op) const { return hist_[static_cast<int>(op)]; }

 private:
  std::array<LatencyHistogram, static_cast<int>(Op::kCount)> hist_;
  std::array<std::atomic<uint64_t>, static_cast<int>(Op::kCount)> errors_{};
};

// Fills the per-namespace and tier fields of a StatsResponse from store stats; only the
// namespace `only` when non-empty.
void FillStats(const storage::StoreStats& stats, const std::string& only, v1::StatsResponse* out);

// A running Prometheus /metrics endpoint. Thread-safe; scrapes call store->Stats().
class MetricsExporter {
 public:
  // Serves http://ADDR:PORT/metrics. `store` and `metrics` must outlive the exporter.
  // UNAVAILABLE if the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsExporter>> Start(const std::string& address,
                                                                uint32_t port,
                                                                storage::TieredStore* store,
                                                                const ServiceMetrics* metrics,
                                                                std::string node_id);
  ~MetricsExporter();

  // Also exports the KV event publisher's counters, read from `stats` at scrape time:
  // kvtier_events_published_total, kvtier_events_dropped_total,
  // kvtier_event_batches_published_total, kvtier_event_batches_dropped_total,
  // kvtier_event_sequences_skipped_total, kvtier_event_replay_requests_total and the
  // gauges kvtier_event_subscribers, kvtier_event_queued_events. `stats` must stay
  // callable while the exporter lives. Call once.
  void ExportEvents(std::function<events::EventsStats()> stats);

 private:
  MetricsExporter() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Collectable> collectable_;
  std::shared_ptr<prometheus::Collectable> events_collectable_;
  std::string node_id_;
};

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_METRICS_H_
