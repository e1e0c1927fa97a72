// kvtier_to_gpu: a worker's restore path end to end, from a running kvtierd into GPU
// memory, for 2 MiB blocks (Llama-3-8B-like layout, 16 tokens). Each of THREADS threads
// loops: GetBlocksInto one block, then cudaMemcpy it to the device, and the tool reports
// GB/s and the latency of get + upload per block for three client set-ups:
//   tcp         payloads over gRPC into pageable buffers
//   shm         the same-node shared-memory path, staged into pageable buffers
//   shm-buffers shared memory straight into SharedBuffers, which the client page-locks
//               with cudaHostRegister (ClientOptions::shared_memory_cuda_register)
// Without a CUDA driver and device it measures the gets alone and says so.
// Not a test and not a Google Benchmark: run by scripts/gpu_check.sh on a GPU machine.
//
// usage: kvtier_to_gpu HOST:PORT [THREADS (4)] [SECONDS (3)] [KEYS (64)]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "common/cuda_runtime.h"
#include "kv/codec.h"
#include "tools/synthetic_blocks.h"

namespace {

namespace v1 = ::kvtier::v1;
using kvtier::client::Client;
using kvtier::client::ClientOptions;
using Clock = std::chrono::steady_clock;

constexpr char kNamespace[] = "kvtier-to-gpu";

kvtier::kv::Layout BlockLayout() {
  kvtier::kv::Layout l;  // 8 KV heads x 128 x 16 tokens fp16 = 64 KiB per layer
  l.num_layers = 32;     // 2 MiB per block
  return l;
}

std::unique_ptr<Client> Connect(const std::string& server, bool shm, int threads) {
  ClientOptions o;
  o.server = server;
  o.num_channels = threads;
  o.max_streams_per_call = 1;
  o.shared_memory = shm;
  o.shared_memory_bytes = static_cast<uint64_t>(threads) * 3 * (BlockLayout().BytesPerBlock() + 8192);
  v1::NamespaceSpec spec;
  spec.set_name(kNamespace);
  *spec.mutable_layout() = kvtier::client::ToProto(BlockLayout());
  spec.set_codec(v1::CODEC_FP16);
  o.namespace_spec = spec;
  auto c = Client::Connect(o);
  if (!c.ok()) {
    std::fprintf(stderr, "connect %s: %s\n", server.c_str(), c.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*c);
}

struct Result {
  double gb_per_s = 0;
  double p50_us = 0, p99_us = 0;
};

// Runs the get (+ upload) loop on `threads` threads for `seconds`.
Result Run(Client& client, const std::vector<std::string>& keys, int threads, double seconds,
           bool shared_buffers, const kvtier::common::CudaRuntime* cuda) {
  const uint64_t block = BlockLayout().BytesPerBlock() + 4096;  // encoded blob + slack
  std::atomic<uint64_t> bytes{0};
  std::vector<std::vector<double>> lat(threads);
  std::vector<std::thread> ts;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      kvtier::client::SharedBuffer shared;
      std::string priv;
      std::span<uint8_t> buf;
      if (shared_buffers) {
        shared = *client.AllocateSharedBuffer(block);
        buf = shared.span();
      } else {
        priv.assign(block, '\1');
        buf = std::span<uint8_t>(reinterpret_cast<uint8_t*>(priv.data()), priv.size());
      }
      void* device = nullptr;
      if (cuda != nullptr && cuda->malloc(&device, block) != 0) device = nullptr;
      std::vector<std::span<uint8_t>> bufs = {buf};
      for (size_t i = t; Clock::now() < end; i += threads) {
        const auto t0 = Clock::now();
        auto infos = client.GetBlocksInto(kNamespace, std::span(keys).subspan(i % keys.size(), 1),
                                          bufs);
        if (!infos.ok() || !(*infos)[0].found()) {
          std::fprintf(stderr, "get failed: %s\n", infos.status().ToString().c_str());
          std::exit(1);
        }
        const uint64_t n = (*infos)[0].size();
        if (device != nullptr &&
            cuda->memcpy(device, buf.data(), n, kvtier::common::kCudaMemcpyHostToDevice) != 0) {
          std::fprintf(stderr, "cudaMemcpy failed\n");
          std::exit(1);
        }
        lat[t].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        bytes += n;
      }
      if (device != nullptr) cuda->free(device);
    });
  }
  for (auto& th : ts) th.join();
  std::vector<double> all;
  for (auto& l : lat) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  Result r;
  r.gb_per_s = static_cast<double>(bytes.load()) / seconds / 1e9;
  if (!all.empty()) {
    r.p50_us = all[all.size() / 2];
    r.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: kvtier_to_gpu HOST:PORT [THREADS] [SECONDS] [KEYS]\n");
    return 2;
  }
  const std::string server = argv[1];
  const int threads = argc > 2 ? std::atoi(argv[2]) : 4;
  const double seconds = argc > 3 ? std::atof(argv[3]) : 3;
  const int num_keys = argc > 4 ? std::atoi(argv[4]) : 64;
  if (threads < 1 || seconds <= 0 || num_keys < 1) return 2;
  const kvtier::common::CudaRuntime* cuda = kvtier::common::LoadCudaRuntime();

  auto tcp = Connect(server, false, threads);
  auto shm = Connect(server, true, threads);
  if (!shm->uses_shared_memory()) {
    std::printf("no shared memory (only tcp is measured): %s\n",
                shm->connect_info().shared_memory_error.c_str());
  }
  std::vector<std::string> keys;
  const std::string raw = kvtier::tools::SyntheticRawBlock(BlockLayout(), 5, 0);
  const std::string blob =
      *kvtier::kv::Encode(kvtier::kv::CodecId::kFp16, BlockLayout(), 0, kvtier::kv::AsBytes(raw));
  for (int i = 0; i < num_keys; ++i) {
    keys.push_back("kvtier-to-gpu-" + std::to_string(i));
    kvtier::client::PutBlock b;
    b.key = keys.back();
    b.payload = kvtier::kv::AsBytes(blob);
    if (!tcp->PutBlocks(kNamespace, {&b, 1}).ok()) {
      std::fprintf(stderr, "put failed\n");
      return 1;
    }
  }
  std::printf("kvtier -> %s, %d threads, %zu-byte blocks, %d keys, %.1fs per path\n",
              cuda != nullptr ? "GPU (get + cudaMemcpy H2D)" : "host only (no CUDA device)",
              threads, blob.size(), num_keys, seconds);
  std::printf("shared region page-locked for CUDA: %s\n",
              shm->connect_info().shared_memory_cuda_registered ? "yes" : "no");
  struct Path {
    const char* name;
    Client* client;
    bool shared_buffers;
  };
  std::vector<Path> paths = {{"tcp", tcp.get(), false}};
  if (shm->uses_shared_memory()) {
    paths.push_back({"shm", shm.get(), false});
    paths.push_back({"shm-buffers", shm.get(), true});
  }
  for (const Path& p : paths) {
    const Result r = Run(*p.client, keys, threads, seconds, p.shared_buffers, cuda);
    std::printf("  %-11s %7.2f GB/s   p50 %8.1f us   p99 %8.1f us\n", p.name, r.gb_per_s,
                r.p50_us, r.p99_us);
  }
  return 0;
}
