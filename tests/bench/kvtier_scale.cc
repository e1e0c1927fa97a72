// kvtier_scale: the index-scale benchmark of issue 16 (offline, not CI). For each block
// count it starts a real kvtierd (port 0, temp data dir), fills that many tiny blocks in
// prefix chains through the C++ client, and prints one table row:
//   blocks        blocks stored
//   put/s         blocks per second of the fill (PutBlocks of one chain per call)
//   rss_B/blk     kvtierd's RSS growth per block over the fill (VmRSS; the hot arena is
//                 touched at open, so this is metadata only: index, hash table, policy,
//                 allocator slack)
//   lookup p50/p99  end-to-end Lookup of a whole resident chain (--chain keys), one thread
//   flush_ms      SIGTERM to exit: the shutdown flush of every block (write-back debt
//                 unbounded here so the fill measures the index, not RocksDB)
//   restart_ms    spawn to `kvtierd listening` over the filled cold tier
//
// usage: kvtier_scale [--kvtierd PATH] [--blocks 10000,100000,1000000] [--chain 2048]
//                     [--lookups 300] [--seed 1]
#include <signal.h>

#include <algorithm>
#include <chrono>
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
#include "protocol/convert.h"
#include "storage/kv/codec.h"
#include "tests/testing/layouts.h"
#include "tests/testing/server_process.h"
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

struct Row {
  uint64_t blocks = 0;
  double put_rate = 0;
  double rss_per_block = 0;
  double lookup_p50_us = 0;
  double lookup_p99_us = 0;
  double flush_ms = 0;
  double restart_ms = 0;
};

int Run(const std::string& kvtierd, uint64_t blocks, uint32_t chain, int lookups, uint64_t seed,
        Row* row) {
  testing::TempDir dir;
  const std::string config = dir.Sub("kvtierd.textproto");
  // Unbounded write-back debt: the fill measures the index, the SIGTERM the flush.
  std::ofstream(config) << "max_unflushed_bytes: 1099511627776\nmax_unflushed_blocks: "
                           "4000000000\nshutdown_grace_ms: 600000\nmax_keys_per_request: "
                        << std::max<uint32_t>(chain, 4096) << "\n";
  const kv::Layout layout = TinyLayout();
  const std::string blob = *kv::Encode(kv::CodecId::kFp16, layout, 1,
                                       kv::AsBytes(std::string(layout.BytesPerBlock(), '\1')));
  const std::string blob0 = *kv::Encode(kv::CodecId::kFp16, layout, 0,
                                        kv::AsBytes(std::string(layout.BytesPerBlock(), '\1')));
  // Hot tier: every block's slot (256-byte granules) with headroom, so nothing demotes.
  const uint64_t hot = std::max<uint64_t>(64ull << 20, blocks * 512 * 5 / 4);
  const std::vector<std::string> args = {"--port",       "0",  "--data-dir", dir.Sub("data"),
                                         "--config",     config, "--hot-capacity",
                                         absl::StrCat(hot), "--shm-socket", "off",
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
  v1::NamespaceSpec spec;
  spec.set_name("scale");
  spec.set_model_id("kvtier_scale");
  *spec.mutable_layout() = protocol::ToProto(layout);
  spec.set_codec(v1::CODEC_FP16);
  o.namespace_spec = spec;
  auto c = client::Client::Connect(o);
  if (!c.ok()) {
    std::fprintf(stderr, "connect: %s\n", c.status().ToString().c_str());
    return 1;
  }
  const uint64_t chains = (blocks + chain - 1) / chain;
  auto put_chain = [&](uint64_t ch) -> bool {
    std::vector<std::string> keys;
    std::vector<client::PutBlock> puts;
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(chain, blocks - ch * chain));
    for (uint32_t i = 0; i < n; ++i) keys.push_back(ChainKey(ch, i));
    for (uint32_t i = 0; i < n; ++i) {
      client::PutBlock b;
      b.key = keys[i];
      b.parent_key = i == 0 ? "" : keys[i - 1];
      b.block_index = i;
      b.payload = kv::AsBytes(i == 0 ? blob0 : blob);
      puts.push_back(std::move(b));
    }
    auto r = (*c)->PutBlocks("scale", puts);
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
  std::vector<double> lat;
  const uint64_t full_chains = blocks / chain;
  for (int i = 0; i < lookups && full_chains > 0; ++i) {
    const uint64_t ch = rng() % full_chains;
    std::vector<std::string> keys;
    for (uint32_t k = 0; k < chain; ++k) keys.push_back(ChainKey(ch, k));
    const auto l0 = Clock::now();
    auto r = (*c)->Lookup("scale", keys);
    lat.push_back(MsSince(l0) * 1000);
    if (!r.ok() || r->prefix_blocks() != chain) {
      std::fprintf(stderr, "lookup: %s\n", r.ok() ? "short prefix" : r.status().ToString().c_str());
      return 1;
    }
  }
  std::sort(lat.begin(), lat.end());
  if (!lat.empty()) {
    row->lookup_p50_us = lat[lat.size() / 2];
    row->lookup_p99_us = lat[std::min(lat.size() - 1, lat.size() * 99 / 100)];
  }
  c->reset();

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

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) {
  std::string kvtierd = kvtier::testing::KvtierdPath();
  std::vector<uint64_t> counts = {10000, 100000, 1000000};
  uint32_t chain = 2048;
  int lookups = 300;
  uint64_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--kvtierd") {
      kvtierd = value;
    } else if (flag == "--blocks") {
      counts.clear();
      for (absl::string_view part : absl::StrSplit(value, ',')) {
        uint64_t n = 0;
        if (!absl::SimpleAtoi(part, &n) || n == 0) return 2;
        counts.push_back(n);
      }
    } else if (flag == "--chain") {
      if (!absl::SimpleAtoi(value, &chain) || chain == 0) return 2;
    } else if (flag == "--lookups") {
      if (!absl::SimpleAtoi(value, &lookups)) return 2;
    } else if (flag == "--seed") {
      if (!absl::SimpleAtoi(value, &seed)) return 2;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::printf("%10s %10s %10s %12s %12s %10s %11s\n", "blocks", "put/s", "rss_B/blk",
              "lookup_p50us", "lookup_p99us", "flush_ms", "restart_ms");
  for (uint64_t n : counts) {
    kvtier::Row row;
    if (int rc = kvtier::Run(kvtierd, n, chain, lookups, seed, &row); rc != 0) return rc;
    std::printf("%10llu %10.0f %10.1f %12.0f %12.0f %10.0f %11.0f\n",
                static_cast<unsigned long long>(row.blocks), row.put_rate, row.rss_per_block,
                row.lookup_p50_us, row.lookup_p99_us, row.flush_ms, row.restart_ms);
    std::fflush(stdout);
  }
  return 0;
}
