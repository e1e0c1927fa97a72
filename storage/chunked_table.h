// ChunkedTable: a table of T addressed by dense 32-bit ids, the storage behind the prefix
// index's entries and long keys and the hot tier's slots. It grows in chunks of
// 2^kChunkShift elements, so growth never copies or moves an element (references stay
// valid until the id is freed) and the table never holds more than one partly used
// chunk, unlike a doubling vector that is up to half empty after it grows. Freed ids are
// reused, the last freed first; chunks are never returned.
//
// Thread-compatible.
#ifndef KVTIER_STORAGE_CHUNKED_TABLE_H_
#define KVTIER_STORAGE_CHUNKED_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace kvtier::storage {

template <typename T, uint32_t kChunkShift>
class ChunkedTable {
 public:
  static constexpr uint32_t kChunkSize = uint32_t{1} << kChunkShift;

  // REQUIRES: id came from Allocate (freed or not: the element stays addressable).
  T& operator[](uint32_t id) { return chunks_[id >> kChunkShift][id & (kChunkSize - 1)]; }
  const T& operator[](uint32_t id) const {
    return chunks_[id >> kChunkShift][id & (kChunkSize - 1)];
  }

  // Returns a free id. Its element holds whatever the last user left there (a new chunk
  // is value-initialized): the caller initializes it.
  uint32_t Allocate() {
    if (!free_.empty()) {
      const uint32_t id = free_.back();
      free_.pop_back();
      return id;
    }
    const uint32_t id = limit_++;
    if ((id >> kChunkShift) >= chunks_.size()) chunks_.push_back(std::make_unique<T[]>(kChunkSize));
    return id;
  }
  // Makes `id` available to Allocate again. REQUIRES: id is allocated.
  void Free(uint32_t id) { free_.push_back(id); }

  // Every id ever allocated is below id_limit().
  uint32_t id_limit() const { return limit_; }
  // Heap bytes: the chunks, the chunk pointers and the free list.
  size_t MemoryBytes() const {
    return chunks_.size() * sizeof(T) * kChunkSize + chunks_.capacity() * sizeof(chunks_[0]) +
           free_.capacity() * sizeof(uint32_t);
  }

 private:
  std::vector<std::unique_ptr<T[]>> chunks_;
  uint32_t limit_ = 0;
  std::vector<uint32_t> free_;
};

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_CHUNKED_TABLE_H_
