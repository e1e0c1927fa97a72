#include "storage/tiered_store_impl.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "storage/namespace_record.h"

namespace kvtier::storage {

// ---------------------------------------------------------------------------------------
// Setup

TieredStoreImpl::TieredStoreImpl(const StoreOptions& options, std::unique_ptr<HotTier> hot,
                                 std::unique_ptr<ColdTier> cold)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : common::RealClock()),
      hot_(std::move(hot)),
      cold_(std::move(cold)),
      high_bytes_(static_cast<uint64_t>(options.high_watermark * hot_->capacity_bytes())),
      low_bytes_(static_cast<uint64_t>(options.low_watermark * hot_->capacity_bytes())),
      index_([this](BlockId id) {
        mu_.AssertHeld();  // PrefixIndex calls back only from within index_ methods
        UpdateEligibilityLocked(id);
      }),
      policy_(NewEvictionPolicy(options.policy, options.policy_options)),
      tenants_(options.tenant_quotas),
      leases_(options.max_leased_bytes, options.max_leased_bytes_per_tenant,
              LeasedQuotas(options.tenant_quotas)) {}

TieredStoreImpl::~TieredStoreImpl() {
  {
    common::MutexLock lock(&mu_);
    stopping_ = true;
    demote_cv_.SignalAll();
    flush_cv_.SignalAll();
    prefetch_cv_.SignalAll();
  }
  for (std::thread& t : prefetchers_) t.join();
  if (demoter_.joinable()) demoter_.join();
  if (flusher_.joinable()) flusher_.join();
  ReportHotTierGone();
}

void TieredStoreImpl::ReportHotTierGone() {
  if (options_.events == nullptr) return;
  common::MutexLock lock(&mu_);
  // The hot tier ends with the process: its blocks leave it (BlockRemoved CPU, up to
  // kChunk keys an event), so a router does not keep scoring them after a restart.
  constexpr size_t kChunk = 1024;
  std::vector<std::vector<std::string>> by_ns(namespaces_.size());
  auto report = [&](size_t ns, bool last) {
    std::vector<std::string>& keys = by_ns[ns];
    if (keys.empty() || (!last && keys.size() < kChunk)) return;
    const NsState& n = *namespaces_[ns];
    options_.events->Publish(events::BlockEvent::Removed(n.opts.name, n.opts.model_id,
                                                         std::move(keys),
                                                         events::Medium::kCpuPinned));
    keys.clear();
  };
  for (BlockId id = 0; id < index_.id_limit(); ++id) {
    const Entry& e = index_.at(id);
    if (!(e.flags & Entry::kUsed) || !(e.flags & Entry::kHot) || (e.flags & Entry::kStandalone)) {
      continue;
    }
    if (e.ns >= namespaces_.size() || namespaces_[e.ns] == nullptr || namespaces_[e.ns]->quiet) {
      continue;
    }
    by_ns[e.ns].emplace_back(index_.key(id));
    report(e.ns, false);
  }
  for (size_t ns = 0; ns < by_ns.size(); ++ns) report(ns, true);
}

absl::Status TieredStoreImpl::ValidateOptions(const StoreOptions& options) {
  if (!(options.low_watermark > 0 && options.low_watermark <= options.high_watermark &&
        options.high_watermark <= 1.0)) {
    return absl::InvalidArgumentError(
        "watermarks must satisfy 0 < low_watermark <= high_watermark <= 1");
  }
  if (!(options.prefetch_max_hot_fraction > 0 && options.prefetch_max_hot_fraction <= 1.0)) {
    return absl::InvalidArgumentError("prefetch_max_hot_fraction must be in (0, 1]");
  }
  if (options.cold_capacity_bytes == 0) {
    return absl::InvalidArgumentError("cold_capacity_bytes must be positive");
  }
  return ValidateTenantQuotas(options.tenant_quotas);
}

absl::Status TieredStoreImpl::Init() {
  RETURN_IF_ERROR(Recover());
  if (options_.background_demotion) demoter_ = std::thread([this] { BackgroundLoop(); });
  StartFlusher();
  StartPrefetchers();
  if (options_.warm_from_cold) WarmFromCold();
  return absl::OkStatus();
}

void TieredStoreImpl::WarmFromCold() {
  std::vector<std::pair<NsState*, std::string>> warm;
  {
    common::MutexLock lock(&mu_);
    uint64_t planned = 0;
    // Most recently used cold leaves first is unknown after restart: take index order.
    for (BlockId id = 0; id < index_.id_limit() && planned < low_bytes_; ++id) {
      const Entry& e = index_.at(id);
      if ((e.flags & Entry::kUsed) && (e.flags & Entry::kCold) && !(e.flags & Entry::kStandalone)) {
        NsState* ns = namespaces_[e.ns].get();
        planned += HotArena::RoundUp(ns->slot_bytes);
        if (planned <= low_bytes_) warm.emplace_back(ns, std::string(index_.key(id)));
      }
    }
  }
  for (auto& [ns, key] : warm) {
    (void)Promote(ns, key, false, 0);
  }
}

absl::Status TieredStoreImpl::Recover() {
  std::vector<std::pair<uint32_t, std::string>> specs;
  RETURN_IF_ERROR(cold_->ForEachNamespace(
      [&](BlockId id, std::string_view spec) { specs.emplace_back(id, std::string(spec)); }));
  common::MutexLock lock(&mu_);
  for (auto& [id, spec] : specs) {
    ASSIGN_OR_RETURN(NamespaceOptions opts, ParseNamespace(spec));
    if (id > 0xffff) return absl::DataLossError("namespace id out of range");
    RETURN_IF_ERROR(AddNamespaceLocked(id, opts));
  }
  absl::Status bad;
  uint64_t loaded = 0;
  const int64_t start_ms = clock_->NowMillis();
  // The records come in key order, which scatters every chain over the index. Entries are
  // created in chain order instead (each root, then depth first), so a chain gets
  // consecutive ids as when it was put, and a Lookup walks it with FindAfter's first try
  // instead of a hash probe per key (docs/prefetch.md "Lookup after a restart"). The
  // records are held compactly meanwhile (~130 bytes each with the child lists, freed
  // before serving).
  struct Rec {
    uint16_t ns;
    uint8_t key_len, parent_len;
    bool standalone;
    uint32_t block_index, payload_bytes, stored_bytes;
    char key[kMaxKeyBytes], parent[kMaxKeyBytes];
    std::string_view Key() const { return {key, key_len}; }
    std::string_view Parent() const { return {parent, parent_len}; }
  };
  std::vector<Rec> recs;
  RETURN_IF_ERROR(cold_->ForEachBlock([&](const ColdIndexRecord& rec) {
    if (++loaded % (1u << 20) == 0) {
      KVTIER_LOG(INFO) << "loading the index: " << loaded << " blocks in "
                       << clock_->NowMillis() - start_ms << " ms";
    }
    if (rec.ns_id >= namespaces_.size() || namespaces_[rec.ns_id] == nullptr || rec.key.empty() ||
        rec.key.size() > kMaxKeyBytes || rec.parent_key.size() > kMaxKeyBytes) {
      bad = absl::DataLossError("block index record names an unknown namespace or bad key");
      return;
    }
    Rec& r = recs.emplace_back();
    r.ns = static_cast<uint16_t>(rec.ns_id);
    r.key_len = static_cast<uint8_t>(rec.key.size());
    std::memcpy(r.key, rec.key.data(), rec.key.size());
    const bool linked = !rec.standalone && !rec.parent_key.empty() && rec.parent_key != rec.key;
    r.parent_len = linked ? static_cast<uint8_t>(rec.parent_key.size()) : 0;
    if (linked) std::memcpy(r.parent, rec.parent_key.data(), rec.parent_key.size());
    r.standalone = rec.standalone;
    r.block_index = rec.block_index;
    r.payload_bytes = rec.payload_bytes;
    r.stored_bytes = rec.stored_bytes;
  }));
  RETURN_IF_ERROR(bad);
  // Children lists (first child / next sibling) over record positions; roots are records
  // whose parent has no record.
  constexpr uint32_t kEnd = 0xffffffffu;
  std::vector<uint32_t> first_child(recs.size(), kEnd), next_sibling(recs.size(), kEnd);
  {
    absl::flat_hash_map<std::pair<uint16_t, std::string_view>, uint32_t> pos;
    pos.reserve(recs.size());
    for (uint32_t i = 0; i < recs.size(); ++i) pos.try_emplace({recs[i].ns, recs[i].Key()}, i);
    // Siblings are linked in reverse so that the walk below visits them in record order.
    for (uint32_t i = static_cast<uint32_t>(recs.size()); i-- > 0;) {
      if (recs[i].parent_len == 0) continue;
      const auto it = pos.find(std::make_pair(recs[i].ns, recs[i].Parent()));
      if (it == pos.end()) continue;
      next_sibling[i] = first_child[it->second];
      first_child[it->second] = i;
    }
    std::vector<uint8_t> is_child(recs.size(), 0);
    for (uint32_t i = 0; i < recs.size(); ++i) {
      for (uint32_t c = first_child[i]; c != kEnd; c = next_sibling[c]) is_child[c] = 1;
    }
    std::vector<uint32_t> stack;
    size_t added = 0;
    auto add = [&](const Rec& rec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      ++added;
      const BlockId id = index_.FindOrCreate(rec.ns, rec.Key());
      Entry& e = index_.at(id);
      e.block_index = rec.block_index;
      e.payload_bytes = rec.payload_bytes;
      if (rec.standalone) e.flags |= Entry::kStandalone;
      e.recency = static_cast<uint32_t>(++tick_);
      if (rec.parent_len != 0) index_.SetParent(id, index_.FindOrCreate(rec.ns, rec.Parent()));
      EnterColdLocked(id, rec.stored_bytes);
    };
    for (uint32_t root = 0; root < recs.size(); ++root) {
      if (is_child[root]) continue;
      stack.push_back(root);
      while (!stack.empty()) {
        const uint32_t i = stack.back();
        stack.pop_back();
        add(recs[i]);
        // Last sibling pushed first: the first child is visited next, right after i.
        const size_t mark = stack.size();
        for (uint32_t c = first_child[i]; c != kEnd; c = next_sibling[c]) stack.push_back(c);
        std::reverse(stack.begin() + static_cast<std::ptrdiff_t>(mark), stack.end());
      }
    }
    // A cycle of parent links (a damaged store) has no root: add what is left as found.
    if (added < recs.size()) {
      for (const Rec& rec : recs) {
        const BlockId id = index_.Find(rec.ns, rec.Key());
        if (id == kNoEntry || !index_.at(id).resident()) add(rec);
      }
    }
  }
  std::vector<Rec>().swap(recs);
  KVTIER_LOG(INFO) << "index loaded: " << loaded << " blocks in "
                   << clock_->NowMillis() - start_ms << " ms";
  // Ghosts whose real record never showed up (parent never stored) stay as ghosts: they
  // have children by construction.
  return absl::OkStatus();
}

absl::Status TieredStoreImpl::AddNamespaceLocked(BlockId id, const NamespaceOptions& opts) {
  if (namespaces_.size() <= id) namespaces_.resize(id + 1);
  auto state = std::make_unique<NsState>();
  state->opts = opts;
  state->id = static_cast<uint16_t>(id);
  state->slot_bytes = kv::EncodedSize(opts.codec, opts.layout, opts.layout.tokens_per_block,
                                      opts.keep_sinks ? opts.layout.sink_tokens : 0);
  state->stats.name = opts.name;
  state->stats.tenant = opts.tenant;
  state->stats.codec = opts.codec;
  state->tenant = tenants_.ForTenant(opts.tenant);
  ns_by_name_[opts.name] = static_cast<uint16_t>(id);
  namespaces_[id] = std::move(state);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Namespaces

absl::StatusOr<NamespaceOptions> TieredStoreImpl::RegisterNamespace(const NamespaceOptions& ns) {
  RETURN_IF_ERROR(ns.Validate());
  common::MutexLock ns_write(&ns_write_mu_);  // RecoverCold's reconcile excludes the write
  common::MutexLock lock(&mu_);
  auto it = ns_by_name_.find(ns.name);
  if (it != ns_by_name_.end()) {
    const NamespaceOptions& have = namespaces_[it->second]->opts;
    std::string diff = FirstNamespaceDifference(have, ns);
    if (!diff.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("namespace '", ns.name, "' is registered with a different ", diff));
    }
    return have;
  }
  if (namespaces_.size() > 0xffff) return absl::ResourceExhaustedError("too many namespaces");
  const uint16_t id = static_cast<uint16_t>(namespaces_.size());
  // Namespace writes are rare; holding mu_ over the synced write keeps ids unique.
  RETURN_IF_ERROR(cold_->PutNamespace(id, SerializeNamespace(ns)));
  RETURN_IF_ERROR(AddNamespaceLocked(id, ns));
  return ns;
}

absl::StatusOr<NsState*> TieredStoreImpl::FindNsLocked(std::string_view name) const {
  auto it = ns_by_name_.find(std::string(name));
  if (it == ns_by_name_.end()) {
    return absl::NotFoundError(absl::StrCat("namespace '", Sv(name), "' is not registered"));
  }
  return namespaces_[it->second].get();
}

absl::StatusOr<NsState*> TieredStoreImpl::FindNs(std::string_view name) const {
  common::MutexLock lock(&mu_);
  return FindNsLocked(name);
}

absl::StatusOr<NamespaceOptions> TieredStoreImpl::GetNamespace(std::string_view name) const {
  common::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(NsState * ns, FindNsLocked(name));
  return ns->opts;
}

std::vector<NamespaceOptions> TieredStoreImpl::ListNamespaces() const {
  common::MutexLock lock(&mu_);
  std::vector<NamespaceOptions> out;
  for (const auto& ns : namespaces_) {
    if (ns != nullptr && !ns->dropped) out.push_back(ns->opts);
  }
  std::sort(out.begin(), out.end(),
            [](const NamespaceOptions& a, const NamespaceOptions& b) { return a.name < b.name; });
  return out;
}

// ---------------------------------------------------------------------------------------
// Index helpers and residency transitions

BlockInfo TieredStoreImpl::InfoLocked(BlockId id) const {
  const Entry& e = index_.at(id);
  BlockInfo info;
  info.block_index = e.block_index;
  info.hits = e.hits;
  info.attention = e.attention;
  info.tick = tick_;
  info.payload_bytes = e.payload_bytes;
  info.key_hash = BlockKeyHash(index_.key(id));
  return info;
}

void TieredStoreImpl::TouchLocked(BlockId id) {
  Entry& e = index_.at(id);
  e.recency = static_cast<uint32_t>(++tick_);
  index_.TouchCold(id);
}

void TieredStoreImpl::UpdateEligibilityLocked(BlockId id) {
  Entry& e = index_.at(id);
  bool eligible = (e.flags & Entry::kHot) && !(e.flags & (Entry::kPinned | Entry::kBusy)) &&
                  !leases_.KeepsHot(id) && !UnreadPrefetchLocked(id);
  if (eligible) {
    // The sink rule holds per tier: a sink block (index < sink_blocks) is not demoted
    // while a descendant is hot, and cold eviction never deletes a block with a descendant.
    // A sink whose descendants are all cold may be demoted: it stays resident (cold) and
    // its prefix whole. Counting cold descendants here would keep every conversation's
    // block 0 hot forever and crowd out reusable blocks. Structure-aware policies
    // further take hot leaves only, which implies the sink rule.
    const NsState& ns = *namespaces_[e.ns];
    const bool protected_sink = e.block_index < ns.opts.sink_blocks && e.hot_children() > 0;
    eligible = policy_->structure_aware() ? e.hot_children() == 0 : !protected_sink;
  }
  if (eligible == static_cast<bool>(e.flags & Entry::kEligible)) return;
  if (eligible) {
    e.flags |= Entry::kEligible;
  } else {
    e.flags &= ~Entry::kEligible;
  }
  policy_->OnEligible(id, eligible);
}

void TieredStoreImpl::ReportLocked(BlockId id, bool stored, events::Medium medium,
                                   const BlockPut* origin) {
  if (options_.events == nullptr) return;
  const Entry& e = index_.at(id);
  if (e.flags & Entry::kStandalone) return;
  const NsState& ns = *namespaces_[e.ns];
  if (ns.quiet) return;  // dropped: AllBlocksCleared said it
  std::vector<std::string> keys{std::string(index_.key(id))};
  if (!stored) {
    options_.events->Publish(
        events::BlockEvent::Removed(ns.opts.name, ns.opts.model_id, std::move(keys), medium));
    return;
  }
  std::optional<std::string> parent;
  if (e.parent != kNoEntry) parent.emplace(index_.key(e.parent));
  events::BlockEvent event =
      events::BlockEvent::Stored(ns.opts.name, ns.opts.model_id, std::move(keys),
                                 std::move(parent), ns.opts.layout.tokens_per_block, medium);
  // Reported under mu_: a resident parent's BlockStored has already been published.
  event.parent_pending = e.parent != kNoEntry && !index_.at(e.parent).resident();
  if (origin != nullptr) {
    event.token_ids.assign(origin->token_ids.begin(), origin->token_ids.end());
    if (origin->lora_name) event.lora_name.emplace(*origin->lora_name);
    if (!origin->extra_keys.empty()) {
      event.extra_keys.emplace_back(origin->extra_keys.begin(), origin->extra_keys.end());
    }
  }
  options_.events->Publish(std::move(event));
}

void TieredStoreImpl::EnterHotLocked(BlockId id, uint32_t slot, const BlockPut* origin) {
  Entry& e = index_.at(id);
  KVTIER_CHECK(!(e.flags & Entry::kHot)) << "block already hot";
  const bool was_unflushed = Unflushed(e);
  e.slot = slot;
  const uint32_t payload_bytes = hot_->Own(slot);
  NsState& ns = *namespaces_[e.ns];
  if (!e.resident()) ns.stats.distinct_blocks++;
  ns.stats.hot.blocks++;
  ns.stats.hot.bytes += payload_bytes;
  ns.tenant->hot_used += payload_bytes;
  policy_->OnInsert(id, InfoLocked(id));
  index_.SetHot(id, true);  // re-evaluates the parent
  UpdateEligibilityLocked(id);
  CountDebtLocked(id, was_unflushed);
  ReportLocked(id, true, events::Medium::kCpuPinned, origin);
}

void TieredStoreImpl::LeaveHotLocked(BlockId id) {
  Entry& e = index_.at(id);
  if (!(e.flags & Entry::kHot)) return;
  const bool was_unflushed = Unflushed(e);
  if (e.flags & Entry::kEligible) e.flags &= ~Entry::kEligible;
  policy_->OnRemove(id);
  NsState& ns = *namespaces_[e.ns];
  const uint32_t payload_bytes = hot_->Disown(e.slot);  // freed now unless a reader holds it
  ns.stats.hot.blocks--;
  ns.stats.hot.bytes -= payload_bytes;
  ns.tenant->hot_used -= payload_bytes;
  e.slot = kNoEntry;
  if (e.flags & Entry::kPinned) {
    e.flags &= ~Entry::kPinned;
    pins_.erase(id);
  }
  index_.SetHot(id, false);  // re-evaluates the parent
  if (!e.resident()) ns.stats.distinct_blocks--;
  CountDebtLocked(id, was_unflushed);
  ReportLocked(id, false, events::Medium::kCpuPinned, nullptr);
  OnPrefetchLeftLocked(id, /*removed=*/false);
}

void TieredStoreImpl::EnterColdLocked(BlockId id, uint32_t stored_bytes, const BlockPut* origin) {
  Entry& e = index_.at(id);
  NsState& ns = *namespaces_[e.ns];
  const bool was_cold = e.flags & Entry::kCold;
  const bool was_unflushed = Unflushed(e);
  if (was_cold) {
    ns.stats.cold.bytes -= e.cold_bytes;
    ns.tenant->cold_used -= e.cold_bytes;
    cold_used_ -= e.cold_bytes;
  } else {
    if (!e.resident()) ns.stats.distinct_blocks++;
    ns.stats.cold.blocks++;
  }
  e.flags |= Entry::kCold;
  // Counted as the tier's allocation, so cold_capacity_bytes bounds the disk it uses.
  const auto footprint = static_cast<uint32_t>(cold_->FootprintBytes(stored_bytes));
  e.cold_bytes = footprint;
  ns.stats.cold.bytes += footprint;
  ns.tenant->cold_used += footprint;
  cold_used_ += footprint;
  index_.UpdateColdList(id, false);
  CountDebtLocked(id, was_unflushed);
  if (!was_cold) ReportLocked(id, true, events::Medium::kDisk, origin);
}

void TieredStoreImpl::LeaveColdLocked(BlockId id) {
  Entry& e = index_.at(id);
  if (!(e.flags & Entry::kCold)) return;
  const bool was_unflushed = Unflushed(e);
  NsState& ns = *namespaces_[e.ns];
  ns.stats.cold.blocks--;
  ns.stats.cold.bytes -= e.cold_bytes;
  ns.tenant->cold_used -= e.cold_bytes;
  cold_used_ -= e.cold_bytes;
  e.cold_bytes = 0;
  e.flags &= ~Entry::kCold;
  if (!e.resident()) ns.stats.distinct_blocks--;
  index_.UpdateColdList(id, false);
  CountDebtLocked(id, was_unflushed);
  ReportLocked(id, false, events::Medium::kDisk, nullptr);
}

bool TieredStoreImpl::RemoveLocked(BlockId id) {
  Entry& e = index_.at(id);
  const bool had_cold = e.flags & Entry::kCold;
  LeaveHotLocked(id);
  LeaveColdLocked(id);
  OnPrefetchLeftLocked(id, /*removed=*/true);
  leases_.Forget(id);  // the id may be reused once freed
  index_.MaybeFree(id);
  return had_cold;
}

void TieredStoreImpl::PinLocked(BlockId id, int64_t until_ms) {
  Entry& e = index_.at(id);
  e.flags |= Entry::kPinned;
  pins_[id] = until_ms;
  next_pin_expiry_ms_ = std::min(next_pin_expiry_ms_, until_ms);
  UpdateEligibilityLocked(id);
}

// ---------------------------------------------------------------------------------------
// Admin calls

bool TieredStoreImpl::DeleteOne(NsState* ns, std::string_view key,
                                uint64_t NamespaceStats::*counter, absl::Status* cold_status) {
  common::MutexLock stripe(&Stripe(ns->id, key));
  bool existed = false;
  bool had_cold = false;
  {
    common::MutexLock lock(&mu_);
    const BlockId id = index_.Find(ns->id, key);
    if (id != kNoEntry && (index_.at(id).flags & (Entry::kHot | Entry::kCold))) {
      existed = true;
      ns->stats.*counter += 1;
      had_cold = RemoveLocked(id);
    }
  }
  if (had_cold) {
    absl::Status st = cold_->DeleteBlock(ns->id, key);
    if (!st.ok()) {
      KVTIER_LOG(WARNING) << "cold delete failed: " << st.ToString();
      if (cold_status != nullptr) cold_status->Update(st);
    }
  }
  return existed;
}

absl::StatusOr<uint64_t> TieredStoreImpl::Delete(std::string_view ns_name,
                                                 std::span<const std::string> keys) {
  ASSIGN_OR_RETURN(NsState * ns, FindNs(ns_name));
  uint64_t n = 0;
  for (const std::string& key : keys) {
    if (DeleteOne(ns, key, &NamespaceStats::evictions_admin)) ++n;
  }
  return n;
}

absl::StatusOr<uint64_t> TieredStoreImpl::Unpin(std::string_view ns_name,
                                                std::span<const std::string> keys) {
  common::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(NsState * ns, FindNsLocked(ns_name));
  uint64_t n = 0;
  for (const std::string& key : keys) {
    const BlockId id = index_.Find(ns->id, key);
    if (id == kNoEntry || !(index_.at(id).flags & Entry::kPinned)) continue;
    index_.at(id).flags &= ~Entry::kPinned;
    pins_.erase(id);
    UpdateEligibilityLocked(id);
    ++n;
  }
  MaybeWakeDemoterLocked();
  return n;
}

absl::Status TieredStoreImpl::ReportScores(std::string_view ns_name,
                                           std::span<const std::string> keys,
                                           std::span<const float> scores) {
  if (keys.size() != scores.size()) {
    return absl::InvalidArgumentError("keys and scores must have the same size");
  }
  common::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(NsState * ns, FindNsLocked(ns_name));
  for (size_t i = 0; i < keys.size(); ++i) {
    const BlockId id = index_.Find(ns->id, keys[i]);
    if (id == kNoEntry) continue;
    Entry& e = index_.at(id);
    e.attention += scores[i];
    if (e.flags & Entry::kHot) policy_->OnScore(id, scores[i], InfoLocked(id));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> TieredStoreImpl::Evict(std::string_view ns_name,
                                                std::span<const std::string> keys, bool drop) {
  ASSIGN_OR_RETURN(NsState * ns, FindNs(ns_name));
  // Targets, deepest first so a prefix never loses a block before its descendants.
  std::vector<std::pair<uint32_t, std::string>> targets;  // (depth, key)
  {
    common::MutexLock lock(&mu_);
    absl::flat_hash_set<uint32_t> chosen;
    for (const std::string& key : keys) {
      const BlockId id = index_.Find(ns->id, key);
      if (id != kNoEntry) chosen.insert(id);
    }
    const bool all = keys.empty();
    for (BlockId id = 0; id < index_.id_limit(); ++id) {
      const Entry& e = index_.at(id);
      if (!(e.flags & Entry::kUsed) || e.ns != ns->id || !(e.flags & (Entry::kHot | Entry::kCold)))
        continue;
      uint32_t depth = 0;
      bool selected = all || chosen.contains(id);
      for (uint32_t p = e.parent; p != kNoEntry && depth < (1u << 20); p = index_.at(p).parent) {
        ++depth;
        if (drop && chosen.contains(p)) selected = true;  // descendants go too
      }
      if (!drop && !(e.flags & Entry::kHot)) selected = false;
      if (selected) targets.emplace_back(depth, std::string(index_.key(id)));
    }
  }
  std::sort(targets.begin(), targets.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  uint64_t moved = 0;
  for (const auto& [depth, key] : targets) {
    if (drop) {
      if (DeleteOne(ns, key, &NamespaceStats::evictions_admin)) ++moved;
      continue;
    }
    BlockId id;
    {
      common::MutexLock lock(&mu_);
      id = index_.Find(ns->id, key);
      if (id == kNoEntry || !(index_.at(id).flags & Entry::kHot) ||
          (index_.at(id).flags & Entry::kBusy))
        continue;
      Entry& e = index_.at(id);
      if (e.flags & Entry::kPinned) {
        e.flags &= ~Entry::kPinned;
        pins_.erase(id);
      }
      e.flags |= Entry::kBusy;
      UpdateEligibilityLocked(id);
    }
    if (DemoteMarked(id, DemoteMode::kAdmin) == DemoteResult::kMoved) ++moved;
  }
  return moved;
}

StoreStats TieredStoreImpl::Stats() const {
  common::MutexLock lock(&mu_);
  StoreStats out;
  out.hot_allocator = hot_->allocator_name();
  out.hot_capacity_bytes = hot_->capacity_bytes();
  out.hot_used_bytes = hot_->used_bytes();
  out.cold_capacity_bytes = options_.cold_capacity_bytes;
  out.cold_used_bytes = cold_used_;
  out.index_entries = index_.size();
  out.index_memory_bytes = index_.MemoryBytes();
  out.policy_memory_bytes = policy_->MemoryBytes();
  out.hot_slot_memory_bytes = hot_->MemoryBytes();
  // std::deque: 512-byte blocks (128 ids each) and a map of block pointers.
  out.write_back_memory_bytes = (unflushed_fifo_.size() / 128 + 1) * (512 + sizeof(void*));
  out.leases = leases_.stats();
  out.prefetch = prefetch_stats_;
  out.prefetch.inflight_bytes = prefetch_inflight_bytes_;
  out.prefetch.unread_bytes = prefetch_unread_bytes_;
  out.unflushed_blocks = unflushed_blocks_;
  out.unflushed_bytes = unflushed_bytes_;
  out.max_unflushed_bytes = options_.max_unflushed_bytes;
  out.max_unflushed_blocks = options_.max_unflushed_blocks;
  out.cold_recovery = cold_->recovery();
  for (const auto& ns : namespaces_) {
    if (ns != nullptr && !ns->dropped) out.namespaces.push_back(ns->stats);
  }
  std::sort(out.namespaces.begin(), out.namespaces.end(),
            [](const NamespaceStats& a, const NamespaceStats& b) { return a.name < b.name; });
  tenants_.ForEachSorted([&](const TenantUsage& u) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    TenantStats& t = out.tenants.emplace_back();
    t.tenant = u.quota.tenant;
    t.hot_used_bytes = u.hot_used;
    t.hot_limit_bytes = u.quota.hot_bytes;
    t.cold_used_bytes = u.cold_used;
    t.cold_limit_bytes = u.quota.cold_bytes;
    t.leased_used_bytes = leases_.TenantBytes(u.quota.tenant);
    t.leased_limit_bytes = leases_.TenantLimit(u.quota.tenant);
    t.evictions_caused = u.evictions_caused;
    t.quota_rejections = u.quota_rejections;
  });
  return out;
}

}  // namespace kvtier::storage
