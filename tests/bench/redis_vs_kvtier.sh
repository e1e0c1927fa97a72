#!/bin/bash
# Redis vs kvtier on loopback with the same workload (`kvtier bench`): SET/GET vs
# Put/Get of 2 MiB blocks over a key space that fits kvtierd's hot tier.
#
# usage: tests/bench/redis_vs_kvtier.sh [BUILD_DIR]        (default: build)
# env:   THREADS (4) KEYS (64) PHASE_SECONDS (5) BLOCK (2MiB) REPEAT (3) EXTRA_KVTIER_FLAGS ("")
#        SMALL_BLOCKS ("64KiB 256KiB"; "" skips the small-block rounds)
#
# Starts redis-server (persistence off, on a free port and a Unix socket) and kvtierd
# (port 0, temp data dir), then REPEAT times, alternating:
#   redis          `kvtier bench --redis` over loopback TCP (hiredis)
#   redis-unix     the same over Redis' Unix socket (Redis' best same-node transport)
#   redis-raw      GET replies read straight off the socket (an upper bound for Redis)
#   kvtier         `kvtier bench --server --no-shm`: payloads over gRPC/TCP
#   kvtier-shm     same-node shared memory, payloads staged from private memory (the
#                  client's default on the same host)
#   kvtier-shm-zc  shared memory with --shared-buffers (payloads already in the region)
# prints every run and the medians (GB/s, latency, CPU seconds per GB of client and
# server) with the kvtier/Redis ratios. Then, for each of SMALL_BLOCKS, the small-block
# rounds (small_block_rounds below): Redis over TCP and its Unix socket against kvtier with
# the client's default settings (shared memory, and TCP with --no-shm), printing
# `ratio small64k/redis put: N.NNx` (kvtier's default transport against Redis' faster one)
# and the TCP ratio. Then (UCX=1, the default) the cross-host rounds of ucx_rounds below:
# redis over TCP vs kvtier-ucx (and ucx-floor, the transport alone) at 2 MiB and 256 KiB, printing
# `ratio remote/redis put|get: N.NNx`. Both servers are stopped by PID on exit. Needs
# redis-server, redis-cli and python3.
set -euo pipefail

BUILD=${1:-build}
KVTIER=$BUILD/client/cli/kvtier
KVTIERD=$BUILD/service/kvtierd
THREADS=${THREADS:-4}
KEYS=${KEYS:-64}
PHASE_SECONDS=${PHASE_SECONDS:-5}
BLOCK=${BLOCK:-2MiB}
REPEAT=${REPEAT:-3}
EXTRA_KVTIER_FLAGS=${EXTRA_KVTIER_FLAGS:-}

for bin in "$KVTIER" "$KVTIERD" "$BUILD/tests/bench/ucx_floor"; do
  [[ -x $bin ]] || { echo "missing $bin (build targets kvtier, kvtierd and ucx_floor)" >&2; exit 2; }
done
command -v redis-server >/dev/null || { echo "redis-server not found" >&2; exit 2; }

tmp=$(mktemp -d)
redis_pid=""
kvtierd_pid=""
ucx_kvtierd_pid=""
cleanup() {
  for pid in $redis_pid $kvtierd_pid $ucx_kvtierd_pid; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in $redis_pid $kvtierd_pid $ucx_kvtierd_pid; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

# A free port for Redis (kvtierd picks its own with --port 0).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --bind 127.0.0.1 --port "$port" --unixsocket "$tmp/redis.sock" --save '' \
  --appendonly no --daemonize no --protected-mode yes >"$tmp/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 100); do
  [[ $(redis-cli -p "$port" ping 2>/dev/null) == PONG ]] && break
  sleep 0.1
done
[[ $(redis-cli -p "$port" ping) == PONG ]] || { echo "redis did not start" >&2; cat "$tmp/redis.log" >&2; exit 1; }

"$KVTIERD" --port 0 --data-dir "$tmp/data" --hot-capacity 1GiB >"$tmp/kvtierd.out" 2>"$tmp/kvtierd.err" &
kvtierd_pid=$!
for _ in $(seq 300); do
  grep -q "listening on" "$tmp/kvtierd.out" 2>/dev/null && break
  sleep 0.1
done
grep -q "listening on" "$tmp/kvtierd.out" || { echo "kvtierd did not start" >&2; cat "$tmp/kvtierd.err" >&2; exit 1; }
kvtier_addr=$(sed -n 's/^kvtierd listening on //p' "$tmp/kvtierd.out")

BLOCK_BYTES=$(python3 -c "
import re, sys
m = re.fullmatch(r'(\d+)(KiB|MiB|GiB)?', '$BLOCK')
print(int(m.group(1)) * {None: 1, 'KiB': 1024, 'MiB': 1 << 20, 'GiB': 1 << 30}[m.group(2)])")
common=(--threads "$THREADS" --keys "$KEYS" --seconds "$PHASE_SECONDS" --block-size "$BLOCK" --ops put,get --json)
echo "# redis 127.0.0.1:$port vs kvtierd $kvtier_addr: $THREADS threads, $BLOCK blocks, $KEYS keys, ${PHASE_SECONDS}s per phase, $REPEAT rounds"
for round in $(seq "$REPEAT"); do
  "$KVTIER" bench --redis "127.0.0.1:$port" --server-pid "$redis_pid" "${common[@]}" | tee -a "$tmp/results.jsonl"
  "$KVTIER" bench --redis "unix:$tmp/redis.sock" --server-pid "$redis_pid" "${common[@]}" | tee -a "$tmp/results.jsonl"
  # Upper bound for Redis GET: the reply read straight into the destination buffer.
  "$KVTIER" bench --redis "127.0.0.1:$port" --server-pid "$redis_pid" --redis-raw-get "${common[@]}" --ops get | tee -a "$tmp/results.jsonl"
  for mode in --no-shm "" --shared-buffers; do
    # shellcheck disable=SC2086
    "$KVTIER" bench --server "$kvtier_addr" --server-pid "$kvtierd_pid" "${common[@]}" $mode $EXTRA_KVTIER_FLAGS | tee -a "$tmp/results.jsonl"
  done
done

# Calibration against machine-baselines.md section 3: redis-benchmark's own client
# (-c THREADS, one fixed key).
if command -v redis-benchmark >/dev/null; then
  echo "# redis-benchmark -d $BLOCK_BYTES -n 2000 -c $THREADS (reference):"
  redis-benchmark -h 127.0.0.1 -p "$port" -t set,get -d "$BLOCK_BYTES" -n 2000 -c "$THREADS" --csv |
    tail -n +2 | tr -d '"' |
    awk -F, -v b="$BLOCK_BYTES" '{printf "#   redis-benchmark %s: %.0f ops/s, %.2f GB/s\n", $1, $2, $2 * b / 1e9}'
fi

python3 - "$tmp/results.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
med = {}
systems = ("redis", "redis-unix", "redis-raw", "kvtier", "kvtier-shm", "kvtier-shm-zc")
for sys_name in systems:
    for phase in ("put", "get"):
        runs = [r for r in rows if r["system"] == sys_name and r["phase"] == phase]
        if not runs:
            continue
        m = lambda k: statistics.median(r[k] for r in runs)
        med[sys_name, phase] = (m("gb_per_s"), min(r["gb_per_s"] for r in runs),
                                max(r["gb_per_s"] for r in runs), m("p50_us"), m("p99_us"),
                                m("client_cpu_s_per_gb"), m("server_cpu_s_per_gb"))
print()
print("%-13s %-4s %22s %9s %9s %22s" % ("system", "op", "GB/s median (min-max)", "p50 us",
                                        "p99 us", "CPU s/GB client+server"))
for (s, p), (m, lo, hi, p50, p99, cc, sc) in med.items():
    print("%-13s %-4s %8.2f (%.2f-%.2f)      %9.0f %9.0f %10.3f + %.3f" % (s, p, m, lo, hi, p50, p99, cc, sc))
# Ratios against Redis' faster transport of the two (TCP or Unix socket) per op.
for k in ("kvtier", "kvtier-shm", "kvtier-shm-zc"):
    for p in ("put", "get"):
        if (k, p) not in med:
            continue
        best = max(("redis", "redis-unix"), key=lambda r: med.get((r, p), (0,))[0])
        print("ratio %s/%s %s: %.2fx" % (k, best, p, med[k, p][0] / med[best, p][0]))
if ("redis-raw", "get") in med:
    print("ratio kvtier-shm/redis-raw get: %.2fx" % (med["kvtier-shm", "get"][0] / med["redis-raw", "get"][0]))
PY

# --- Small-block rounds (issue 16): the per-call cost at 64 KiB and 256 KiB ---------------
# kvtier with its client's defaults (no tuning flags: coalescing, channels, shared memory
# as a same-host engine gets them) against Redis over TCP and its Unix socket; REPEAT
# alternating rounds per size, medians of ops/s.
small_block_rounds() {
  local block=$1 label out
  label=small$(python3 -c "
import re
m = re.fullmatch(r'(\d+)(KiB|MiB)', '$block')
print(int(m.group(1)) * (1024 if m.group(2) == 'MiB' else 1), end='')")k
  out=$tmp/$label.jsonl
  local small=(--threads "$THREADS" --keys "$KEYS" --seconds "$PHASE_SECONDS" --block-size "$block" --ops put,get --json)
  echo
  echo "# $label: $THREADS threads, $block blocks, $KEYS keys, ${PHASE_SECONDS}s per phase, $REPEAT rounds"
  for _ in $(seq "$REPEAT"); do
    "$KVTIER" bench --redis "127.0.0.1:$port" --server-pid "$redis_pid" "${small[@]}" | tee -a "$out"
    "$KVTIER" bench --redis "unix:$tmp/redis.sock" --server-pid "$redis_pid" "${small[@]}" | tee -a "$out"
    "$KVTIER" bench --server "$kvtier_addr" --server-pid "$kvtierd_pid" "${small[@]}" | tee -a "$out"
    "$KVTIER" bench --server "$kvtier_addr" --server-pid "$kvtierd_pid" "${small[@]}" --no-shm | tee -a "$out"
  done
  python3 - "$out" "$label" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
label = sys.argv[2]
med = {}
for s in ("redis", "redis-unix", "kvtier-shm", "kvtier"):
    for p in ("put", "get"):
        runs = [r for r in rows if r["system"] == s and r["phase"] == p]
        if runs:
            med[s, p] = (statistics.median(r["ops_per_s"] for r in runs),
                         statistics.median(r["p50_us"] for r in runs),
                         statistics.median(r["p99_us"] for r in runs))
print("%-13s %-4s %12s %9s %9s" % ("system", "op", "ops/s median", "p50 us", "p99 us"))
for (s, p), (ops, p50, p99) in med.items():
    print("%-13s %-4s %12.0f %9.0f %9.0f" % (s, p, ops, p50, p99))
for p in ("put", "get"):
    best = max(("redis", "redis-unix"), key=lambda r: med.get((r, p), (0,))[0])
    if ("kvtier-shm", p) in med:
        print("ratio %s/redis %s: %.2fx" % (label, p, med["kvtier-shm", p][0] / med[best, p][0]))
    if ("kvtier", p) in med:
        print("ratio %s-tcp/redis %s: %.2fx" % (label, p, med["kvtier", p][0] / med[best, p][0]))
PY
}
for small_block in ${SMALL_BLOCKS-64KiB 256KiB}; do
  small_block_rounds "$small_block"
done

# ---------------------------------------------------------------------------------------
# Cross-host path over UCX (issue 12). A second kvtierd with --ucx, UCX forced onto its
# TCP transport (UCX_TLS=tcp, so no shared-memory transport can flatter it), clients with
# the shared-memory path off and UCX forced (`kvtier bench --ucx --no-shm`), against Redis
# over TCP in the same run, REPEAT rounds alternating, at 2 MiB and 256 KiB blocks.
# Each round also runs tests/bench/ucx_floor (system "ucx-floor"): the same payloads as
# UCX active messages between two bare transport::Workers, as many in flight as threads,
# no gRPC and no store: what UCX over TCP alone gives on this machine.
# Prints the medians and `ratio remote/redis put: N.NNx` / `ratio remote/redis get:
# N.NNx` (2 MiB), `ratio ucx-floor/redis put` and `ratio remote/ucx-floor put` (the
# transport's ceiling against Redis, and kvtier's share of it), then the same with
# "256KiB" for the small blocks.
ucx_rounds() {
  UCX_TLS=tcp "$KVTIERD" --port 0 --data-dir "$tmp/data-ucx" --hot-capacity 1GiB --ucx \
    --shm-socket off >"$tmp/kvtierd-ucx.out" 2>"$tmp/kvtierd-ucx.err" &
  ucx_kvtierd_pid=$!
  for _ in $(seq 300); do
    grep -q "listening on" "$tmp/kvtierd-ucx.out" 2>/dev/null && break
    sleep 0.1
  done
  grep -q "listening on" "$tmp/kvtierd-ucx.out" ||
    { echo "kvtierd --ucx did not start" >&2; cat "$tmp/kvtierd-ucx.err" >&2; exit 1; }
  local addr
  addr=$(sed -n 's/^kvtierd listening on //p' "$tmp/kvtierd-ucx.out")
  echo
  echo "# cross-host path: kvtierd --ucx $addr with UCX_TLS=tcp vs redis over TCP"
  for block in 2MiB 256KiB; do
    local c=(--threads "$THREADS" --keys "$KEYS" --seconds "$PHASE_SECONDS" --block-size "$block"
             --ops put,get --json)
    for _ in $(seq "$REPEAT"); do
      "$KVTIER" bench --redis "127.0.0.1:$port" --server-pid "$redis_pid" "${c[@]}" |
        tee -a "$tmp/ucx-$block.jsonl"
      UCX_TLS=tcp "$KVTIER" bench --server "$addr" --server-pid "$ucx_kvtierd_pid" "${c[@]}" \
        --no-shm --ucx | tee -a "$tmp/ucx-$block.jsonl"
      # The transport alone (tests/bench/ucx_floor.cc): the same bytes, as many in flight
      # as there are threads, no gRPC and no store.
      UCX_TLS=tcp "$BUILD/tests/bench/ucx_floor" --size "$block" \
        --window "$THREADS" --seconds "$PHASE_SECONDS" | tee -a "$tmp/ucx-$block.jsonl"
    done
  done
  python3 - "$tmp/ucx-2MiB.jsonl" "$tmp/ucx-256KiB.jsonl" <<'PY'
import json, statistics, sys
for path, label in ((sys.argv[1], ""), (sys.argv[2], " 256KiB")):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    med = {}
    for s in ("redis", "kvtier-ucx", "ucx-floor"):
        for p in ("put", "get"):
            runs = [r for r in rows if r["system"] == s and r["phase"] == p]
            if runs:
                med[s, p] = {k: statistics.median(r[k] for r in runs)
                             for k in ("gb_per_s", "p50_us", "p99_us", "client_cpu_s_per_gb",
                                       "server_cpu_s_per_gb")}
    print()
    print("%-11s %-4s %-7s %8s %9s %9s %22s" % ("system", "op", "block", "GB/s", "p50 us",
                                                "p99 us", "CPU s/GB client+server"))
    for (s, p), m in med.items():
        print("%-11s %-4s %-7s %8.2f %9.0f %9.0f %10.3f + %.3f" % (
            s, p, label.strip() or "2MiB", m["gb_per_s"], m["p50_us"], m["p99_us"],
            m["client_cpu_s_per_gb"], m["server_cpu_s_per_gb"]))
    for p in ("put", "get"):
        if ("kvtier-ucx", p) in med and ("redis", p) in med:
            print("ratio remote/redis%s %s: %.2fx" % (
                label, p, med["kvtier-ucx", p]["gb_per_s"] / med["redis", p]["gb_per_s"]))
    if ("ucx-floor", "put") in med and ("redis", "put") in med:
        floor = med["ucx-floor", "put"]["gb_per_s"]
        print("ratio ucx-floor/redis%s put: %.2fx (the transport alone)" % (
            label, floor / med["redis", "put"]["gb_per_s"]))
        if ("kvtier-ucx", "put") in med:
            print("ratio remote/ucx-floor%s put: %.2fx" % (
                label, med["kvtier-ucx", "put"]["gb_per_s"] / floor))
PY
  kill "$ucx_kvtierd_pid" 2>/dev/null || true
  wait "$ucx_kvtierd_pid" 2>/dev/null || true
  ucx_kvtierd_pid=""
}
if [[ ${UCX:-1} == 1 ]]; then
  ucx_rounds
fi
