// SliceRefs: counts the gRPC slices that still point at a caller's memory (slices made
// with a release callback, Release and the SliceRefs as its user data), so a Put returns,
// and hands the caller its buffers back, only after gRPC has let go of every one of them,
// even when the stream failed half-way. Used by the C++ client's Put streams
// (client/client_streams.cc) and the Python extension's (client/python/native).
//
// Thread-safe.
#ifndef KVTIER_PROTOCOL_SLICE_REFS_H_
#define KVTIER_PROTOCOL_SLICE_REFS_H_

#include "common/mutex.h"

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

}  // namespace kvtier::protocol

#endif  // KVTIER_PROTOCOL_SLICE_REFS_H_
