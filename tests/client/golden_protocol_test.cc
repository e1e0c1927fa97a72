// Cross-language golden vectors of the protocol's constants and formulas, the ones the
// Python package takes from kvtier._native or mirrors in pure Python (kvtier._protocol,
// kvtier.codec, kvtier.wire, kvtier._xxh3, kvtier.keys, kvtier.lookup_form): this test
// computes them with the C++ definitions and compares them with
// tests/data/golden/protocol.txt; tests/python/test_golden.py checks both Python forms
// against the same file. A C++ change to one of them fails here first (regenerate the
// file on purpose, then the Python test says what to mirror).
//
// Lines (inputs, then the expected output; bytes as lowercase hex, "-" for empty):
//   C <name> <value>      protocol constants (kvtier._native.CONSTANTS)
//   D <name> <value>      client::ClientOptions defaults (bools 0 / 1)
//   K <name> <id>         codec ids (kv::AllCodecs)
//   E <codec> <layers> <heads> <head_dim> <tokens> <raw_tokens> <kv::EncodedSize>
//   F <payload bytes> <protocol::EncodeChunkPrefix>
//   H <data> <seed> <XXH3_64bits_withSeed>
//   S <namespace> <tenant> <kv::MakePrefixSeed>
//   L <compact LookupResponse> <protocol::ExpandLookup of it, or DATA_LOSS>
// Regenerate (only when a definition changes on purpose):
//   KVTIER_WRITE_GOLDEN=tests/data/golden/protocol.txt build/tests/client/golden_protocol_test
#include <xxhash.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "kv/codec.h"
#include "kv/prefix_key.h"
#include "protocol/frame.h"
#include "protocol/lookup_form.h"
#include "protocol/rendezvous.h"
#include "protocol/shm_wire.h"

namespace kvtier::client {
namespace {

std::string Hex(std::string_view bytes) {
  return bytes.empty() ? "-"
                       : absl::BytesToHexString(absl::string_view(bytes.data(), bytes.size()));
}

std::string HexOf(const void* data, size_t n) {
  return Hex(std::string_view(static_cast<const char*>(data), n));
}

// Deterministic bytes for the hash inputs (splitmix64).
std::string Bytes(uint64_t seed, size_t n) {
  std::string out;
  uint64_t s = seed;
  for (size_t i = 0; i < n; ++i) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    out.push_back(static_cast<char>((z ^ (z >> 31)) & 0xff));
  }
  return out;
}

v1::LookupResponse Compact(std::vector<v1::Tier> tiers, std::vector<std::string> owners,
                           std::vector<uint32_t> index, std::vector<uint64_t> leases) {
  v1::LookupResponse r;
  std::string t;
  for (v1::Tier x : tiers) t.push_back(static_cast<char>(x));
  r.set_tiers(t);
  for (auto& o : owners) r.add_owners(o);
  for (uint32_t i : index) r.add_owner_index(i);
  for (uint64_t l : leases) r.add_owner_lease_ids(l);
  uint32_t prefix = 0;
  while (prefix < tiers.size() && tiers[prefix] != v1::TIER_NONE) ++prefix;
  r.set_prefix_blocks(prefix);
  return r;
}

std::vector<std::string> GoldenLines() {
  std::vector<std::string> out;
  namespace shm = protocol::shm;
  out.push_back(absl::StrCat("C header_tag ", int{protocol::kHeaderTag}));
  out.push_back(absl::StrCat("C chunk_tag ", int{protocol::kChunkTag}));
  out.push_back(absl::StrCat("C max_varint_bytes ", protocol::kMaxVarintBytes));
  out.push_back(absl::StrCat("C encoded_header_bytes ", kv::kEncodedHeaderBytes));
  out.push_back(absl::StrCat("C hash_scheme ", kv::kHashSchemeVersion));
  out.push_back(absl::StrCat("C prefix_key_bytes ", kv::kPrefixKeyBytes));
  out.push_back(absl::StrCat("C shm_magic ", HexOf(shm::kMagic, sizeof(shm::kMagic))));
  out.push_back(absl::StrCat("C shm_session_bytes ", shm::kSessionBytes));
  out.push_back(absl::StrCat("C shm_instance_bytes ", shm::kInstanceBytes));
  out.push_back(
      absl::StrCat("C shm_frame_magic ", HexOf(shm::kFrameMagic, sizeof(shm::kFrameMagic))));
  out.push_back(absl::StrCat("C shm_max_frame_bytes ", shm::kMaxFrameBytes));
  out.push_back(absl::StrCat("C rendezvous_scheme ", std::string(protocol::kRendezvousScheme)));

  const ClientOptions o;
  out.push_back(absl::StrCat("D num_channels ", o.num_channels));
  out.push_back(absl::StrCat("D default_deadline_ms ", o.default_deadline_ms));
  out.push_back(absl::StrCat("D connect_deadline_ms ", o.connect_deadline_ms));
  out.push_back(absl::StrCat("D max_attempts ", o.max_attempts));
  out.push_back(absl::StrCat("D retry_backoff_ms ", o.retry_backoff_ms));
  out.push_back(absl::StrCat("D chunk_bytes ", o.chunk_bytes));
  out.push_back(absl::StrCat("D max_streams_per_call ", o.max_streams_per_call));
  out.push_back(absl::StrCat("D max_receive_message_bytes ", o.max_receive_message_bytes));
  out.push_back(absl::StrCat("D http2_stream_window_bytes ", o.http2_stream_window_bytes));
  out.push_back(absl::StrCat("D shared_memory ", o.shared_memory ? 1 : 0));
  out.push_back(absl::StrCat("D shared_memory_bytes ", o.shared_memory_bytes));
  out.push_back(
      absl::StrCat("D shared_memory_socket_calls ", o.shared_memory_socket_calls ? 1 : 0));
  out.push_back(absl::StrCat("D coalesce_max_delay_us ", o.coalesce_max_delay_us));
  out.push_back(absl::StrCat("D coalesce_max_bytes ", o.coalesce_max_bytes));
  out.push_back(absl::StrCat("D ucx_coalesce_max_bytes ", o.ucx_coalesce_max_bytes));

  for (kv::CodecId c : kv::AllCodecs()) {
    out.push_back(absl::StrCat("K ", kv::CodecName(c), " ", static_cast<int>(c)));
  }
  // Every codec over layouts with head_dim not a multiple of the group, odd token counts,
  // raw (sink) tokens and a whole Llama-3-8B block.
  const uint32_t dims[][5] = {{1, 1, 2, 1, 0},   {2, 3, 34, 7, 2},  {4, 2, 64, 16, 4},
                              {3, 1, 96, 33, 40}, {32, 8, 128, 16, 4}, {2, 2, 130, 17, 0}};
  for (kv::CodecId c : kv::AllCodecs()) {
    for (const auto& d : dims) {
      kv::Layout l;
      l.num_layers = d[0];
      l.num_kv_heads = d[1];
      l.head_dim = d[2];
      l.tokens_per_block = d[3];
      l.sink_tokens = 0;
      out.push_back(absl::StrCat("E ", static_cast<int>(c), " ", d[0], " ", d[1], " ", d[2],
                                 " ", d[3], " ", d[4], " ", kv::EncodedSize(c, l, d[3], d[4])));
    }
  }
  for (uint64_t n : {0ull, 1ull, 127ull, 128ull, 16383ull, 16384ull, 1ull << 20, 2097152ull,
                     (1ull << 35) + 5}) {
    uint8_t prefix[protocol::kMaxFramePrefixBytes];
    const size_t len = protocol::EncodeChunkPrefix(n, prefix);
    out.push_back(absl::StrCat("F ", n, " ", HexOf(prefix, len)));
  }
  const size_t lengths[] = {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1024, 1025, 2049};
  for (size_t i = 0; i < sizeof(lengths) / sizeof(lengths[0]); ++i) {
    const std::string data = Bytes(i + 1, lengths[i]);
    for (uint64_t seed : {uint64_t{0}, uint64_t{0x9E3779B97F4A7C15ull + i}}) {
      out.push_back(absl::StrCat("H ", Hex(data), " ", seed, " ",
                                 XXH3_64bits_withSeed(data.data(), data.size(), seed)));
    }
  }
  for (const auto& [ns, tenant] : std::vector<std::pair<std::string, std::string>>{
           {"llama3", "default"}, {"llama3", "team-a"}, {"n", "x"}, {"a.b/c-d_e", "default"}}) {
    const kv::PrefixSeed seed = kv::MakePrefixSeed(ns, tenant);
    out.push_back(absl::StrCat("S ", ns, " ", tenant, " ", HexOf(seed.data(), seed.size())));
  }
  using T = v1::Tier;
  const T H = v1::TIER_HOT, C = v1::TIER_COLD, N = v1::TIER_NONE;
  const std::vector<v1::LookupResponse> lookups = {
      Compact({H, H, C}, {"127.0.0.1:1"}, {}, {}),
      Compact({H, C, N, N}, {"a:1"}, {}, {7}),
      Compact({H, C, H, N}, {"a:1", "b:2"}, {0, 1, 0, 0}, {11, 0}),
      Compact({N}, {}, {}, {}),
      Compact({H, H}, {"a:1"}, {0}, {}),             // owner_index shorter than the keys
      Compact({H, H}, {"a:1"}, {0, 3}, {}),          // an index past the owners
      Compact({H}, {"a:1", "b:2"}, {0}, {1}),        // one lease id for two owners
  };
  for (const v1::LookupResponse& compact : lookups) {
    v1::LookupResponse expanded = compact;
    const absl::Status s = protocol::ExpandLookup(&expanded);
    out.push_back(absl::StrCat("L ", Hex(compact.SerializeAsString()), " ",
                               s.ok() ? Hex(expanded.SerializeAsString()) : "DATA_LOSS"));
  }
  return out;
}

TEST(GoldenProtocolTest, TheCppDefinitionsEqualTheGoldenFile) {
  const std::vector<std::string> lines = GoldenLines();
  if (const char* out = std::getenv("KVTIER_WRITE_GOLDEN"); out != nullptr && *out) {
    std::ofstream f(out);
    f << "# Golden vectors of the protocol's constants and formulas, written by\n"
         "# tests/client/golden_protocol_test.cc (its header says what each line is);\n"
         "# checked there and by tests/python/test_golden.py.\n";
    for (const auto& l : lines) f << l << "\n";
    ASSERT_TRUE(f.good());
    GTEST_SKIP() << "wrote " << out;
  }
  const char* src = std::getenv("KVTIER_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "KVTIER_SOURCE_DIR is not set (run through ctest)";
  std::ifstream f(absl::StrCat(src, "/tests/data/golden/protocol.txt"));
  ASSERT_TRUE(f.good());
  std::vector<std::string> want;
  for (std::string line; std::getline(f, line);) {
    if (!line.empty() && line[0] != '#') want.push_back(line);
  }
  ASSERT_EQ(want.size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i], want[i]) << "line " << i;
}

}  // namespace
}  // namespace kvtier::client
