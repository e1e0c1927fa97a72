// `kvtier stats`: one node's counters as a table (or JSON), or the cluster's per-node view.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/admin_common.h"
#include "common/status_macros.h"

namespace kvtier::cli {
namespace {

namespace v1 = ::kvtier::v1;

constexpr char kStatsHelp[] =
    "usage: kvtier stats [--server HOST:PORT] [--namespace NS] [--watch] [--interval S]\n"
    "                    [--cluster] [--json]\n"
    "\n"
    "One row per namespace (tier \"all\") and one per tier (\"hot\", \"cold\"). Counters\n"
    "run from the server's start.\n"
    "\n"
    "  NAMESPACE      the namespace (its rows follow until the next name)\n"
    "  TIER           all: the namespace as a whole; hot / cold: that tier only\n"
    "  BLOCKS         blocks resident. all: distinct blocks (a block held in both tiers,\n"
    "                 e.g. after a promotion or flush, counts once); hot / cold: copies\n"
    "                 in that tier\n"
    "  BYTES          encoded payload bytes stored in the tier (all: hot + cold, so a\n"
    "                 block in both tiers counts in both)\n"
    "  LOOKUP_KEYS    keys asked in Lookup calls (all row only)\n"
    "  LOOKUP_HIT     of those, the share resident in any tier\n"
    "  LOOKUP_PREFIX  of those, the share inside the resident leading prefix (what a\n"
    "                 worker can load without recomputing); per tier: the part of it\n"
    "                 that tier held when Lookup answered (hot + cold = all)\n"
    "  GET_BLOCKS     blocks asked with Get (all row only)\n"
    "  GET_HITS       blocks Get served; per tier: served from that tier (a cold hit is\n"
    "                 promoted to hot)\n"
    "  GET_MISSES     blocks Get did not serve (absent, or failed their checksum)\n"
    "  GET_HIT        GET_HITS / GET_BLOCKS\n"
    "  EVICTIONS      all: every eviction; hot: dropped from hot under pressure (demoted\n"
    "                 to cold); cold: deleted because cold was over capacity; admin\n"
    "                 evictions and deletes count in all only\n"
    "  CODEC, RATIO   storage codec, and raw / encoded bytes of the blocks put\n"
    "\n"
    "Below the table: per namespace lookups (calls), gets, puts, evictions by reason,\n"
    "demotions, promotions, checksum failures; the node's leases (granted, released,\n"
    "expired unused, active, leased bytes); per tenant, its hot, cold and leased bytes\n"
    "against its quotas; and per-operation latency.\n"
    "  --cluster      one row per node: BLOCKS (distinct), LOOKUP_KEYS, LOOKUP_HIT and\n"
    "                 LOOKUP_PREFIX summed over namespaces, plus a cluster total\n"
    "  --json         the StatsResponse (or ClusterStatusResponse) as JSON\n";

std::string Rate(uint64_t part, uint64_t whole) {
  return whole == 0 ? std::string("-") : Pct(static_cast<double>(part) / whole);
}

void PrintStatsTable(const v1::StatsResponse& s) {
  std::printf("node %s  hot %s / %s (%s)  cold %s / %s", s.node_id().c_str(),
              HumanBytes(s.hot_used_bytes()).c_str(), HumanBytes(s.hot_capacity_bytes()).c_str(),
              s.hot_allocator().c_str(), HumanBytes(s.cold_used_bytes()).c_str(),
              HumanBytes(s.cold_capacity_bytes()).c_str());
  if (!s.shared_memory().socket_path().empty()) {
    std::printf("  shm %s (%u sessions)", s.shared_memory().socket_path().c_str(),
                s.shm_sessions());
  }
  std::printf("\n");
  std::vector<std::vector<std::string>> rows = {
      {"NAMESPACE", "TIER", "BLOCKS", "BYTES", "LOOKUP_KEYS", "LOOKUP_HIT", "LOOKUP_PREFIX",
       "GET_BLOCKS", "GET_HITS", "GET_MISSES", "GET_HIT", "EVICTIONS", "CODEC", "RATIO"}};
  for (const auto& ns : s.namespaces()) {
    const uint64_t evictions =
        ns.evictions_hot_capacity() + ns.evictions_cold_capacity() + ns.evictions_admin();
    const uint64_t get_hits = ns.hot().hits() + ns.cold().hits();
    rows.push_back({ns.name(), "all", absl::StrCat(ns.distinct_blocks()),
                    HumanBytes(ns.hot().bytes() + ns.cold().bytes()),
                    absl::StrCat(ns.lookup_blocks()),
                    Rate(ns.lookup_hit_blocks(), ns.lookup_blocks()),
                    Rate(ns.lookup_prefix_hit_blocks(), ns.lookup_blocks()),
                    absl::StrCat(ns.gets()), absl::StrCat(get_hits), absl::StrCat(ns.get_misses()),
                    Rate(get_hits, ns.gets()), absl::StrCat(evictions), CodecLabel(ns.codec()),
                    absl::StrFormat("%.2fx", ns.compression_ratio())});
    // LOOKUP_PREFIX per tier: the share of looked-up keys in the resident prefix that the
    // hot (cold) tier held; the two rows add up to the "all" row.
    rows.push_back({"", "hot", absl::StrCat(ns.hot().blocks()), HumanBytes(ns.hot().bytes()), "",
                    "", Rate(ns.lookup_prefix_hit_blocks_hot(), ns.lookup_blocks()), "",
                    absl::StrCat(ns.hot().hits()), "", "",
                    absl::StrCat(ns.evictions_hot_capacity()), "", ""});
    rows.push_back({"", "cold", absl::StrCat(ns.cold().blocks()), HumanBytes(ns.cold().bytes()),
                    "", "", Rate(ns.lookup_prefix_hit_blocks_cold(), ns.lookup_blocks()), "",
                    absl::StrCat(ns.cold().hits()), "", "",
                    absl::StrCat(ns.evictions_cold_capacity()), "", ""});
  }
  PrintTable(rows);
  if (s.namespaces_size() == 0) std::printf("(no namespaces)\n");
  for (const auto& ns : s.namespaces()) {
    std::printf("%s: lookups %llu, gets %llu, puts %llu; evictions: hot capacity %llu, cold "
                "capacity %llu, admin %llu; demotions %llu, promotions %llu; checksum "
                "failures %llu\n",
                ns.name().c_str(), static_cast<unsigned long long>(ns.lookups()),
                static_cast<unsigned long long>(ns.gets()),
                static_cast<unsigned long long>(ns.puts()),
                static_cast<unsigned long long>(ns.evictions_hot_capacity()),
                static_cast<unsigned long long>(ns.evictions_cold_capacity()),
                static_cast<unsigned long long>(ns.evictions_admin()),
                static_cast<unsigned long long>(ns.demotions()),
                static_cast<unsigned long long>(ns.promotions()),
                static_cast<unsigned long long>(ns.checksum_failures()));
  }
  const v1::LeaseStats& l = s.leases();
  std::printf("leases: granted %llu, released %llu, expired unused %llu, active %llu (%s)\n",
              static_cast<unsigned long long>(l.granted()),
              static_cast<unsigned long long>(l.released()),
              static_cast<unsigned long long>(l.expired_unused()),
              static_cast<unsigned long long>(l.active()), HumanBytes(l.leased_bytes()).c_str());
  std::printf("write-back debt: %llu blocks, %s unflushed (bound %llu blocks, %s)\n",
              static_cast<unsigned long long>(s.unflushed_blocks()),
              HumanBytes(s.unflushed_bytes()).c_str(),
              static_cast<unsigned long long>(s.max_unflushed_blocks()),
              HumanBytes(s.max_unflushed_bytes()).c_str());
  if (s.tenants_size() > 0) {
    // Per-tenant use against its quotas (ServerConfig.tenant_quotas); "-" = unlimited.
    auto used = [](uint64_t bytes, uint64_t limit) {
      return absl::StrCat(HumanBytes(bytes), " / ", limit == 0 ? "-" : HumanBytes(limit));
    };
    std::vector<std::vector<std::string>> tenants = {
        {"TENANT", "HOT", "COLD", "LEASED", "QUOTA_EVICTIONS", "QUOTA_REJECTIONS"}};
    for (const auto& t : s.tenants()) {
      tenants.push_back({t.tenant(), used(t.hot_used_bytes(), t.hot_limit_bytes()),
                         used(t.cold_used_bytes(), t.cold_limit_bytes()),
                         used(t.leased_used_bytes(), t.leased_limit_bytes()),
                         absl::StrCat(t.evictions_caused()), absl::StrCat(t.quota_rejections())});
    }
    std::printf("\n");
    PrintTable(tenants);
  }
  if (s.cold_wal_dropped_ranges() > 0) {
    std::printf("cold tier started after WAL damage: %llu range(s), %s dropped (see the log)\n",
                static_cast<unsigned long long>(s.cold_wal_dropped_ranges()),
                HumanBytes(s.cold_wal_dropped_bytes()).c_str());
  }
  if (s.latencies_size() > 0) {
    std::vector<std::vector<std::string>> lat = {{"OPERATION", "COUNT", "MEAN_US"}};
    for (const auto& h : s.latencies()) {
      lat.push_back({h.operation(), absl::StrCat(h.count()),
                     h.count() ? absl::StrFormat("%.0f", h.sum_us() / h.count()) : "-"});
    }
    std::printf("\n");
    PrintTable(lat);
  }
}

}  // namespace

absl::Status RunStats(const Flags& flags) {
  if (flags.Has("help")) {
    std::fputs(kStatsHelp, stdout);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(auto client, ConnectFromFlags(flags));
  const std::string ns = flags.GetString("namespace", "");
  const bool json = flags.Has("json");
  const bool watch = flags.Has("watch");
  ASSIGN_OR_RETURN(const double interval_s, flags.GetDouble("interval", 2.0));
  const bool tty = isatty(STDOUT_FILENO);
  if (flags.Has("cluster")) {
    ASSIGN_OR_RETURN(auto cluster, client->ClusterStatus());
    if (json) {
      std::printf("%s\n", ProtoJson(cluster).c_str());
      return absl::OkStatus();
    }
    std::printf("cluster seen from %s, replication factor %u\n", cluster.node_id().c_str(),
                cluster.replication_factor());
    std::vector<std::vector<std::string>> rows = {
        {"NODE", "ADDRESS", "HEALTHY", "SHARE", "LAST_SEEN", "HOT_USED", "COLD_USED", "BLOCKS",
         "LOOKUP_KEYS", "LOOKUP_HIT", "LOOKUP_PREFIX"}};
    // Cluster totals sum the counts before dividing (never an average of ratios).
    uint64_t total_blocks = 0, total_asked = 0, total_hit = 0, total_prefix = 0;
    for (const auto& p : cluster.peers()) {
      uint64_t blocks = 0, asked = 0, hit = 0, prefix = 0;
      for (const auto& ns : p.stats().namespaces()) {
        blocks += ns.distinct_blocks();
        asked += ns.lookup_blocks();
        hit += ns.lookup_hit_blocks();
        prefix += ns.lookup_prefix_hit_blocks();
      }
      total_blocks += blocks;
      total_asked += asked;
      total_hit += hit;
      total_prefix += prefix;
      const bool has = p.has_stats();
      rows.push_back({p.node_id(), p.address(), p.healthy() ? "yes" : "NO",
                      Pct(p.ownership_share()), absl::StrCat(p.last_seen_ms_ago(), "ms"),
                      has ? HumanBytes(p.stats().hot_used_bytes()) : "-",
                      has ? HumanBytes(p.stats().cold_used_bytes()) : "-",
                      has ? absl::StrCat(blocks) : "-", has ? absl::StrCat(asked) : "-",
                      has ? Rate(hit, asked) : "-", has ? Rate(prefix, asked) : "-"});
    }
    rows.push_back({"cluster", "", "", "", "", "", "", absl::StrCat(total_blocks),
                    absl::StrCat(total_asked), Rate(total_hit, total_asked),
                    Rate(total_prefix, total_asked)});
    PrintTable(rows);
    std::printf("(a cluster-wide Lookup also counts on each peer it fans out to: compare the\n"
                " answering node's rates with what workers see, per-node rates per key range)\n");
    return absl::OkStatus();
  }
  while (true) {
    ASSIGN_OR_RETURN(auto stats, client->Stats(ns));
    if (json) {
      std::printf("%s\n", ProtoJson(stats).c_str());
    } else {
      if (watch && tty) std::printf("\033[H\033[2J");
      PrintStatsTable(stats);
    }
    std::fflush(stdout);
    if (!watch) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(interval_s * 1e3)));
  }
}

}  // namespace kvtier::cli
