#!/usr/bin/env bash
# README command 2: install dependencies, build, and run the whole test suite: clang's
# thread-safety analysis, CTest, the Python client's pytest suite, the real-model tests
# (SmolLM2 through transformers), llm-d's indexer against kvtierd; then the sanitized
# tests under ASAN+UBSAN and the concurrency tests under TSAN.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
# Clang's -Wthread-safety over the production sources (the lock annotations, checked).
scripts/thread_safety.sh build
(cd build && ctest --output-on-failure -j "$(nproc)")
# The Python client (client/python) against real kvtierd processes; pytest's exit code 5
# ("no tests collected") means the suite went missing, so it fails the run with a message.
rc=0
KVTIER_BINARY_DIR="$PWD/build" /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python \
  --ignore=tests/python/model || rc=$?
if [ "$rc" -eq 5 ]; then echo "scripts/test.sh: pytest collected no tests in tests/python" >&2; exit 1; fi
[ "$rc" -eq 0 ] || exit "$rc"
# The real-model tests (SmolLM2-135M through transformers) on the venv scripts/model_env.sh
# creates or reuses (it also fetches the model with scripts/model.sh).
model_python="$(scripts/model_env.sh | tail -1)"
KVTIER_BINARY_DIR="$PWD/build" "$model_python" -m pytest -q -p no:cacheprovider tests/python/model
# llm-d's KV-cache indexer (Go, pinned in tests/router/go*.mod) scoring real kvtierd.
tests/router/run.sh "$PWD/build"
export CCACHE_BASEDIR="$PWD"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKVTIER_SANITIZE=ON \
  -DKVTIER_BUILD_BENCHMARKS=OFF >/dev/null
ninja -C build-asan -j "$(nproc)" kvtier_sanitized_tests
(cd build-asan && ctest --output-on-failure -j "$(nproc)" -L sanitized)
# ThreadSanitizer over the store, shared-memory server, events and put-watchdog tests
# (scripts/tsan.sh ci; docs/recovery.md "ThreadSanitizer in CI" has its cost).
scripts/tsan.sh ci
