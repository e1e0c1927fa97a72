#include "protocol/lookup_form.h"

#include <functional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "protocol/frame.h"

namespace kvtier::protocol {
namespace {

// Writes the compact fields of `n` keys (key i: tier_of(i), owner_of(i), lease_of(i))
// into `r`. `default_owner` names holder 0 when no key is resident.
template <typename TierFn, typename OwnerFn, typename LeaseFn>
void EncodeCompact(size_t n, TierFn tier_of, OwnerFn owner_of, LeaseFn lease_of,
                   std::string_view default_owner, v1::LookupResponse* r) {
  std::string* tiers = r->mutable_tiers();
  tiers->reserve(tiers->size() + n);
  // The short form (no owner_index) fits when every resident key has one (owner, lease)
  // and no absent key names an owner: one node's answer.
  bool simple = true;
  bool seen = false;
  std::string_view owner0 = default_owner;
  uint64_t lease0 = 0;
  for (size_t i = 0; i < n; ++i) {
    const v1::Tier tier = tier_of(i);
    tiers->push_back(static_cast<char>(tier));
    if (tier == v1::TIER_NONE) {
      simple &= owner_of(i).empty() && lease_of(i) == 0;
    } else if (!seen) {
      owner0 = owner_of(i);
      lease0 = lease_of(i);
      seen = true;
    } else {
      simple &= owner_of(i) == owner0 && lease_of(i) == lease0;
    }
  }
  if (simple) {
    if (seen || !owner0.empty()) r->add_owners(std::string(owner0));
    if (lease0 != 0) r->add_owner_lease_ids(lease0);
    return;
  }
  // Holders stay few (about two per node), so a linear scan beats a map. Owners usually
  // view the same few strings (a ring's node ids), so the first scan matches a view at
  // the same address without comparing bytes; only a miss compares them.
  using Holder = std::pair<std::string_view, uint64_t>;
  std::vector<Holder> holders;
  auto find = [&holders](const Holder& holder, auto same_owner) {
    size_t h = 0;
    while (h < holders.size() &&
           !(holders[h].second == holder.second && same_owner(holders[h].first, holder.first))) {
      ++h;
    }
    return h;
  };
  auto same_view = [](std::string_view a, std::string_view b) {
    return a.data() == b.data() && a.size() == b.size();
  };
  r->mutable_owner_index()->Reserve(static_cast<int>(n));
  for (size_t i = 0; i < n; ++i) {
    const Holder holder(owner_of(i), lease_of(i));
    size_t h = find(holder, same_view);
    if (h == holders.size()) h = find(holder, std::equal_to<std::string_view>());
    if (h == holders.size()) holders.push_back(holder);
    r->add_owner_index(static_cast<uint32_t>(h));
  }
  bool any_lease = false;
  for (const auto& h : holders) any_lease |= h.second != 0;
  for (const auto& h : holders) {
    r->add_owners(std::string(h.first));
    if (any_lease) r->add_owner_lease_ids(h.second);
  }
}

// Key i's holder in a compact response, or -1 for none.
int HolderOf(const v1::LookupResponse& r, size_t i) {
  if (r.owner_index_size() > 0) return static_cast<int>(r.owner_index(static_cast<int>(i)));
  return LookupTier(r, i) == v1::TIER_NONE ? -1 : 0;
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

// EncodeLookupRequest for the keys key_at(0) .. key_at(n - 1).
template <typename KeyAt>
std::string EncodeRequest(std::string_view ns, size_t n, KeyAt key_at, bool local_only,
                          uint64_t lease_ms, bool compact, uint32_t prefetch) {
  // Field numbers of kvtier.v1.LookupRequest, in the order the generated code writes them.
  constexpr int kNamespace = 1, kKeys = 2, kLocalOnly = 3, kLeaseMs = 4, kPrefetch = 5,
                kCompact = 10;
  size_t size = ns.empty() ? 0 : 1 + VarintSize(ns.size()) + ns.size();
  for (size_t i = 0; i < n; ++i) size += 1 + VarintSize(key_at(i).size()) + key_at(i).size();
  size += 2 + 1 + VarintSize(lease_ms) + 1 + VarintSize(prefetch) + 2;
  std::string out;
  out.reserve(size);
  if (!ns.empty()) PutBytesField(kNamespace, ns, &out);
  for (size_t i = 0; i < n; ++i) PutBytesField(kKeys, key_at(i), &out);
  if (local_only) {
    out.push_back(static_cast<char>(kLocalOnly << 3));
    out.push_back(1);
  }
  if (lease_ms != 0) {
    out.push_back(static_cast<char>(kLeaseMs << 3));
    PutVarint(lease_ms, &out);
  }
  if (prefetch != 0) {
    out.push_back(static_cast<char>(kPrefetch << 3));
    PutVarint(prefetch, &out);
  }
  if (compact) {
    out.push_back(static_cast<char>(kCompact << 3));  // 80: one byte tag
    out.push_back(1);
  }
  return out;
}

}  // namespace

std::string EncodeLookupRequest(std::string_view ns, std::span<const std::string> keys,
                                bool local_only, uint64_t lease_ms, bool compact,
                                uint32_t prefetch) {
  return EncodeRequest(
      ns, keys.size(), [&](size_t i) -> const std::string& { return keys[i]; }, local_only,
      lease_ms, compact, prefetch);
}

std::string EncodeLookupRequest(std::string_view ns, std::span<const std::string_view> keys,
                                std::span<const size_t> which, bool local_only, uint64_t lease_ms,
                                bool compact, uint32_t prefetch) {
  return EncodeRequest(
      ns, which.size(), [&](size_t i) { return keys[which[i]]; }, local_only, lease_ms, compact,
      prefetch);
}

bool ReadLookupRequest(std::string_view bytes, LookupRequestView* out) {
  *out = LookupRequestView{};
  const std::span<const uint8_t> whole[] = {
      std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())};
  SliceCursor c(whole);
  // Field numbers of kvtier.v1.LookupRequest (EncodeRequest).
  constexpr uint64_t kNamespace = 1, kKeys = 2, kLocalOnly = 3, kLeaseMs = 4, kPrefetch = 5,
                     kCompact = 10;
  while (c.remaining() > 0) {
    uint64_t tag = 0;
    if (!c.ReadVarint(&tag)) return false;
    const uint64_t field = tag >> 3;
    const uint64_t wire_type = tag & 7;
    if (field == kNamespace || field == kKeys) {
      std::span<const uint8_t> v;
      if (wire_type != 2 || !ReadLengthDelimited(c, &v)) return false;
      const std::string_view sv(reinterpret_cast<const char*>(v.data()), v.size());
      if (field == kKeys) {
        out->keys.push_back(sv);
        continue;
      }
      for (const char ch : sv) {
        if (static_cast<unsigned char>(ch) >= 0x80) return false;
      }
      out->ns = sv;  // the last occurrence wins, as in protobuf
    } else if (field == kLocalOnly || field == kLeaseMs || field == kCompact ||
               field == kPrefetch) {
      uint64_t v = 0;
      if (wire_type != 0 || !c.ReadVarint(&v)) return false;
      if (field == kLeaseMs) {
        out->lease_ms = v;
      } else if (field == kPrefetch) {
        out->prefetch = static_cast<uint32_t>(v);  // an enum: int32 on the wire
      } else {
        (field == kLocalOnly ? out->local_only : out->compact) = v != 0;
      }
    } else if (!SkipField(c, tag)) {
      return false;
    }
  }
  return true;
}

bool IsCompactLookup(const v1::LookupResponse& response) {
  return !response.tiers().empty() || response.owners_size() > 0;
}

void EncodeCompactLookup(std::span<const v1::Tier> tiers, std::span<const uint64_t> lease_ids,
                         std::string_view owner, v1::LookupResponse* response) {
  EncodeCompact(
      tiers.size(), [&](size_t i) { return tiers[i]; },
      [&](size_t i) { return tiers[i] == v1::TIER_NONE ? std::string_view() : owner; },
      [&](size_t i) { return tiers[i] == v1::TIER_NONE ? uint64_t{0} : lease_ids[i]; }, owner,
      response);
}

void EncodeLookupAnswers(std::span<const KeyAnswer> answers, bool compact,
                         v1::LookupResponse* response) {
  if (compact) {
    EncodeCompact(
        answers.size(), [&](size_t i) { return answers[i].tier; },
        [&](size_t i) { return answers[i].owner; }, [&](size_t i) { return answers[i].lease_id; },
        {}, response);
    return;
  }
  response->mutable_blocks()->Reserve(static_cast<int>(answers.size()));
  for (const KeyAnswer& a : answers) {
    v1::BlockLocation* loc = response->add_blocks();
    loc->set_tier(a.tier);
    loc->set_owner(std::string(a.owner));
    loc->set_lease_id(a.lease_id);
  }
}

absl::Status CheckLookup(const v1::LookupResponse& response) {
  if (!IsCompactLookup(response)) return absl::OkStatus();
  const size_t n = response.tiers().size();
  const size_t holders = static_cast<size_t>(response.owners_size());
  if (response.owner_lease_ids_size() != 0 &&
      static_cast<size_t>(response.owner_lease_ids_size()) != holders) {
    return absl::DataLossError(absl::StrCat("owner_lease_ids has ", response.owner_lease_ids_size(),
                                            " entries for ", holders, " owners"));
  }
  if (response.owner_index_size() == 0) {
    for (size_t i = 0; i < n && holders == 0; ++i) {
      if (LookupTier(response, i) != v1::TIER_NONE) {
        return absl::DataLossError(absl::StrCat("tiers[", i, "] is resident but owners is empty"));
      }
    }
    return absl::OkStatus();
  }
  if (static_cast<size_t>(response.owner_index_size()) != n) {
    return absl::DataLossError(
        absl::StrCat("owner_index has ", response.owner_index_size(), " entries for ", n, " keys"));
  }
  for (size_t i = 0; i < n; ++i) {
    if (response.owner_index(static_cast<int>(i)) >= holders) {
      return absl::DataLossError(absl::StrCat("owner_index[", i, "] is ",
                                              response.owner_index(static_cast<int>(i)),
                                              " but owners has ", holders, " entries"));
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

std::string_view LookupOwner(const v1::LookupResponse& response, size_t i) {
  if (!IsCompactLookup(response)) return response.blocks(static_cast<int>(i)).owner();
  const int h = HolderOf(response, i);
  return h < 0 ? std::string_view() : std::string_view(response.owners(h));
}

uint64_t LookupLeaseId(const v1::LookupResponse& response, size_t i) {
  if (!IsCompactLookup(response)) return response.blocks(static_cast<int>(i)).lease_id();
  const int h = HolderOf(response, i);
  return h < 0 || response.owner_lease_ids_size() == 0 ? 0 : response.owner_lease_ids(h);
}

absl::Status ExpandLookup(v1::LookupResponse* response) {
  if (!IsCompactLookup(*response)) return absl::OkStatus();
  if (absl::Status s = CheckLookup(*response); !s.ok()) return s;
  const size_t n = response->tiers().size();
  google::protobuf::RepeatedPtrField<v1::BlockLocation> blocks;
  blocks.Reserve(static_cast<int>(n));
  for (size_t i = 0; i < n; ++i) {
    v1::BlockLocation* b = blocks.Add();
    b->set_tier(LookupTier(*response, i));
    const std::string_view owner = LookupOwner(*response, i);
    if (!owner.empty()) b->set_owner(std::string(owner));
    b->set_lease_id(LookupLeaseId(*response, i));
  }
  response->clear_tiers();
  response->clear_owners();
  response->clear_owner_lease_ids();
  response->clear_owner_index();
  *response->mutable_blocks() = std::move(blocks);
  return absl::OkStatus();
}

}  // namespace kvtier::protocol
