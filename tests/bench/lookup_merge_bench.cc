// The client-side cost of a one-hop cluster Lookup (issue 16), in-process:
//
//   build/tests/bench/lookup_merge_bench
//
// BM_LookupMerge/N: protocol::LookupMerge over a ring of N nodes for a 2,048-key chain:
// the plan (every key's owners, R = 1), one compact answer per owner with every key of
// its share hot, the merge and the compact result. What ClusterClient::Lookup computes
// beside its calls (the answers here are built, not parsed).
// BM_StartThreads/N: starting and joining N threads that do nothing, what a thread per
// owner would add to every Lookup (why ClusterClient::Lookup calls asynchronously).
#include <benchmark/benchmark.h>

#include <string>
#include <thread>
#include <vector>

#include "protocol/lookup_form.h"
#include "protocol/lookup_merge.h"
#include "protocol/rendezvous.h"

namespace kvtier::protocol {
namespace {

constexpr int kChainKeys = 2048;

void BM_LookupMerge(benchmark::State& state) {
  std::vector<std::string> ids;
  for (int i = 0; i < state.range(0); ++i) ids.push_back("127.0.0.1:4000" + std::to_string(i));
  const RendezvousRing ring(ids);
  std::vector<std::string> keys;
  for (int i = 0; i < kChainKeys; ++i) keys.push_back(std::string(32, 'k') + std::to_string(i));
  const std::vector<std::string_view> views(keys.begin(), keys.end());
  for (auto _ : state) {
    LookupMerge merge(ring, 1, "scale", views);
    for (size_t n = 0; n < ring.size(); ++n) {
      const std::vector<v1::Tier> tiers(merge.shares()[n].index.size(), v1::TIER_HOT);
      const std::vector<uint64_t> leases(tiers.size(), 0);
      v1::LookupResponse answer;
      EncodeCompactLookup(tiers, leases, ring.nodes()[n], &answer);
      merge.Add(n, answer);
    }
    benchmark::DoNotOptimize(merge.Result(/*compact=*/true));
  }
}
BENCHMARK(BM_LookupMerge)->Arg(3)->Arg(5)->Unit(benchmark::kMicrosecond);

void BM_StartThreads(benchmark::State& state) {
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (int i = 0; i < state.range(0); ++i) threads.emplace_back([] {});
    for (std::thread& t : threads) t.join();
  }
}
BENCHMARK(BM_StartThreads)->Arg(2)->Arg(4)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace kvtier::protocol

BENCHMARK_MAIN();
