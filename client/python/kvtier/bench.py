"""python3 -m kvtier.bench --server HOST:PORT: the Python client's `kvtier bench`.

The same workload as the C++ tool (client/cli/bench_cmd.cc): namespace bench-<KiB>k of
fp16 blocks of --block-size bytes (layout (block/64KiB) x 8 x 128 x 16, codec fp16),
payloads ENCODED fp16 blobs, --keys keys split over --threads threads, every key put once
untimed, then --seconds of closed-loop puts, then of get_blocks_into reused buffers; with
`lookup` in --ops, also of lookups of --lookup-keys of the thread's keys (on the same host
over the shared-memory socket unless --no-shm; compact answers unless --lookup-full). System
"kvtier-py" is TCP, "kvtier-py-shm" staged through the shared region, "kvtier-py-shm-zc"
put from / got into SharedBuffers. Each result names the client ("path": "native" for the C++
client bound through kvtier._native, "grpcio" for the pure-Python one: not built, or
--no-native). With --compare PATH_TO_kvtier it also runs
`kvtier bench` with the same flags against the same server, right after (with --repeat N,
N runs of each alternating which goes first), and prints the Python / C++ ratio of the
median GB/s per phase (for lookup, of the median p50 and p99 latencies).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

import kvtier
from kvtier import codec


def _bytes(text):
    m = re.fullmatch(r"(\d+)([KMG]i?B?)?", text.strip(), re.I)
    if not m:
        raise argparse.ArgumentTypeError("bad size %r" % text)
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[(m.group(2) or "")[:1].lower()]
    return int(m.group(1)) * mult


def _percentile(sorted_values, p):
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


def run_phase(name, workers, seconds):
    """Runs worker(t, deadline) -> (ops, bytes, latencies) on one thread each."""
    results = [None] * len(workers)
    errors_ = []
    start = time.monotonic()
    deadline = start + seconds
    cpu0 = time.process_time()

    def body(t):
        try:
            results[t] = workers[t](deadline)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors_.append(e)
    threads = [threading.Thread(target=body, args=(t,)) for t in range(len(workers))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors_:
        raise errors_[0]
    elapsed = time.monotonic() - start
    ops = sum(r[0] for r in results)
    nbytes = sum(r[1] for r in results)
    lat = sorted(x for r in results for x in r[2])
    return dict(phase=name, ops=ops, seconds=round(elapsed, 3), ops_per_s=round(ops / elapsed, 1),
                gb_per_s=round(nbytes / elapsed / 1e9, 3), p50_us=round(_percentile(lat, .5), 1),
                p99_us=round(_percentile(lat, .99), 1),
                client_cpu_s_per_gb=(round((time.process_time() - cpu0) / (nbytes / 1e9), 4)
                                     if nbytes else None))


def bench(args):
    layout = kvtier.make_layout(args.block_size // 65536, 8, 128, 16)
    ns = args.namespace or "bench-%dk" % (args.block_size // 1024)
    spec = kvtier.make_namespace(ns, layout, codec="fp16", model_id="kvtier-bench")
    rng = np.random.default_rng(7)
    raw = rng.standard_normal(kvtier.bytes_per_block(layout) // 2).astype(np.float16)
    payload = codec.encode_raw_codec(raw, layout.num_layers, layout.num_kv_heads,
                                     layout.head_dim)
    keys = [("kvtier-bench-%03d" % (i % 1000) + ("-%d" % (i // 1000) if i >= 1000 else ""))
            .encode() for i in range(args.keys)]
    client = kvtier.Client(
        args.server, namespace=spec, num_channels=args.channels or args.threads,
        chunk_bytes=args.chunk, max_streams_per_call=1, shared_memory=not args.no_shm,
        shared_memory_bytes=args.threads * 3 * (args.block_size + 8192) * 2,
        auth_token=os.environ.get("KVTIER_AUTH_TOKEN", ""), native=not args.no_native)
    if not args.no_shm and not client.uses_shared_memory and client.connect_info.shared_memory_error:
        print("kvtier.bench: shared memory not used: " + client.connect_info.shared_memory_error,
              file=sys.stderr)
    zc = args.shared_buffers and client.uses_shared_memory
    system = "kvtier-py" + ("-shm" if client.uses_shared_memory else "") + ("-zc" if zc else "")
    put_src, get_dst = [], []
    for _ in range(args.threads):
        if zc:
            src = client.allocate_shared_buffer(len(payload))
            src[:] = np.frombuffer(payload, np.uint8)
            dst = client.allocate_shared_buffer(len(payload) + 4096)
        else:
            src, dst = payload, np.empty(len(payload) + 4096, np.uint8)
        dst.fill(1)  # touched up front
        put_src.append(src)
        get_dst.append(dst)
    mine = [[keys[i] for i in range(t, len(keys), args.threads)] or [keys[t % len(keys)]]
            for t in range(args.threads)]

    def populate(t):
        for k in mine[t]:
            client.put_blocks(ns, [kvtier.PutBlock(k, put_src[t])])
    ths = [threading.Thread(target=populate, args=(t,)) for t in range(args.threads)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()

    def make_worker(t, op):
        def worker(deadline):
            ops = nbytes = 0
            lat = []
            i = 0
            while time.monotonic() < deadline:
                k = mine[t][i % len(mine[t])]
                i += 1
                if op == "lookup":  # the keys are picked untimed, as in `kvtier bench`
                    ks = [mine[t][(i + j) % len(mine[t])] for j in range(args.lookup_keys)]
                t0 = time.monotonic()
                if op == "lookup":
                    client.lookup(ns, ks, compact=not args.lookup_full)
                elif op == "put":
                    r = client.put_blocks(ns, [kvtier.PutBlock(k, put_src[t])])
                    if r.blocks_stored != 1:
                        raise RuntimeError("put stored %d of 1 blocks" % r.blocks_stored)
                    nbytes += len(payload)
                else:
                    info = client.get_blocks_into(ns, [k], [get_dst[t]])[0]
                    if not info.found:
                        raise RuntimeError("get: a bench key is missing")
                    nbytes += info.size
                lat.append((time.monotonic() - t0) * 1e6)
                ops += 1
            return ops, nbytes, lat
        return worker

    out = []
    for op in args.ops.split(","):
        if op not in ("put", "get", "lookup"):
            raise SystemExit("kvtier.bench: unknown op %r (want put, get, lookup)" % op)
        r = run_phase(op, [make_worker(t, op) for t in range(args.threads)], args.seconds)
        r.update(system=system, target=args.server, threads=args.threads,
                 block_bytes=len(payload), path="native" if client.uses_native else "grpcio")
        out.append(r)
    client.close()
    return out


def run_cli(args):
    cmd = [args.compare, "bench", "--server", args.server, "--threads", str(args.threads),
           "--block-size", str(args.block_size), "--keys", str(args.keys),
           "--seconds", str(args.seconds), "--ops", args.ops, "--chunk", str(args.chunk),
           "--lookup-keys", str(args.lookup_keys), "--json"]
    if args.channels:
        cmd += ["--channels", str(args.channels)]
    if args.no_shm:
        cmd.append("--no-shm")
    if args.shared_buffers:
        cmd.append("--shared-buffers")
    if args.lookup_full:
        cmd.append("--lookup-full")
    text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _print(r, as_json):
    if as_json:
        print(json.dumps(r, sort_keys=True))
    else:
        cpu = r.get("client_cpu_s_per_gb")
        print("%-27s %-4s %9.1f ops/s %7.3f GB/s  p50 %8.1f us  p99 %8.1f us%s"
              % (r["system"] + (" (%s)" % r["path"] if r.get("path") else ""), r["phase"],
                 r["ops_per_s"], r["gb_per_s"], r["p50_us"], r["p99_us"],
                 "  client cpu %.3f s/GB" % cpu if cpu else ""))
    sys.stdout.flush()


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m kvtier.bench", description=__doc__.split("\n")[0])
    p.add_argument("--server", required=True, help="HOST:PORT of a kvtierd")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--block-size", type=_bytes, default=2 << 20)
    p.add_argument("--keys", type=int, default=64)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--ops", default="put,get", help="phases: put,get,lookup")
    p.add_argument("--lookup-keys", type=int, default=8, help="keys per lookup")
    p.add_argument("--lookup-full", action="store_true",
                   help="lookups expand the answer into one BlockLocation per key (default: "
                        "keep the compact form)")
    p.add_argument("--channels", type=int, default=0, help="default = threads")
    p.add_argument("--chunk", type=_bytes, default=1 << 20)
    p.add_argument("--namespace", default="")
    p.add_argument("--no-shm", action="store_true")
    p.add_argument("--shared-buffers", action="store_true")
    p.add_argument("--no-native", action="store_true",
                   help="the pure-Python client even when kvtier._native is built")
    p.add_argument("--compare", metavar="KVTIER", default="",
                   help="path of the C++ `kvtier` tool: run its bench too and print ratios")
    p.add_argument("--repeat", type=int, default=1,
                   help="with --compare: runs of each client, alternating which goes first; "
                        "ratios of the median GB/s")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.block_size <= 0 or args.block_size % 65536:
        p.error("--block-size must be a positive multiple of 64KiB")
    if args.threads < 1 or args.keys < 1 or args.repeat < 1:
        p.error("--threads, --keys and --repeat must be >= 1")
    if not args.compare:
        for r in bench(args):
            _print(r, args.json)
        return 0
    # Alternate which client goes first, so drifting load on the host hits both alike.
    py_runs, cpp_runs = [], []
    for rep in range(args.repeat):
        order = (bench, run_cli) if rep % 2 == 0 else (run_cli, bench)
        for fn in order:
            res = fn(args)
            for r in res:
                r.setdefault("system", "kvtier")
                _print({k: r.get(k, 0) for k in ("system", "phase", "ops_per_s", "gb_per_s",
                                                    "p50_us", "p99_us", "client_cpu_s_per_gb",
                                                    "path")},
                       args.json)
            (py_runs if fn is bench else cpp_runs).append(res)
    for i, py in enumerate(py_runs[0]):
        if py["phase"] == "lookup":
            # Latency, not ops/s: the Python loop also builds each call's key list
            # (untimed, as C++ picks its keys untimed), which ops/s would count.
            line = {"phase": "lookup", "python": py["system"], "path": py["path"],
                    "cpp": cpp_runs[0][i]["system"], "runs": args.repeat,
                    "lookup_keys": args.lookup_keys,
                    "form": "full" if args.lookup_full else "compact"}
            for q in ("p50_us", "p99_us"):
                py_v = statistics.median(run[i][q] for run in py_runs)
                cpp_v = statistics.median(run[i][q] for run in cpp_runs)
                line.update({"python_" + q: py_v, "cpp_" + q: cpp_v,
                             "latency_ratio_" + q[:3]: round(py_v / cpp_v, 3) if cpp_v else 0.0})
            print(json.dumps(line, sort_keys=True) if args.json else
                  "latency lookup (%d keys, %s form) %s (%s) / %s: p50 %.1f / %.1f us = %.2f, "
                  "p99 %.1f / %.1f us = %.2f (medians of %d runs)"
                  % (args.lookup_keys, line["form"], line["python"], line["path"], line["cpp"],
                     line["python_p50_us"], line["cpp_p50_us"], line["latency_ratio_p50"],
                     line["python_p99_us"], line["cpp_p99_us"], line["latency_ratio_p99"],
                     args.repeat))
            continue
        unit = "gb_per_s"
        py_v = statistics.median(run[i][unit] for run in py_runs)
        cpp_v = statistics.median(run[i][unit] for run in cpp_runs)
        line = {"phase": py["phase"], "python": py["system"], "path": py["path"],
                "cpp": cpp_runs[0][i]["system"], "python_" + unit: py_v, "cpp_" + unit: cpp_v,
                "runs": args.repeat, "ratio": round(py_v / cpp_v, 3) if cpp_v else 0.0}
        # Client CPU seconds per GB, C++ over Python (higher is better for Python, as the
        # GB/s ratio): on a shared host the steadier measure, since other processes move
        # GB/s between runs far more than they move a client's CPU per byte.
        cpu = [[run[i].get("client_cpu_s_per_gb") for run in runs]
               for runs in (py_runs, cpp_runs)]
        if all(v for vs in cpu for v in vs):
            py_cpu, cpp_cpu = statistics.median(cpu[0]), statistics.median(cpu[1])
            line.update(python_cpu_s_per_gb=py_cpu, cpp_cpu_s_per_gb=cpp_cpu,
                        cpu_ratio=round(cpp_cpu / py_cpu, 3))
        print(json.dumps(line, sort_keys=True) if args.json else
              "ratio %-4s %s (%s) / %s = %.2f (medians of %d runs: %.3f / %.3f %s)%s"
              % (line["phase"], line["python"], line["path"], line["cpp"], line["ratio"],
                 args.repeat, py_v, cpp_v, "ops/s" if unit == "ops_per_s" else "GB/s",
                 "; client CPU per GB C++ / Python = %.2f (%.3f / %.3f s/GB)"
                 % (line["cpu_ratio"], line["cpp_cpu_s_per_gb"], line["python_cpu_s_per_gb"])
                 if "cpu_ratio" in line else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
