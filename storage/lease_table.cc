#include "storage/lease_table.h"

#include <algorithm>
#include <utility>

namespace kvtier::storage {

const char* LeaseLimitName(LeaseLimit limit) {
  switch (limit) {
    case LeaseLimit::kNone:
      return "none";
    case LeaseLimit::kNodeBytes:
      return "node_bytes";
    case LeaseLimit::kTenantBytes:
      return "tenant_bytes";
  }
  return "none";
}

uint64_t LeaseTable::TenantLimit(std::string_view tenant) const {
  auto it = tenant_limits_.find(std::string(tenant));
  return it == tenant_limits_.end() ? max_bytes_per_tenant_ : it->second;
}

uint64_t LeaseTable::TenantBytes(std::string_view tenant) const {
  auto it = tenant_bytes_.find(std::string(tenant));
  return it == tenant_bytes_.end() ? 0 : it->second;
}

LeaseTable::Room LeaseTable::RoomFor(std::string_view tenant) const {
  const uint64_t used = TenantBytes(tenant);
  const uint64_t limit = TenantLimit(tenant);
  Room room;
  room.node = max_bytes_ > bytes_ ? max_bytes_ - bytes_ : 0;
  room.tenant = limit > used ? limit - used : 0;
  return room;
}

uint64_t LeaseTable::Grant(uint16_t ns, std::string_view tenant, std::vector<Hold> holds,
                           uint64_t bytes, int64_t until_ms) {
  const uint64_t id = next_id_++;
  counts_.reserve(counts_.size() + holds.size());
  for (const Hold& h : holds) {
    Count& c = counts_[h.id];
    c.any++;
    if (h.keep_hot) c.hot++;
  }
  bytes_ += bytes;
  tenant_bytes_[std::string(tenant)] += bytes;
  next_expiry_ms_ = std::min(next_expiry_ms_, until_ms);
  leases_.emplace(id, Lease{ns, std::string(tenant), until_ms, bytes, std::move(holds)});
  stats_.granted++;
  return id;
}

std::vector<LeaseTable::Hold> LeaseTable::End(
    absl::flat_hash_map<uint64_t, Lease>::iterator it) {
  Lease lease = std::move(it->second);
  leases_.erase(it);
  for (const Hold& h : lease.holds) {
    auto c = counts_.find(h.id);
    if (c == counts_.end()) continue;  // forgotten
    c->second.any--;
    if (h.keep_hot) c->second.hot--;
    if (c->second.any == 0) counts_.erase(c);
  }
  bytes_ -= lease.bytes;
  auto t = tenant_bytes_.find(lease.tenant);
  t->second -= lease.bytes;
  if (t->second == 0) tenant_bytes_.erase(t);
  return std::move(lease.holds);
}

std::vector<LeaseTable::Hold> LeaseTable::Release(uint16_t ns, uint64_t lease_id) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end() || it->second.ns != ns) return {};
  stats_.released++;
  return End(it);
}

std::vector<LeaseTable::Hold> LeaseTable::ReleaseNamespace(uint16_t ns) {
  std::vector<uint64_t> ids;
  for (const auto& [id, lease] : leases_) {
    if (lease.ns == ns) ids.push_back(id);
  }
  std::vector<Hold> freed;
  for (uint64_t id : ids) {
    stats_.released++;
    std::vector<Hold> holds = End(leases_.find(id));
    freed.insert(freed.end(), holds.begin(), holds.end());
  }
  return freed;
}

bool LeaseTable::HoldsNamespace(uint16_t ns) const {
  for (const auto& [id, lease] : leases_) {
    if (lease.ns == ns) return true;
  }
  return false;
}

std::vector<LeaseTable::Hold> LeaseTable::Expire(int64_t now_ms) {
  if (now_ms < next_expiry_ms_) return {};
  std::vector<uint64_t> due;
  int64_t next = std::numeric_limits<int64_t>::max();
  for (const auto& [id, lease] : leases_) {
    if (lease.until_ms <= now_ms) {
      due.push_back(id);
    } else {
      next = std::min(next, lease.until_ms);
    }
  }
  std::vector<Hold> freed;
  for (uint64_t id : due) {
    std::vector<Hold> holds = End(leases_.find(id));
    freed.insert(freed.end(), holds.begin(), holds.end());
    stats_.expired_unused++;
  }
  next_expiry_ms_ = next;
  return freed;
}

void LeaseTable::Forget(BlockId id) {
  if (counts_.erase(id) == 0) return;
  for (auto& [lease_id, lease] : leases_) {
    std::erase_if(lease.holds, [id](const Hold& h) { return h.id == id; });
  }
}

std::optional<int64_t> LeaseTable::DeadlineIfActive(uint64_t lease_id, int64_t now_ms) const {
  const auto it = leases_.find(lease_id);
  if (it == leases_.end() || it->second.until_ms <= now_ms) return std::nullopt;
  return it->second.until_ms;
}

bool LeaseTable::KeepsHot(BlockId id) const {
  if (counts_.empty()) return false;
  auto it = counts_.find(id);
  return it != counts_.end() && it->second.hot > 0;
}

bool LeaseTable::KeepsResident(BlockId id) const {
  if (counts_.empty()) return false;
  return counts_.contains(id);
}

LeaseStats LeaseTable::stats() const {
  LeaseStats s = stats_;
  s.active = leases_.size();
  s.leased_bytes = bytes_;
  return s;
}

}  // namespace kvtier::storage
