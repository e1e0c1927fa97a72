// LeaseTable: the leases Lookup grants (docs/design.md §4 Tiers and eviction). A lease
// keeps the leading resident prefix a Lookup reported loadable until it ends or is
// released: a block leased while hot stays hot (no policy may pick it as a victim, like
// a pin), a block leased while cold stays resident (cold-capacity eviction skips it; it
// may be promoted and demoted again). Leases are bounded in bytes per node and per
// tenant; bytes count per lease (a block in two leases counts twice), so the bound holds
// for the distinct bytes too.
//
// The table only records holds; TieredStoreImpl asks KeepsHot / KeepsResident when it
// picks victims and re-evaluates eligibility of the blocks whose holds change.
//
// Thread-compatible: TieredStoreImpl calls it only while holding its index mutex.
#ifndef KVTIER_STORAGE_LEASE_TABLE_H_
#define KVTIER_STORAGE_LEASE_TABLE_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "storage/eviction_policy.h"

namespace kvtier::storage {

// Why a Lookup leased fewer blocks than it reported resident. Stable numbers (wire).
enum class LeaseLimit : uint8_t {
  kNone = 0,         // the whole reported prefix is leased (or no lease was asked)
  kNodeBytes = 1,    // the node's leased-bytes bound (StoreOptions::max_leased_bytes)
  kTenantBytes = 2,  // the tenant's bound (StoreOptions::max_leased_bytes_per_tenant)
};
const char* LeaseLimitName(LeaseLimit limit);  // "none", "node_bytes", "tenant_bytes"

// Counters of the leases granted so far (StoreStats).
struct LeaseStats {
  uint64_t granted = 0;         // leases granted (a Lookup that leased >= 1 block)
  uint64_t released = 0;        // ended by ReleaseLease or by the Get that named them
  uint64_t expired_unused = 0;  // ended by their deadline, never released
  uint64_t active = 0;          // leases in force now
  uint64_t leased_bytes = 0;    // payload bytes of the active leases
};

class LeaseTable {
 public:
  // One leased block: its index entry and whether the lease keeps it hot.
  struct Hold {
    BlockId id = kInvalidBlock;
    bool keep_hot = false;
  };

  // `tenant_limits` overrides max_bytes_per_tenant for the tenants it lists
  // (StoreOptions::tenant_quotas leased_bytes).
  LeaseTable(uint64_t max_bytes, uint64_t max_bytes_per_tenant,
             absl::flat_hash_map<std::string, uint64_t> tenant_limits = {})
      : max_bytes_(max_bytes),
        max_bytes_per_tenant_(max_bytes_per_tenant),
        tenant_limits_(std::move(tenant_limits)) {}

  // The bound on `tenant`'s leased bytes, and the bytes its active leases hold.
  uint64_t TenantLimit(std::string_view tenant) const;
  uint64_t TenantBytes(std::string_view tenant) const;

  // Bytes a new lease of `tenant` may still take under each bound.
  struct Room {
    uint64_t node = 0;    // under max_bytes (LeaseLimit::kNodeBytes beyond)
    uint64_t tenant = 0;  // under max_bytes_per_tenant (LeaseLimit::kTenantBytes beyond)
  };
  Room RoomFor(std::string_view tenant) const;

  // Records a lease of `holds` (bytes in total) for namespace `ns` until `until_ms` and
  // returns its id (never 0). REQUIRES: bytes within RoomFor(tenant), holds not empty.
  uint64_t Grant(uint16_t ns, std::string_view tenant, std::vector<Hold> holds, uint64_t bytes,
                 int64_t until_ms);

  // Ends lease `lease_id` of namespace `ns`; returns its holds (empty when no such lease
  // is in force, e.g. it expired or was released already). Counted as released.
  std::vector<Hold> Release(uint16_t ns, uint64_t lease_id);

  // Ends every lease of namespace `ns` (DropNamespace) and returns their holds. Counted as
  // released.
  std::vector<Hold> ReleaseNamespace(uint16_t ns);
  // Whether some lease of namespace `ns` is in force (expired ones count until Expire).
  bool HoldsNamespace(uint16_t ns) const;

  // Ends every lease whose deadline is at or before `now_ms` and returns their holds.
  // Cheap when none is due.
  std::vector<Hold> Expire(int64_t now_ms);

  // Drops every hold on `id` (the block was removed from every tier; its entry id may be
  // reused). The leases stay, with their bytes.
  void Forget(BlockId id);

  // The deadline of lease `lease_id` while it is in force at `now_ms` (not released, its
  // deadline after now_ms); nullopt otherwise.
  std::optional<int64_t> DeadlineIfActive(uint64_t lease_id, int64_t now_ms) const;

  // Whether some lease keeps `id` hot / resident.
  bool KeepsHot(BlockId id) const;
  bool KeepsResident(BlockId id) const;

  bool empty() const { return leases_.empty(); }
  LeaseStats stats() const;

 private:
  struct Lease {
    uint16_t ns = 0;
    std::string tenant;
    int64_t until_ms = 0;
    uint64_t bytes = 0;
    std::vector<Hold> holds;
  };
  struct Count {
    uint32_t hot = 0;  // leases keeping it hot
    uint32_t any = 0;  // leases keeping it resident (hot ones included)
  };

  std::vector<Hold> End(absl::flat_hash_map<uint64_t, Lease>::iterator it);

  const uint64_t max_bytes_;
  const uint64_t max_bytes_per_tenant_;
  const absl::flat_hash_map<std::string, uint64_t> tenant_limits_;
  absl::flat_hash_map<uint64_t, Lease> leases_;
  absl::flat_hash_map<BlockId, Count> counts_;
  absl::flat_hash_map<std::string, uint64_t> tenant_bytes_;
  uint64_t bytes_ = 0;
  uint64_t next_id_ = 1;
  int64_t next_expiry_ms_ = std::numeric_limits<int64_t>::max();
  LeaseStats stats_;
};

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_LEASE_TABLE_H_
