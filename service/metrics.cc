#include "service/metrics.h"

#include <exception>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"
#include "prometheus/metric_family.h"
#include "protocol/convert.h"
#include "service/config.h"

namespace kvtier::service {

const char* OpName(Op op) {
  switch (op) {
    case Op::kRegisterNamespace:
      return "register_namespace";
    case Op::kPut:
      return "put";
    case Op::kGet:
      return "get";
    case Op::kLookup:
      return "lookup";
    case Op::kPin:
      return "pin";
    case Op::kUnpin:
      return "unpin";
    case Op::kReportScores:
      return "report_scores";
    case Op::kDelete:
      return "delete";
    case Op::kCompact:
      return "compact";
    case Op::kStats:
      return "stats";
    case Op::kEvict:
      return "evict";
    case Op::kFlush:
      return "flush";
    case Op::kReleaseLease:
      return "release_lease";
    case Op::kCount:
      break;
  }
  return "unknown";
}

void LatencyHistogram::Record(int64_t micros) {
  if (micros < 0) micros = 0;
  size_t i = 0;
  while (i < kBoundsUs.size() && static_cast<double>(micros) > kBoundsUs[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_us_.fetch_add(static_cast<uint64_t>(micros), std::memory_order_relaxed);
}

void LatencyHistogram::Snapshot(v1::LatencyHistogram* out) const {
  for (double b : kBoundsUs) out->add_bounds_us(b);
  uint64_t total = 0;
  for (const auto& c : counts_) {
    uint64_t v = c.load(std::memory_order_relaxed);
    out->add_counts(v);
    total += v;
  }
  out->set_count(total);
  out->set_sum_us(static_cast<double>(sum_us_.load(std::memory_order_relaxed)));
}

void ServiceMetrics::Record(Op op, int64_t micros, bool ok) {
  hist_[static_cast<int>(op)].Record(micros);
  if (!ok) errors_[static_cast<int>(op)].fetch_add(1, std::memory_order_relaxed);
}

void ServiceMetrics::AppendLatencies(v1::StatsResponse* out) const {
  for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
    v1::LatencyHistogram h;
    hist_[i].Snapshot(&h);
    if (h.count() == 0) continue;
    h.set_operation(OpName(static_cast<Op>(i)));
    *out->add_latencies() = std::move(h);
  }
}

void FillStats(const storage::StoreStats& stats, const std::string& only, v1::StatsResponse* out) {
  out->set_hot_allocator(stats.hot_allocator);
  out->set_hot_capacity_bytes(stats.hot_capacity_bytes);
  out->set_hot_used_bytes(stats.hot_used_bytes);
  out->set_cold_capacity_bytes(stats.cold_capacity_bytes);
  out->set_cold_used_bytes(stats.cold_used_bytes);
  out->set_cold_wal_dropped_ranges(stats.cold_recovery.wal_dropped_ranges);
  out->set_cold_wal_dropped_bytes(stats.cold_recovery.wal_dropped_bytes);
  out->set_unflushed_bytes(stats.unflushed_bytes);
  out->set_unflushed_blocks(stats.unflushed_blocks);
  out->set_max_unflushed_bytes(stats.max_unflushed_bytes);
  out->set_max_unflushed_blocks(stats.max_unflushed_blocks);
  for (const storage::NamespaceStats& n : stats.namespaces) {
    if (!only.empty() && n.name != only) continue;
    v1::NamespaceStats* o = out->add_namespaces();
    o->set_name(n.name);
    o->set_tenant(n.tenant);
    o->set_codec(protocol::CodecToProto(n.codec));
    o->set_lookups(n.lookups);
    o->set_lookup_blocks(n.lookup_blocks);
    o->set_lookup_hit_blocks(n.lookup_hit_blocks);
    o->set_lookup_prefix_hit_blocks(n.lookup_prefix_hit_blocks);
    o->set_lookup_prefix_hit_blocks_hot(n.lookup_prefix_hit_blocks_hot);
    o->set_lookup_prefix_hit_blocks_cold(n.lookup_prefix_hit_blocks_cold);
    if (n.lookup_blocks > 0) {
      o->set_hit_rate(static_cast<double>(n.lookup_hit_blocks) / n.lookup_blocks);
      o->set_prefix_hit_rate(static_cast<double>(n.lookup_prefix_hit_blocks) / n.lookup_blocks);
    }
    o->set_gets(n.gets);
    o->set_get_misses(n.get_misses);
    o->set_puts(n.puts);
    if (n.encoded_bytes_put > 0) {
      o->set_compression_ratio(static_cast<double>(n.raw_bytes_put) / n.encoded_bytes_put);
    }
    o->set_raw_bytes_put(n.raw_bytes_put);
    o->set_encoded_bytes_put(n.encoded_bytes_put);
    auto tier = [](const storage::TierStats& t, v1::TierStats* p) {
      p->set_blocks(t.blocks);
      p->set_bytes(t.bytes);
      p->set_hits(t.hits);
    };
    tier(n.hot, o->mutable_hot());
    tier(n.cold, o->mutable_cold());
    o->set_demotions(n.demotions);
    o->set_promotions(n.promotions);
    o->set_evictions_hot_capacity(n.evictions_hot_capacity);
    o->set_evictions_cold_capacity(n.evictions_cold_capacity);
    o->set_evictions_admin(n.evictions_admin);
    o->set_checksum_failures(n.checksum_failures);
    o->set_distinct_blocks(n.distinct_blocks);
  }
  v1::LeaseStats* l = out->mutable_leases();
  l->set_granted(stats.leases.granted);
  l->set_released(stats.leases.released);
  l->set_expired_unused(stats.leases.expired_unused);
  l->set_active(stats.leases.active);
  l->set_leased_bytes(stats.leases.leased_bytes);
  const storage::PrefetchStats& ps = stats.prefetch;
  v1::PrefetchStats* p = out->mutable_prefetch();
  p->set_queued_blocks(ps.queued_blocks);
  p->set_skipped_blocks(ps.skipped_blocks);
  p->set_prefetched_blocks(ps.prefetched_blocks);
  p->set_hits(ps.hits);
  p->set_wasted_evicted(ps.wasted_evicted);
  p->set_wasted_expired(ps.wasted_expired);
  p->set_cancelled(ps.cancelled);
  p->set_failed(ps.failed);
  p->set_get_waits(ps.get_waits);
  p->set_get_wait_us(ps.get_wait_us);
  p->set_inflight_bytes(ps.inflight_bytes);
  p->set_unread_bytes(ps.unread_bytes);
  for (const storage::TenantStats& t : stats.tenants) {
    v1::TenantStats* o = out->add_tenants();
    o->set_tenant(t.tenant);
    o->set_hot_used_bytes(t.hot_used_bytes);
    o->set_hot_limit_bytes(t.hot_limit_bytes);
    o->set_cold_used_bytes(t.cold_used_bytes);
    o->set_cold_limit_bytes(t.cold_limit_bytes);
    o->set_leased_used_bytes(t.leased_used_bytes);
    o->set_leased_limit_bytes(t.leased_limit_bytes);
    o->set_evictions_caused(t.evictions_caused);
    o->set_quota_rejections(t.quota_rejections);
  }
}

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// Appends metric families; every metric gets the node label. Families are handed out
// by reference into a vector reserved up front, so they stay valid while more are added.
class FamilyBuilder {
 public:
  explicit FamilyBuilder(const std::string& node_id) : node_id_(node_id) { out_.reserve(64); }

  MetricFamily& Family(const char* name, const char* help, MetricType type) {
    KVTIER_CHECK(out_.size() < out_.capacity());
    out_.push_back(MetricFamily{name, help, type, {}});
    return out_.back();
  }

  void Add(MetricFamily& f, std::vector<ClientMetric::Label> labels, double v) const {
    ClientMetric m;
    m.label = std::move(labels);
    m.label.push_back({"node", node_id_});
    if (f.type == MetricType::Counter) {
      m.counter.value = v;
    } else {
      m.gauge.value = v;
    }
    f.metric.push_back(std::move(m));
  }

  const std::string& node_id() const { return node_id_; }
  std::vector<MetricFamily> Take() { return std::move(out_); }

 private:
  const std::string& node_id_;
  std::vector<MetricFamily> out_;
};

void AddTierFamilies(const storage::StoreStats& s, FamilyBuilder& b) {
  auto& f = b.Family("kvtier_tier_capacity_bytes", "Capacity of each tier in bytes.",
                     MetricType::Gauge);
  b.Add(f, {{"tier", "hot"}}, static_cast<double>(s.hot_capacity_bytes));
  b.Add(f, {{"tier", "cold"}}, static_cast<double>(s.cold_capacity_bytes));
  auto& u = b.Family("kvtier_tier_used_bytes", "Bytes used in each tier.", MetricType::Gauge);
  b.Add(u, {{"tier", "hot"}}, static_cast<double>(s.hot_used_bytes));
  b.Add(u, {{"tier", "cold"}}, static_cast<double>(s.cold_used_bytes));
  b.Add(b.Family("kvtier_cold_wal_dropped_ranges",
                 "Damaged write-ahead-log ranges the cold tier skipped at start.",
                 MetricType::Gauge),
        {}, static_cast<double>(s.cold_recovery.wal_dropped_ranges));
  b.Add(b.Family("kvtier_cold_wal_dropped_bytes",
                 "Bytes of damaged write-ahead log the cold tier skipped at start.",
                 MetricType::Gauge),
        {}, static_cast<double>(s.cold_recovery.wal_dropped_bytes));
}

void AddNamespaceCounters(const storage::StoreStats& s, FamilyBuilder& b) {
  struct CounterDef {
    const char* name;
    const char* help;
    uint64_t storage::NamespaceStats::*field;
  };
  static const CounterDef kCounters[] = {
      {"kvtier_lookups_total", "Lookup calls.", &storage::NamespaceStats::lookups},
      {"kvtier_lookup_blocks_total", "Keys asked in Lookup calls.",
       &storage::NamespaceStats::lookup_blocks},
      {"kvtier_lookup_hit_blocks_total", "Looked-up keys resident in any tier.",
       &storage::NamespaceStats::lookup_hit_blocks},
      {"kvtier_lookup_prefix_hit_blocks_total", "Looked-up keys in the resident leading prefix.",
       &storage::NamespaceStats::lookup_prefix_hit_blocks},
      {"kvtier_lookup_prefix_hit_blocks_hot_total",
       "Looked-up keys in the resident leading prefix that were hot.",
       &storage::NamespaceStats::lookup_prefix_hit_blocks_hot},
      {"kvtier_lookup_prefix_hit_blocks_cold_total",
       "Looked-up keys in the resident leading prefix that were cold.",
       &storage::NamespaceStats::lookup_prefix_hit_blocks_cold},
      {"kvtier_get_blocks_total", "Blocks asked with Get.", &storage::NamespaceStats::gets},
      {"kvtier_get_misses_total", "Blocks asked with Get and not served.",
       &storage::NamespaceStats::get_misses},
      {"kvtier_put_blocks_total", "Blocks stored.", &storage::NamespaceStats::puts},
      {"kvtier_put_raw_bytes_total", "Source-dtype bytes of stored blocks.",
       &storage::NamespaceStats::raw_bytes_put},
      {"kvtier_put_encoded_bytes_total", "Encoded bytes of stored blocks.",
       &storage::NamespaceStats::encoded_bytes_put},
      {"kvtier_demotions_total", "Hot to cold demotions.", &storage::NamespaceStats::demotions},
      {"kvtier_promotions_total", "Cold to hot promotions.", &storage::NamespaceStats::promotions},
      {"kvtier_checksum_failures_total", "Corrupt blocks found.",
       &storage::NamespaceStats::checksum_failures},
  };
  for (const CounterDef& d : kCounters) {
    auto& f = b.Family(d.name, d.help, MetricType::Counter);
    for (const auto& n : s.namespaces) {
      b.Add(f, {{"namespace", n.name}, {"tenant", n.tenant}}, static_cast<double>(n.*d.field));
    }
  }
  auto& f = b.Family("kvtier_evictions_total", "Blocks evicted, by reason.", MetricType::Counter);
  for (const auto& n : s.namespaces) {
    b.Add(f, {{"namespace", n.name}, {"reason", "hot_capacity"}},
          static_cast<double>(n.evictions_hot_capacity));
    b.Add(f, {{"namespace", n.name}, {"reason", "cold_capacity"}},
          static_cast<double>(n.evictions_cold_capacity));
    b.Add(f, {{"namespace", n.name}, {"reason", "admin"}}, static_cast<double>(n.evictions_admin));
  }
}

void AddNamespaceGauges(const storage::StoreStats& s, FamilyBuilder& b) {
  auto& hr =
      b.Family("kvtier_lookup_hit_rate", "Lookup hit blocks / lookup blocks.", MetricType::Gauge);
  auto& pr = b.Family("kvtier_lookup_prefix_hit_rate",
                      "Lookup prefix-hit blocks / lookup blocks.", MetricType::Gauge);
  auto& bb =
      b.Family("kvtier_namespace_bytes", "Encoded bytes resident, by tier.", MetricType::Gauge);
  auto& bl = b.Family("kvtier_namespace_blocks", "Blocks resident, by tier.", MetricType::Gauge);
  auto& db = b.Family("kvtier_namespace_distinct_blocks",
                      "Blocks resident in some tier (a block in both tiers counts once).",
                      MetricType::Gauge);
  auto& gh = b.Family("kvtier_get_hits_total", "Get hits, by the tier that served them.",
                      MetricType::Counter);
  for (const auto& n : s.namespaces) {
    b.Add(db, {{"namespace", n.name}}, static_cast<double>(n.distinct_blocks));
    b.Add(gh, {{"namespace", n.name}, {"tier", "hot"}}, static_cast<double>(n.hot.hits));
    b.Add(gh, {{"namespace", n.name}, {"tier", "cold"}}, static_cast<double>(n.cold.hits));
    double denom = n.lookup_blocks ? static_cast<double>(n.lookup_blocks) : 1.0;
    b.Add(hr, {{"namespace", n.name}}, n.lookup_hit_blocks / denom);
    b.Add(pr, {{"namespace", n.name}}, n.lookup_prefix_hit_blocks / denom);
    b.Add(bb, {{"namespace", n.name}, {"tier", "hot"}}, static_cast<double>(n.hot.bytes));
    b.Add(bb, {{"namespace", n.name}, {"tier", "cold"}}, static_cast<double>(n.cold.bytes));
    b.Add(bl, {{"namespace", n.name}, {"tier", "hot"}}, static_cast<double>(n.hot.blocks));
    b.Add(bl, {{"namespace", n.name}, {"tier", "cold"}}, static_cast<double>(n.cold.blocks));
  }
}

void AddLeaseFamilies(const storage::StoreStats& s, FamilyBuilder& b) {
  const storage::LeaseStats& l = s.leases;
  b.Add(b.Family("kvtier_leases_granted_total", "Leases granted by Lookup.", MetricType::Counter),
        {}, static_cast<double>(l.granted));
  b.Add(b.Family("kvtier_leases_released_total",
                 "Leases ended by ReleaseLease or by the Get naming them.", MetricType::Counter),
        {}, static_cast<double>(l.released));
  b.Add(b.Family("kvtier_leases_expired_unused_total", "Leases ended by their deadline.",
                 MetricType::Counter),
        {}, static_cast<double>(l.expired_unused));
  b.Add(b.Family("kvtier_leases_active", "Leases in force.", MetricType::Gauge), {},
        static_cast<double>(l.active));
  b.Add(b.Family("kvtier_leased_bytes", "Payload bytes the active leases hold.",
                 MetricType::Gauge),
        {}, static_cast<double>(l.leased_bytes));
  // Prefetch on Lookup (docs/prefetch.md).
  const storage::PrefetchStats& p = s.prefetch;
  b.Add(b.Family("kvtier_prefetch_blocks_total", "Blocks promoted to hot by a Lookup's prefetch.",
                 MetricType::Counter),
        {}, static_cast<double>(p.prefetched_blocks));
  b.Add(b.Family("kvtier_prefetch_hits_total",
                 "Gets that found their block hot because of a prefetch.", MetricType::Counter),
        {}, static_cast<double>(p.hits));
  auto& wasted = b.Family("kvtier_prefetch_wasted_total",
                          "Prefetched blocks no Get read, by why they ended.", MetricType::Counter);
  b.Add(wasted, {{"reason", "evicted"}}, static_cast<double>(p.wasted_evicted));
  b.Add(wasted, {{"reason", "expired"}}, static_cast<double>(p.wasted_expired));
  b.Add(b.Family("kvtier_prefetch_cancelled_total",
                 "Prefetches dropped before done (lease ended, block gone, read by its Get).",
                 MetricType::Counter),
        {}, static_cast<double>(p.cancelled));
  b.Add(b.Family("kvtier_prefetch_skipped_blocks_total",
                 "Cold blocks a Lookup did not queue: over a prefetch bound or a quota.",
                 MetricType::Counter),
        {}, static_cast<double>(p.skipped_blocks));
  b.Add(b.Family("kvtier_prefetch_get_waits_total",
                 "Gets that waited for an in-flight prefetch of their block.", MetricType::Counter),
        {}, static_cast<double>(p.get_waits));
  b.Add(b.Family("kvtier_prefetch_get_wait_seconds_total",
                 "Time Gets waited for in-flight prefetches.", MetricType::Counter),
        {}, static_cast<double>(p.get_wait_us) / 1e6);
  b.Add(b.Family("kvtier_prefetch_inflight_bytes", "Payload bytes queued or being prefetched.",
                 MetricType::Gauge),
        {}, static_cast<double>(p.inflight_bytes));
}

void AddTenantFamilies(const storage::StoreStats& s, FamilyBuilder& b) {
  auto& used = b.Family("kvtier_tenant_used_bytes",
                        "Bytes a tenant holds, by tier (hot, cold) and in leases (leased).",
                        MetricType::Gauge);
  auto& limit = b.Family("kvtier_tenant_limit_bytes",
                         "A tenant's quota by tier (hot, cold, leased); 0 = unlimited.",
                         MetricType::Gauge);
  auto& caused = b.Family("kvtier_tenant_quota_evictions_total",
                          "A tenant's own blocks demoted or deleted to keep it in quota.",
                          MetricType::Counter);
  auto& rejected = b.Family("kvtier_tenant_quota_rejections_total",
                            "A tenant's blocks refused at its hot quota.", MetricType::Counter);
  for (const storage::TenantStats& t : s.tenants) {
    b.Add(used, {{"tenant", t.tenant}, {"tier", "hot"}}, static_cast<double>(t.hot_used_bytes));
    b.Add(used, {{"tenant", t.tenant}, {"tier", "cold"}}, static_cast<double>(t.cold_used_bytes));
    b.Add(used, {{"tenant", t.tenant}, {"tier", "leased"}},
          static_cast<double>(t.leased_used_bytes));
    b.Add(limit, {{"tenant", t.tenant}, {"tier", "hot"}}, static_cast<double>(t.hot_limit_bytes));
    b.Add(limit, {{"tenant", t.tenant}, {"tier", "cold"}},
          static_cast<double>(t.cold_limit_bytes));
    b.Add(limit, {{"tenant", t.tenant}, {"tier", "leased"}},
          static_cast<double>(t.leased_limit_bytes));
    b.Add(caused, {{"tenant", t.tenant}}, static_cast<double>(t.evictions_caused));
    b.Add(rejected, {{"tenant", t.tenant}}, static_cast<double>(t.quota_rejections));
  }
}

void AddRequestFamilies(const ServiceMetrics& metrics, FamilyBuilder& b) {
  auto& f = b.Family("kvtier_request_latency_seconds", "RPC latency.", MetricType::Histogram);
  auto& e = b.Family("kvtier_request_errors_total", "RPCs that returned an error.",
                     MetricType::Counter);
  for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
    v1::LatencyHistogram h;
    metrics.histogram(static_cast<Op>(i)).Snapshot(&h);
    ClientMetric m;
    m.label = {{"node", b.node_id()}, {"op", OpName(static_cast<Op>(i))}};
    m.histogram.sample_count = h.count();
    m.histogram.sample_sum = h.sum_us() / 1e6;
    uint64_t cum = 0;
    for (int k = 0; k < h.counts_size(); ++k) {
      cum += h.counts(k);
      double bound = k < h.bounds_us_size() ? h.bounds_us(k) / 1e6
                                            : std::numeric_limits<double>::infinity();
      m.histogram.bucket.push_back({cum, bound});
    }
    f.metric.push_back(std::move(m));
    b.Add(e, {{"op", OpName(static_cast<Op>(i))}},
          static_cast<double>(metrics.errors(static_cast<Op>(i))));
  }
}

// Builds the metric families from the store and the service at scrape time.
class KvtierCollectable : public prometheus::Collectable {
 public:
  KvtierCollectable(storage::TieredStore* store, const ServiceMetrics* metrics, std::string node_id)
      : store_(store), metrics_(metrics), node_id_(std::move(node_id)) {}

  std::vector<MetricFamily> Collect() const override {
    const storage::StoreStats s = store_->Stats();
    FamilyBuilder b(node_id_);
    AddTierFamilies(s, b);
    AddNamespaceCounters(s, b);
    AddNamespaceGauges(s, b);
    AddLeaseFamilies(s, b);
    AddTenantFamilies(s, b);
    AddRequestFamilies(*metrics_, b);
    return b.Take();
  }

 private:
  storage::TieredStore* store_;
  const ServiceMetrics* metrics_;
  std::string node_id_;
};

// The event publisher's counters at scrape time.
class EventsCollectable : public prometheus::Collectable {
 public:
  EventsCollectable(std::function<events::EventsStats()> stats, std::string node_id)
      : stats_(std::move(stats)), node_id_(std::move(node_id)) {}

  std::vector<MetricFamily> Collect() const override {
    const events::EventsStats s = stats_();
    FamilyBuilder b(node_id_);
    struct Def {
      const char* name;
      const char* help;
      MetricType type;
      double value;
    };
    const Def defs[] = {
        {"kvtier_events_published_total", "KV events in batches the PUB socket accepted.",
         MetricType::Counter, static_cast<double>(s.events_published)},
        {"kvtier_events_dropped_total",
         "KV events dropped (queue full, or in a batch a stuck subscriber refused).",
         MetricType::Counter, static_cast<double>(s.events_dropped)},
        {"kvtier_event_batches_published_total", "KV event batches published.",
         MetricType::Counter, static_cast<double>(s.batches_published)},
        {"kvtier_event_batches_dropped_total",
         "KV event batches refused because a subscriber was at send_hwm (kept for replay).",
         MetricType::Counter, static_cast<double>(s.batches_dropped)},
        {"kvtier_event_sequences_skipped_total",
         "Sequence numbers left unused to mark queue drops (consumers must re-sync).",
         MetricType::Counter, static_cast<double>(s.sequences_skipped)},
        {"kvtier_event_replay_requests_total", "Replay requests answered.", MetricType::Counter,
         static_cast<double>(s.replay_requests)},
        {"kvtier_event_subscribers", "Connections open on the KV event PUB socket.",
         MetricType::Gauge, static_cast<double>(s.subscribers)},
        {"kvtier_event_queued_events", "KV events waiting to be sent.", MetricType::Gauge,
         static_cast<double>(s.queued_events)},
    };
    for (const Def& d : defs) b.Add(b.Family(d.name, d.help, d.type), {}, d.value);
    return b.Take();
  }

 private:
  std::function<events::EventsStats()> stats_;
  std::string node_id_;
};

}  // namespace

void MetricsExporter::ExportEvents(std::function<events::EventsStats()> stats) {
  auto c = std::make_shared<EventsCollectable>(std::move(stats), node_id_);
  events_collectable_ = c;
  exposer_->RegisterCollectable(c);
}

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(
    const std::string& address, uint32_t port, storage::TieredStore* store,
    const ServiceMetrics* metrics, std::string node_id) {
  std::unique_ptr<MetricsExporter> e(new MetricsExporter());
  // prometheus-cpp reports bind failures with an exception; translate it here, once.
  try {
    e->exposer_ = std::make_unique<prometheus::Exposer>(absl::StrCat(address, ":", port), 1);
  } catch (const std::exception& ex) {
    return absl::UnavailableError(
        absl::StrCat("metrics_port ", port, ": cannot serve /metrics: ", ex.what()));
  }
  e->node_id_ = node_id;
  auto c = std::make_shared<KvtierCollectable>(store, metrics, std::move(node_id));
  e->collectable_ = c;
  e->exposer_->RegisterCollectable(c);
  return e;
}

MetricsExporter::~MetricsExporter() = default;

}  // namespace kvtier::service
