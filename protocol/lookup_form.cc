#include "protocol/lookup_form.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvtier::protocol {
namespace {

// Index of holder (owner, lease_id) in `response`'s table, added if new. The table stays
// small (a few entries per node), so a linear scan beats a map.
uint32_t HolderIndex(v1::LookupResponse* response, std::string_view owner, uint64_t lease_id) {
  const int n = response->owners_size();
  for (int h = 0; h < n; ++h) {
    const uint64_t id = h < response->owner_lease_ids_size() ? response->owner_lease_ids(h) : 0;
    if (id == lease_id && response->owners(h) == owner) return static_cast<uint32_t>(h);
  }
  response->add_owners(std::string(owner));
  // owner_lease_ids is one per holder as soon as one is leased.
  if (lease_id != 0 || response->owner_lease_ids_size() > 0) {
    while (response->owner_lease_ids_size() < n) response->add_owner_lease_ids(0);
    response->add_owner_lease_ids(lease_id);
  }
  return static_cast<uint32_t>(n);
}

// Sets key `key`'s holder to `h`, materializing owner_index when it is first non-zero.
void SetHolder(v1::LookupResponse* response, uint32_t key, uint32_t h) {
  if (h == 0 && response->owner_index_size() == 0) return;
  while (static_cast<uint32_t>(response->owner_index_size()) < key) response->add_owner_index(0);
  response->add_owner_index(h);
}

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// A length-delimited field (wire type 2) of field number < 16.
void PutBytesField(int field, std::string_view bytes, std::string* out) {
  out->push_back(static_cast<char>(field << 3 | 2));
  PutVarint(bytes.size(), out);
  out->append(bytes);
}

}  // namespace

std::string EncodeLookupRequest(std::string_view ns, std::span<const std::string> keys,
                                bool local_only, uint64_t lease_ms, bool compact) {
  // Field numbers of kvtier.v1.LookupRequest, in the order the generated code writes them.
  constexpr int kNamespace = 1, kKeys = 2, kLocalOnly = 3, kLeaseMs = 4, kCompact = 10;
  size_t size = ns.empty() ? 0 : 1 + VarintSize(ns.size()) + ns.size();
  for (const std::string& k : keys) size += 1 + VarintSize(k.size()) + k.size();
  size += 2 + 1 + VarintSize(lease_ms) + 2;
  std::string out;
  out.reserve(size);
  if (!ns.empty()) PutBytesField(kNamespace, ns, &out);
  for (const std::string& k : keys) PutBytesField(kKeys, k, &out);
  if (local_only) {
    out.push_back(static_cast<char>(kLocalOnly << 3));
    out.push_back(1);
  }
  if (lease_ms != 0) {
    out.push_back(static_cast<char>(kLeaseMs << 3));
    PutVarint(lease_ms, &out);
  }
  if (compact) {
    out.push_back(static_cast<char>(kCompact << 3));  // 80: one byte tag
    out.push_back(1);
  }
  return out;
}

bool IsCompactLookup(const v1::LookupResponse& response) {
  return !response.tiers().empty() || response.owners_size() > 0;
}

void CompactLookup(v1::LookupResponse* response) {
  if (IsCompactLookup(*response)) return;
  auto blocks = std::move(*response->mutable_blocks());
  response->clear_blocks();
  std::string* tiers = response->mutable_tiers();
  tiers->reserve(blocks.size());
  for (int i = 0; i < blocks.size(); ++i) {
    const v1::BlockLocation& b = blocks[i];
    tiers->push_back(static_cast<char>(b.tier()));
    if (b.tier() == v1::TIER_NONE) continue;
    SetHolder(response, static_cast<uint32_t>(i), HolderIndex(response, b.owner(), b.lease_id()));
  }
  // Trailing absent keys need no owner_index entries, but the form says one per key.
  if (response->owner_index_size() > 0) {
    while (response->owner_index_size() < blocks.size()) response->add_owner_index(0);
  }
}

absl::Status CheckLookup(const v1::LookupResponse& response) {
  if (!IsCompactLookup(response)) return absl::OkStatus();
  const size_t n = response.tiers().size();
  const size_t holders = static_cast<size_t>(response.owners_size());
  if (response.owner_index_size() != 0 && static_cast<size_t>(response.owner_index_size()) != n) {
    return absl::DataLossError(
        absl::StrCat("owner_index has ", response.owner_index_size(), " entries for ", n, " keys"));
  }
  if (response.owner_lease_ids_size() != 0 &&
      static_cast<size_t>(response.owner_lease_ids_size()) != holders) {
    return absl::DataLossError(absl::StrCat("owner_lease_ids has ", response.owner_lease_ids_size(),
                                            " entries for ", holders, " owners"));
  }
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<uint8_t>(response.tiers()[i]) == v1::TIER_NONE) continue;
    const uint32_t h = response.owner_index_size() == 0 ? 0 : response.owner_index(i);
    if (h >= holders) {
      return absl::DataLossError(
          absl::StrCat("owner_index[", i, "] is ", h, " but owners has ", holders, " entries"));
    }
  }
  return absl::OkStatus();
}

size_t LookupKeys(const v1::LookupResponse& response) {
  return IsCompactLookup(response) ? response.tiers().size()
                                   : static_cast<size_t>(response.blocks_size());
}

v1::Tier LookupTier(const v1::LookupResponse& response, size_t i) {
  if (!IsCompactLookup(response)) return response.blocks(static_cast<int>(i)).tier();
  return static_cast<v1::Tier>(static_cast<uint8_t>(response.tiers()[i]));
}

namespace {
// Key i's holder in a compact response (the key is resident).
int HolderOf(const v1::LookupResponse& response, size_t i) {
  return response.owner_index_size() == 0
             ? 0
             : static_cast<int>(response.owner_index(static_cast<int>(i)));
}
}  // namespace

std::string_view LookupOwner(const v1::LookupResponse& response, size_t i) {
  if (!IsCompactLookup(response)) return response.blocks(static_cast<int>(i)).owner();
  if (LookupTier(response, i) == v1::TIER_NONE) return {};
  return response.owners(HolderOf(response, i));
}

uint64_t LookupLeaseId(const v1::LookupResponse& response, size_t i) {
  if (!IsCompactLookup(response)) return response.blocks(static_cast<int>(i)).lease_id();
  if (LookupTier(response, i) == v1::TIER_NONE || response.owner_lease_ids_size() == 0) return 0;
  return response.owner_lease_ids(HolderOf(response, i));
}

absl::Status ExpandLookup(v1::LookupResponse* response) {
  if (!IsCompactLookup(*response)) return absl::OkStatus();
  if (absl::Status s = CheckLookup(*response); !s.ok()) return s;
  const size_t n = response->tiers().size();
  google::protobuf::RepeatedPtrField<v1::BlockLocation> blocks;
  blocks.Reserve(static_cast<int>(n));
  for (size_t i = 0; i < n; ++i) {
    v1::BlockLocation* b = blocks.Add();
    const v1::Tier tier = LookupTier(*response, i);
    b->set_tier(tier);
    if (tier == v1::TIER_NONE) continue;
    b->set_owner(std::string(LookupOwner(*response, i)));
    b->set_lease_id(LookupLeaseId(*response, i));
  }
  response->clear_tiers();
  response->clear_owners();
  response->clear_owner_lease_ids();
  response->clear_owner_index();
  *response->mutable_blocks() = std::move(blocks);
  return absl::OkStatus();
}

CompactLookupBuilder::CompactLookupBuilder(v1::LookupResponse* response, std::string_view owner)
    : response_(response), tiers_(response->mutable_tiers()), owner_(owner) {
  keys_ = static_cast<uint32_t>(tiers_->size());
  HolderIndex(response_, owner_, 0);  // holder 0: the owner, not leased
}

void CompactLookupBuilder::Add(v1::Tier tier, uint64_t lease_id) {
  tiers_->push_back(static_cast<char>(tier));
  const uint32_t key = keys_++;
  if (tier == v1::TIER_NONE) {
    if (response_->owner_index_size() > 0) response_->add_owner_index(0);
    return;
  }
  uint32_t h = 0;
  if (lease_id != 0) {
    if (lease_id != last_lease_id_) {
      last_holder_ = HolderIndex(response_, owner_, lease_id);
      last_lease_id_ = lease_id;
    }
    h = last_holder_;
  }
  SetHolder(response_, key, h);
}

}  // namespace kvtier::protocol
