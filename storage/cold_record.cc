#include "storage/cold_record.h"

#include <zstd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "storage/checksum.h"

namespace kvtier::storage {
namespace {

constexpr uint32_t kRecordMagic = 0x4254564b;  // "KVTB"
constexpr uint8_t kFlagZstd = 1;
constexpr uint8_t kFlagStandalone = 2;
constexpr size_t kIndexFixedBytes = 22;
constexpr size_t kHeaderChecksumAt = 56;

void PutU16(std::string* out, uint16_t v) { out->append(reinterpret_cast<char*>(&v), 2); }
void PutU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<char*>(&v), 4); }
void PutU64(std::string* out, uint64_t v) { out->append(reinterpret_cast<char*>(&v), 8); }
uint16_t GetU16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
uint32_t GetU32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t GetU64(const void* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// The header checksum: bytes 0..56 and the keys (which follow the checksum field).
uint64_t HeaderChecksum(const uint8_t* header, size_t keys_bytes) {
  std::string covered(reinterpret_cast<const char*>(header), kHeaderChecksumAt);
  covered.append(reinterpret_cast<const char*>(header) + kColdRecordHeaderBytes, keys_bytes);
  return PayloadChecksum(std::span<const uint8_t>(
      reinterpret_cast<const uint8_t*>(covered.data()), covered.size()));
}

}  // namespace

std::string EncodeColdRecord(const ColdIndexRecord& record, uint64_t seq,
                             std::span<const uint8_t> payload, uint64_t checksum, bool compress) {
  std::string packed;
  uint8_t flags = record.standalone ? kFlagStandalone : 0;
  if (compress) {
    packed.resize(ZSTD_compressBound(payload.size()));
    size_t n = ZSTD_compress(packed.data(), packed.size(), payload.data(), payload.size(), 1);
    // Keep zstd only when it saves at least 1/8; otherwise reads would pay for nothing.
    if (!ZSTD_isError(n) && n < payload.size() - payload.size() / 8) {
      packed.resize(n);
      flags |= kFlagZstd;
    }
  }
  const std::string_view body =
      (flags & kFlagZstd)
          ? std::string_view(packed)
          : std::string_view(reinterpret_cast<const char*>(payload.data()), payload.size());
  std::string value;
  value.reserve(kColdRecordHeaderBytes + record.key.size() + record.parent_key.size() +
                body.size());
  PutU32(&value, kRecordMagic);
  value.push_back(static_cast<char>(kColdRecordVersion));
  value.push_back(static_cast<char>(flags));
  PutU16(&value, static_cast<uint16_t>(record.key.size()));
  PutU16(&value, static_cast<uint16_t>(record.parent_key.size()));
  PutU16(&value, 0);
  PutU32(&value, record.ns_id);
  PutU32(&value, record.block_index);
  PutU32(&value, static_cast<uint32_t>(payload.size()));
  PutU32(&value, static_cast<uint32_t>(body.size()));
  PutU32(&value, 0);
  PutU64(&value, seq);
  PutU64(&value, checksum);
  PutU64(&value, (flags & kFlagZstd) ? PayloadChecksum(std::span<const uint8_t>(
                                           reinterpret_cast<const uint8_t*>(body.data()),
                                           body.size()))
                                     : checksum);
  PutU64(&value, 0);  // the header checksum, below
  value.append(record.key);
  value.append(record.parent_key);
  const uint64_t header_checksum = HeaderChecksum(
      reinterpret_cast<const uint8_t*>(value.data()), record.key.size() + record.parent_key.size());
  std::memcpy(value.data() + kHeaderChecksumAt, &header_checksum, 8);
  value.append(body);
  return value;
}

absl::StatusOr<ColdRecordHeader> ParseColdRecordHeader(std::span<const uint8_t> prefix) {
  if (prefix.size() < kColdRecordHeaderBytes) {
    return absl::DataLossError("cold record header is truncated");
  }
  if (std::memcmp(prefix.data(), kColdRecordKilled.data(), 4) == 0) {
    return absl::NotFoundError("cold record was deleted");
  }
  if (GetU32(prefix.data()) != kRecordMagic) {
    return absl::DataLossError("cold record header has no magic");
  }
  if (prefix[4] != kColdRecordVersion) {
    return absl::DataLossError(
        absl::StrCat("cold record header has format version ", prefix[4], ", not ",
                     kColdRecordVersion));
  }
  const uint8_t flags = prefix[5];
  const size_t key_bytes = GetU16(prefix.data() + 6);
  const size_t parent_bytes = GetU16(prefix.data() + 8);
  if (prefix.size() < kColdRecordHeaderBytes + key_bytes + parent_bytes) {
    return absl::DataLossError("cold record header keys do not fit");
  }
  if (HeaderChecksum(prefix.data(), key_bytes + parent_bytes) !=
      GetU64(prefix.data() + kHeaderChecksumAt)) {
    return absl::DataLossError("cold record header checksum mismatch");
  }
  ColdRecordHeader h;
  h.header_bytes = static_cast<uint32_t>(kColdRecordHeaderBytes + key_bytes + parent_bytes);
  h.zstd = (flags & kFlagZstd) != 0;
  h.record.standalone = (flags & kFlagStandalone) != 0;
  h.record.ns_id = GetU32(prefix.data() + 12);
  h.record.block_index = GetU32(prefix.data() + 16);
  h.record.payload_bytes = GetU32(prefix.data() + 20);
  h.body_bytes = GetU32(prefix.data() + 24);
  h.seq = GetU64(prefix.data() + 32);
  h.record.checksum = GetU64(prefix.data() + 40);
  h.body_checksum = GetU64(prefix.data() + 48);
  const char* keys = reinterpret_cast<const char*>(prefix.data()) + kColdRecordHeaderBytes;
  h.record.key.assign(keys, key_bytes);
  h.record.parent_key.assign(keys + key_bytes, parent_bytes);
  const uint64_t stored = uint64_t{h.header_bytes} + h.body_bytes;
  if (stored > UINT32_MAX || (!h.zstd && h.body_bytes != h.record.payload_bytes)) {
    return absl::DataLossError("cold record header sizes are inconsistent");
  }
  h.record.stored_bytes = static_cast<uint32_t>(stored);
  return h;
}

absl::StatusOr<std::span<const uint8_t>> ParseColdRecord(std::span<const uint8_t> value,
                                                         std::string* scratch,
                                                         uint64_t* checksum,
                                                         ColdRecordHeader* header) {
  absl::StatusOr<ColdRecordHeader> h = ParseColdRecordHeader(value);
  if (!h.ok()) {
    return absl::DataLossError(absl::StrCat(h.status().message(), " (cold record header)"));
  }
  if (value.size() != h->record.stored_bytes) {
    return absl::DataLossError("cold record payload size mismatch");
  }
  *checksum = h->record.checksum;
  const uint32_t payload_bytes = h->record.payload_bytes;
  std::span<const uint8_t> body = value.subspan(h->header_bytes);
  if (h->zstd) {
    // The frame states its content size (ZSTD_compress writes it): check it against the
    // header before allocating, so a damaged size cannot make us allocate up to 4 GiB.
    const unsigned long long frame_bytes = ZSTD_getFrameContentSize(body.data(), body.size());
    if (frame_bytes != payload_bytes) {
      return absl::DataLossError("cold record does not decompress");
    }
    scratch->resize(payload_bytes);
    size_t n = ZSTD_decompress(scratch->data(), scratch->size(), body.data(), body.size());
    if (ZSTD_isError(n) || n != payload_bytes) {
      return absl::DataLossError("cold record does not decompress");
    }
    body = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(scratch->data()), n);
  }
  if (PayloadChecksum(body) != *checksum) {
    return absl::DataLossError("cold record checksum mismatch");
  }
  if (header != nullptr) *header = *std::move(h);
  return body;
}

std::string EncodeColdIndexValue(const ColdIndexRecord& record) {
  std::string index;
  PutU32(&index, record.block_index);
  PutU32(&index, record.payload_bytes);
  PutU32(&index, record.stored_bytes);
  PutU64(&index, record.checksum);
  index.push_back(record.standalone ? 1 : 0);
  index.push_back(static_cast<char>(record.parent_key.size()));
  index.append(record.parent_key);
  return index;
}

absl::Status ParseColdIndexValue(std::string_view v, ColdIndexRecord* record) {
  if (v.size() < kIndexFixedBytes || v.size() != kIndexFixedBytes + static_cast<uint8_t>(v[21])) {
    return absl::DataLossError("malformed block index record");
  }
  record->block_index = GetU32(v.data());
  record->payload_bytes = GetU32(v.data() + 4);
  record->stored_bytes = GetU32(v.data() + 8);
  record->checksum = GetU64(v.data() + 12);
  record->standalone = v[20] != 0;
  record->parent_key.assign(v.data() + kIndexFixedBytes, static_cast<uint8_t>(v[21]));
  return absl::OkStatus();
}

}  // namespace kvtier::storage
