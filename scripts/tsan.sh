#!/usr/bin/env bash
# docs/development.md: builds the build-tsan tree (-DKVTIER_TSAN=ON: -fsanitize=thread,
# and common/mutex.h over std::mutex so TSAN sees every lock; Debian's Abseil is not
# TSAN-instrumented) and runs the concurrency tests in it: thread pool, store, service
# reactors and helpers, shared memory, events, cluster client. Any report fails its test.
# `scripts/tsan.sh ci` (what scripts/test.sh runs) builds and runs only the store (the cold
# tier's O_DIRECT reader thread and the prefetch readers included), shared-memory server,
# events and put-watchdog tests; without it, every test below.
# JOBS=n limits the build and test parallelism (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD"
jobs="${JOBS:-$(nproc)}"
# Tests whose threads synchronize only through kvtier's own locks (and RocksDB / zmq):
# every report is real.
tests=(mutex_test thread_pool_test tiered_store_concurrency_test tiered_store_test
       tiered_store_recover_test tiered_store_prefetch_test rocksdb_cold_tier_test shm_server_test
       put_watchdog_test peer_health_test membership_test zmq_publisher_test event_log_test)
# Tests whose threads hand off through gRPC callbacks: run with scripts/tsan-grpc.supp too.
grpc_tests=(kv_cache_service_test peer_fanout_test shared_memory_test cluster_client_test
            client_test)
targets=(kvtierd kvtier)
if [ "${1:-}" = ci ]; then
  tests=(mutex_test tiered_store_concurrency_test tiered_store_test tiered_store_recover_test
         tiered_store_prefetch_test rocksdb_cold_tier_test shm_server_test put_watchdog_test
         event_log_test zmq_publisher_test)
  grpc_tests=()
  targets=()
fi
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
  -DKVTIER_TSAN=ON -DKVTIER_BUILD_BENCHMARKS=OFF >/dev/null
ninja -C build-tsan -j "$jobs" "${targets[@]}" "${tests[@]}" "${grpc_tests[@]}"
base="ignore_noninstrumented_modules=1 halt_on_error=0 exitcode=66 second_deadlock_stack=1"
# TSAN reads one suppression file: the gRPC tests get both lists, concatenated.
cat scripts/tsan.supp scripts/tsan-grpc.supp > build-tsan/tsan-grpc-all.supp
# UCX's libucm (linked through kvtier_ucx) hooks madvise and takes a rwlock in it,
# which TSAN intercepts on an exiting thread's stack release: a segfault in every test
# that links the service. UCX_MEM_MMAP_HOOK_MODE=none leaves madvise alone.
export UCX_MEM_MMAP_HOOK_MODE=none
run() {  # run <suppression file> <tests...>
  local supp="$1"
  shift
  (cd build-tsan && TSAN_OPTIONS="$base suppressions=$supp ${TSAN_OPTIONS:-}" \
     ctest --output-on-failure -j "$jobs" -R "^($(IFS='|'; echo "$*"))\$")
}
rc=0
run "$PWD/scripts/tsan.supp" "${tests[@]}" || rc=$?
if [ "${#grpc_tests[@]}" -gt 0 ]; then
  run "$PWD/build-tsan/tsan-grpc-all.supp" "${grpc_tests[@]}" || rc=$?
fi
exit "$rc"
