#!/usr/bin/env bash
# README command 2: install dependencies, build, and run the whole test suite (CTest, then
# the Python client's pytest suite); then build the storage/kv unit tests with ASAN+UBSAN
# and run them too.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
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
export CCACHE_BASEDIR="$PWD"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKVTIER_SANITIZE=ON \
  -DKVTIER_BUILD_BENCHMARKS=OFF >/dev/null
ninja -C build-asan -j "$(nproc)" kvtier_sanitized_tests
(cd build-asan && ctest --output-on-failure -j "$(nproc)" -L sanitized)
