#!/bin/bash
# kvtier's Put over UCX against the bare transport (tests/bench/ucx_floor.cc), alternating
# within one run; with a second build directory, that build's Put too (an A/B of two
# trees on the same machine in the same run).
#
# usage: tests/bench/ucx_put_vs_floor.sh [BUILD_DIR [BASE_BUILD_DIR]]   (default: build)
# env:   ROUNDS (8) PHASE_SECONDS (2) BLOCK (2MiB) THREADS (4)
#        PIN=1: clients (the bench, the floor's sender) on CPU 0, servers (kvtierd, the
#        floor's receiver) on CPU 1, as two hosts of one core each (needs 2 CPUs)
#        FLAGS_0, FLAGS_1: more `kvtier bench` flags for the first / second build (the
#        same build twice with two settings: `FLAGS_1=--no-ucx-calls
#        tests/bench/ucx_put_vs_floor.sh build build`); each is labelled with its flags
#
# Starts one kvtierd --ucx per build (UCX_TLS=tcp, shared memory off, port 0, temp data
# dir), then ROUNDS times: `kvtier bench --no-shm --ucx --ops put` of each build (in the
# reverse order every other round: the second run of a round measured up to 10% better
# than the first), then ucx_floor with as many sends in flight as the bench has threads. Prints every run,
# each round's ratio to that round's floor (the machine's speed drifts between rounds;
# adjacent runs share it), and the medians: `ratio put/ucx-floor: median N.NNx` per
# build, and the CPU seconds per GB (client + server), the steadier measure on a busy
# machine. Servers are stopped by PID on exit. Needs python3.
set -euo pipefail

BUILDS=("${1:-build}")
[[ $# -ge 2 ]] && BUILDS+=("$2")
FLAGS=("${FLAGS_0:-}" "${FLAGS_1:-}")
LABELS=()
for i in "${!BUILDS[@]}"; do LABELS+=("${BUILDS[$i]}${FLAGS[$i]:+ ${FLAGS[$i]}}"); done
ROUNDS=${ROUNDS:-8}
PHASE_SECONDS=${PHASE_SECONDS:-2}
BLOCK=${BLOCK:-2MiB}
THREADS=${THREADS:-4}
client_pin=() server_pin=() floor_pin=()
if [[ ${PIN:-0} == 1 ]]; then
  client_pin=(taskset -c 0) server_pin=(taskset -c 1) floor_pin=(--sender-cpu 0 --receiver-cpu 1)
fi
FLOOR=${BUILDS[0]}/tests/bench/ucx_floor
for b in "${BUILDS[@]}"; do
  for bin in "$b/client/cli/kvtier" "$b/service/kvtierd"; do
    [[ -x $bin ]] || { echo "missing $bin (build targets kvtier, kvtierd)" >&2; exit 2; }
  done
done
[[ -x $FLOOR ]] || { echo "missing $FLOOR (build target ucx_floor)" >&2; exit 2; }

tmp=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

addrs=()
for i in "${!BUILDS[@]}"; do
  UCX_TLS=tcp "${server_pin[@]}" "${BUILDS[$i]}/service/kvtierd" --port 0 --data-dir "$tmp/data$i" \
    --hot-capacity 1GiB --ucx --shm-socket off >"$tmp/kvtierd$i.out" 2>"$tmp/kvtierd$i.err" &
  pids+=($!)
  for _ in $(seq 100); do
    grep -q "listening on" "$tmp/kvtierd$i.out" 2>/dev/null && break
    sleep 0.1
  done
  grep -q "listening on" "$tmp/kvtierd$i.out" ||
    { echo "kvtierd --ucx did not start" >&2; cat "$tmp/kvtierd$i.err" >&2; exit 1; }
  addrs+=("$(sed -n 's/^kvtierd listening on //p' "$tmp/kvtierd$i.out")")
done

echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  order=("${!BUILDS[@]}")
  (( r % 2 == 0 )) && order=($(printf '%s\n' "${order[@]}" | tac))
  for i in "${order[@]}"; do
    # shellcheck disable=SC2086  # FLAGS_i is a list of flags
    UCX_TLS=tcp "${client_pin[@]}" "${BUILDS[$i]}/client/cli/kvtier" bench --server "${addrs[$i]}" \
      --server-pid "${pids[$i]}" --threads "$THREADS" --keys 64 --seconds "$PHASE_SECONDS" \
      --block-size "$BLOCK" --ops put --no-shm --ucx --json ${FLAGS[$i]} | grep '^{' |
      sed "s|^{|{\"round\":$r,\"build\":\"${LABELS[$i]}\",|" | tee -a "$tmp/runs.jsonl"
  done
  UCX_TLS=tcp "$FLOOR" --size "$BLOCK" --window "$THREADS" --seconds "$PHASE_SECONDS" \
    "${floor_pin[@]}" |
    sed "s|^{|{\"round\":$r,\"build\":\"floor\",|" | tee -a "$tmp/runs.jsonl"
done
echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$tmp/runs.jsonl" "${LABELS[@]}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
floor = {r["round"]: r for r in rows if r["build"] == "floor"}
print()
for b in sys.argv[2:] + ["floor"]:
    runs = [r for r in rows if r["build"] == b]
    gbs = statistics.median(r["gb_per_s"] for r in runs)
    cpu = statistics.median(r["client_cpu_s_per_gb"] + r["server_cpu_s_per_gb"] for r in runs)
    line = "%-44s put median %6.2f GB/s  CPU %.3f s/GB client+server" % (b, gbs, cpu)
    if b != "floor":
        ratios = [r["gb_per_s"] / floor[r["round"]]["gb_per_s"] for r in runs]
        line += "  per round x floor: %s" % " ".join("%.2f" % x for x in ratios)
        print(line)
        print("ratio put/ucx-floor %s: median %.2fx" % (b, statistics.median(ratios)))
    else:
        print(line)
PY
