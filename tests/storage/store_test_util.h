// Helpers shared by the TieredStore tests: a small layout, deterministic encoded payloads,
// store options sized in blocks and the StoreTest fixture (a temp dir and a FakeClock).
#ifndef KVTIER_TESTS_STORAGE_STORE_TEST_UTIL_H_
#define KVTIER_TESTS_STORAGE_STORE_TEST_UTIL_H_

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "gtest/gtest.h"
#include "kv/codec.h"
#include "storage/cold_tier.h"
#include "storage/hot_arena.h"
#include "storage/tiered_store.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::storage::testing {

// L2 H2 D32 T16 fp16: 8 KiB raw per block, fast to encode.
inline kv::Layout SmallLayout() {
  kv::Layout layout;
  layout.num_layers = 2;
  layout.num_kv_heads = 2;
  layout.head_dim = 32;
  layout.tokens_per_block = 16;
  return layout;
}

// Hot-tier bytes one full SmallLayout() fp16 block takes (its slot, rounded).
inline uint64_t SlotBytes() {
  const kv::Layout l = SmallLayout();
  return HotArena::RoundUp(
      kv::EncodedSize(kv::CodecId::kFp16, l, l.tokens_per_block, l.sink_tokens));
}

inline NamespaceOptions SmallNamespace(std::string name = "ns", bool write_through = false) {
  NamespaceOptions ns;
  ns.name = std::move(name);
  ns.model_id = "test-model";
  ns.layout = SmallLayout();
  ns.codec = kv::CodecId::kFp16;
  ns.write_through = write_through;
  return ns;
}

// A valid fp16 blob whose bytes are a function of (seed, block_index) only.
inline std::string MakePayload(const kv::Layout& layout, uint32_t block_index, uint64_t seed,
                               kv::CodecId codec = kv::CodecId::kFp16) {
  std::mt19937_64 rng(seed * 1000003 + block_index);
  std::string raw(layout.BytesPerBlock(), '\0');
  // Finite fp16 values in [-2, 2): sign, small exponent, random mantissa.
  for (size_t i = 0; i + 1 < raw.size(); i += 2) {
    uint64_t r = rng();
    uint16_t h =
        static_cast<uint16_t>(((r & 1) << 15) | ((12 + (r >> 1) % 4) << 10) | ((r >> 8) & 0x3ff));
    raw[i] = static_cast<char>(h & 0xff);
    raw[i + 1] = static_cast<char>(h >> 8);
  }
  auto blob = kv::Encode(codec, layout, block_index, kv::AsBytes(raw));
  KVTIER_CHECK(blob.ok()) << blob.status().ToString();
  return *std::move(blob);
}

// 16-byte keys "k<seed>-<index>" padded.
inline std::string KeyOf(uint64_t seq, uint32_t index) {
  std::string k = absl::StrCat("k", seq, "-", index);
  k.resize(16, '.');
  return k;
}

inline std::string RefBytes(const BlockRef& ref) {
  return std::string(reinterpret_cast<const char*>(ref.payload().data()), ref.payload().size());
}

// Returns the stats of namespace `name` (empty stats if it is unknown).
inline NamespaceStats NsStats(const TieredStore& store, const std::string& name = "ns") {
  for (const auto& ns : store.Stats().namespaces) {
    if (ns.name == name) return ns;
  }
  return {};
}

// Returns the tier Lookup reports for one key (kNone when absent or on error).
inline Tier TierOf(TieredStore* store, const std::string& key, const std::string& ns = "ns") {
  std::vector<std::string> keys = {key};
  auto r = store->Lookup(ns, keys);
  return r.ok() ? r->tiers[0] : Tier::kNone;
}

// Flips the middle byte of the first occurrence of `needle` (e.g. a block key, which
// its index record holds) in a RocksDB write-ahead log (*.log) under `db_dir`, damaging
// the WAL record that holds it. Returns false if no WAL holds it.
inline bool FlipByteInWal(const std::string& db_dir, const std::string& needle) {
  for (const auto& f : std::filesystem::directory_iterator(db_dir)) {
    if (f.path().extension() != ".log") continue;
    std::string bytes;
    {
      std::ifstream in(f.path(), std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const size_t at = bytes.find(needle);
    if (at == std::string::npos) continue;
    bytes[at + needle.size() / 2] ^= 0x40;
    std::ofstream out(f.path(), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return out.good();
  }
  return false;
}

// Options of a test store: capacities in full SmallLayout() blocks, synchronous demotion
// (deterministic), pin expiry on `clock`.
inline StoreOptions TestStoreOptions(const std::string& data_dir, uint64_t hot_blocks,
                                     uint64_t cold_blocks, common::Clock* clock) {
  StoreOptions o;
  o.data_dir = data_dir;
  o.hot_capacity_bytes = hot_blocks * SlotBytes();
  o.cold_capacity_bytes = cold_blocks * SlotBytes();
  o.background_demotion = false;
  o.clock = clock;
  return o;
}

// Opens a store (over `cold` when given); a failure fails the test and returns null.
inline std::unique_ptr<TieredStore> OpenStore(const StoreOptions& o,
                                              std::unique_ptr<ColdTier> cold = nullptr) {
  auto store = cold != nullptr ? TieredStore::Open(o, std::move(cold)) : TieredStore::Open(o);
  EXPECT_OK(store);
  return store.ok() ? *std::move(store) : nullptr;
}

// Puts the chain KeyOf(seq, 0) .. KeyOf(seq, n-1) (each block the parent of the next)
// and returns the payloads.
inline std::vector<std::string> PutChain(TieredStore* store, uint64_t seq, uint32_t n,
                                         const std::string& ns = "ns") {
  std::vector<std::string> payloads;
  for (uint32_t i = 0; i < n; ++i) {
    payloads.push_back(MakePayload(SmallLayout(), i, seq));
    std::string key = KeyOf(seq, i);
    std::string parent = i == 0 ? "" : KeyOf(seq, i - 1);
    BlockPut put{key, parent, i, payloads.back()};
    EXPECT_OK(store->Put(ns, {&put, 1}));
  }
  return payloads;
}

// The fixture of the TieredStore tests: a store directory and a clock that moves only
// when the test says so.
class StoreTest : public ::testing::Test {
 protected:
  StoreOptions Options(uint64_t hot_blocks = 64, uint64_t cold_blocks = 1 << 20) {
    return TestStoreOptions(dir_.Sub("db"), hot_blocks, cold_blocks, &clock_);
  }
  std::unique_ptr<TieredStore> Open(const StoreOptions& o,
                                    std::unique_ptr<ColdTier> cold = nullptr) {
    return OpenStore(o, std::move(cold));
  }

  kvtier::testing::TempDir dir_;
  kvtier::testing::FakeClock clock_;
};

}  // namespace kvtier::storage::testing

#endif  // KVTIER_TESTS_STORAGE_STORE_TEST_UTIL_H_
