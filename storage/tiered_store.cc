#include "storage/tiered_store.h"

#include <algorithm>
#include <utility>

#include "common/logging.h"
#include "common/status_macros.h"
#include "storage/hot_tier.h"
#include "storage/rocksdb_cold_tier.h"
#include "storage/tiered_store_impl.h"

namespace kvtier::storage {

absl::StatusOr<std::unique_ptr<TieredStore>> TieredStore::Open(const StoreOptions& options) {
  RETURN_IF_ERROR(TieredStoreImpl::ValidateOptions(options));
  ColdTierOptions cold_options;
  cold_options.dir = options.data_dir;
  cold_options.sync_writes = options.cold_sync;
  cold_options.direct_reads = options.cold_direct_reads;
  // Slack over the capacity: the store evicts by stored bytes after a demotion lands,
  // extents round up to 4 KiB, and free ranges fragment. 1/8 (at least 64 MiB) keeps the
  // directory within the 1.3x of issue 16 (docs/durability.md, "Cold tier disk under churn").
  cold_options.slab_bytes = options.cold_capacity_bytes +
                            std::max<uint64_t>(options.cold_capacity_bytes / 8, 64ull << 20);
  ASSIGN_OR_RETURN(std::unique_ptr<RocksDbColdTier> cold, RocksDbColdTier::Open(cold_options));
  return Open(options, std::move(cold));
}

absl::StatusOr<std::unique_ptr<TieredStore>> TieredStore::Open(const StoreOptions& options,
                                                               std::unique_ptr<ColdTier> cold) {
  KVTIER_CHECK(cold != nullptr) << "TieredStore::Open needs a cold tier";
  RETURN_IF_ERROR(TieredStoreImpl::ValidateOptions(options));
  ASSIGN_OR_RETURN(std::unique_ptr<HotTier> hot,
                   HotTier::Create(options.hot_capacity_bytes, options.hot_allocator));
  auto store = std::make_unique<TieredStoreImpl>(options, std::move(hot), std::move(cold));
  RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<TieredStore>(std::move(store));
}

}  // namespace kvtier::storage
