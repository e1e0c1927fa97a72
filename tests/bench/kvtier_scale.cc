// kvtier_scale: the index-scale benchmark of issue 16 (offline, not CI).
//
// Single-node mode (--blocks): for each block count it starts a real kvtierd (port 0,
// temp data dir), fills that many tiny blocks in prefix chains through the C++ client,
// and prints one table row:
//   blocks        blocks stored
//   put/s         blocks per second of the fill (PutBlocks of one chain per call)
//   rss_B/blk     kvtierd's RSS growth per block over the fill (VmRSS; the hot arena is
//                 touched at open, so this is metadata only: index, hash table, policy,
//                 allocator slack)
//   lookup p50/p99  end-to-end Lookup of a whole resident chain (--chain keys), one thread,
//                 reading the compact answer (LookupOptions::keep_compact)
//   flush_ms      SIGTERM to exit: the shutdown flush of every block (write-back debt
//                 unbounded here so the fill measures the index, not RocksDB)
//   restart_ms    spawn to `kvtierd listening` over the filled cold tier
// With --restart 0 kvtierd is SIGKILLed after the lookups instead (flush_ms and restart_ms
// print as -): at 10^7 tiny blocks the flush writes a 4 KiB slab extent per block (41 GB,
// minutes), so that is how the 10^7 row's fill and lookups are measured.
//
// Cluster mode (--nodes): for each node count a static-peer cluster of real kvtierd
// processes on 127.0.0.1 (R=1), filled with --cluster-chains chains through the
// ClusterClient, prints the ClusterClient Lookup p50/p99 of a whole chain and of its
// first 64 blocks; then, with 3 nodes or more, Lookups of whole chains for
// --kill-seconds / 3 before and --kill-seconds after SIGKILLing the first member in ring
// order (an owner every Lookup asks), as p50/p99 per third of the after-kill window.
//
// usage: kvtier_scale [--kvtierd PATH] [--blocks 10000,100000,1000000] [--chain 2048]
//                     [--lookups 300] [--restart 1] [--seed 1]
//        kvtier_scale [--kvtierd PATH] --nodes 1,3,5 [--cluster-chains 32] [--chain 2048]
//                     [--lookups 300] [--kill-seconds 30] [--seed 1]
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "client/cluster_client.h"
#include "kv/codec.h"
#include "protocol/convert.h"
#include "protocol/lookup_form.h"
#include "tests/testing/layouts.h"
#include "tests/testing/server_process.h"
#include "tests/testing/static_peer_cluster.h"
#include "tests/testing/temp_dir.h"

namespace kvtier {
namespace {

using Clock = std::chrono::steady_clock;
using testing::TinyLayout;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// VmRSS of `pid` in bytes (0 if unreadable).
uint64_t RssBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      uint64_t kb = 0;
      std::sscanf(line.c_str() + 6, "%lu", &kb);
      return kb * 1024;
    }
  }
  return 0;
}

std::string ChainKey(uint64_t chain, uint32_t index) {
  std::string k(16, '\0');
  std::memcpy(k.data(), &chain, 8);
  std::memcpy(k.data() + 8, &index, 4);
  k[12] = 'k';
  k[13] = 't';
  return k;
}

std::vector<std::string> ChainKeys(uint64_t chain, uint32_t n) {
  std::vector<std::string> keys;
  keys.reserve(n);
  for (uint32_t k = 0; k < n; ++k) keys.push_back(ChainKey(chain, k));
  return keys;
}

// p50 and p99 of latencies in microseconds (0, 0 when empty).
struct Percentiles {
  double p50_us = 0;
  double p99_us = 0;
  size_t samples = 0;
};
Percentiles PercentilesOf(std::vector<double> us) {
  Percentiles p;
  p.samples = us.size();
  if (us.empty()) return p;
  std::sort(us.begin(), us.end());
  p.p50_us = us[us.size() / 2];
  p.p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  return p;
}

// The tiny fp16 blocks every chain is made of: block 0 and the others.
struct TinyBlobs {
  std::string first;
  std::string rest;
};
TinyBlobs MakeBlobs() {
  const kv::Layout layout = TinyLayout();
  const std::string raw(layout.BytesPerBlock(), '\1');
  return {*kv::Encode(kv::CodecId::kFp16, layout, 0, kv::AsBytes(raw)),
          *kv::Encode(kv::CodecId::kFp16, layout, 1, kv::AsBytes(raw))};
}

// The first `n` blocks of chain `ch` (the payloads point into `blobs`).
std::vector<client::PutBlock> ChainPuts(uint64_t ch, uint32_t n, const TinyBlobs& blobs) {
  std::vector<client::PutBlock> puts(n);
  for (uint32_t i = 0; i < n; ++i) {
    puts[i].key = ChainKey(ch, i);
    if (i > 0) puts[i].parent_key = puts[i - 1].key;
    puts[i].block_index = i;
    puts[i].payload = kv::AsBytes(i == 0 ? blobs.first : blobs.rest);
  }
  return puts;
}

// Lookups read the compact answer, as an engine does (and `kvtier bench --ops lookup`).
client::LookupOptions CompactLookup() {
  client::LookupOptions o;
  o.keep_compact = true;
  return o;
}

v1::NamespaceSpec ScaleSpec() {
  v1::NamespaceSpec spec;
  spec.set_name("scale");
  spec.set_model_id("kvtier_scale");
  *spec.mutable_layout() = protocol::ToProto(TinyLayout());
  spec.set_codec(v1::CODEC_FP16);
  return spec;
}

// Times `lookups` calls of lookup(keys) over the first `n` keys of random full chains (the
// keys are made before the clock starts); false on a failed call.
template <typename LookupFn>
bool TimeLookups(int lookups, uint64_t full_chains, uint32_t n, std::mt19937_64& rng,
                 LookupFn lookup, Percentiles* out) {
  std::vector<double> lat;
  for (int i = 0; i < lookups && full_chains > 0; ++i) {
    const std::vector<std::string> keys = ChainKeys(rng() % full_chains, n);
    const auto l0 = Clock::now();
    if (!lookup(keys)) return false;
    lat.push_back(MsSince(l0) * 1000);
  }
  *out = PercentilesOf(std::move(lat));
  return true;
}

struct Row {
  uint64_t blocks = 0;
  double put_rate = 0;
  double rss_per_block = 0;
  Percentiles lookup;
  double flush_ms = 0;
  double restart_ms = 0;
};

int Run(const std::string& kvtierd, uint64_t blocks, uint32_t chain, int lookups, bool restart,
        uint64_t seed, Row* row) {
  testing::TempDir dir;
  const std::string config = dir.Sub("kvtierd.textproto");
  // Unbounded write-back debt: the fill measures the index, the SIGTERM the flush.
  std::ofstream(config) << "max_unflushed_bytes: 1099511627776\nmax_unflushed_blocks: "
                           "4000000000\nshutdown_grace_ms: 600000\nmax_keys_per_request: "
                        << std::max<uint32_t>(chain, 4096) << "\n";
  const TinyBlobs blobs = MakeBlobs();
  // Hot tier: every block's slot (256-byte granules) with headroom, so nothing demotes.
  const uint64_t hot = std::max<uint64_t>(64ull << 20, blocks * 512 * 5 / 4);
  // Cold tier: the flush gives every tiny block a 4 KiB slab extent (10^7 blocks: 41 GB,
  // past the 16 GiB default), with headroom.
  const uint64_t cold = std::max<uint64_t>(16ull << 30, blocks * 4096 * 5 / 4);
  const std::vector<std::string> args = {"--port",          "0",
                                         "--data-dir",      dir.Sub("data"),
                                         "--config",        config,
                                         "--hot-capacity",  absl::StrCat(hot),
                                         "--cold-capacity", absl::StrCat(cold),
                                         "--shm-socket",    "off",
                                         "--hot-allocator", "malloc"};
  auto server = testing::ServerProcess::Start(kvtierd, args, 600000);
  if (!server.ok()) {
    std::fprintf(stderr, "kvtierd: %s\n", server.status().ToString().c_str());
    return 1;
  }
  client::ClientOptions o;
  o.server = server->address();
  o.num_channels = 1;
  o.shared_memory = false;
  o.default_deadline_ms = 600000;
  o.namespace_spec = ScaleSpec();
  auto c = client::Client::Connect(o);
  if (!c.ok()) {
    std::fprintf(stderr, "connect: %s\n", c.status().ToString().c_str());
    return 1;
  }
  const uint64_t chains = (blocks + chain - 1) / chain;
  auto put_chain = [&](uint64_t ch) -> bool {
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(chain, blocks - ch * chain));
    auto r = (*c)->PutBlocks("scale", ChainPuts(ch, n, blobs));
    if (!r.ok()) std::fprintf(stderr, "put: %s\n", r.status().ToString().c_str());
    return r.ok();
  };
  // Warm-up chain (allocator pools, gRPC buffers), not counted.
  if (!put_chain(chains)) return 1;
  const uint64_t rss0 = RssBytes(server->pid());
  const auto t0 = Clock::now();
  for (uint64_t ch = 0; ch < chains; ++ch) {
    if (!put_chain(ch)) return 1;
  }
  const double fill_ms = MsSince(t0);
  const uint64_t rss1 = RssBytes(server->pid());
  row->blocks = blocks;
  row->put_rate = blocks / (fill_ms / 1000);
  row->rss_per_block = static_cast<double>(rss1 - rss0) / blocks;

  std::mt19937_64 rng(seed);
  const bool looked_up = TimeLookups(
      lookups, blocks / chain, chain, rng,
      [&](const std::vector<std::string>& keys) {
        auto r = (*c)->Lookup("scale", keys, CompactLookup());
        if (!r.ok() || r->prefix_blocks() != chain) {
          std::fprintf(stderr, "lookup: %s\n",
                       r.ok() ? "short prefix" : r.status().ToString().c_str());
          return false;
        }
        return true;
      },
      &row->lookup);
  if (!looked_up) return 1;
  c->reset();
  if (!restart) {
    server->Kill();
    row->flush_ms = row->restart_ms = -1;
    return 0;
  }

  const auto f0 = Clock::now();
  auto code = server->Terminate(600000);
  row->flush_ms = MsSince(f0);
  if (!code.ok() || *code != 0) {
    std::fprintf(stderr, "SIGTERM: %s\n",
                 code.ok() ? "non-zero exit" : code.status().ToString().c_str());
    return 1;
  }
  const auto r0 = Clock::now();
  auto again = testing::ServerProcess::Start(kvtierd, args, 600000);
  row->restart_ms = MsSince(r0);
  if (!again.ok()) {
    std::fprintf(stderr, "restart: %s\n", again.status().ToString().c_str());
    return 1;
  }
  (void)again->Terminate(600000);
  return 0;
}

struct ClusterRow {
  int nodes = 0;
  uint64_t blocks = 0;
  double put_rate = 0;
  Percentiles chain_lookup;  // --chain keys
  Percentiles short_lookup;  // the first kShortLookup keys
  Percentiles before_kill;
  std::vector<Percentiles> after_kill;  // per third of the window
};

constexpr uint32_t kShortLookup = 64;

// Whole-chain ClusterClient Lookups of random full chains for `seconds`; per lookup its
// start (s since `t0`) and latency (us). False on a failed call.
bool LookupFor(client::ClusterClient& cluster, uint32_t chain, uint64_t chains, double seconds,
               std::mt19937_64& rng, std::vector<std::pair<double, double>>* samples) {
  const auto t0 = Clock::now();
  while (MsSince(t0) < seconds * 1000) {
    const std::vector<std::string> keys = ChainKeys(rng() % chains, chain);
    const double at = MsSince(t0) / 1000;
    const auto l0 = Clock::now();
    auto r = cluster.Lookup("scale", keys, CompactLookup());
    const double us = MsSince(l0) * 1000;
    if (!r.ok() || protocol::LookupKeys(*r) != chain) {
      std::fprintf(stderr, "cluster lookup: %s\n",
                   r.ok() ? "wrong block count" : r.status().ToString().c_str());
      return false;
    }
    samples->emplace_back(at, us);
  }
  return true;
}

int RunCluster(const std::string& kvtierd, int nodes, uint64_t chains, uint32_t chain, int lookups,
               double kill_seconds, uint64_t seed, ClusterRow* row) {
  testing::TempDir dir;
  testing::StaticPeerCluster::Options co;
  co.kvtierd = kvtierd;
  co.num_nodes = nodes;
  co.replication_factor = 1;
  co.root_dir = dir.path();
  co.extra_config = absl::StrCat("max_keys_per_request: ", std::max<uint32_t>(chain, 4096),
                                 "\nshm_socket: \"off\"\n");
  auto cluster_nodes = testing::StaticPeerCluster::Create(co);
  if (!cluster_nodes.ok()) {
    std::fprintf(stderr, "cluster: %s\n", cluster_nodes.status().ToString().c_str());
    return 1;
  }
  if (absl::Status s = cluster_nodes->StartAll(); !s.ok()) {
    std::fprintf(stderr, "kvtierd: %s\n", s.ToString().c_str());
    return 1;
  }
  client::ClusterClientOptions o;
  o.node.server = cluster_nodes->ids()[0];
  o.node.num_channels = 1;
  o.node.shared_memory = false;
  o.node.default_deadline_ms = 60000;
  o.node.namespace_spec = ScaleSpec();
  auto cluster = client::ClusterClient::Connect(o);
  if (!cluster.ok()) {
    std::fprintf(stderr, "cluster connect: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  const TinyBlobs blobs = MakeBlobs();
  const auto t0 = Clock::now();
  for (uint64_t ch = 0; ch < chains; ++ch) {
    auto r = (*cluster)->PutBlocks("scale", ChainPuts(ch, chain, blobs));
    if (!r.ok()) {
      std::fprintf(stderr, "cluster put: %s\n", r.status().ToString().c_str());
      return 1;
    }
  }
  row->nodes = nodes;
  row->blocks = chains * chain;
  row->put_rate = row->blocks / (MsSince(t0) / 1000);

  std::mt19937_64 rng(seed);
  auto lookup = [&](const std::vector<std::string>& keys) {
    auto r = (*cluster)->Lookup("scale", keys, CompactLookup());
    if (!r.ok() || r->prefix_blocks() != keys.size()) {
      std::fprintf(stderr, "cluster lookup: %s\n",
                   r.ok() ? "short prefix" : r.status().ToString().c_str());
      return false;
    }
    return true;
  };
  if (!TimeLookups(lookups, chains, chain, rng, lookup, &row->chain_lookup) ||
      !TimeLookups(lookups, chains, std::min(chain, kShortLookup), rng, lookup,
                   &row->short_lookup)) {
    return 1;
  }
  if (nodes < 3 || kill_seconds <= 0) return 0;

  std::vector<std::pair<double, double>> before;
  if (!LookupFor(**cluster, chain, chains, kill_seconds / 3, rng, &before)) return 1;
  std::vector<double> us;
  for (const auto& [at, lat] : before) us.push_back(lat);
  row->before_kill = PercentilesOf(std::move(us));
  // Kill the first member in ring order: an owner of about 1/n of every chain.
  const std::string victim = (*cluster)->members()[0].node_id;
  for (int i = 0; i < nodes; ++i) {
    if (cluster_nodes->ids()[i] == victim) cluster_nodes->node(i).Kill();
  }
  std::vector<std::pair<double, double>> after;
  if (!LookupFor(**cluster, chain, chains, kill_seconds, rng, &after)) return 1;
  std::vector<std::vector<double>> thirds(3);
  for (const auto& [at, lat] : after) {
    thirds[std::min<size_t>(2, static_cast<size_t>(at * 3 / kill_seconds))].push_back(lat);
  }
  for (std::vector<double>& t : thirds) row->after_kill.push_back(PercentilesOf(std::move(t)));
  return 0;
}

// Parses "a,b,c" into positive integers; false on a bad or zero entry.
template <typename T>
bool ParseList(const std::string& value, std::vector<T>* out) {
  out->clear();
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    T n = 0;
    if (!absl::SimpleAtoi(part, &n) || n == 0) return false;
    out->push_back(n);
  }
  return true;
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) {
  std::string kvtierd = kvtier::testing::KvtierdPath();
  std::vector<uint64_t> counts = {10000, 100000, 1000000};
  std::vector<int> node_counts;
  uint64_t cluster_chains = 32;
  uint32_t chain = 2048;
  int lookups = 300;
  double kill_seconds = 30;
  int restart = 1;
  uint64_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    bool ok = true;
    if (flag == "--kvtierd") {
      kvtierd = value;
    } else if (flag == "--blocks") {
      ok = kvtier::ParseList(value, &counts);
    } else if (flag == "--nodes") {
      ok = kvtier::ParseList(value, &node_counts);
    } else if (flag == "--cluster-chains") {
      ok = absl::SimpleAtoi(value, &cluster_chains) && cluster_chains > 0;
    } else if (flag == "--chain") {
      ok = absl::SimpleAtoi(value, &chain) && chain > 0;
    } else if (flag == "--lookups") {
      ok = absl::SimpleAtoi(value, &lookups);
    } else if (flag == "--kill-seconds") {
      ok = absl::SimpleAtod(value, &kill_seconds);
    } else if (flag == "--restart") {
      ok = absl::SimpleAtoi(value, &restart);
    } else if (flag == "--seed") {
      ok = absl::SimpleAtoi(value, &seed);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "bad value for %s: %s\n", flag.c_str(), value.c_str());
      return 2;
    }
  }
  if (!node_counts.empty()) {
    std::printf("%5s %8s %8s %11s %11s %11s %11s %s\n", "nodes", "blocks", "put/s", "chain_p50us",
                "chain_p99us", "64_p50us", "64_p99us",
                "before kill p50/p99 us -> after, per third of the window");
    for (int n : node_counts) {
      kvtier::ClusterRow row;
      if (int rc = kvtier::RunCluster(kvtierd, n, cluster_chains, chain, lookups, kill_seconds,
                                      seed, &row);
          rc != 0) {
        return rc;
      }
      std::string kill;
      if (row.before_kill.samples > 0) {
        kill = absl::StrCat(static_cast<int>(row.before_kill.p50_us), "/",
                            static_cast<int>(row.before_kill.p99_us), " (", row.before_kill.samples,
                            ") ->");
        for (const kvtier::Percentiles& p : row.after_kill) {
          absl::StrAppend(&kill, " ", static_cast<int>(p.p50_us), "/", static_cast<int>(p.p99_us),
                          " (", p.samples, ")");
        }
      }
      std::printf("%5d %8llu %8.0f %11.0f %11.0f %11.0f %11.0f %s\n", row.nodes,
                  static_cast<unsigned long long>(row.blocks), row.put_rate,
                  row.chain_lookup.p50_us, row.chain_lookup.p99_us, row.short_lookup.p50_us,
                  row.short_lookup.p99_us, kill.c_str());
      std::fflush(stdout);
    }
    return 0;
  }
  std::printf("%10s %10s %10s %12s %12s %10s %11s\n", "blocks", "put/s", "rss_B/blk",
              "lookup_p50us", "lookup_p99us", "flush_ms", "restart_ms");
  for (uint64_t n : counts) {
    kvtier::Row row;
    if (int rc = kvtier::Run(kvtierd, n, chain, lookups, restart != 0, seed, &row); rc != 0) {
      return rc;
    }
    auto ms = [](double v) { return v < 0 ? std::string("-") : absl::StrCat(std::llround(v)); };
    std::printf("%10llu %10.0f %10.1f %12.0f %12.0f %10s %11s\n",
                static_cast<unsigned long long>(row.blocks), row.put_rate, row.rss_per_block,
                row.lookup.p50_us, row.lookup.p99_us, ms(row.flush_ms).c_str(),
                ms(row.restart_ms).c_str());
    std::fflush(stdout);
  }
  return 0;
}
