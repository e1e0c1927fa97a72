#!/bin/bash
# Cold-tier churn benchmark (issue 16; offline, not CI): a kvtierd with a small hot tier
# and a bounded cold tier takes far more distinct 2 MiB blocks than it can hold, then a
# mixed put/get phase, while the RocksDB directory's size is sampled every 5 s. Shows
# whether disk use tracks cold_capacity_bytes under deletes (target <= 1.3x after warm-up)
# and the Put latency while the cold tier is full and evicting (target p99 < 50 ms).
#
# usage: tests/bench/churn.sh [BUILD_DIR]              (default: build)
# env:   HOT (256MiB) COLD (4GiB) KEYS (10240: 20 GiB of distinct 2 MiB blocks, written once
#        by the untimed touch pass of `kvtier bench`) PUT_SECONDS (60) MIX_SECONDS (300)
#        MIX_KEYS (80% of COLD in blocks: the mixed phase's gets must hit) THREADS (2)
#        BLOCK (2MiB) EXTRA_KVTIERD_FLAGS ("")
# prints the samples (seconds, bytes on disk, ratio to COLD), the max ratio after warm-up
# (once the cold tier first reached capacity) and each phase's `kvtier bench` line.
set -euo pipefail

BUILD=${1:-build}
KVTIER=$BUILD/client/cli/kvtier
KVTIERD=$BUILD/service/kvtierd
HOT=${HOT:-256MiB}
COLD=${COLD:-4GiB}
KEYS=${KEYS:-10240}
PUT_SECONDS=${PUT_SECONDS:-60}
MIX_SECONDS=${MIX_SECONDS:-300}
THREADS=${THREADS:-2}
BLOCK=${BLOCK:-2MiB}
EXTRA_KVTIERD_FLAGS=${EXTRA_KVTIERD_FLAGS:-}

for bin in "$KVTIER" "$KVTIERD"; do
  [[ -x $bin ]] || { echo "missing $bin (build targets kvtier and kvtierd)" >&2; exit 2; }
done

to_bytes() {
  python3 -c "import re,sys; m=re.fullmatch(r'(\d+)([KMG]i?B)?', sys.argv[1]); \
u={'KiB':1<<10,'MiB':1<<20,'GiB':1<<30,None:1}[m.group(2)]; print(int(m.group(1))*u)" "$1"
}
cold_bytes=$(to_bytes "$COLD")
MIX_KEYS=${MIX_KEYS:-$(( cold_bytes * 8 / 10 / $(to_bytes "$BLOCK") ))}

tmp=$(mktemp -d)
kvtierd_pid=""
sampler_pid=""
cleanup() {
  [[ -n $sampler_pid ]] && kill "$sampler_pid" 2>/dev/null || true
  [[ -n $kvtierd_pid ]] && kill "$kvtierd_pid" 2>/dev/null && wait "$kvtierd_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# shellcheck disable=SC2086
"$KVTIERD" --port 0 --data-dir "$tmp/data" --hot-capacity "$HOT" --cold-capacity "$COLD" \
  --shm-socket off $EXTRA_KVTIERD_FLAGS >"$tmp/kvtierd.out" 2>"$tmp/kvtierd.log" &
kvtierd_pid=$!
for _ in $(seq 600); do
  grep -q "kvtierd listening on" "$tmp/kvtierd.out" 2>/dev/null && break
  sleep 0.1
done
addr=$(sed -n 's/^kvtierd listening on //p' "$tmp/kvtierd.out")
[[ -n $addr ]] || { echo "kvtierd did not start" >&2; cat "$tmp/kvtierd.log" >&2; exit 1; }

start=$(date +%s)
(
  while true; do
    bytes=$(du -sb "$tmp/data" 2>/dev/null | cut -f1)
    echo "$(( $(date +%s) - start )) $bytes"
    sleep 5
  done
) >"$tmp/samples" &
sampler_pid=$!

common=(--server "$addr" --block-size "$BLOCK" --threads "$THREADS" --no-shm)
"$KVTIER" bench "${common[@]}" --keys "$KEYS" --ops put --seconds "$PUT_SECONDS" | tee "$tmp/put.txt"
"$KVTIER" bench "${common[@]}" --keys "$MIX_KEYS" --mix put=1,get=1 --seconds "$MIX_SECONDS" |
  tee "$tmp/mix.txt"
kill "$sampler_pid"; sampler_pid=""

echo "samples (s, bytes on disk, x cold capacity):"
awk -v cold="$cold_bytes" '{ printf "  %5d %14.0f %6.2fx\n", $1, $2, $2 / cold }' "$tmp/samples"
# Warm-up ends at the first sample at or above the cold capacity.
awk -v cold="$cold_bytes" '
  $2 >= cold { warm = 1 }
  warm && $2 / cold > max { max = $2 / cold }
  END { if (warm) printf "max disk after warm-up: %.2fx cold capacity\n", max;
        else print "cold tier never reached capacity: raise KEYS" }' "$tmp/samples"
"$KVTIER" stats --server "$addr" | head -3
grep -h "Cumulative stall" "$tmp/data/LOG" | tail -1 || true
