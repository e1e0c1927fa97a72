// The cold tier's recovery figures (docs/recovery.md), on a tier of N blocks of 4000-byte
// incompressible payloads (one 4 KiB slab unit each), filled once per N in
// $KVTIER_BENCH_DIR (default /tmp) and removed at exit:
//   BM_SlabScan/N                 ScanSlab over cold.slab, the file's pages dropped from
//                                 the page cache first (posix_fadvise DONTNEED): GB/s and
//                                 blocks/s of the scan alone.
//   BM_RestartWithoutDatabase/N   RocksDbColdTier::Open of the directory with its RocksDB
//                                 files deleted outright: scan, index rewrite (synced) and
//                                 allocator reset: the restart time of the issue.
//   BM_RestartWithDatabase/N      a normal Open of the same tier (index from RocksDB), the
//                                 reference.
//   BM_OnlineVerify/N             RecoverOnline(kVerify) on the open tier (the admin RPC
//                                 Recover --verify; a rebuild with nothing lost does the
//                                 same work): the whole call, and reconcile_ms, the part
//                                 inside `exclusive`, which is how long Puts and Deletes
//                                 wait for an on-demand recovery.
// scripts/bench.sh recovery runs N = 10^5 and 10^6.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "common/logging.h"
#include "storage/checksum.h"
#include "storage/rocksdb_cold_tier.h"
#include "storage/slab_file.h"
#include "storage/slab_scan.h"

namespace kvtier::storage {
namespace {

namespace fs = std::filesystem;

constexpr size_t kPayloadBytes = 4000;

// The tier directory of `blocks` blocks, filled on first use.
const std::string& TierDir(int64_t blocks) {
  static std::map<int64_t, std::string>* dirs = new std::map<int64_t, std::string>();
  auto it = dirs->find(blocks);
  if (it != dirs->end()) return it->second;
  const char* base = std::getenv("KVTIER_BENCH_DIR");
  const std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/kvtier-recovery-",
                                       getpid(), "-", blocks);
  fs::remove_all(dir);
  {
    auto cold = RocksDbColdTier::Open(ColdTierOptions{dir});
    KVTIER_CHECK(cold.ok()) << cold.status();
    KVTIER_CHECK((*cold)->PutNamespace(1, "bench").ok());
    std::mt19937_64 rng(1);
    std::string payload(kPayloadBytes, '\0');
    for (int64_t i = 0; i < blocks; ++i) {
      for (size_t j = 0; j < payload.size(); j += 8) {
        const uint64_t r = rng();
        std::memcpy(payload.data() + j, &r, std::min<size_t>(8, payload.size() - j));
      }
      ColdIndexRecord rec;
      rec.ns_id = 1;
      rec.key = absl::StrCat("block-", i);
      rec.key.resize(16, '.');
      const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(payload.data()),
                                           payload.size());
      KVTIER_CHECK((*cold)->PutBlock(rec, bytes, PayloadChecksum(bytes), false).ok());
    }
    KVTIER_CHECK((*cold)->Sync().ok());
  }
  std::atexit([] {
    for (const auto& [n, d] : *dirs) fs::remove_all(d);
  });
  return dirs->emplace(blocks, dir).first->second;
}

void DropFromPageCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void DeleteDatabase(const std::string& dir) {
  for (const auto& f : fs::directory_iterator(dir)) {
    if (f.path().filename().string().rfind("cold.", 0) != 0) fs::remove_all(f.path());
  }
}

void BM_SlabScan(benchmark::State& state) {
  const std::string& dir = TierDir(state.range(0));
  auto slab = SlabFile::Open(dir + "/cold.slab", 0);
  KVTIER_CHECK(slab.ok());
  uint64_t bytes = 0, blocks = 0;
  for (auto _ : state) {
    state.PauseTiming();
    DropFromPageCache(dir + "/cold.slab");
    state.ResumeTiming();
    auto scan = ScanSlab(**slab);
    KVTIER_CHECK(scan.ok()) << scan.status();
    KVTIER_CHECK(scan->extents.size() == static_cast<size_t>(state.range(0)));
    bytes += scan->bytes;
    blocks += scan->extents.size();
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["blocks/s"] =
      benchmark::Counter(static_cast<double>(blocks), benchmark::Counter::kIsRate);
}

void BM_RestartWithoutDatabase(benchmark::State& state) {
  const std::string& dir = TierDir(state.range(0));
  for (auto _ : state) {
    state.PauseTiming();
    DeleteDatabase(dir);
    DropFromPageCache(dir + "/cold.slab");
    state.ResumeTiming();
    auto cold = RocksDbColdTier::Open(ColdTierOptions{dir});
    KVTIER_CHECK(cold.ok()) << cold.status();
    const ColdTierRecovery r = (*cold)->recovery();
    KVTIER_CHECK(r.slab_scanned && r.blocks_indexed == static_cast<uint64_t>(state.range(0)));
    state.counters["scan+rewrite_s"] = r.scan_seconds;
    state.PauseTiming();
    cold->reset();  // closing (a memtable flush) is not part of the restart
    state.ResumeTiming();
  }
}

void BM_RestartWithDatabase(benchmark::State& state) {
  const std::string& dir = TierDir(state.range(0));
  for (auto _ : state) {
    auto cold = RocksDbColdTier::Open(ColdTierOptions{dir});
    KVTIER_CHECK(cold.ok()) << cold.status();
    KVTIER_CHECK(!(*cold)->recovery().slab_scanned);
    state.PauseTiming();
    cold->reset();
    state.ResumeTiming();
  }
}

void BM_OnlineVerify(benchmark::State& state) {
  const std::string& dir = TierDir(state.range(0));
  auto cold = RocksDbColdTier::Open(ColdTierOptions{dir});
  KVTIER_CHECK(cold.ok()) << cold.status();
  double reconcile_s = 0;
  ColdRecoverHooks hooks;
  hooks.exclusive = [&](const std::function<absl::Status()>& critical) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status st = critical();
    reconcile_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return st;
  };
  for (auto _ : state) {
    state.PauseTiming();
    DropFromPageCache(dir + "/cold.slab");
    state.ResumeTiming();
    auto r = (*cold)->RecoverOnline(ColdRecoverMode::kVerify, hooks);
    KVTIER_CHECK(r.ok()) << r.status();
    KVTIER_CHECK(r->records_verified == static_cast<uint64_t>(state.range(0)));
  }
  state.counters["reconcile_ms"] =
      1000 * reconcile_s / static_cast<double>(state.iterations());
}

BENCHMARK(BM_SlabScan)->Arg(100000)->Arg(1000000)->Iterations(3)->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_RestartWithoutDatabase)->Arg(100000)->Arg(1000000)->Iterations(2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RestartWithDatabase)->Arg(100000)->Arg(1000000)->Iterations(2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_OnlineVerify)->Arg(100000)->Arg(1000000)->Iterations(2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvtier::storage

BENCHMARK_MAIN();
