#!/bin/bash
# fill_rss.sh BUILD_DIR BLOCKS: kvtierd's RSS growth per block over a kvtier_scale fill,
# sampled from outside once a second, for block counts whose full kvtier_scale row cannot
# finish (at 10^7 tiny blocks the SIGTERM flush needs more slab than the default cold
# capacity). Samples VmRSS from `serving` until it has grown and then held still for 6 s,
# stops kvtier_scale and its kvtierd before the flush, and prints the growth per block
# (start-up allocations and the warm-up chain included) and the fill rate over the
# seconds of growth. Offline, not CI.
set -eu
build=$1
blocks=$2
log=$(mktemp)
"$build/tests/bench/kvtier_scale" --blocks "$blocks" --lookups 1 >"$log" 2>&1 &
scale=$!
pid=""
while [ -z "$pid" ]; do pid=$(pgrep -P "$scale" kvtierd | head -1 || true); sleep 0.5; done
while ! grep -q "serving kvtier.v1" "$log"; do sleep 0.2; done
rss() { awk '/VmRSS/{print $2}' "/proc/$pid/status"; }
start=$(rss)
prev=$start; flat=0; grew=0; t=0; last_growth=0
while [ "$grew" -eq 0 ] || [ "$flat" -lt 6 ]; do
  sleep 1; t=$((t + 1))
  now=$(rss)
  if [ $((now - prev)) -gt 1000 ] || [ $((prev - now)) -gt 1000 ]; then
    flat=0; grew=1; last_growth=$t
  else
    flat=$((flat + 1))
  fi
  prev=$now
done
kill "$scale"; sleep 1; kill -9 "$pid" 2>/dev/null || true
dir=$(grep -o "/tmp/kvtier-test-[A-Za-z0-9]*" "$log" | head -1)
[ -n "$dir" ] && rm -rf "$dir"
rm -f "$log"
echo "blocks=$blocks rss_B_per_block=$(( (prev - start) * 1024 / blocks )) put_per_s=$(( blocks / last_growth ))"
