// Internal to kv: the body of the lossless codec (codec.h, "lossless"). The
// 16-bit source elements are split into a plane of high bytes (sign, exponent and top
// mantissa bits: skewed, compresses) and a plane of low bytes (mantissa: close to
// uniform); each plane is stored as a zstd frame when that is smaller, else as is. Decode
// is bit-exact for any 16-bit pattern. Pure functions; thread-safe.
//
// BODY FORMAT (after the 40-byte KVTB header; n = number of 16-bit elements):
//   0  u8  high-plane mode     1  u8  low-plane mode     (0 = stored, 1 = zstd frame)
//   2  u16 reserved, 0         4  u32 high-plane bytes   8  u32 low-plane bytes
//   12 the high plane, then the low plane. A stored plane is n bytes; a zstd plane is one
//      zstd frame with its content size (n) in its header. Plane byte i is byte 1 (high) or byte 0
//      (low) of little-endian element i, in payload order.
#ifndef KVTIER_KV_CODEC_LOSSLESS_H_
#define KVTIER_KV_CODEC_LOSSLESS_H_

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "kv/codec_kernels.h"

namespace kvtier::kv::internal {

// Returns the largest body a lossless blob of `elements` 16-bit values can have (both
// planes stored).
uint64_t LosslessMaxBodyBytes(uint64_t elements);

// Returns a lower bound on the body of a lossless blob of `elements` 16-bit values (what
// the smallest zstd frames take), so a small blob cannot claim a huge payload.
uint64_t LosslessMinBodyBytes(uint64_t elements);

// Appends the lossless body of `raw` (an even number of bytes, any alignment) to `out`.
// INTERNAL if zstd fails (out of memory).
absl::Status AppendLosslessBody(const CodecKernels& kernels, std::span<const uint8_t> raw,
                                std::string& out);

// Decodes a lossless `body` into `raw_out` (2 * n bytes for n elements). DATA_LOSS if the
// body is malformed: bad modes or sizes, a zstd frame that does not decompress to exactly
// n bytes. Never reads or writes out of bounds.
absl::Status DecodeLosslessBody(const CodecKernels& kernels, std::span<const uint8_t> body,
                                std::span<uint8_t> raw_out);

}  // namespace kvtier::kv::internal

#endif  // KVTIER_KV_CODEC_LOSSLESS_H_
