// TieredStoreImpl: Put and ReservePut (tiered_store_impl.h). A block goes through four
// steps: PreparePut (validate against the namespace), CopyIntoHot (a hot slot, filled
// outside any lock; a reserved block's slot is filled already), WriteColdForPut
// (write-through or no hot room) and PublishLocked (the index), the last two under the
// key's stripe.
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/bulk_copy.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "kv/compaction.h"
#include "storage/checksum.h"
#include "storage/tiered_store_impl.h"

namespace kvtier::storage {

struct TieredStoreImpl::PreparedPut {
  // The payload as contiguous bytes: the caller's, `joined`, or the hot slot's copy.
  // Empty while the payload is still only in BlockPut::pieces (in_pieces).
  std::span<const uint8_t> payload;
  std::string joined;  // pieces concatenated, when contiguous bytes are needed
  bool in_pieces = false;
  uint64_t payload_size = 0;
  uint64_t raw_bytes = 0;  // source-dtype bytes the block represents
  bool write_through = false;
  std::optional<SlotId> slot;  // holds our allocation reference until published
  uint64_t tenant_reserved = 0;  // bytes of the tenant's hot quota held until published
  std::unique_ptr<uint8_t[]> heap;  // a reservation's heap buffer `payload` views
};

// ReservePut's room: a hot slot holding our allocation reference (and the tenant's hot
// quota for it), or a heap buffer when the hot tier had no room. Moved into a
// PreparedPut by the Put that stores it.
class TieredStoreImpl::Reservation final : public PutReservation {
 public:
  Reservation(TieredStoreImpl* store, NsState* ns, uint64_t bytes)
      : store_(store), ns_(ns), bytes_(bytes) {}
  ~Reservation() override {
    if (slot_) store_->hot_->Release(*slot_);
    if (tenant_reserved_ != 0) {
      common::MutexLock lock(&store_->mu_);
      store_->UnreserveTenantHotLocked(ns_, &tenant_reserved_);
    }
  }

  std::span<uint8_t> data() override {
    return {slot_ ? store_->hot_->View(*slot_).data : heap_.get(), bytes_};
  }

  TieredStoreImpl* const store_;
  NsState* const ns_;
  const uint64_t bytes_;
  std::optional<SlotId> slot_;
  uint64_t tenant_reserved_ = 0;
  std::unique_ptr<uint8_t[]> heap_;  // only without a slot
  bool stored_ = false;              // a Put took it (the room is the block's now)
};

namespace {

// FAILED_PRECONDITION naming the first field in which the blob differs from the
// namespace.
absl::Status CheckBlobMatches(const NamespaceOptions& ns, const kv::EncodedInfo& info,
                              bool standalone) {
  const kv::Layout& want = ns.layout;
  if (info.codec != ns.codec) {
    return absl::FailedPreconditionError(absl::StrCat("payload codec ", kv::CodecName(info.codec),
                                                      " differs from namespace codec ",
                                                      kv::CodecName(ns.codec)));
  }
  if (info.layout.num_layers != want.num_layers) {
    return absl::FailedPreconditionError("payload layout.num_layers differs from namespace");
  }
  if (info.layout.num_kv_heads != want.num_kv_heads) {
    return absl::FailedPreconditionError("payload layout.num_kv_heads differs from namespace");
  }
  if (info.layout.head_dim != want.head_dim) {
    return absl::FailedPreconditionError("payload layout.head_dim differs from namespace");
  }
  if (info.layout.dtype != want.dtype) {
    return absl::FailedPreconditionError("payload layout.dtype differs from namespace");
  }
  if (!standalone && info.num_tokens > want.tokens_per_block) {
    return absl::FailedPreconditionError("payload holds more tokens than layout.tokens_per_block");
  }
  return absl::OkStatus();
}

absl::Status CheckKeys(const BlockPut& block) {
  if (block.key.empty() || block.key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key must be 1..", kMaxKeyBytes, " bytes, got ", block.key.size()));
  }
  if (block.parent_key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("parent_key must be at most ", kMaxKeyBytes, " bytes"));
  }
  if (!block.standalone && block.parent_key == block.key) {
    return absl::InvalidArgumentError("parent_key must differ from key");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TieredStoreImpl::Put(std::string_view ns_name, std::span<const BlockPut> blocks) {
  ASSIGN_OR_RETURN(NsState * ns, FindNs(ns_name));
  // Each block's index lookup and insert misses the cache at 10^7 blocks: prefetching a
  // few blocks ahead overlaps those misses with the blocks in between.
  constexpr size_t kAhead = 8;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::string_view next = i + kAhead < blocks.size() ? blocks[i + kAhead].key : "";
    RETURN_IF_ERROR(PutOne(ns, blocks[i], i, next));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PutReservation>> TieredStoreImpl::ReservePut(
    std::string_view ns_name, std::string_view parent_key, uint64_t bytes) {
  ASSIGN_OR_RETURN(NsState * ns, FindNs(ns_name));
  if (bytes == 0 || bytes > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a reserved payload must be 1..4 GiB bytes, got ", bytes));
  }
  auto r = std::make_unique<Reservation>(this, ns, bytes);
  // The same room and quota as a Put's hot copy (PutOne).
  RETURN_IF_ERROR(ReserveTenantHot(ns, bytes, /*count_rejection=*/true, parent_key,
                                   &r->tenant_reserved_));
  r->slot_ = AllocSlot(std::max<uint64_t>(ns->slot_bytes, bytes));
  if (r->slot_) {
    hot_->SetPayload(*r->slot_, static_cast<uint32_t>(bytes));
  } else {
    common::MutexLock lock(&mu_);
    UnreserveTenantHotLocked(ns, &r->tenant_reserved_);
    r->heap_.reset(new uint8_t[bytes]);
  }
  return r;
}

absl::Status TieredStoreImpl::PutOne(NsState* ns, const BlockPut& block, size_t position,
                                     std::string_view next) {
  auto* const reserved = static_cast<Reservation*>(block.reservation);
  if (reserved != nullptr &&
      (reserved->store_ != this || reserved->ns_ != ns || reserved->stored_ || block.standalone)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "blocks[", position, "].reservation is not an unused reservation of this namespace"));
  }
  PreparedPut prepared;
  RETURN_IF_ERROR(PreparePut(*ns, block, &prepared));
  {
    // Checked before the hot copy too, so a rejected block demotes nothing.
    common::MutexLock lock(&mu_);
    if (!next.empty()) index_.Prefetch(ns->id, next);
    RETURN_IF_ERROR(CheckPrefixRulesLocked(*ns, block, position));
  }
  if (reserved != nullptr) {
    // The payload is in its room already: the room becomes the block's.
    prepared.slot = std::exchange(reserved->slot_, std::nullopt);
    prepared.tenant_reserved = std::exchange(reserved->tenant_reserved_, 0);
    reserved->stored_ = true;
    if (!prepared.slot) prepared.heap = std::move(reserved->heap_);
  } else if (!block.standalone) {
    // Within the tenant's hot quota first: its own blocks make the room.
    RETURN_IF_ERROR(ReserveTenantHot(ns, prepared.payload_size, /*count_rejection=*/true,
                                     block.parent_key, &prepared.tenant_reserved));
  }
  if (reserved == nullptr) CopyIntoHot(*ns, block, &prepared);
  if (!prepared.slot && prepared.tenant_reserved != 0) {
    common::MutexLock lock(&mu_);
    UnreserveTenantHotLocked(ns, &prepared.tenant_reserved);
  }
  bool stale_cold_record;
  {
    common::MutexLock stripe(&Stripe(ns->id, block.key));
    absl::Status rules;
    {
      // Again under the stripe: a concurrent Put of the key may have stored it meanwhile,
      // or DropNamespace started (it waits for every stripe before it collects blocks).
      common::MutexLock lock(&mu_);
      rules = ns->dropped ? absl::NotFoundError(absl::StrCat("namespace '", ns->opts.name,
                                                             "' was dropped"))
                          : CheckPrefixRulesLocked(*ns, block, position);
    }
    absl::StatusOr<std::optional<uint32_t>> stored =
        rules.ok() ? WriteColdForPut(*ns, block, prepared)
                   : absl::StatusOr<std::optional<uint32_t>>(rules);
    if (!stored.ok()) {
      // Nothing was published: the slot goes back, the index is untouched.
      if (prepared.slot) hot_->Release(*prepared.slot);
      if (prepared.tenant_reserved != 0) {
        common::MutexLock lock(&mu_);
        UnreserveTenantHotLocked(ns, &prepared.tenant_reserved);
      }
      return stored.status();
    }
    common::MutexLock lock(&mu_);
    UnreserveTenantHotLocked(ns, &prepared.tenant_reserved);
    stale_cold_record = PublishLocked(ns, block, prepared, *stored);
  }
  if (stale_cold_record) RETURN_IF_ERROR(DropStaleCold(*ns, block.key));
  DemoteIfSynchronous();
  LimitUnflushed();
  EnforceColdCapacity();
  return absl::OkStatus();
}

absl::Status TieredStoreImpl::CheckPrefixRulesLocked(const NsState& ns, const BlockPut& block,
                                                     size_t position) const {
  if (block.standalone) return absl::OkStatus();  // not part of the prefix tree
  const bool root = block.parent_key.empty();
  if (root != (block.block_index == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("blocks[", position, "].block_index is ", block.block_index,
                     root ? " but the block has no parent_key (only block 0 has none)"
                          : " but the block has a parent_key (block 0 has none)"));
  }
  if (!root) {
    // A parent this node does not hold is fine: in a cluster it lives on another node.
    const BlockId parent = index_.Find(ns.id, block.parent_key);
    if (parent != kNoEntry && index_.at(parent).resident() &&
        !(index_.at(parent).flags & Entry::kStandalone) &&
        block.block_index != index_.at(parent).block_index + 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("blocks[", position, "].block_index is ", block.block_index,
                       " but its parent holds block_index ", index_.at(parent).block_index,
                       " (a child's block_index is its parent's + 1)"));
    }
  }
  const BlockId id = index_.Find(ns.id, block.key);
  if (id != kNoEntry && index_.at(id).resident() && !(index_.at(id).flags & Entry::kStandalone)) {
    const Entry& e = index_.at(id);
    const std::string_view have =
        e.parent == kNoEntry ? std::string_view() : index_.key(e.parent);
    if (have != block.parent_key) {
      return absl::FailedPreconditionError(absl::StrCat(
          "blocks[", position, "].parent_key differs from the parent the stored key has (",
          have.empty() ? "none" : "another key", "): a key never changes its parent"));
    }
  }
  return absl::OkStatus();
}

absl::Status TieredStoreImpl::PreparePut(const NsState& ns, const BlockPut& block,
                                         PreparedPut* p) const {
  RETURN_IF_ERROR(CheckKeys(block));
  // A payload given as pieces is copied once, straight into the hot slot (`payload` then
  // views the slot); it is joined only when it must be contiguous without a hot copy.
  p->in_pieces = block.reservation == nullptr && block.payload.empty() && !block.pieces.empty();
  if (p->in_pieces && block.standalone) {
    p->joined = JoinPieces(block.pieces);
    p->in_pieces = false;
  }
  p->payload = block.reservation != nullptr ? block.reservation->data()
                                             : kv::AsBytes(p->joined.empty() ? block.payload
                                                                             : p->joined);
  p->payload_size = p->in_pieces ? PiecesSize(block.pieces) : p->payload.size();
  // A standalone entry may be a compacted sequence: a compaction header (kept positions)
  // around an ordinary codec blob, which is what is checked against the namespace.
  std::span<const uint8_t> blob = p->payload;
  if (block.standalone && kv::IsCompactedEntry(p->payload)) {
    absl::StatusOr<kv::CompactedEntry> entry = kv::ParseCompactedEntry(p->payload);
    if (!entry.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("payload is not a valid compacted entry: ", entry.status().message()));
    }
    blob = entry->blob;
  }
  absl::StatusOr<kv::EncodedInfo> info =
      p->in_pieces ? ParsePiecesHeader(block.pieces) : kv::ParseHeader(blob);
  if (!info.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload is not a valid encoded block: ", info.status().message()));
  }
  RETURN_IF_ERROR(CheckBlobMatches(ns.opts, *info, block.standalone));
  if (p->payload_size > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError("payload larger than 4 GiB");
  }
  p->raw_bytes = info->raw_bytes;
  p->write_through = ns.opts.write_through || block.standalone;
  return absl::OkStatus();
}

void TieredStoreImpl::CopyIntoHot(const NsState& ns, const BlockPut& block, PreparedPut* p) {
  if (!block.standalone) p->slot = AllocSlot(std::max<uint64_t>(ns.slot_bytes, p->payload_size));
  if (!p->slot) {
    if (p->in_pieces) {
      p->joined = JoinPieces(block.pieces);  // no hot room: the cold write needs it contiguous
      p->payload = kv::AsBytes(p->joined);
    }
    return;
  }
  hot_->SetPayload(*p->slot, static_cast<uint32_t>(p->payload_size));
  uint8_t* const dst = hot_->View(*p->slot).data;
  if (p->in_pieces) {
    uint8_t* o = dst;
    for (std::string_view piece : block.pieces) {
      if (piece.empty()) continue;
      common::BulkCopy(o, piece.data(), piece.size());
      o += piece.size();
    }
    // Our allocation reference keeps the slot ours until it is published.
    p->payload = std::span<const uint8_t>(dst, p->payload_size);
  } else {
    common::BulkCopy(dst, p->payload.data(), p->payload.size());
  }
}

absl::StatusOr<std::optional<uint32_t>> TieredStoreImpl::WriteColdForPut(const NsState& ns,
                                                                         const BlockPut& block,
                                                                         const PreparedPut& p) {
  if (!p.write_through && p.slot) return std::nullopt;
  // A hot-only Put skips the XXH3 pass: it is computed when the block goes cold.
  const uint64_t checksum = PayloadChecksum(p.payload);
  ColdIndexRecord rec;
  rec.ns_id = ns.id;
  rec.key = std::string(block.key);
  rec.parent_key = block.standalone ? "" : std::string(block.parent_key);
  rec.block_index = block.block_index;
  rec.standalone = block.standalone;
  ASSIGN_OR_RETURN(uint32_t stored, cold_->PutBlock(rec, p.payload, checksum, ns.opts.cold_zstd));
  return stored;
}

bool TieredStoreImpl::PublishLocked(NsState* ns, const BlockPut& block, const PreparedPut& p,
                                    std::optional<uint32_t> stored) {
  const BlockId id = index_.FindOrCreate(ns->id, block.key);
  Entry& e = index_.at(id);
  const int64_t pinned_until = (e.flags & Entry::kPinned) ? pins_[id] : 0;  // a re-put keeps it
  bool stale_cold_record = false;
  if (e.flags & Entry::kHot) {
    // Same bytes as before? Only asked when the old copy also has a cold record.
    const HotTier::SlotView old = hot_->View(e.slot);
    const bool same = (e.flags & Entry::kCold) && old.payload_bytes == p.payload.size() &&
                      std::memcmp(old.data, p.payload.data(), p.payload.size()) == 0;
    LeaveHotLocked(id);
    if ((e.flags & Entry::kCold) && !same && !stored) stale_cold_record = true;
  } else if ((e.flags & Entry::kCold) && !stored) {
    stale_cold_record = true;  // cannot tell whether the cold copy matches
  }
  if (stale_cold_record) LeaveColdLocked(id);
  e.block_index = block.block_index;
  e.payload_bytes = static_cast<uint32_t>(p.payload.size());
  if (block.standalone) {
    e.flags |= Entry::kStandalone;
  } else {
    e.flags &= ~Entry::kStandalone;
  }
  const BlockId parent = (block.standalone || block.parent_key.empty())
                             ? kNoEntry
                             : index_.FindOrCreate(ns->id, block.parent_key);
  index_.SetParent(id, parent);
  if (stored) EnterColdLocked(id, *stored, &block);
  TouchLocked(id);
  if (p.slot) {
    EnterHotLocked(id, *p.slot, &block);  // the index takes over the slot's reference
    if (pinned_until != 0) PinLocked(id, pinned_until);
  }
  ns->stats.puts++;
  ns->stats.raw_bytes_put += p.raw_bytes;
  ns->stats.encoded_bytes_put += p.payload.size();
  return stale_cold_record;
}

absl::Status TieredStoreImpl::DropStaleCold(const NsState& ns, std::string_view key) {
  // The old cold record holds different bytes; drop it rather than serve them.
  common::MutexLock stripe(&Stripe(ns.id, key));
  bool still_stale;
  {
    common::MutexLock lock(&mu_);
    const BlockId id = index_.Find(ns.id, key);
    still_stale = id == kNoEntry || !(index_.at(id).flags & Entry::kCold);
  }
  if (still_stale) RETURN_IF_ERROR(cold_->DeleteBlock(ns.id, key));
  return absl::OkStatus();
}

}  // namespace kvtier::storage
