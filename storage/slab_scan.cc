#include "storage/slab_scan.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "storage/checksum.h"

namespace kvtier::storage {

absl::StatusOr<SlabScan> ScanSlab(const SlabFile& slab, uint64_t chunk_bytes) {
  SlabScan out;
  ASSIGN_OR_RETURN(out.bytes, slab.FileBytes());
  const uint64_t end = out.bytes;
  std::string buf;
  uint64_t buf_at = 0;
  // Makes [at, at + n) (clipped to the file) readable in buf; returns a view of it.
  auto view = [&](uint64_t at, uint64_t n) -> absl::StatusOr<std::span<const uint8_t>> {
    n = std::min(n, end - at);
    if (at < buf_at || at + n > buf_at + buf.size()) {
      buf_at = at;
      RETURN_IF_ERROR(slab.Read(at, std::min(std::max(n, chunk_bytes), end - at), &buf));
    }
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(buf.data()) + (at - buf_at),
                                    n);
  };
  uint64_t at = 0;
  while (at + kColdRecordHeaderBytes <= end) {
    ASSIGN_OR_RETURN(std::span<const uint8_t> head, view(at, SlabFile::kUnitBytes));
    // Keys are short (TieredStore allows 32 bytes); a longer pair needs a second look.
    uint16_t key_bytes, parent_bytes;
    std::memcpy(&key_bytes, head.data() + 6, 2);
    std::memcpy(&parent_bytes, head.data() + 8, 2);
    if (kColdRecordHeaderBytes + key_bytes + parent_bytes > head.size()) {
      ASSIGN_OR_RETURN(head, view(at, kColdRecordHeaderBytes + key_bytes + parent_bytes));
    }
    absl::StatusOr<ColdRecordHeader> h = ParseColdRecordHeader(head);
    if (!h.ok()) {
      if (absl::IsNotFound(h.status())) {
        ++out.killed_headers;
      } else if (std::memcmp(head.data(), "KVTB", 4) == 0) {
        ++out.damaged_headers;
      }
      at += SlabFile::kUnitBytes;
      continue;
    }
    out.max_seq = std::max(out.max_seq, h->seq);
    const uint64_t stored = h->record.stored_bytes;
    bool whole = at + stored <= end;
    if (whole) {
      ASSIGN_OR_RETURN(std::span<const uint8_t> value, view(at, stored));
      whole = PayloadChecksum(value.subspan(h->header_bytes)) == h->body_checksum;
    }
    if (!whole) {
      out.damaged.push_back({at, stored});
      at += SlabFile::kUnitBytes;
      continue;
    }
    out.extents.push_back({at, *std::move(h)});
    at += SlabFile::Round(stored);
  }
  return out;
}

absl::StatusOr<ColdRecordHeader> VerifyExtent(const SlabFile& slab, uint64_t offset) {
  ASSIGN_OR_RETURN(const uint64_t end, slab.FileBytes());
  if (offset + kColdRecordHeaderBytes > end) {
    return absl::DataLossError(absl::StrCat("cold slab has no extent at ", offset));
  }
  std::string buf;
  RETURN_IF_ERROR(slab.Read(offset, std::min<uint64_t>(SlabFile::kUnitBytes, end - offset), &buf));
  uint16_t key_bytes, parent_bytes;
  std::memcpy(&key_bytes, buf.data() + 6, 2);
  std::memcpy(&parent_bytes, buf.data() + 8, 2);
  const uint64_t head_bytes = kColdRecordHeaderBytes + key_bytes + parent_bytes;
  if (head_bytes > buf.size() && offset + head_bytes <= end) {
    RETURN_IF_ERROR(slab.Read(offset, head_bytes, &buf));
  }
  ASSIGN_OR_RETURN(ColdRecordHeader h,
                   ParseColdRecordHeader(std::span<const uint8_t>(
                       reinterpret_cast<const uint8_t*>(buf.data()), buf.size())));
  const uint64_t stored = h.record.stored_bytes;
  if (offset + stored > end) {
    return absl::DataLossError(absl::StrCat("cold extent at ", offset, " runs past the end"));
  }
  if (stored > buf.size()) RETURN_IF_ERROR(slab.Read(offset, stored, &buf));
  const auto value = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(buf.data()), stored);
  if (PayloadChecksum(value.subspan(h.header_bytes)) != h.body_checksum) {
    return absl::DataLossError(absl::StrCat("cold extent at ", offset, " fails its body checksum"));
  }
  return h;
}

}  // namespace kvtier::storage
