#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU (never part of CI):
#   scripts/gpu_check.sh pack   here: build, then copy hot_tier_h2d, kvtierd and kvtier with
#                               their shared libraries (not libc's) into build-gpu/
#   scripts/gpu_check.sh run    on the GPU machine (with build-gpu/ carried over): print the
#                               hot tier's allocator (cuda = cudaHostAlloc) and host-to-device
#                               bandwidth from hot-tier memory vs pageable memory, then start
#                               kvtierd, measure get + upload to the GPU per client path
#                               (kvtier_to_gpu) and show the allocator its stats report.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-run}" in
  pack)
    scripts/build.sh >/dev/null
    rm -rf build-gpu
    mkdir -p build-gpu/lib
    cp build/tests/bench/hot_tier_h2d build/tests/bench/kvtier_to_gpu build/service/kvtierd \
      build/client/cli/kvtier build-gpu/
    for bin in build-gpu/hot_tier_h2d build-gpu/kvtier_to_gpu build-gpu/kvtierd build-gpu/kvtier; do
      ldd "$bin" | awk '/=> \// {print $3}' |
        grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' |
        xargs -r cp -n -L -t build-gpu/lib
    done
    du -sh build-gpu
    ;;
  run)
    # libcudart is dlopen'ed: add wherever the machine keeps it (CUDA toolkit or a
    # Python nvidia-cuda-runtime wheel) to the search path.
    cudart=$(find /usr/local/cuda*/lib64 /usr/local/lib/python3*/dist-packages/nvidia \
      /opt/*/.venv/lib/python3*/site-packages/nvidia -name 'libcudart.so*' 2>/dev/null |
      xargs -r -n1 dirname | sort -u | paste -sd: || true)
    export LD_LIBRARY_PATH="$PWD/build-gpu/lib${cudart:+:$cudart}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    build-gpu/hot_tier_h2d 1024 2048 5
    build-gpu/hot_tier_h2d 1024 256 5 | tail -n 4
    dir=$(mktemp -d)
    build-gpu/kvtierd --port 0 --data-dir "$dir/data" --hot-capacity 1GiB >"$dir/out" 2>"$dir/err" &
    pid=$!
    for _ in $(seq 300); do grep -q listening "$dir/out" && break; sleep 0.1; done
    addr=$(sed -n 's/^kvtierd listening on //p' "$dir/out")
    build-gpu/kvtier_to_gpu "$addr" 4 3 64
    build-gpu/kvtier_to_gpu "$addr" 1 3 64 | tail -n +3
    build-gpu/kvtier stats --server "$addr" | head -n 1
    kill "$pid"
    wait "$pid" || true
    rm -rf "$dir"
    ;;
  *) echo "usage: scripts/gpu_check.sh pack|run" >&2; exit 2 ;;
esac
