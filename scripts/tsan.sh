#!/usr/bin/env bash
# README "ThreadSanitizer": builds the build-tsan tree (-DKVTIER_TSAN=ON: -fsanitize=thread,
# and common/mutex.h over std::mutex so TSAN sees every lock; Debian's Abseil is not
# TSAN-instrumented) and runs the concurrency tests in it: thread pool, store, service
# reactors and helpers, shared memory, events, cluster client. Any report fails its test.
# Not part of scripts/test.sh (CI time); run it after changing concurrent code.
# JOBS=n limits the build and test parallelism (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD"
jobs="${JOBS:-$(nproc)}"
tests=(thread_pool_test tiered_store_concurrency_test tiered_store_test kv_cache_service_test
       shm_server_test put_watchdog_test peer_fanout_test peer_health_test membership_test
       zmq_publisher_test shared_memory_test cluster_client_test)
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DKVTIER_TSAN=ON \
  -DKVTIER_BUILD_BENCHMARKS=OFF >/dev/null
ninja -C build-tsan -j "$jobs" kvtierd "${tests[@]}"
# gRPC, protobuf and RocksDB are not instrumented: their internal synchronization is
# invisible, so reports whose every frame is inside them are suppressed (scripts/tsan.supp).
export TSAN_OPTIONS="suppressions=$PWD/scripts/tsan.supp halt_on_error=0 exitcode=66 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
regex="^($(IFS='|'; echo "${tests[*]}"))\$"
(cd build-tsan && ctest --output-on-failure -j "$jobs" -R "$regex")
