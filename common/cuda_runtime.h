// The few CUDA runtime calls kvtier makes, loaded with dlopen: no binary needs CUDA to
// build or run, and a machine without a driver or device fails over in well under a
// millisecond. Used by the hot tier (cudaHostAlloc), the client's shared region
// (cudaHostRegister) and the GPU benchmarks.
#ifndef KVTIER_COMMON_CUDA_RUNTIME_H_
#define KVTIER_COMMON_CUDA_RUNTIME_H_

#include <cstddef>

namespace kvtier::common {

// cudaError_t is an int-sized enum; 0 is cudaSuccess. Signatures as in cuda_runtime_api.h.
struct CudaRuntime {
  int (*host_alloc)(void** ptr, size_t bytes, unsigned int flags);
  int (*free_host)(void* ptr);
  int (*host_register)(void* ptr, size_t bytes, unsigned int flags);
  int (*host_unregister)(void* ptr);
  // Succeeds only for memory that cudaHostAlloc allocated or cudaHostRegister pinned.
  int (*host_get_flags)(unsigned int* flags, void* ptr);
  int (*malloc)(void** ptr, size_t bytes);
  int (*free)(void* ptr);
  int (*memcpy)(void* dst, const void* src, size_t bytes, int kind);
};

inline constexpr int kCudaMemcpyHostToDevice = 1;

// The runtime when libcudart loads (libcudart.so, .so.13, .so.12 or the toolkit's copy)
// and reports at least one device; else null. Loaded once per process and never unloaded.
// Thread-safe.
const CudaRuntime* LoadCudaRuntime();

}  // namespace kvtier::common

#endif  // KVTIER_COMMON_CUDA_RUNTIME_H_
