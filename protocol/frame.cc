#include "protocol/frame.h"

#include <algorithm>
#include <cstring>
#include <string>
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

namespace {

// found (field 2) and size (field 3) of one serialized GetBlockInfo.
bool ReadBlockSize(std::span<const uint8_t> info, uint64_t* size) {
  const std::span<const uint8_t> whole[] = {info};
  SliceCursor c(whole);
  uint64_t found = 0, bytes = 0;
  while (c.remaining() > 0) {
    uint64_t tag = 0;
    if (!c.ReadVarint(&tag)) return false;
    if (tag >> 3 == 2 || tag >> 3 == 3) {
      // A known field with another wire type would be an unknown field to protobuf.
      if ((tag & 7) != 0 || !c.ReadVarint(tag >> 3 == 2 ? &found : &bytes)) return false;
    } else if (!SkipField(c, tag)) {
      return false;
    }
  }
  *size = found != 0 ? bytes : 0;
  return true;
}

}  // namespace

namespace {

bool SkipBytes(SliceCursor& c, uint64_t n) {
  if (n > c.remaining()) return false;
  while (n > 0) n -= c.Next(n).size();
  return true;
}

}  // namespace

bool SkipField(SliceCursor& c, uint64_t tag) {
  if (tag >> 3 == 0) return false;
  uint64_t v = 0;
  switch (tag & 7) {
    case 0:
      return c.ReadVarint(&v);
    case 1:
      return SkipBytes(c, 8);
    case 2:
      return c.ReadVarint(&v) && SkipBytes(c, v);
    case 5:
      return SkipBytes(c, 4);
    default:
      return false;
  }
}

bool ReadLengthDelimited(SliceCursor& c, std::span<const uint8_t>* out) {
  uint64_t n = 0;
  if (!c.ReadVarint(&n) || n > c.remaining()) return false;
  *out = c.Next(n);
  return out->size() == n;
}

bool ReadGetHeaderSizes(std::span<const uint8_t> get_response, std::vector<uint64_t>* sizes) {
  sizes->clear();
  const std::span<const uint8_t> whole[] = {get_response};
  SliceCursor c(whole);
  bool any = false;
  while (c.remaining() > 0) {  // a repeated header field merges: its blocks append
    uint64_t tag = 0;
    std::span<const uint8_t> header;
    if (!c.ReadVarint(&tag) || tag != kHeaderTag || !ReadLengthDelimited(c, &header)) return false;
    any = true;
    const std::span<const uint8_t> header_whole[] = {header};
    SliceCursor h(header_whole);
    while (h.remaining() > 0) {
      if (!h.ReadVarint(&tag)) return false;
      if (tag >> 3 != 1) {
        if (!SkipField(h, tag)) return false;
        continue;
      }
      std::span<const uint8_t> info;
      uint64_t size = 0;
      if ((tag & 7) != 2 || !ReadLengthDelimited(h, &info) || !ReadBlockSize(info, &size)) {
        return false;
      }
      sizes->push_back(size);
    }
  }
  return any;
}

GetStreamFramer::GetStreamFramer(HeaderFn on_header) : on_header_(std::move(on_header)) {}

absl::Status GetStreamFramer::Consume(std::span<const std::span<const uint8_t>> slices) {
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
  // The header is small: copy it out to hand it over in one piece.
  std::string bytes;
  bytes.reserve(length);
  for (size_t i = cursor.index(); i < slices.size(); ++i) {
    const size_t from = i == cursor.index() ? cursor.offset() : 0;
    bytes.append(reinterpret_cast<const char*>(slices[i].data()) + from,
                 slices[i].size() - from);
  }
  absl::StatusOr<std::vector<std::span<uint8_t>>> dest = on_header_(bytes);
  if (!dest.ok()) return dest.status();
  has_header_ = true;
  dest_ = *std::move(dest);
  for (const auto& d : dest_) remaining_total_ += d.size();
  cur_block_ = 0;
  cur_offset_ = 0;
  return absl::OkStatus();
}

absl::Status GetStreamFramer::ConsumeChunk(std::span<const std::span<const uint8_t>> slices,
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
      while (cur_block_ < dest_.size() && cur_offset_ == dest_[cur_block_].size()) {
        ++cur_block_;
        cur_offset_ = 0;
      }
      // remaining_total_ accounting guarantees a block with room exists.
      const size_t take = static_cast<size_t>(
          std::min<uint64_t>(avail, dest_[cur_block_].size() - cur_offset_));
      std::memcpy(dest_[cur_block_].data() + cur_offset_, src, take);
      cur_offset_ += take;
      src += take;
      avail -= take;
    }
  }
  return absl::OkStatus();
}

absl::Status GetStreamFramer::Finish() const {
  if (!has_header_) return absl::InternalError("get stream: ended without a header");
  if (remaining_total_ != 0) {
    return absl::InternalError(
        absl::StrCat("get stream: ended ", remaining_total_, " payload bytes short"));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::protocol
