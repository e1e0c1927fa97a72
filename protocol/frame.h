// The protobuf-free half of the data plane's hand-rolled framing (protocol/wire.h builds
// on it): chunk prefixes, a cursor over a message's gRPC slices, chunk planning, and the
// framing state machine of a Get stream. Depends on no generated code and no gRPC, so the
// Python client's native module (client/python/native) links it without a second copy
// of the kvtier.v1 descriptors next to Python's. Pure functions and a small state
// machine over byte spans; no I/O.
//
// Wire facts relied on (proto3, see proto/kvtier/v1/kvtier.proto):
//   PutRequest  { oneof msg { PutHeader header = 1; bytes chunk = 2; } }
//   GetResponse { oneof msg { GetHeader header = 1; bytes chunk = 2; } }
// so a chunk message is exactly: 0x12, varint(len), len payload bytes; a header message
// is 0x0a, varint(len), serialized header.
#ifndef KVTIER_PROTOCOL_FRAME_H_
#define KVTIER_PROTOCOL_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier::protocol {

// Field tags (field number << 3 | wire type 2) of the oneof members above.
inline constexpr uint8_t kHeaderTag = 0x0a;  // field 1: PutHeader / GetHeader
inline constexpr uint8_t kChunkTag = 0x12;   // field 2: bytes chunk

// Longest base-128 varint of a 64-bit value.
inline constexpr size_t kMaxVarintBytes = 10;
// Maximum length of a field prefix: one tag byte plus a 10-byte varint.
inline constexpr size_t kMaxFramePrefixBytes = 1 + kMaxVarintBytes;

// Writes the prefix of a `chunk` field (tag 2, wire type 2) holding `payload_bytes` bytes
// into `out` and returns how many bytes were written (2..11).
size_t EncodeChunkPrefix(uint64_t payload_bytes, uint8_t out[kMaxFramePrefixBytes]);

// A read cursor over the byte spans of one received message (its gRPC slices, in order).
// The spans are viewed, not copied: they must outlive the cursor. Empty spans are
// skipped. Thread-compatible.
class SliceCursor {
 public:
  explicit SliceCursor(std::span<const std::span<const uint8_t>> slices);

  // Reads one byte; false at the end.
  bool ReadByte(uint8_t* out);

  // Reads a base-128 varint. False (position unspecified) when the message ends inside
  // it, when it runs past kMaxVarintBytes, or when its value overflows 64 bits.
  bool ReadVarint(uint64_t* out);

  // Returns the next contiguous piece of at most `max` bytes and moves past it; empty at
  // the end.
  std::span<const uint8_t> Next(uint64_t max);

  // Bytes not read yet.
  uint64_t remaining() const { return remaining_; }
  // Position: index of the current span and offset inside it.
  size_t index() const { return index_; }
  size_t offset() const { return offset_; }

 private:
  void Skip();

  std::span<const std::span<const uint8_t>> slices_;
  size_t index_ = 0;
  size_t offset_ = 0;
  uint64_t remaining_ = 0;
};

// If the message under `cursor` is exactly one `chunk` field (kChunkTag, a varint
// length, and that many bytes to the end), moves past the prefix and returns true: the
// rest of the cursor is the payload. Otherwise returns false and the position is
// unspecified (parse the message with protobuf instead).
bool ReadChunkPrefix(SliceCursor& cursor);

// Moves `cursor` past one protobuf field whose tag (just read) is `tag`. False for field
// number 0, a group (wire types 3 and 4: not proto3) or a field that runs past the end.
bool SkipField(SliceCursor& cursor, uint64_t tag);
// Reads the length and bytes of a length-delimited field whose tag was just read. False
// when it runs past the end or its bytes are not contiguous (they span two slices).
bool ReadLengthDelimited(SliceCursor& cursor, std::span<const uint8_t>* out);

// Reads the payload size of every block a serialized GetResponse header lists, without
// protobuf: GetResponse { GetHeader header = 1; } with GetHeader { repeated GetBlockInfo
// blocks = 1; } and GetBlockInfo { bool found = 2; uint64 size = 3; } (other fields
// skipped). `sizes` gets one entry per block: its size when found, else 0. Returns false
// (sizes unspecified) unless the bytes are exactly header fields of that shape; parse
// them with protobuf then.
bool ReadGetHeaderSizes(std::span<const uint8_t> get_response, std::vector<uint64_t>* sizes);

// One piece of a chunk message: `bytes` of block `block` starting at `offset`.
struct ChunkPiece {
  size_t block = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// Splits the concatenation of blocks with the given sizes into chunk messages of at most
// `chunk_bytes` payload bytes each (the last may be shorter). Each chunk lists the pieces
// of the blocks it covers, in order. Zero-size blocks contribute nothing; an all-empty
// input yields no chunks. REQUIRES: chunk_bytes > 0.
std::vector<std::vector<ChunkPiece>> PlanChunks(std::span<const uint64_t> block_sizes,
                                                uint64_t chunk_bytes);

// The framing of the client side of a Get stream. Feed each received GetResponse message
// as its list of byte spans (the gRPC slices, in order, not copied). The first message
// must be the header: its serialized GetHeader goes to the header callback, which returns
// one destination span per block (empty for a block that carries no payload); the rest
// are chunks whose payload bytes fill those spans completely, in order.
// Thread-compatible.
class GetStreamFramer {
 public:
  // Called once, with the serialized GetHeader (valid during the call only). The spans
  // it returns must stay valid until the framer is done. An error aborts the parse.
  using HeaderFn =
      std::function<absl::StatusOr<std::vector<std::span<uint8_t>>>(std::string_view header)>;

  explicit GetStreamFramer(HeaderFn on_header);

  // Consumes one message. INTERNAL naming the problem on a malformed message, a chunk
  // before the header, a second header, or more payload bytes than the destinations
  // hold; the header callback's error otherwise.
  absl::Status Consume(std::span<const std::span<const uint8_t>> slices);

  // OK once the header arrived and every destination byte was received; INTERNAL
  // (naming the missing byte count) otherwise.
  absl::Status Finish() const;

  bool has_header() const { return has_header_; }

 private:
  absl::Status ConsumeChunk(std::span<const std::span<const uint8_t>> slices,
                            size_t slice_index, size_t slice_offset, uint64_t length);

  HeaderFn on_header_;
  bool has_header_ = false;
  // Destination of each block (empty for none) and the write cursor.
  std::vector<std::span<uint8_t>> dest_;
  size_t cur_block_ = 0;
  uint64_t cur_offset_ = 0;
  uint64_t remaining_total_ = 0;
};

}  // namespace kvtier::protocol

#endif  // KVTIER_PROTOCOL_FRAME_H_
