// SliceRefs: counts the gRPC slices that still point at a caller's memory (slices made
// with a release callback, Release and the SliceRefs as its user data), so a Put returns,
// and hands the caller its buffers back, only after gRPC has let go of every one of them,
// even when the stream failed half-way. ChunkMessage builds one Put-stream chunk message
// of such slices. Used by the C++ client's Put streams (client/client_streams.cc) and the
// Python extension's (client/python/native).
//
// Thread-safe.
#ifndef KVTIER_PROTOCOL_SLICE_REFS_H_
#define KVTIER_PROTOCOL_SLICE_REFS_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <span>
#include <vector>

#include "common/mutex.h"
#include "protocol/frame.h"

namespace kvtier::protocol {

class SliceRefs {
 public:
  // Counts one more slice over caller memory; its release callback is Release(this).
  void Add() {
    common::MutexLock lock(&mu_);
    ++live_;
  }
  // The slices' release callback: `self` is the SliceRefs that counted the slice.
  static void Release(void* self) {
    auto* refs = static_cast<SliceRefs*>(self);
    common::MutexLock lock(&refs->mu_);
    --refs->live_;
  }
  // Blocks until every counted slice was released.
  void WaitForNone() {
    common::MutexLock lock(&mu_);
    mu_.Await(common::Condition(+[](int* live) { return *live == 0; }, &live_));
  }

 private:
  common::Mutex mu_;
  int live_ ABSL_GUARDED_BY(mu_) = 0;
};

// Returns the chunk message (protocol/frame.h framing) carrying `chunk` (one element of
// PlanChunks): its chunk prefix (copied: a few bytes), then one slice per piece pointing
// at payload_of(piece.block) + piece.offset, not copied and counted in `refs`.
// payload_of(size_t block) returns the block's first payload byte (const uint8_t*).
template <typename PayloadOf>
grpc::ByteBuffer ChunkMessage(std::span<const ChunkPiece> chunk, PayloadOf payload_of,
                              SliceRefs* refs) {
  uint64_t len = 0;
  for (const ChunkPiece& piece : chunk) len += piece.bytes;
  uint8_t prefix[kMaxFramePrefixBytes];
  std::vector<grpc::Slice> slices;
  slices.reserve(chunk.size() + 1);
  slices.emplace_back(prefix, EncodeChunkPrefix(len, prefix));
  for (const ChunkPiece& piece : chunk) {
    refs->Add();
    slices.emplace_back(const_cast<uint8_t*>(payload_of(piece.block) + piece.offset),
                        piece.bytes, &SliceRefs::Release, refs);
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace kvtier::protocol

#endif  // KVTIER_PROTOCOL_SLICE_REFS_H_
