// Cold reads against the disk (issue 35, docs/prefetch.md): a RocksDbColdTier holding a
// 2,048-block prefix of 64 KiB incompressible blocks (128 MiB, put in chain order as a
// demotion writes them), in $KVTIER_BENCH_DIR (default /tmp), removed at exit. Each
// iteration runs, one after the other on the same file, with the slab's pages dropped
// from the page cache (posix_fadvise DONTNEED) before each cold read:
//   multiget  ColdTier::MultiGetBlock of all 2,048 keys (what one Get of the prefix does),
//             every payload verified and copied into a destination buffer, as a
//             promotion copies it into its hot slot;
//   each      GetBlock per key (the read path before MultiGetBlock), same copies;
//   raw       the slab file read whole with O_DIRECT in 1 MiB reads, as
//             `dd if=cold.slab of=/dev/null bs=1M iflag=direct` reads it.
// Counters: GB/s of payload for each (raw: of the file) over all iterations, and the
// median (and least) of each iteration's multiget / raw and each / raw. The iteration
// time is multiget's.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "common/logging.h"
#include "storage/checksum.h"
#include "storage/rocksdb_cold_tier.h"

namespace kvtier::storage {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr size_t kBlocks = 2048;
constexpr size_t kPayloadBytes = 64 << 10;

struct Tier {
  std::string dir;
  std::unique_ptr<RocksDbColdTier> cold;
  std::vector<std::string> keys;
  ~Tier() {
    cold.reset();
    fs::remove_all(dir);
  }
};

Tier& TheTier() {
  static Tier* tier = [] {
    auto* t = new Tier();
    const char* base = std::getenv("KVTIER_BENCH_DIR");
    t->dir = absl::StrCat(base != nullptr ? base : "/tmp", "/kvtier-cold-read-", getpid());
    fs::remove_all(t->dir);
    auto cold = RocksDbColdTier::Open(ColdTierOptions{t->dir});
    KVTIER_CHECK(cold.ok()) << cold.status();
    t->cold = *std::move(cold);
    std::mt19937_64 rng(1);
    std::string payload(kPayloadBytes, '\0');
    for (size_t i = 0; i < kBlocks; ++i) {
      for (size_t j = 0; j < payload.size(); j += 8) {
        const uint64_t r = rng();
        std::memcpy(payload.data() + j, &r, 8);
      }
      ColdIndexRecord rec;
      rec.ns_id = 1;
      rec.key = absl::StrCat("kvtier-cold-", 1000000 + i);
      rec.parent_key = i == 0 ? "" : t->keys.back();
      rec.block_index = static_cast<uint32_t>(i);
      const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(payload.data()),
                                           payload.size());
      KVTIER_CHECK(t->cold->PutBlock(rec, bytes, PayloadChecksum(bytes), false).ok());
      t->keys.push_back(rec.key);
    }
    KVTIER_CHECK(t->cold->Sync().ok());
    std::atexit([] { delete &TheTier(); });
    return t;
  }();
  return *tier;
}

std::string SlabPath() { return TheTier().dir + "/cold.slab"; }

void DropSlabFromPageCache() {
  const int fd = open(SlabPath().c_str(), O_RDONLY);
  KVTIER_CHECK(fd >= 0);
  KVTIER_CHECK(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
  close(fd);
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Bytes of the file read with O_DIRECT, 1 MiB at a time; *secs gets the time.
uint64_t RawDirectRead(double* secs) {
  const int fd = open(SlabPath().c_str(), O_RDONLY | O_DIRECT);
  KVTIER_CHECK(fd >= 0);
  constexpr size_t kChunk = 1 << 20;
  void* buf = nullptr;
  KVTIER_CHECK(posix_memalign(&buf, 4096, kChunk) == 0);
  uint64_t total = 0;
  const auto t0 = Clock::now();
  while (true) {
    const ssize_t n = read(fd, buf, kChunk);
    if (n < 0 && errno == EINTR) continue;
    KVTIER_CHECK(n >= 0);
    if (n == 0) break;
    total += static_cast<uint64_t>(n);
  }
  *secs = Seconds(t0, Clock::now());
  free(buf);
  close(fd);
  return total;
}

void BM_ColdReadVsRaw(benchmark::State& state) {
  Tier& tier = TheTier();
  std::vector<std::string_view> keys(tier.keys.begin(), tier.keys.end());
  std::vector<std::string> dst(kBlocks, std::string(kPayloadBytes, '\0'));
  double multi_s = 0, each_s = 0, raw_s = 0;
  std::vector<double> multi_ratio, each_ratio;  // per iteration, over that iteration's raw
  uint64_t raw_bytes = 0;
  int64_t n = 0;
  for (auto _ : state) {
    DropSlabFromPageCache();
    size_t copied = 0;
    auto t0 = Clock::now();
    const std::vector<absl::Status> st = tier.cold->MultiGetBlock(
        1, keys, [&](size_t i, std::span<const uint8_t> b, uint64_t) {
          std::memcpy(dst[i].data(), b.data(), b.size());
          ++copied;
        });
    const double m = Seconds(t0, Clock::now());
    KVTIER_CHECK(copied == kBlocks);
    for (const absl::Status& s : st) KVTIER_CHECK(s.ok()) << s;
    state.SetIterationTime(m);

    DropSlabFromPageCache();
    t0 = Clock::now();
    for (size_t i = 0; i < kBlocks; ++i) {
      KVTIER_CHECK(tier.cold
                       ->GetBlock(1, keys[i],
                                  [&](std::span<const uint8_t> b, uint64_t) {
                                    std::memcpy(dst[i].data(), b.data(), b.size());
                                  })
                       .ok());
    }
    const double e = Seconds(t0, Clock::now());

    double r = 0;
    raw_bytes = RawDirectRead(&r);
    multi_s += m;
    each_s += e;
    raw_s += r;
    const double payload = static_cast<double>(kBlocks * kPayloadBytes);
    multi_ratio.push_back((payload / m) / (static_cast<double>(raw_bytes) / r));
    each_ratio.push_back((payload / e) / (static_cast<double>(raw_bytes) / r));
    ++n;
  }
  const double payload_gb = static_cast<double>(kBlocks * kPayloadBytes) / 1e9;
  state.counters["multiget_GBps"] = payload_gb * static_cast<double>(n) / multi_s;
  state.counters["each_GBps"] = payload_gb * static_cast<double>(n) / each_s;
  state.counters["raw_direct_GBps"] = static_cast<double>(raw_bytes) / 1e9 *
                                      static_cast<double>(n) / raw_s;
  std::sort(multi_ratio.begin(), multi_ratio.end());
  std::sort(each_ratio.begin(), each_ratio.end());
  state.counters["multiget_over_raw_p50"] = multi_ratio[multi_ratio.size() / 2];
  state.counters["multiget_over_raw_min"] = multi_ratio.front();
  state.counters["each_over_raw_p50"] = each_ratio[each_ratio.size() / 2];
}
BENCHMARK(BM_ColdReadVsRaw)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(11);

}  // namespace
}  // namespace kvtier::storage

BENCHMARK_MAIN();
