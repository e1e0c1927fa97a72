#!/usr/bin/env bash
# llm-d's KV-cache indexer against real kvtierd processes (tests/router/test_llmd_indexer.py).
# Builds the Go harness (main.go) against each pinned indexer release, through the Go module
# proxy into the default module cache (GOMODCACHE; a rerun downloads nothing and rebuilds
# from Go's build cache in seconds), then runs the pytest suite with each.
#   tests/router/run.sh [build dir]       (default: ./build; needs kvtierd and kvtier_python)
# Versions: go.mod pins v0.8.1; go.v0.9.0.mod pins v0.9.0 (read through -modfile).
set -euo pipefail
BUILD="$(cd "${1:-$(dirname "$0")/../../build}" && pwd)"
cd "$(dirname "$0")"
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
command -v go >/dev/null || PATH="/usr/local/go/bin:$PATH"  # where this kind of machine has it
command -v go >/dev/null || { echo "tests/router: needs Go >= 1.25 on PATH" >&2; exit 1; }
for mod in go.mod go.v0.9.0.mod; do
  [ -f "$mod" ] || continue
  version="$(sed -n 's|^\s*github.com/llm-d/llm-d-kv-cache \(v[0-9.]*\).*|\1|p' "$mod" | head -1)"
  bin="$BUILD/llmd_indexer_$version"
  echo "tests/router: building llm-d's indexer $version ($mod)"
  go build -modfile="$mod" -o "$bin" .
  KVTIER_BINARY_DIR="$BUILD" KVTIER_LLMD_INDEXER="$bin" \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider test_llmd_indexer.py
done
