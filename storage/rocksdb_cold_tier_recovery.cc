// RocksDbColdTier's recovery from the slab (storage/rocksdb_cold_tier.h "Recovery";
// docs/recovery.md): the rebuild at open and RecoverOnline.
#include "storage/rocksdb_cold_tier.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "storage/cold_record.h"
#include "storage/rocksdb_cold_tier_records.h"
#include "storage/slab_file.h"
#include "storage/slab_scan.h"

namespace kvtier::storage {
namespace {

// Whether the extent at `offset` holds the block value of (ns_id, key) that `record`
// names: its header parses and matches. A cheap test used at open only.
bool ExtentHolds(const SlabFile& slab, uint64_t offset, uint32_t ns_id, std::string_view key,
                 const ColdIndexRecord& record) {
  std::string prefix;
  const uint64_t n = std::min<uint64_t>(record.stored_bytes, SlabFile::kUnitBytes);
  if (!slab.Read(offset, n, &prefix).ok()) return false;
  absl::StatusOr<ColdRecordHeader> h = ParseColdRecordHeader(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(prefix.data()), prefix.size()));
  return h.ok() && h->record.ns_id == ns_id && h->record.key == key &&
         h->record.checksum == record.checksum &&
         h->record.payload_bytes == record.payload_bytes &&
         h->record.stored_bytes == record.stored_bytes;
}

}  // namespace

absl::Status RocksDbColdTier::SyncNamespaces(const ColdMeta& meta) {
  // cold.meta is written before the database (PutNamespace, DeleteNamespace), so it is
  // the newer of the two: the database follows it.
  std::map<uint32_t, std::string> in_db;
  RETURN_IF_ERROR(ForEachNamespace(
      [&](uint32_t id, std::string_view spec) { in_db.emplace(id, std::string(spec)); }));
  rocksdb::WriteBatch batch;
  for (const auto& [id, spec] : meta.namespaces) {
    auto it = in_db.find(id);
    if (it != in_db.end() && it->second == spec) continue;
    RETURN_IF_ERROR(FromRocks(batch.Put(meta_cf_, BlockKey(id, "", kNamespacePrefix), spec),
                              "put namespace"));
    ++recovery_.namespaces_recreated;
  }
  for (const auto& [id, spec] : in_db) {
    if (meta.namespaces.contains(id)) continue;
    RETURN_IF_ERROR(
        FromRocks(batch.Delete(meta_cf_, BlockKey(id, "", kNamespacePrefix)), "drop namespace"));
  }
  {
    common::MutexLock lock(&meta_mu_);
    meta_.namespaces = meta.namespaces;
  }
  if (batch.Count() == 0) return absl::OkStatus();
  KVTIER_LOG(WARNING) << "cold tier " << options_.dir << ": " << batch.Count()
                      << " namespace record(s) of the database differed from " << kMetaFileName
                      << "; rewritten from it";
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Write(wo, &batch), "rewrite namespaces");
}

absl::Status RocksDbColdTier::Recover(const std::optional<ColdMeta>& meta) {
  const absl::Time start = absl::Now();
  KVTIER_LOG(WARNING) << "cold tier " << options_.dir << ": rebuilding the index from "
                      << kSlabFileName << " (" << recovery_.scan_reason << ")";
  ASSIGN_OR_RETURN(SlabScan scan, ScanSlab(*slab_));
  // Namespaces: cold.meta when it is intact, else what the database still has.
  ColdMeta specs;
  if (meta) {
    specs = *meta;
  } else {
    RETURN_IF_ERROR(ForEachNamespace(
        [&](uint32_t id, std::string_view spec) { specs.namespaces.emplace(id, spec); }));
  }
  RETURN_IF_ERROR(SyncNamespaces(specs));
  // The block of each key: its highest-seq verified copy in a known namespace.
  std::vector<uint64_t> kills;
  absl::flat_hash_map<std::string, size_t> best;
  for (size_t i = 0; i < scan.extents.size(); ++i) {
    const ColdIndexRecord& r = scan.extents[i].header.record;
    if (!specs.namespaces.contains(r.ns_id)) {
      ++recovery_.orphan_blocks;
      kills.push_back(scan.extents[i].offset);
      continue;
    }
    if (r.key.empty() || r.parent_key.size() > 255) {
      ++recovery_.damaged_extents;
      kills.push_back(scan.extents[i].offset);
      continue;
    }
    auto [it, inserted] = best.try_emplace(IndexKey(r.ns_id, r.key), i);
    if (inserted) continue;
    ++recovery_.stale_copies;
    if (scan.extents[it->second].header.seq < scan.extents[i].header.seq) {
      kills.push_back(scan.extents[it->second].offset);
      it->second = i;
    } else {
      kills.push_back(scan.extents[i].offset);
    }
  }
  recovery_.damaged_extents += scan.damaged.size() + scan.damaged_headers;
  for (const SlabFile::Extent& e : scan.damaged) kills.push_back(e.offset);
  // Kill the losers first: a later scan must not find them whatever happens next.
  for (uint64_t offset : kills) {
    RETURN_IF_ERROR(slab_->Write(offset, kColdRecordKilled, false));
  }
  if (!kills.empty()) RETURN_IF_ERROR(slab_->Sync());
  // The index records: exactly the chosen extents.
  absl::flat_hash_map<std::string, std::string> in_db;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), meta_cf_));
    const std::string prefix(1, kBlockIndexPrefix);
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      in_db.emplace(it->key().ToString(), it->value().ToString());
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "scan block index"));
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::WriteBatch batch;
  auto flush_batch = [&](size_t at_least) -> absl::Status {
    if (batch.Count() < at_least || batch.Count() == 0) return absl::OkStatus();
    RETURN_IF_ERROR(FromRocks(db_->Write(wo, &batch), "rewrite block index"));
    batch.Clear();
    return absl::OkStatus();
  };
  std::vector<SlabFile::Extent> used;
  used.reserve(best.size());
  for (const auto& [key, i] : best) {
    const ScannedExtent& e = scan.extents[i];
    const std::string value = EncodeIndex(e.header.record, e.offset);
    used.push_back({e.offset, e.header.record.stored_bytes});
    auto it = in_db.find(key);
    if (it != in_db.end()) {
      const bool same = it->second == value;
      in_db.erase(it);
      if (same) continue;
    }
    RETURN_IF_ERROR(FromRocks(batch.Put(meta_cf_, key, value), "put block index"));
    ++recovery_.records_recreated;
    RETURN_IF_ERROR(flush_batch(1 << 14));
  }
  for (const auto& [key, value] : in_db) {  // naming no verified extent
    RETURN_IF_ERROR(FromRocks(batch.Delete(meta_cf_, key), "drop block index"));
    ++recovery_.records_dropped;
    RETURN_IF_ERROR(flush_batch(1 << 14));
  }
  RETURN_IF_ERROR(flush_batch(0));
  std::sort(used.begin(), used.end(),
            [](const SlabFile::Extent& a, const SlabFile::Extent& b) { return a.offset < b.offset; });
  RETURN_IF_ERROR(slab_->Reset(used));
  blocks_.store(static_cast<int64_t>(used.size()));
  next_seq_.store(std::max(next_seq_.load(), scan.max_seq + 1));
  recovery_.slab_scanned = true;
  recovery_.scan_bytes = scan.bytes;
  recovery_.blocks_indexed = used.size();
  recovery_.scan_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const double secs = std::max(recovery_.scan_seconds, 1e-9);
  KVTIER_LOG(WARNING) << "cold tier " << options_.dir << ": index rebuilt from "
                      << kSlabFileName << ": " << scan.bytes << " bytes in "
                      << recovery_.scan_seconds << " s ("
                      << static_cast<double>(scan.bytes) / secs / 1e9 << " GB/s, "
                      << static_cast<double>(scan.extents.size()) / secs << " blocks/s); "
                      << recovery_.blocks_indexed << " blocks indexed, "
                      << recovery_.records_recreated << " records re-created, "
                      << recovery_.records_dropped << " dropped; "
                      << recovery_.damaged_extents << " damaged extent(s), "
                      << recovery_.stale_copies << " stale copies, " << recovery_.orphan_blocks
                      << " orphan block(s) freed; " << scan.killed_headers
                      << " deleted extent(s) skipped; " << recovery_.namespaces_recreated
                      << " namespace(s) re-created";
  return absl::OkStatus();
}

absl::Status RocksDbColdTier::RebuildSlab() {
  struct Used {
    SlabFile::Extent extent;
    std::string db_key;
    ColdIndexRecord record;
  };
  std::vector<Used> used;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), meta_cf_));
    const std::string prefix(1, kBlockIndexPrefix);
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      Used u;
      if (!ParseIndex(std::string_view(it->value().data(), it->value().size()), &u.record,
                      &u.extent.offset)
               .ok()) {
        continue;  // ForEachBlock reports it; it names no extent we could trust
      }
      u.extent.bytes = u.record.stored_bytes;
      u.db_key = it->key().ToString();
      used.push_back(std::move(u));
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "scan block index"));
  }
  std::sort(used.begin(), used.end(), [](const Used& a, const Used& b) {
    return a.extent.offset != b.extent.offset ? a.extent.offset < b.extent.offset
                                              : a.db_key < b.db_key;
  });
  // Overlapping extents mean a record whose deletion was lost (see the header): keep
  // the one whose extent holds its block, drop the other record. Reads would never
  // serve the stale one anyway; dropping it keeps the allocator exact.
  std::vector<SlabFile::Extent> kept;
  std::vector<const Used*> kept_by;
  rocksdb::WriteBatch drops;
  for (const Used& u : used) {
    if (u.extent.offset % SlabFile::kUnitBytes != 0 || u.extent.bytes < kColdRecordHeaderBytes ||
        u.db_key.size() < 6) {
      RETURN_IF_ERROR(FromRocks(drops.Delete(meta_cf_, u.db_key), "drop malformed record"));
      continue;
    }
    if (!kept.empty() && u.extent.offset < kept.back().offset + kept.back().bytes) {
      const Used* prev = kept_by.back();
      auto holds = [&](const Used& x) {
        return ExtentHolds(*slab_, x.extent.offset, DecodeNsId(x.db_key.data() + 1),
                           std::string_view(x.db_key).substr(5), x.record);
      };
      if (!holds(*prev) && holds(u)) {
        RETURN_IF_ERROR(FromRocks(drops.Delete(meta_cf_, prev->db_key), "drop stale record"));
        kept.pop_back();
        kept_by.pop_back();
      } else {
        RETURN_IF_ERROR(FromRocks(drops.Delete(meta_cf_, u.db_key), "drop stale record"));
        continue;
      }
      if (!kept.empty() && u.extent.offset < kept.back().offset + kept.back().bytes) {
        RETURN_IF_ERROR(FromRocks(drops.Delete(meta_cf_, u.db_key), "drop stale record"));
        continue;
      }
    }
    kept.push_back(u.extent);
    kept_by.push_back(&u);
  }
  if (drops.Count() > 0) {
    KVTIER_LOG(WARNING) << "cold tier " << options_.dir << ": dropped " << drops.Count()
                        << " index record(s) naming an extent another block holds";
    rocksdb::WriteOptions wo;
    wo.sync = true;
    RETURN_IF_ERROR(FromRocks(db_->Write(wo, &drops), "drop stale records"));
  }
  blocks_.store(static_cast<int64_t>(kept.size()));
  return slab_->Reset(kept);
}

absl::StatusOr<ColdRecoverReport> RocksDbColdTier::RecoverOnline(ColdRecoverMode mode,
                                                                 const ColdRecoverHooks& hooks) {
  const absl::Time start = absl::Now();
  const bool rebuild = mode == ColdRecoverMode::kRebuild;
  ColdRecoverReport report;
  // Everything up to `critical` runs alongside Puts and Deletes, so what it saw may be
  // stale by then: `critical` reads again each record and extent it acts on.
  ASSIGN_OR_RETURN(SlabScan scan, ScanSlab(*slab_));
  report.scan_bytes = scan.bytes;
  report.extents_scanned = scan.extents.size();
  report.deleted_extents = scan.killed_headers;
  absl::flat_hash_map<uint64_t, size_t> scanned_at;
  scanned_at.reserve(scan.extents.size());
  for (size_t i = 0; i < scan.extents.size(); ++i) scanned_at.emplace(scan.extents[i].offset, i);
  auto holds = [](const ColdRecordHeader& h, const ColdIndexRecord& r) {
    return h.record.ns_id == r.ns_id && h.record.key == r.key &&
           h.record.checksum == r.checksum && h.record.stored_bytes == r.stored_bytes &&
           h.record.payload_bytes == r.payload_bytes;
  };
  // Whether the extent a record names holds its block (the scan's view, else read again).
  auto verified = [&](const ColdIndexRecord& rec, uint64_t offset) -> absl::StatusOr<bool> {
    auto at = scanned_at.find(offset);
    if (at != scanned_at.end() && holds(scan.extents[at->second].header, rec)) return true;
    absl::StatusOr<ColdRecordHeader> h = VerifyExtent(*slab_, offset);
    if (!h.ok() && !absl::IsDataLoss(h.status()) && !absl::IsNotFound(h.status())) {
      return h.status();
    }
    return h.ok() && holds(*h, rec);
  };
  // The index as it is now: which records the blocks back (counted, never changed), and
  // which keys have a record at all. A record whose extent does not verify may have been
  // deleted or put again since the iterator's snapshot: `critical` looks at it again.
  absl::flat_hash_map<std::string, uint64_t> named;  // index key -> offset
  std::vector<std::string> suspects;                  // index keys
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), meta_cf_));
    const std::string prefix(1, kBlockIndexPrefix);
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      ColdIndexRecord rec;
      uint64_t offset = 0;
      if (it->key().size() < 6 ||
          !ParseIndex(std::string_view(it->value().data(), it->value().size()), &rec, &offset)
               .ok()) {
        suspects.push_back(it->key().ToString());
        continue;
      }
      rec.ns_id = DecodeNsId(it->key().data() + 1);
      rec.key.assign(it->key().data() + 5, it->key().size() - 5);
      ASSIGN_OR_RETURN(const bool ok, verified(rec, offset));
      if (ok) {
        ++report.records_verified;
      } else {
        suspects.push_back(it->key().ToString());
      }
      named.emplace(it->key().ToString(), offset);
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "scan block index"));
  }
  // Candidates: verified extents no record named, and damaged extents.
  std::vector<size_t> unnamed;
  for (size_t i = 0; i < scan.extents.size(); ++i) {
    const ColdIndexRecord& r = scan.extents[i].header.record;
    auto n = named.find(IndexKey(r.ns_id, r.key));
    if (n == named.end() || n->second != scan.extents[i].offset) unnamed.push_back(i);
  }
  absl::flat_hash_map<std::string, uint64_t>().swap(named);

  // The database's namespace records, then cold.meta's specs (written first: a namespace
  // write under way shows in `specs_before`, and is at worst written again below).
  auto read_db_namespaces = [&](std::map<uint32_t, std::string>* in_db) {
    in_db->clear();
    return ForEachNamespace(
        [&](uint32_t id, std::string_view spec) { in_db->emplace(id, std::string(spec)); });
  };
  std::map<uint32_t, std::string> in_db;
  RETURN_IF_ERROR(read_db_namespaces(&in_db));
  std::map<uint32_t, std::string> specs_before;
  {
    common::MutexLock lock(&meta_mu_);
    specs_before = meta_.namespaces;
  }

  // The reconcile: no Put, Delete or namespace write runs (hooks.exclusive). Its cost is
  // in the candidates, not in the index size (the database is read only for them).
  auto critical = [&]() -> absl::Status {
    std::map<uint32_t, std::string> specs;
    {
      common::MutexLock lock(&meta_mu_);
      specs = meta_.namespaces;
    }
    // A namespace was registered or dropped since: read the database's records again.
    if (specs != specs_before) RETURN_IF_ERROR(read_db_namespaces(&in_db));
    {
      // Namespace records: the database follows cold.meta (written first).
      rocksdb::WriteBatch batch;
      for (const auto& [id, spec] : specs) {
        auto it = in_db.find(id);
        if (it != in_db.end() && it->second == spec) continue;
        ++report.namespaces_recreated;
        RETURN_IF_ERROR(FromRocks(batch.Put(meta_cf_, BlockKey(id, "", kNamespacePrefix), spec),
                                  "put namespace"));
      }
      if (rebuild && batch.Count() > 0) {
        rocksdb::WriteOptions wo;
        wo.sync = true;
        RETURN_IF_ERROR(FromRocks(db_->Write(wo, &batch), "rewrite namespaces"));
      }
    }
    // The records that did not verify in the pass, as they are now: one deleted since is
    // not counted, one put again is verified against its new extent.
    for (const std::string& key : suspects) {
      std::string value;
      const rocksdb::Status got = db_->Get(rocksdb::ReadOptions(), meta_cf_, key, &value);
      if (got.IsNotFound()) continue;
      if (!got.ok()) return FromRocks(got, "get block index");
      ColdIndexRecord rec;
      uint64_t offset = 0;
      bool ok = false;
      if (key.size() >= 6 && ParseIndex(value, &rec, &offset).ok()) {
        rec.ns_id = DecodeNsId(key.data() + 1);
        rec.key = key.substr(5);
        ASSIGN_OR_RETURN(ok, verified(rec, offset));
      }
      ++(ok ? report.records_verified : report.damaged_records);
    }
    std::vector<uint64_t> kills;
    absl::flat_hash_map<std::string, ColdRecordHeader> lost;  // index key -> newest copy
    absl::flat_hash_map<std::string, uint64_t> lost_at;
    for (size_t i : unnamed) {
      const ScannedExtent& e = scan.extents[i];
      const ColdIndexRecord& r = e.header.record;
      const std::string key = IndexKey(r.ns_id, r.key);
      // The key's record now (a Put may have written one since).
      std::string value;
      const rocksdb::Status got = db_->Get(rocksdb::ReadOptions(), meta_cf_, key, &value);
      if (!got.ok() && !got.IsNotFound()) return FromRocks(got, "get block index");
      ColdIndexRecord rec;
      uint64_t rec_offset = 0;
      const bool has_record = got.ok();
      const bool parsed = has_record && ParseIndex(value, &rec, &rec_offset).ok();
      if (parsed && rec_offset == e.offset) continue;        // its own record's (now)
      if (!slab_->IsFree(e.offset, r.stored_bytes)) continue;  // in use by another
      absl::StatusOr<ColdRecordHeader> now = VerifyExtent(*slab_, e.offset);
      if (!now.ok() || now->seq != e.header.seq) continue;  // killed or reused since
      if (!specs.contains(r.ns_id)) {
        ++report.orphan_blocks;
        kills.push_back(e.offset);
        continue;
      }
      if (has_record) {
        // A verified record is the block (this copy is older or was never acknowledged);
        // a damaged one is left to the read path (never changed here).
        rec.ns_id = r.ns_id;
        rec.key = r.key;
        bool ok = false;
        if (parsed) {
          ASSIGN_OR_RETURN(ok, verified(rec, rec_offset));
        }
        if (ok) {
          ++report.stale_copies;
          kills.push_back(e.offset);
        }
        continue;
      }
      if (r.key.empty() || r.parent_key.size() > 255) {
        ++report.damaged_extents;
        kills.push_back(e.offset);
        continue;
      }
      auto [it, inserted] = lost.try_emplace(key, *now);
      if (!inserted) {
        ++report.stale_copies;
        if (it->second.seq < now->seq) {
          kills.push_back(lost_at[key]);
          it->second = *now;
        } else {
          kills.push_back(e.offset);
          continue;
        }
      }
      lost_at[key] = e.offset;
    }
    for (const SlabFile::Extent& d : scan.damaged) {
      if (!slab_->IsFree(d.offset, SlabFile::kUnitBytes)) continue;  // a record's: counted
      absl::StatusOr<ColdRecordHeader> now = VerifyExtent(*slab_, d.offset);
      if (!absl::IsDataLoss(now.status())) continue;  // killed or rewritten since
      ++report.damaged_extents;
      kills.push_back(d.offset);
    }
    report.damaged_extents += scan.damaged_headers;  // no scan adopts those: nothing to kill
    // Keys the caller holds a newer copy of (or whose namespace is going) stay out.
    std::vector<std::pair<std::string, ColdRecordHeader>> adopt;
    adopt.reserve(lost.size());
    for (auto& [key, h] : lost) {
      if (hooks.adopt && !hooks.adopt(h.record)) {
        ++report.stale_copies;
        kills.push_back(lost_at[key]);
        continue;
      }
      adopt.emplace_back(key, h);
    }
    report.records_recreated = adopt.size();
    if (!rebuild) return absl::OkStatus();

    // Kill the losers first: a later scan must not find them whatever happens next.
    for (uint64_t offset : kills) RETURN_IF_ERROR(Kill(offset));
    if (!kills.empty()) RETURN_IF_ERROR(slab_->Sync());
    rocksdb::WriteBatch batch;
    std::vector<const ColdIndexRecord*> written;
    std::vector<SlabFile::Extent> claimed;
    auto unclaim = [&] {
      for (const SlabFile::Extent& c : claimed) slab_->Free(c.offset, c.bytes);
    };
    for (const auto& [key, h] : adopt) {
      const uint64_t offset = lost_at[key];
      if (!slab_->Claim(offset, h.record.stored_bytes)) continue;  // checked free above
      claimed.push_back({offset, h.record.stored_bytes});
      absl::Status put =
          FromRocks(batch.Put(meta_cf_, key, EncodeIndex(h.record, offset)), "put block index");
      if (!put.ok()) {
        unclaim();
        return put;
      }
      written.push_back(&h.record);
    }
    if (batch.Count() > 0) {
      rocksdb::WriteOptions wo;
      wo.sync = true;
      if (absl::Status st = FromRocks(db_->Write(wo, &batch), "rewrite block index"); !st.ok()) {
        unclaim();
        return st;
      }
    }
    blocks_.fetch_add(static_cast<int64_t>(written.size()), std::memory_order_relaxed);
    report.records_recreated = written.size();
    for (const ColdIndexRecord* r : written) {
      if (hooks.adopted) hooks.adopted(*r);
    }
    // Seqs above every copy seen, so a later re-Put's copy always wins a later scan.
    uint64_t next = next_seq_.load();
    while (next <= scan.max_seq && !next_seq_.compare_exchange_weak(next, scan.max_seq + 1)) {
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(hooks.exclusive ? hooks.exclusive(critical) : critical());
  report.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  KVTIER_LOG(WARNING) << "cold tier " << options_.dir << ": "
                      << (rebuild ? "online rebuild" : "online verify") << " from "
                      << kSlabFileName << ": " << report.scan_bytes << " bytes, "
                      << report.extents_scanned << " extents in " << report.seconds << " s; "
                      << report.records_verified << " records verified, "
                      << report.records_recreated
                      << (rebuild ? " re-created, " : " to re-create, ")
                      << report.damaged_records << " naming a damaged extent; "
                      << report.damaged_extents << " damaged extent(s), "
                      << report.stale_copies << " stale copies, " << report.orphan_blocks
                      << " orphan block(s)" << (rebuild ? " freed; " : " to free; ")
                      << report.namespaces_recreated << " namespace record(s)"
                      << (rebuild ? " re-created" : " to re-create");
  return report;
}

}  // namespace kvtier::storage
