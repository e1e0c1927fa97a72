// TieredStore throughput and index-memory benchmarks (in-process, no gRPC).
//
//   ninja -C build-store store_bench && build-store/tests/bench/store_bench
//
// BM_Memcpy is the ceiling: the same bytes copied between pre-faulted buffers rotating
// over a pool larger than the LLC. BM_PutHot copies the payload into the hot arena (plus
// header parse, XXH3 and index work). BM_GetHot returns a zero-copy handle; BM_GetHotCopy
// also copies the bytes out (what a gRPC response costs at least). BM_GetCold reads from
// the cold slab file (warm page cache), verifies XXH3 and promotes into the arena.
// BM_PutWriteThrough acknowledges after the slab write and the RocksDB index write.
// BM_Lookup measures a 2,048-key prefix lookup, without and with a lease of it.
// BM_IndexMemory fills 10^4 to 10^7 tiny blocks in 64-block chains, one Put per chain, and
// reports the store's bytes per block by structure, this process's RSS growth over the
// fill beside them, and the fill's Put rate (puts_per_s: how the per-block cost grows
// with the index, without gRPC; kvtier_scale measures the same through kvtierd).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/process_cpu.h"
#include "kv/codec.h"
#include "storage/checksum.h"
#include "storage/hot_arena.h"
#include "storage/tiered_store.h"

namespace kvtier::storage {
namespace {

// A scratch directory removed on destruction (tests/bench does not link kvtier_testing).
class ScratchDir {
 public:
  ScratchDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/kvtier-bench-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) abort();
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// 2 MiB: L32 H8 D128 T16 fp16. 64 KiB: L4 H2 D128 T16... -> 2*4*2*128*16*2 = 64 KiB.
kv::Layout LayoutFor(int64_t kib) {
  kv::Layout l;
  if (kib == 2048) return l;
  l.num_layers = 4;
  l.num_kv_heads = 2;
  l.head_dim = 128;
  l.tokens_per_block = 16;
  return l;
}

std::string Payload(const kv::Layout& layout, uint32_t index, uint64_t seed) {
  std::string raw(layout.BytesPerBlock(), '\0');
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + index + 1;
  for (size_t i = 0; i + 8 <= raw.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    uint64_t v = x & 0x3bff3bff3bff3bffull;  // finite fp16 values
    std::memcpy(&raw[i], &v, 8);
  }
  auto blob = kv::Encode(kv::CodecId::kFp16, layout, index, kv::AsBytes(raw));
  if (!blob.ok()) abort();
  return *std::move(blob);
}

std::string Key(uint64_t i) {
  std::string k(16, '\0');
  std::memcpy(&k[0], &i, 8);
  k[15] = 'k';
  return k;
}

struct Fixture {
  ScratchDir dir;
  std::unique_ptr<TieredStore> store;
  std::vector<std::string> payloads;
  std::vector<std::string> keys;
};

std::unique_ptr<Fixture> MakeFixture(int64_t kib, size_t nkeys, uint64_t hot_bytes,
                                     bool write_through) {
  auto f = std::make_unique<Fixture>();
  StoreOptions o;
  o.data_dir = f->dir.Sub("db");
  o.hot_capacity_bytes = hot_bytes;
  o.background_demotion = false;
  auto store = TieredStore::Open(o);
  if (!store.ok()) abort();
  f->store = *std::move(store);
  NamespaceOptions ns;
  ns.name = "bench";
  ns.layout = LayoutFor(kib);
  ns.write_through = write_through;
  if (!f->store->RegisterNamespace(ns).ok()) abort();
  for (size_t i = 0; i < nkeys; ++i) {
    f->payloads.push_back(Payload(ns.layout, 1, i));
    f->keys.push_back(Key(i));
  }
  return f;
}

// Number of distinct blocks so the working set (~256 MiB) exceeds the caches.
size_t PoolBlocks(int64_t kib) { return static_cast<size_t>((256 << 10) / kib); }

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) << 10;
  const size_t n = PoolBlocks(state.range(0));
  std::vector<std::string> src(n, std::string(bytes, 'x'));
  std::vector<std::string> dst(n, std::string(bytes, 'y'));
  size_t i = 0;
  for (auto _ : state) {
    std::memcpy(dst[i].data(), src[i].data(), bytes);
    benchmark::DoNotOptimize(dst[i].data());
    i = (i + 1) % n;
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_Memcpy)->ArgName("KiB")->Arg(2048)->Arg(64);

// The payload checksum (storage/checksum.h) over the same pool: what write-through Puts,
// demotion and every cold read pay per byte, next to memcpy.
void BM_Checksum(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) << 10;
  const size_t n = PoolBlocks(state.range(0));
  std::vector<std::string> src(n, std::string(bytes, 'x'));
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(storage::PayloadChecksum(
        std::span(reinterpret_cast<const uint8_t*>(src[i].data()), bytes)));
    i = (i + 1) % n;
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_Checksum)->ArgName("KiB")->Arg(2048)->Arg(64);

// Sets the counter process_cpu_us_per_op: CPU time of the whole process (all threads,
// including RocksDB's flush/compaction) since `cpu0` per iteration.
void SetProcessCpuPerOp(benchmark::State& state, double cpu0) {
  state.counters["process_cpu_us_per_op"] =
      1e6 * (common::SelfCpuSeconds() - cpu0) / std::max<int64_t>(1, state.iterations());
}

// Puts every block of the fixture's pool once (untimed setup; aborts on failure).
void PutPool(Fixture& f) {
  for (size_t i = 0; i < f.keys.size(); ++i) {
    BlockPut put{f.keys[i], "", 0, f.payloads[i]};  // roots: block 0
    if (!f.store->Put("bench", {&put, 1}).ok()) abort();
  }
}

uint64_t SlotFor(int64_t kib) {
  kv::Layout l = LayoutFor(kib);
  return HotArena::RoundUp(kv::EncodedSize(kv::CodecId::kFp16, l, l.tokens_per_block, l.sink_tokens));
}

void BM_PutHot(benchmark::State& state) {
  const size_t n = PoolBlocks(state.range(0));
  // Room for every block plus slack so re-puts never cross the high watermark.
  auto f = MakeFixture(state.range(0), n, n * SlotFor(state.range(0)) * 13 / 10, false);
  size_t i = 0;
  for (auto _ : state) {
    BlockPut put{f->keys[i], "", 0, f->payloads[i]};
    if (!f->store->Put("bench", {&put, 1}).ok()) state.SkipWithError("put failed");
    i = (i + 1) % n;
  }
  state.SetBytesProcessed(state.iterations() * f->payloads[0].size());
  state.counters["hot_allocator_mlock"] = f->store->Stats().hot_allocator == "mlock";
}
BENCHMARK(BM_PutHot)->ArgName("KiB")->Arg(2048)->Arg(64)->UseRealTime();

void BM_PutWriteThrough(benchmark::State& state) {
  const size_t n = PoolBlocks(state.range(0));
  auto f = MakeFixture(state.range(0), n, n * SlotFor(state.range(0)) * 13 / 10, true);
  size_t i = 0;
  const double cpu0 = common::SelfCpuSeconds();
  for (auto _ : state) {
    BlockPut put{f->keys[i], "", 0, f->payloads[i]};
    if (!f->store->Put("bench", {&put, 1}).ok()) state.SkipWithError("put failed");
    i = (i + 1) % n;
  }
  SetProcessCpuPerOp(state, cpu0);
  state.SetBytesProcessed(state.iterations() * f->payloads[0].size());
}
BENCHMARK(BM_PutWriteThrough)->ArgName("KiB")->Arg(2048)->Arg(64)->UseRealTime();

void GetHot(benchmark::State& state, bool copy_out) {
  const size_t n = PoolBlocks(state.range(0));
  auto f = MakeFixture(state.range(0), n, n * SlotFor(state.range(0)) * 13 / 10, false);
  PutPool(*f);
  std::vector<std::string> out(copy_out ? n : 0, std::string(f->payloads[0].size(), 'z'));
  size_t i = 0;
  for (auto _ : state) {
    auto ref = f->store->Get("bench", f->keys[i]);
    if (!ref.ok() || ref->tier() != Tier::kHot) {
      state.SkipWithError("not a hot hit");
      break;
    }
    if (copy_out) std::memcpy(out[i].data(), ref->payload().data(), ref->payload().size());
    benchmark::DoNotOptimize(ref->payload().data());
    i = (i + 1) % n;
  }
  state.SetBytesProcessed(state.iterations() * f->payloads[0].size());
}
void BM_GetHot(benchmark::State& state) { GetHot(state, false); }
void BM_GetHotCopy(benchmark::State& state) { GetHot(state, true); }
BENCHMARK(BM_GetHot)->ArgName("KiB")->Arg(2048)->Arg(64)->UseRealTime();
BENCHMARK(BM_GetHotCopy)->ArgName("KiB")->Arg(2048)->Arg(64)->UseRealTime();

void BM_GetCold(benchmark::State& state) {
  const size_t n = PoolBlocks(state.range(0));
  // A hot tier of 8 blocks: every Get of the rotating pool is a cold hit + promotion.
  auto f = MakeFixture(state.range(0), n, 8 * SlotFor(state.range(0)), false);
  PutPool(*f);
  if (!f->store->Evict("bench", {}, false).ok()) abort();
  size_t i = 0;
  const double cpu0 = common::SelfCpuSeconds();
  for (auto _ : state) {
    auto ref = f->store->Get("bench", f->keys[i]);
    if (!ref.ok() || ref->tier() != Tier::kCold) {
      state.SkipWithError("not a cold hit");
      break;
    }
    benchmark::DoNotOptimize(ref->payload().data());
    i = (i + 1) % n;
  }
  SetProcessCpuPerOp(state, cpu0);
  state.SetBytesProcessed(state.iterations() * f->payloads[0].size());
}
BENCHMARK(BM_GetCold)->ArgName("KiB")->Arg(2048)->Arg(64)->UseRealTime();

kv::Layout TinyLayout(uint32_t head_dim, uint32_t tokens) {
  kv::Layout l;
  l.num_layers = 1;
  l.num_kv_heads = 1;
  l.head_dim = head_dim;
  l.tokens_per_block = tokens;
  l.sink_tokens = 1;
  return l;
}

// range(1) = 1: every lookup also leases the prefix (and the lease is released, untimed).
void BM_Lookup(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const bool lease = state.range(1) != 0;
  ScratchDir dir;
  StoreOptions o;
  o.data_dir = dir.Sub("db");
  o.hot_capacity_bytes = 64 << 20;
  o.background_demotion = false;
  auto store = *TieredStore::Open(o);
  NamespaceOptions ns;
  ns.name = "bench";
  ns.layout = TinyLayout(32, 16);
  if (!store->RegisterNamespace(ns).ok()) abort();
  std::vector<std::string> keys;
  for (size_t i = 0; i < n; ++i) {
    keys.push_back(Key(i));
    std::string payload = Payload(ns.layout, static_cast<uint32_t>(i), i);
    BlockPut put{keys[i], i == 0 ? std::string_view() : std::string_view(keys[i - 1]),
                 static_cast<uint32_t>(i), payload};
    if (!store->Put("bench", {&put, 1}).ok()) abort();
  }
  LeaseOptions lease_options;
  lease_options.lease_ms = lease ? 1000 : 0;
  for (auto _ : state) {
    auto r = store->Lookup("bench", keys, lease_options);
    if (!r.ok() || r->prefix_blocks != n || (lease && r->leased_blocks != n)) {
      state.SkipWithError("lookup");
    }
    benchmark::DoNotOptimize(r);
    if (lease) {
      state.PauseTiming();
      (void)store->ReleaseLease("bench", r->lease_id);
      state.ResumeTiming();
    }
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_Lookup)
    ->ArgNames({"blocks", "lease"})
    ->Args({2048, 0})
    ->Args({2048, 1})
    ->Unit(benchmark::kMicrosecond);

// Resident bytes of this process (0 if unreadable).
uint64_t RssBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

void BM_IndexMemory(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    ScratchDir dir;
    StoreOptions o;
    o.data_dir = dir.Sub("db");
    const kv::Layout layout = TinyLayout(2, 1);  // 8 raw bytes: one 256-byte slot each
    const uint64_t slot =
        HotArena::RoundUp(kv::EncodedSize(kv::CodecId::kFp16, layout, 1, 1));
    o.hot_capacity_bytes = (n + n / 4) * slot;
    o.background_demotion = false;
    // Unbounded write-back debt, as kvtier_scale configures kvtierd: the fill writes
    // nothing cold, so the RSS growth is the store's structures (no RocksDB memtable).
    o.max_unflushed_bytes = 0;
    o.max_unflushed_blocks = 0;
    auto store = *TieredStore::Open(o);
    NamespaceOptions ns;
    ns.name = "bench";
    ns.layout = layout;
    if (!store->RegisterNamespace(ns).ok()) abort();
    const std::string payload = Payload(layout, 1, 1);
    std::vector<std::string> keys(64);
    const uint64_t rss0 = RssBytes();  // the hot arena is touched at open
    const auto t0 = std::chrono::steady_clock::now();
    // Chains of 64 blocks, one Put per chain (as kvtier_scale puts one chain per call):
    // real prefix trees with parent links.
    std::vector<BlockPut> puts(64);
    for (size_t i = 0; i < n; ++i) {
      keys[i % 64] = Key(i);
      puts[i % 64] = BlockPut{keys[i % 64], i % 64 == 0 ? std::string_view() : keys[(i - 1) % 64],
                              static_cast<uint32_t>(i % 64), payload};
      if (i % 64 == 63 || i + 1 == n) {
        if (!store->Put("bench", std::span(puts.data(), i % 64 + 1)).ok()) abort();
      }
    }
    const double fill_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const uint64_t rss1 = RssBytes();
    StoreStats st = store->Stats();
    if (st.index_entries != n) state.SkipWithError("not every block is indexed");
    const double per_block = static_cast<double>(st.index_memory_bytes) / n;
    state.counters["blocks"] = static_cast<double>(n);
    state.counters["index_B_per_block"] = per_block;
    // The 16-byte key lives in the entry, with a length byte.
    state.counters["index_B_beyond_key"] = per_block - 17;
    state.counters["hot_policy_B_per_block"] = static_cast<double>(st.policy_memory_bytes) / n;
    state.counters["hot_slot_B_per_block"] = static_cast<double>(st.hot_slot_memory_bytes) / n;
    state.counters["write_back_B_per_block"] = static_cast<double>(st.write_back_memory_bytes) / n;
    // Every per-block structure: what kvtierd's RSS delta (kvtier_scale) should match.
    state.counters["total_B_per_block"] =
        static_cast<double>(st.index_memory_bytes + st.policy_memory_bytes +
                            st.hot_slot_memory_bytes + st.write_back_memory_bytes) /
        n;
    state.counters["rss_B_per_block"] = static_cast<double>(rss1 - rss0) / n;
    state.counters["puts_per_s"] = n / fill_s;
  }
}
BENCHMARK(BM_IndexMemory)
    ->Arg(10000)
    ->Arg(100000)
    ->Arg(1000000)
    ->Arg(10000000)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvtier::storage

int main(int argc, char** argv) {
  // As kvtierd does (service/main.cc): Debian's Abseil keeps mutex deadlock detection on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
