"""python3 -m kvtier.bench runs (tiny settings) and compares against `kvtier bench`."""

import json
import os

import conftest
from kvtier import bench


def test_bench_runs_and_compares_with_the_cpp_tool(server, capsys):
    args = ["--server", server.address, "--seconds", "0.2", "--keys", "4", "--threads", "2",
            "--block-size", "64KiB", "--json"]
    if os.path.exists(conftest.KVTIER_CLI):
        args += ["--compare", conftest.KVTIER_CLI]
    assert bench.main(args) == 0
    lines = [json.loads(l) for l in capsys.readouterr().out.splitlines() if l.startswith("{")]
    py = [l for l in lines if l.get("system", "").startswith("kvtier-py")]
    assert [l["phase"] for l in py] == ["put", "get"] and all(l["ops_per_s"] > 0 for l in py)
    if "--compare" in args:
        ratios = [l for l in lines if "ratio" in l]
        assert [l["phase"] for l in ratios] == ["put", "get"]
        # Client CPU per GB of both clients, and their ratio (C++ over Python).
        for l in ratios:
            assert l["python_cpu_s_per_gb"] > 0 and l["cpp_cpu_s_per_gb"] > 0
            assert l["cpu_ratio"] == round(l["cpp_cpu_s_per_gb"] / l["python_cpu_s_per_gb"], 3)


def test_bench_lookup_phase_over_the_socket_and_grpc(server, capsys):
    for extra in ([], ["--no-shm"]):
        args = ["--server", server.address, "--seconds", "0.2", "--keys", "8", "--threads", "1",
                "--block-size", "64KiB", "--ops", "put,lookup", "--lookup-keys", "4", "--json"]
        assert bench.main(args + extra) == 0
        lines = [json.loads(l) for l in capsys.readouterr().out.splitlines() if l.startswith("{")]
        assert [l["phase"] for l in lines] == ["put", "lookup"]
        assert lines[1]["ops_per_s"] > 0 and lines[1]["client_cpu_s_per_gb"] is None
        assert lines[1]["system"] == ("kvtier-py" if extra else "kvtier-py-shm")
    if os.path.exists(conftest.KVTIER_CLI):  # lookups compare by latency, both forms
        for form in ([], ["--lookup-full"]):
            assert bench.main(args + form + ["--compare", conftest.KVTIER_CLI]) == 0
            lines = [json.loads(l) for l in capsys.readouterr().out.splitlines()
                     if l.startswith("{")]
            assert [l["phase"] for l in lines if "ratio" in l] == ["put"]
            lookup = [l for l in lines if "latency_ratio_p50" in l]
            assert len(lookup) == 1 and lookup[0]["form"] == ("full" if form else "compact")
            assert lookup[0]["latency_ratio_p50"] > 0 and lookup[0]["cpp_p50_us"] > 0
