#!/usr/bin/env bash
# The long measurements behind the figures in docs/ (not part of CI). Builds first.
#   scripts/bench.sh            everything below, in order
#   scripts/bench.sh codecs|store|redis|eval|replay|recovery   one part
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
part=${1:-all}
trace=data/mooncake_synthetic_trace.jsonl
run() { [ "$part" = all ] || [ "$part" = "$1" ]; }
if run codecs; then build/tests/bench/codec_bench --benchmark_min_time=0.5; fi
if run store; then
  build/tests/bench/store_bench --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_min_time=0.5
fi
if run recovery; then  # docs/recovery.md: 100 one-byte flips, slab scan, restart at 10^6 blocks
  KVTIER_FLIP_RUNS=100 build/tests/storage/rocksdb_cold_tier_recovery_test
  build/tests/bench/store_recovery_bench
fi
if run redis; then REPEAT=3 PHASE_SECONDS=5 tests/bench/redis_vs_kvtier.sh build; fi
if run eval; then
  build/client/cli/kvtier eval codecs
  build/client/cli/kvtier eval compaction
fi
if run replay; then
  build/client/cli/kvtier replay --trace "$trace" --sweep
  build/client/cli/kvtier replay --trace "$trace" --sweep-codecs --sim
fi
