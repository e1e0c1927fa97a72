#include "storage/cold_record.h"

#include <zstd.h>

#include <cstring>

#include "storage/checksum.h"

namespace kvtier::storage {
namespace {

constexpr uint32_t kRecordMagic = 0x4254564b;  // "KVTB"
constexpr uint8_t kRecordVersion = 1;
constexpr uint8_t kFlagZstd = 1;
constexpr size_t kIndexFixedBytes = 22;

void PutU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<char*>(&v), 4); }
void PutU64(std::string* out, uint64_t v) { out->append(reinterpret_cast<char*>(&v), 8); }
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

}  // namespace

std::string EncodeColdRecord(std::span<const uint8_t> payload, uint64_t checksum, bool compress) {
  std::string packed;
  uint8_t flags = 0;
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
  value.reserve(kColdRecordHeaderBytes + body.size());
  PutU32(&value, kRecordMagic);
  value.push_back(static_cast<char>(kRecordVersion));
  value.push_back(static_cast<char>(flags));
  value.append(2, '\0');
  PutU64(&value, checksum);
  PutU32(&value, static_cast<uint32_t>(payload.size()));
  value.append(body);
  return value;
}

absl::StatusOr<std::span<const uint8_t>> ParseColdRecord(std::span<const uint8_t> value,
                                                         std::string* scratch,
                                                         uint64_t* checksum) {
  if (value.size() < kColdRecordHeaderBytes || GetU32(value.data()) != kRecordMagic ||
      value[4] != kRecordVersion) {
    return absl::DataLossError("cold record header is malformed");
  }
  const uint8_t flags = value[5];
  *checksum = GetU64(value.data() + 8);
  const uint32_t payload_bytes = GetU32(value.data() + 16);
  std::span<const uint8_t> body = value.subspan(kColdRecordHeaderBytes);
  if (flags & kFlagZstd) {
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
  } else if (body.size() != payload_bytes) {
    return absl::DataLossError("cold record payload size mismatch");
  }
  if (PayloadChecksum(body) != *checksum) {
    return absl::DataLossError("cold record checksum mismatch");
  }
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
