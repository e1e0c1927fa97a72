#!/usr/bin/env bash
# README command 2: install dependencies, build, and run the whole test suite; then build
# the storage/kv unit tests with ASAN+UBSAN and run them too.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
(cd build && ctest --output-on-failure -j "$(nproc)")
export CCACHE_BASEDIR="$PWD"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKVTIER_SANITIZE=ON \
  -DKVTIER_BUILD_BENCHMARKS=OFF >/dev/null
ninja -C build-asan -j "$(nproc)" kvtier_sanitized_tests
(cd build-asan && ctest --output-on-failure -j "$(nproc)" -L sanitized)
