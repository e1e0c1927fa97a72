#include "storage/tiered_store.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "storage/hot_tier.h"
#include "storage/rocksdb_cold_tier.h"
#include "storage/tiered_store_impl.h"

namespace kvtier::storage {

const char* TierName(Tier tier) {
  switch (tier) {
    case Tier::kNone:
      return "none";
    case Tier::kHot:
      return "hot";
    case Tier::kCold:
      return "cold";
  }
  return "none";
}

uint64_t PiecesSize(std::span<const std::string_view> pieces) {
  uint64_t n = 0;
  for (std::string_view p : pieces) n += p.size();
  return n;
}

std::string JoinPieces(std::span<const std::string_view> pieces) {
  std::string out;
  out.reserve(PiecesSize(pieces));
  for (std::string_view p : pieces) out.append(p);
  return out;
}

absl::StatusOr<kv::EncodedInfo> ParsePiecesHeader(std::span<const std::string_view> pieces) {
  std::array<uint8_t, kv::kEncodedHeaderBytes> header;
  size_t copied = 0;
  for (std::string_view p : pieces) {
    if (copied == header.size()) break;
    const size_t n = std::min(p.size(), header.size() - copied);
    std::memcpy(header.data() + copied, p.data(), n);
    copied += n;
  }
  return kv::ParseHeaderPrefix(std::span<const uint8_t>(header.data(), copied), PiecesSize(pieces));
}

bool IsValidName(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameBytes) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '/' || c == '-';
    if (!ok) return false;
  }
  return true;
}

namespace {

bool ValidCodec(kv::CodecId codec) {
  for (kv::CodecId c : kv::AllCodecs()) {
    if (c == codec) return true;
  }
  return false;
}

}  // namespace

absl::Status NamespaceOptions::Validate() const {
  if (!IsValidName(name)) {
    return absl::InvalidArgumentError(absl::StrCat("name must be 1..", kMaxNameBytes,
                                                   " chars of [A-Za-z0-9._/-], got '", name, "'"));
  }
  if (!IsValidName(tenant)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tenant must be 1..", kMaxNameBytes, " chars of [A-Za-z0-9._/-], got '", tenant, "'"));
  }
  if (model_id.size() > kMaxModelIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("model_id longer than ", kMaxModelIdBytes));
  }
  RETURN_IF_ERROR(layout.Validate());
  if (sink_blocks > kMaxSinkBlocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("sink_blocks must be at most ", kMaxSinkBlocks, ", got ", sink_blocks));
  }
  if (!ValidCodec(codec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("codec id ", static_cast<int>(codec), " is unknown"));
  }
  if ((codec == kv::CodecId::kFp16 && layout.dtype != kv::Dtype::kFp16) ||
      (codec == kv::CodecId::kBf16 && layout.dtype != kv::Dtype::kBf16)) {
    return absl::InvalidArgumentError(absl::StrCat("codec ", kv::CodecName(codec),
                                                   " does not match layout dtype ",
                                                   kv::DtypeName(layout.dtype)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TieredStore>> TieredStore::Open(const StoreOptions& options) {
  RETURN_IF_ERROR(TieredStoreImpl::ValidateOptions(options));
  ColdTierOptions cold_options;
  cold_options.dir = options.data_dir;
  cold_options.sync_writes = options.cold_sync;
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
