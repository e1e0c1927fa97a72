// ColdTier: the persistent tier behind TieredStore (docs/design.md §4 Tiers and
// eviction). It stores a block's payload together with a small index record, so a
// restart rebuilds the prefix index without reading payloads, and it stores the
// namespace specs. The production implementation is RocksDbColdTier
// (rocksdb_cold_tier.h); tests use the in-memory, fault-injecting FakeColdTier
// (tests/testing/fake_cold_tier.h).
//
// Contract every implementation keeps:
//  - A block's payload and its index record are written, and deleted, atomically.
//  - Every read verifies the payload against the stored PayloadChecksum (checksum.h);
//    a mismatch, or a record that cannot be decoded, is DATA_LOSS and the bytes are never
//    handed out. The record is left in place: the caller decides (TieredStore deletes it).
//  - Errors of the backing store are translated to absl::Status in the implementation:
//    NOT_FOUND (absent), DATA_LOSS (corrupt), UNAVAILABLE (I/O error, busy, timed out:
//    may succeed later), INTERNAL (anything else).
//
// Thread-safe: every method may be called concurrently. Writes of one key are serialized
// by the caller (TieredStore's per-key stripes); the tier need not order them itself.
#ifndef KVTIER_STORAGE_COLD_TIER_H_
#define KVTIER_STORAGE_COLD_TIER_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier::storage {

// What the cold tier remembers about one stored block besides its payload.
struct ColdIndexRecord {
  uint32_t ns_id = 0;
  std::string key;
  std::string parent_key;
  uint32_t block_index = 0;
  uint32_t payload_bytes = 0;  // uncompressed
  uint32_t stored_bytes = 0;   // value bytes on disk (after optional compression)
  uint64_t checksum = 0;       // PayloadChecksum of the uncompressed payload
  bool standalone = false;
};

// What opening a cold tier had to drop or rebuild to start: damaged write-ahead-log
// ranges skipped and their bytes, and, when the index was rebuilt from the slab
// (docs/recovery.md), what that scan found. Zero when nothing was lost or rebuilt.
struct ColdTierRecovery {
  uint64_t wal_dropped_ranges = 0;
  uint64_t wal_dropped_bytes = 0;
  // The slab scan (0 / empty when none ran).
  bool slab_scanned = false;
  std::string scan_reason;           // why the scan ran (a log line's words)
  std::string damaged_db_dir;        // where a damaged database was moved aside, or ""
  uint64_t scan_bytes = 0;           // bytes of slab read
  double scan_seconds = 0;           // the scan and the index rewrite
  uint64_t blocks_indexed = 0;       // blocks in the rebuilt index
  uint64_t records_recreated = 0;    // index records the database had lost (or differed)
  uint64_t records_dropped = 0;      // index records naming no verified extent
  uint64_t damaged_extents = 0;      // header or body failed its checksum: freed
  uint64_t stale_copies = 0;         // older copies of a key (lower seq): freed
  uint64_t orphan_blocks = 0;        // blocks of a namespace with no spec: freed
  uint64_t namespaces_recreated = 0; // namespace specs the database had lost
};

// Recovery on a running tier (ColdTier::RecoverOnline; docs/recovery.md "On demand").
enum class ColdRecoverMode {
  kVerify,   // scan and count what a rebuild would change; change nothing
  kRebuild,  // re-create lost index records and namespace records, free damaged extents
};

// What RecoverOnline found (kVerify: would do; kRebuild: did).
struct ColdRecoverReport {
  uint64_t scan_bytes = 0;           // bytes of slab read
  double seconds = 0;                // the whole call
  uint64_t extents_scanned = 0;      // extents the scan verified (header and body)
  uint64_t records_verified = 0;     // index records whose extent holds their block
  uint64_t records_recreated = 0;    // index records re-created for lost blocks
  uint64_t damaged_extents = 0;      // free space holding a header or body that fails
                                     // its checksum (kRebuild kills those with a header)
  uint64_t damaged_records = 0;      // index records naming an extent that fails: left
                                     // to the read path (a miss, then dropped)
  uint64_t stale_copies = 0;         // verified extents no record names whose key has a
                                     // newer block: freed (killed)
  uint64_t orphan_blocks = 0;        // verified extents of a namespace with no spec: freed
  uint64_t deleted_extents = 0;      // killed headers seen (deleted blocks): left dead
  uint64_t namespaces_recreated = 0; // namespace records the database lacked (or differed)
};

// The caller's side of RecoverOnline, which runs its reconcile inside `exclusive`.
struct ColdRecoverHooks {
  // Runs `critical` while no PutBlock, DeleteBlock, PutNamespace or DeleteNamespace runs
  // or starts (GetBlock and the ForEach* calls may), and returns its status.
  std::function<absl::Status(const std::function<absl::Status()>& critical)> exclusive;
  // Inside `critical`: whether the verified extent of `record` (a key no index record
  // names) should become the key's block again. False (the caller holds a newer copy of
  // the key, or its namespace is going away): the extent is freed as a stale copy.
  // Null: always true.
  std::function<bool(const ColdIndexRecord& record)> adopt;
  // Inside `critical`, kRebuild only: `record` was re-created (durably) and is the
  // key's block now. Null: nothing.
  std::function<void(const ColdIndexRecord& record)> adopted;
};

class ColdTier {
 public:
  // Called with a verified payload (valid only during the call) and its checksum.
  using PayloadSink = std::function<void(std::span<const uint8_t> payload, uint64_t checksum)>;

  virtual ~ColdTier() = default;

  // Writes the block and its index record atomically, replacing any previous record of
  // the key; `record.payload_bytes`, `stored_bytes` and `checksum` are filled in here.
  // `checksum` must be PayloadChecksum(payload). `compress` asks for compression where it
  // pays (the tier may store the raw bytes). Durable against a process crash when it
  // returns. Returns the stored bytes. UNAVAILABLE / INTERNAL when the write fails, in
  // which case the previous record (if any) is unchanged.
  virtual absl::StatusOr<uint32_t> PutBlock(ColdIndexRecord record,
                                            std::span<const uint8_t> payload, uint64_t checksum,
                                            bool compress) = 0;

  // Reads the block, verifies its checksum and calls `sink` once with the verified
  // payload. NOT_FOUND if absent; DATA_LOSS if the record is malformed or the checksum
  // fails (sink is not called, the record stays); UNAVAILABLE / INTERNAL on read errors.
  virtual absl::Status GetBlock(uint32_t ns_id, std::string_view key, const PayloadSink& sink) = 0;

  // Called by MultiGetBlock with key i's verified payload (valid only during the call).
  // When it lies at the start of key i's destination (MultiDestination), it was read
  // there and needs no copy.
  using MultiPayloadSink =
      std::function<void(size_t i, std::span<const uint8_t> payload, uint64_t checksum)>;
  // Where key i's payload may be read to directly (MultiGetBlock may use it as scratch
  // for key i even when it then fails or reads the key another way), or an empty span.
  // Called at most once per key, before any read, from the calling thread.
  using MultiDestination = std::function<std::span<uint8_t>(size_t i)>;

  // Reads the blocks `keys` of namespace `ns_id` as GetBlock reads each one, batched
  // where the tier can (RocksDbColdTier: one index MultiGet, extents read in slab order,
  // adjacent ones in one pread). Returns one status per key, GetBlock's codes; `sink` is
  // called exactly once for each key whose status is OK (in any order, from the calling
  // thread) and never for another. A block that fails its checksum is DATA_LOSS for that
  // key only; the other keys are unaffected. `destination` (may be null): where a
  // payload may be read to directly, saving the sink a copy; its bytes are verified there
  // before `sink` sees them. Default: GetBlock per key, in order, ignoring `destination`.
  virtual std::vector<absl::Status> MultiGetBlock(uint32_t ns_id,
                                                  std::span<const std::string_view> keys,
                                                  const MultiPayloadSink& sink,
                                                  const MultiDestination* destination = nullptr) {
    (void)destination;
    std::vector<absl::Status> out;
    out.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      out.push_back(GetBlock(ns_id, keys[i], [&](std::span<const uint8_t> payload,
                                                 uint64_t checksum) { sink(i, payload, checksum); }));
    }
    return out;
  }

  // Deletes the block and its index record; absent is OK. UNAVAILABLE / INTERNAL.
  virtual absl::Status DeleteBlock(uint32_t ns_id, std::string_view key) = 0;

  // Stores the serialized spec (namespace_record.h) of namespace `ns_id`, durably
  // (synced). UNAVAILABLE / INTERNAL.
  virtual absl::Status PutNamespace(uint32_t ns_id, std::string_view spec) = 0;
  // Deletes the spec of namespace `ns_id`, durably (synced); absent is OK. The caller
  // deletes the namespace's blocks first. UNAVAILABLE / INTERNAL.
  virtual absl::Status DeleteNamespace(uint32_t ns_id) = 0;
  // Calls fn(ns_id, spec) for every stored namespace, in id order. DATA_LOSS on a
  // malformed key; UNAVAILABLE / INTERNAL on read errors.
  virtual absl::Status ForEachNamespace(
      const std::function<void(uint32_t ns_id, std::string_view spec)>& fn) = 0;
  // Calls fn for every block index record (in (ns_id, key) order). DATA_LOSS on a
  // malformed one; UNAVAILABLE / INTERNAL on read errors.
  virtual absl::Status ForEachBlock(const std::function<void(const ColdIndexRecord&)>& fn) = 0;

  // Makes every write so far durable against power loss. UNAVAILABLE / INTERNAL.
  virtual absl::Status Sync() = 0;

  // Returns the bytes of the tier's space a block of `stored_bytes` (PutBlock's result)
  // occupies, its allocation rounding included. TieredStore counts cold usage, capacity
  // and quotas in these, so cold_capacity_bytes bounds what the tier really allocates
  // (tiny blocks would otherwise fill a slab of 4 KiB units long before the byte count
  // reached the capacity). Default: `stored_bytes`.
  virtual uint64_t FootprintBytes(uint32_t stored_bytes) const { return stored_bytes; }

  // What opening the tier had to drop to start (ColdTierRecovery). Default: nothing.
  virtual ColdTierRecovery recovery() const { return {}; }

  // Checks the index against the tier's own copy of the blocks while the tier serves
  // (docs/recovery.md "On demand"), and with kRebuild re-creates what the index lost.
  // What it may change, so that no acknowledged block is lost and no deleted one comes
  // back: it adds index records (for keys that have none, only through hooks.adopt) and
  // namespace records, and it frees only space no index record names; it never changes
  // or deletes an index record. Its long part (reading the blocks) runs alongside every
  // other call; what it acts on is read again inside hooks.exclusive. UNIMPLEMENTED for a
  // tier without a self-describing copy (the default); UNAVAILABLE / INTERNAL on I/O
  // errors (what was written before stays consistent).
  virtual absl::StatusOr<ColdRecoverReport> RecoverOnline(ColdRecoverMode /*mode*/,
                                                          const ColdRecoverHooks& /*hooks*/) {
    return absl::UnimplementedError("this cold tier cannot be rebuilt from its blocks");
  }
};

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_COLD_TIER_H_
