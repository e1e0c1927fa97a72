#include "protocol/wire.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvtier::protocol {
SliceCursor::SliceCursor(std::span<const std::span<const uint8_t>> slices) : slices_(slices) {
  for (const auto& s : slices_) remaining_ += s.size();
  Skip();
}

void SliceCursor::Skip() {
  while (index_ < slices_.size() && offset_ >= slices_[index_].size()) {
    ++index_;
    offset_ = 0;
  }
}

bool SliceCursor::ReadByte(uint8_t* out) {
  if (remaining_ == 0) return false;
  *out = slices_[index_][offset_++];
  --remaining_;
  Skip();
  return true;
}

bool SliceCursor::ReadVarint(uint64_t* out) {
  uint64_t value = 0;
  for (size_t i = 0; i < kMaxVarintBytes; ++i) {
    uint8_t b;
    if (!ReadByte(&b)) return false;
    // The 10th byte holds bit 63 only: anything more overflows 64 bits.
    if (i == kMaxVarintBytes - 1 && b > 1) return false;
    value |= uint64_t{b & 0x7fu} << (7 * i);
    if ((b & 0x80) == 0) {
      *out = value;
      return true;
    }
  }
  return false;
}

std::span<const uint8_t> SliceCursor::Next(uint64_t max) {
  if (remaining_ == 0) return {};
  const size_t n =
      static_cast<size_t>(std::min<uint64_t>(max, slices_[index_].size() - offset_));
  std::span<const uint8_t> out = slices_[index_].subspan(offset_, n);
  offset_ += n;
  remaining_ -= n;
  Skip();
  return out;
}

bool ReadChunkPrefix(SliceCursor& cursor) {
  uint8_t tag = 0;
  uint64_t length = 0;
  return cursor.ReadByte(&tag) && tag == kChunkTag && cursor.ReadVarint(&length) &&
         length == cursor.remaining();
}

size_t EncodeChunkPrefix(uint64_t payload_bytes, uint8_t out[kMaxFramePrefixBytes]) {
  size_t n = 0;
  out[n++] = kChunkTag;
  do {
    uint8_t b = payload_bytes & 0x7f;
    payload_bytes >>= 7;
    if (payload_bytes != 0) b |= 0x80;
    out[n++] = b;
  } while (payload_bytes != 0);
  return n;
}

std::vector<std::vector<ChunkPiece>> PlanChunks(std::span<const uint64_t> block_sizes,
                                                uint64_t chunk_bytes) {
  std::vector<std::vector<ChunkPiece>> chunks;
  std::vector<ChunkPiece> current;
  uint64_t current_bytes = 0;
  for (size_t b = 0; b < block_sizes.size(); ++b) {
    uint64_t offset = 0;
    while (offset < block_sizes[b]) {
      const uint64_t take = std::min(block_sizes[b] - offset, chunk_bytes - current_bytes);
      current.push_back({b, offset, take});
      offset += take;
      current_bytes += take;
      if (current_bytes == chunk_bytes) {
        chunks.push_back(std::move(current));
        current.clear();
        current_bytes = 0;
      }
    }
  }
  if (!current.empty()) chunks.push_back(std::move(current));
  return chunks;
}

GetStreamParser::GetStreamParser(DestinationFn destination)
    : destination_(std::move(destination)) {}

absl::Status GetStreamParser::Consume(std::span<const std::span<const uint8_t>> slices) {
  SliceCursor cursor(slices);
  uint8_t tag;
  if (!cursor.ReadByte(&tag)) {
    // An empty message is a GetResponse with no oneof set: nothing to do.
    return absl::OkStatus();
  }
  uint64_t length;
  if (!cursor.ReadVarint(&length) || length != cursor.remaining()) {
    return absl::InternalError("get stream: malformed message length");
  }
  if (tag == kChunkTag) {
    if (!has_header_) return absl::InternalError("get stream: chunk before header");
    return ConsumeChunk(slices, cursor.index(), cursor.offset(), length);
  }
  if (tag != kHeaderTag) {
    return absl::InternalError(absl::StrCat("get stream: unexpected field tag ", tag));
  }
  if (has_header_) return absl::InternalError("get stream: second header");
  // The header is small: copy it out to parse it with protobuf.
  std::string bytes;
  bytes.reserve(length);
  for (size_t i = cursor.index(); i < slices.size(); ++i) {
    const size_t from = i == cursor.index() ? cursor.offset() : 0;
    bytes.append(reinterpret_cast<const char*>(slices[i].data()) + from,
                 slices[i].size() - from);
  }
  if (!header_.ParseFromString(bytes)) {
    return absl::InternalError("get stream: header does not parse");
  }
  has_header_ = true;
  dest_.assign(header_.blocks_size(), {});
  sizes_.assign(header_.blocks_size(), 0);
  for (int i = 0; i < header_.blocks_size(); ++i) {
    const auto& info = header_.blocks(i);
    if (!info.found() || info.size() == 0) continue;
    auto dest = destination_(static_cast<size_t>(i), info);
    if (!dest.ok()) return dest.status();
    if (dest->size() < info.size()) {
      return absl::InternalError(absl::StrCat("get stream: destination of block ", i,
                                              " holds ", dest->size(), " bytes, needs ",
                                              info.size()));
    }
    dest_[i] = dest->subspan(0, info.size());
    sizes_[i] = info.size();
    remaining_total_ += info.size();
  }
  cur_block_ = 0;
  cur_offset_ = 0;
  return absl::OkStatus();
}

absl::Status GetStreamParser::ConsumeChunk(std::span<const std::span<const uint8_t>> slices,
                                           size_t slice_index, size_t slice_offset,
                                           uint64_t length) {
  if (length > remaining_total_) {
    return absl::InternalError(absl::StrCat("get stream: ", length - remaining_total_,
                                            " payload bytes more than the header announced"));
  }
  remaining_total_ -= length;
  for (size_t i = slice_index; i < slices.size(); ++i) {
    const uint8_t* src = slices[i].data() + (i == slice_index ? slice_offset : 0);
    size_t avail = slices[i].size() - (i == slice_index ? slice_offset : 0);
    while (avail > 0) {
      while (cur_block_ < sizes_.size() && cur_offset_ == sizes_[cur_block_]) {
        ++cur_block_;
        cur_offset_ = 0;
      }
      // remaining_total_ accounting guarantees a block with room exists.
      const size_t take =
          static_cast<size_t>(std::min<uint64_t>(avail, sizes_[cur_block_] - cur_offset_));
      std::memcpy(dest_[cur_block_].data() + cur_offset_, src, take);
      cur_offset_ += take;
      src += take;
      avail -= take;
    }
  }
  return absl::OkStatus();
}

absl::Status GetStreamParser::Finish() const {
  if (!has_header_) return absl::InternalError("get stream: ended without a header");
  if (remaining_total_ != 0) {
    return absl::InternalError(
        absl::StrCat("get stream: ended ", remaining_total_, " payload bytes short"));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::protocol
