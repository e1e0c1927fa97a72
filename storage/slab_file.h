// SlabFile: the file that holds the cold tier's payloads (docs/design.md §4 Tiers and
// eviction) and the allocator of its space. RocksDbColdTier (rocksdb_cold_tier.h) writes
// each block's record into one extent and keeps the extent's offset in the block's index
// record; nothing is ever compacted or rewritten, so the file never grows past the
// highest extent in use, which never ends past `limit_bytes`.
//
// Space is handed out in units of kUnitBytes, best fit (the smallest free range that
// holds the request, lowest offset among equals), else from the end of the used part
// while that stays within the limit. Freed ranges merge with their free neighbours; the
// file itself is not shrunk or hole-punched (the space is reused by the next blocks).
// The allocator lives in memory only: at open, the owner rebuilds it with Reset from the
// extents its index records name.
//
// Reads and writes are positional (pread / pwrite) and need no lock; the allocator is
// guarded by a mutex. Thread-safe: every method may be called concurrently.
#ifndef KVTIER_STORAGE_SLAB_FILE_H_
#define KVTIER_STORAGE_SLAB_FILE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace kvtier::storage {

class SlabFile {
 public:
  static constexpr uint64_t kUnitBytes = 4096;

  struct Extent {
    uint64_t offset = 0;
    uint64_t bytes = 0;  // as requested; the allocation is rounded up to kUnitBytes
  };

  // Opens or creates the file at `path`. `limit_bytes`: no allocation ends past it
  // (0: unbounded). UNAVAILABLE when the file cannot be opened.
  static absl::StatusOr<std::unique_ptr<SlabFile>> Open(const std::string& path,
                                                        uint64_t limit_bytes);
  ~SlabFile();
  SlabFile(const SlabFile&) = delete;
  SlabFile& operator=(const SlabFile&) = delete;

  // Replaces the allocator state: exactly `used` (sorted by offset, not overlapping) is
  // allocated, everything else is free. Extents may end past the limit (a limit smaller
  // than when they were written); the file shrinks below it only as they are freed.
  // INVALID_ARGUMENT when `used` is unsorted or overlaps.
  absl::Status Reset(const std::vector<Extent>& used);

  // Reserves an extent of `bytes` (> 0); nullopt when no free range holds it.
  std::optional<uint64_t> Allocate(uint64_t bytes);
  // Returns an extent from Allocate or Reset. REQUIRES: it is allocated.
  void Free(uint64_t offset, uint64_t bytes);
  // Whether no allocation overlaps the extent at `offset` (its rounded length).
  bool IsFree(uint64_t offset, uint64_t bytes) const;
  // Allocates exactly the extent at `offset` (unit-aligned) when it is free (IsFree);
  // returns false, changing nothing, otherwise. It may end past the limit, as Reset's.
  // Recovery on a running tier uses it for an extent its index lost.
  bool Claim(uint64_t offset, uint64_t bytes);

  // pwrite of `data` at `offset`, then fdatasync when `sync`. UNAVAILABLE on I/O errors.
  absl::Status Write(uint64_t offset, std::string_view data, bool sync);
  // pread of `bytes` at `offset` into *out. DATA_LOSS when the file ends first (a
  // truncated slab); UNAVAILABLE on I/O errors.
  absl::Status Read(uint64_t offset, uint64_t bytes, std::string* out) const;
  // preadv of the file from `offset` into `buffers` in order (all of them filled, with as
  // many preadv calls as IOV_MAX and short reads need). DATA_LOSS when the file ends
  // first; UNAVAILABLE on I/O errors.
  absl::Status ReadV(uint64_t offset, std::span<const std::span<uint8_t>> buffers) const;
  // Whether [offset, offset + bytes) is mostly in the page cache, or has dirty pages
  // (cachestat(2)); true when that cannot be told.
  bool Cached(uint64_t offset, uint64_t bytes) const;
  // A buffer aligned for O_DIRECT reads (ReadDirectAt), grown by Reserve.
  struct AlignedBuffer {
    uint8_t* data = nullptr;
    size_t capacity = 0;
    AlignedBuffer() = default;
    AlignedBuffer(const AlignedBuffer&) = delete;
    AlignedBuffer& operator=(const AlignedBuffer&) = delete;
    ~AlignedBuffer();
  };
  // Whether ReadDirectAt works (the file system has O_DIRECT).
  bool has_direct_reads() const { return direct_fd_ >= 0; }
  // One O_DIRECT pread of `bytes` at `offset` into `dst` (all three kDirectAlign-aligned);
  // returns the bytes read, fewer only at the end of the file. UNIMPLEMENTED without
  // O_DIRECT; UNAVAILABLE on I/O errors.
  static constexpr uint64_t kDirectAlign = 4096;
  absl::StatusOr<size_t> ReadDirectAt(uint64_t offset, uint8_t* dst, size_t bytes) const;
  // Grows *buffer to at least `bytes` (contents not kept). RESOURCE_EXHAUSTED.
  static absl::Status Reserve(AlignedBuffer* buffer, size_t bytes);
  // fdatasync. UNAVAILABLE on I/O errors.
  absl::Status Sync();
  // The file's size (fstat): the end of the highest extent ever written, which may lie
  // past end_bytes() (freed extents are not truncated). UNAVAILABLE on I/O errors.
  absl::StatusOr<uint64_t> FileBytes() const;

  // Allocated bytes (in units) and the end of the highest allocation.
  uint64_t used_bytes() const;
  uint64_t end_bytes() const;
  uint64_t limit_bytes() const { return limit_; }

  // Returns the bytes an extent of `bytes` allocates (rounded up to kUnitBytes).
  static uint64_t Round(uint64_t bytes) {
    return (bytes + kUnitBytes - 1) / kUnitBytes * kUnitBytes;
  }

 private:
  SlabFile(std::string path, int fd, int direct_fd, uint64_t limit)
      : path_(std::move(path)), fd_(fd), direct_fd_(direct_fd), limit_(limit) {}
  void AddFreeLocked(uint64_t offset, uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The free range (offset -> length) holding [offset, offset + length), or end().
  std::map<uint64_t, uint64_t>::const_iterator FreeRangeHoldingLocked(uint64_t offset,
                                                                      uint64_t length) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const int fd_;
  const int direct_fd_;  // the file opened O_DIRECT, or -1
  const uint64_t limit_;
  mutable common::Mutex mu_;
  // Free ranges below end_, by offset (-> length) and by (length, offset); disjoint and
  // never adjacent (neighbours are merged).
  std::map<uint64_t, uint64_t> free_by_offset_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_ ABSL_GUARDED_BY(mu_);
  uint64_t end_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_SLAB_FILE_H_
