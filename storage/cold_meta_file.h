// The cold tier's small metadata file, cold.meta (docs/recovery.md): the slab's format
// version, the sequence-number ceiling (every block value's seq is below it, so a reopened
// tier never reuses one) and a copy of every namespace spec, so a scan of cold.slab can
// re-create the namespaces when the RocksDB database lost them.
//
// It also says whether the tier was closed cleanly and how many block records its
// database held then: an open that finds another count knows the database lost records
// without RocksDB noticing (a MANIFEST or WAL tail dropped as if torn) and rebuilds.
//
// Format: magic "KVTM" u32, file version u32 (1), slab format u32 (cold_record.h's
// kColdRecordVersion), seq ceiling u64, clean u32 (0 or 1), blocks u64, namespace count u32, then per namespace: id u32,
// spec length u32, spec bytes (namespace_record.h); last, XXH3-64 (checksum.h) of all the
// bytes before it. Little-endian. Replaced atomically: written to cold.meta.tmp, fsynced,
// renamed over cold.meta, the directory fsynced.
//
// Pure functions and one-shot file I/O; thread-safe (callers serialize writes of a file).
#ifndef KVTIER_STORAGE_COLD_META_FILE_H_
#define KVTIER_STORAGE_COLD_META_FILE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier::storage {

struct ColdMeta {
  uint32_t slab_format = 0;
  uint64_t seq_ceiling = 0;
  bool clean = false;   // written by a clean close; an open writes false
  uint64_t blocks = 0;  // block index records at that clean close
  std::map<uint32_t, std::string> namespaces;  // id -> serialized spec
};

std::string EncodeColdMeta(const ColdMeta& meta);
// DATA_LOSS ("cold.meta ...") for a bad magic, version, length or checksum.
absl::StatusOr<ColdMeta> ParseColdMeta(std::string_view bytes);

// Reads `path`: nullopt when it does not exist; DATA_LOSS when it is damaged;
// UNAVAILABLE on I/O errors.
absl::StatusOr<std::optional<ColdMeta>> ReadColdMetaFile(const std::string& path);
// Replaces `path` atomically and durably (header comment). UNAVAILABLE on I/O errors.
absl::Status WriteColdMetaFile(const std::string& path, const ColdMeta& meta);

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_COLD_META_FILE_H_
