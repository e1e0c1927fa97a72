// hot_tier_h2d: the GPU check for a machine with an NVIDIA GPU. Allocates the hot tier
// exactly as kvtierd does (storage/hot_arena.h: cudaHostAlloc through a dlopen'ed
// libcudart, else mmap+mlock, else malloc), prints which allocator it got, and measures
// host-to-device copy bandwidth of 2 MiB blocks from hot-tier memory against the same
// copies from ordinary pageable memory. Without a CUDA driver and device it says so and
// exits 0 (it never needs CUDA at build time).
//
// usage: hot_tier_h2d [ARENA_MIB (default 1024)] [BLOCK_KIB (default 2048)] [REPS (default 5)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "common/cuda_runtime.h"
#include "storage/hot_arena.h"

namespace {

using kvtier::common::CudaRuntime;
using kvtier::common::kCudaMemcpyHostToDevice;

// Copies `bytes` from `src` to the device in `block`-sized cudaMemcpy calls (each one
// synchronous), cycling over the device buffer; returns GB/s (1e9 bytes per second).
double CopyGbPerS(const CudaRuntime& cuda, const uint8_t* src, size_t bytes, size_t block,
                  uint8_t* device, size_t device_bytes) {
  const auto start = std::chrono::steady_clock::now();
  size_t dev_off = 0;
  for (size_t off = 0; off + block <= bytes; off += block) {
    if (cuda.memcpy(device + dev_off, src + off, block, kCudaMemcpyHostToDevice) != 0) return -1;
    dev_off = (dev_off + block + block <= device_bytes) ? dev_off + block : 0;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(bytes / block * block) / s / 1e9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const size_t arena_bytes = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024) << 20;
  const size_t block = (argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 2048) << 10;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  if (arena_bytes == 0 || block == 0 || block > arena_bytes || reps <= 0) {
    std::fprintf(stderr, "usage: hot_tier_h2d [ARENA_MIB] [BLOCK_KIB] [REPS]\n");
    return 2;
  }
  auto arena = kvtier::storage::HotArena::Create(arena_bytes, "auto");
  if (!arena.ok()) {
    std::fprintf(stderr, "hot arena: %s\n", arena.status().ToString().c_str());
    return 1;
  }
  std::printf("hot tier allocator: %s (%zu MiB)\n", (*arena)->allocator_name(),
              arena_bytes >> 20);
  const CudaRuntime* rt = kvtier::common::LoadCudaRuntime();
  if (rt == nullptr) {
    std::printf("no CUDA runtime/driver/device: host-to-device copy not measured\n");
    return 0;
  }
  const CudaRuntime& cuda = *rt;
  // cudaHostGetFlags succeeds only for memory that cudaHostAlloc allocated (or that was
  // registered with CUDA): the proof that the hot tier really is pinned by CUDA.
  unsigned int flags = 0;
  const int flags_err = cuda.host_get_flags(&flags, (*arena)->base());
  std::printf("cudaHostGetFlags(hot tier base): %s\n",
              flags_err == 0 ? "ok, CUDA pinned host memory" : "error, not CUDA pinned");
  const size_t device_bytes = std::min<size_t>(arena_bytes, 256u << 20);
  void* device = nullptr;
  if (cuda.malloc(&device, device_bytes) != 0) {
    std::fprintf(stderr, "cudaMalloc(%zu) failed\n", device_bytes);
    return 1;
  }
  // Pageable source: ordinary heap memory, touched up front like the arena.
  std::unique_ptr<uint8_t[]> pageable(new uint8_t[arena_bytes]);
  std::memset(pageable.get(), 1, arena_bytes);
  std::memset((*arena)->base(), 1, arena_bytes);
  auto* dev = static_cast<uint8_t*>(device);
  std::vector<double> pinned_gbs, pageable_gbs;
  for (int r = 0; r < reps; ++r) {
    pinned_gbs.push_back(CopyGbPerS(cuda, (*arena)->base(), arena_bytes, block, dev, device_bytes));
    pageable_gbs.push_back(CopyGbPerS(cuda, pageable.get(), arena_bytes, block, dev, device_bytes));
  }
  cuda.free(device);
  const double pinned = Median(pinned_gbs), plain = Median(pageable_gbs);
  std::printf("host-to-device, %zu KiB cudaMemcpy, median of %d passes over %zu MiB:\n",
              block >> 10, reps, arena_bytes >> 20);
  std::printf("  from hot tier (%s): %.2f GB/s\n", (*arena)->allocator_name(), pinned);
  std::printf("  from pageable memory: %.2f GB/s\n", plain);
  std::printf("  ratio hot tier / pageable: %.2fx\n", plain > 0 ? pinned / plain : 0.0);
  return 0;
}
