"""kvtier as SGLang's HiCache L3 storage backend against sglang 0.5.23's own code and a real
kvtierd: the backend built by SGLang's StorageBackendFactory ("dynamic") from the documented
extra config, pages in SGLang's real CPU host pool for each of its MHA layouts, keys from
SGLang's own page hash chain, and its real HiCacheController's backup and prefetch threads; each
store and load a fresh process (tests/engines/sglang_run.py). SGLang cannot serve on CPU here,
so no tokens are generated (docs/engines.md)."""

import json
import os

import conftest
import kvtier

TIMEOUT = 600
LAYOUTS = ["layer_first", "page_first", "page_first_direct", "page_head"]
PAGES = 6


def env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(conftest.BUILD, "python"),
                                                        os.environ.get("PYTHONPATH", "")]))


def run(tmp_path, mode, address, name, **opts):
    args = [mode, "--kvtier", address]
    for k, v in opts.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    return conftest.run_script(tmp_path, "sglang_run.py", args, name, env(), TIMEOUT)


def namespaces(server):
    with kvtier.Client(server.address) as c:
        return [n for n in c.stats().namespaces if n.name.startswith("sglang/")]


def test_factory_backend_round_trips_every_host_layout_across_processes(start_server, tmp_path):
    server = start_server()
    s = run(tmp_path, "store", server.address, "store")
    assert s["sglang"] == "0.5.23"
    for layout in LAYOUTS:
        st = s["layouts"][layout]
        assert st["backend"] == "kvtier.engines.sglang_backend.KvtierHiCacheStorage"
        assert st["set"] == [True] * PAGES, (layout, st)
        assert st["regions"] == (2 * 3 if layout == "layer_first" else 2), (layout, st)
    assert all(len(k) == 64 for k in s["keys"])
    ns = namespaces(server)
    # One namespace per layout: their bytes differ at equal sizes.
    assert len(ns) == len(LAYOUTS), ns
    assert {n.name for n in ns} == {s["layouts"][l]["namespace"] for l in LAYOUTS}
    r = run(tmp_path, "load", server.address, "load")
    for layout in LAYOUTS:
        st, ld = s["layouts"][layout], r["layouts"][layout]
        assert ld["exists"] == PAGES, (layout, ld)
        assert ld["get"] == [True] * PAGES, (layout, ld)
        assert ld["digests"] == st["digests"], layout  # byte-exact, at other host slots
        assert ld["rest_untouched"], layout
    # Other tokens (another seed): a miss, nothing written.
    m = run(tmp_path, "load", server.address, "other", seed=2, layouts="page_first")
    lo = m["layouts"]["page_first"]
    assert lo["exists"] == 0 and lo["get"] == [False] * PAGES and lo["rest_untouched"]


def test_models_and_tp_ranks_never_collide(start_server, tmp_path):
    server = start_server()
    run(tmp_path, "store", server.address, "store-a-r0", layouts="page_first", model="m-a",
        tp_rank=0, tp_size=2)
    for name, opts in [("b-r0", dict(model="m-b", tp_rank=0, tp_size=2)),
                       ("a-r1", dict(model="m-a", tp_rank=1, tp_size=2)),
                       ("a-tp1", dict(model="m-a", tp_rank=0, tp_size=1))]:
        m = run(tmp_path, "load", server.address, "load-" + name, layouts="page_first", **opts)
        lo = m["layouts"]["page_first"]
        assert lo["exists"] == 0 and lo["get"] == [False] * PAGES, (name, lo)
        assert lo["rest_untouched"], name
    # Rank 1 stores its own shard under the same page keys; each rank reads back its own.
    run(tmp_path, "store", server.address, "store-a-r1", layouts="page_first", model="m-a",
        tp_rank=1, tp_size=2, seed=1)
    # The loads registered their (empty) namespaces too; two hold pages, one per rank.
    assert len([n for n in namespaces(server) if n.puts]) == 2
    for rank in (0, 1):
        s = json.load(open(str(tmp_path / ("store-a-r%d.json" % rank))))
        r = run(tmp_path, "load", server.address, "load-a-r%d" % rank, layouts="page_first",
                model="m-a", tp_rank=rank, tp_size=2)
        assert r["layouts"]["page_first"]["get"] == [True] * PAGES
        assert r["layouts"]["page_first"]["digests"] == s["layouts"]["page_first"]["digests"]


def test_down_kvtierd_is_a_miss_not_an_exception_or_hang(start_server, tmp_path):
    server = start_server()
    address = server.address
    server.kill()
    s = run(tmp_path, "store", address, "store-down", layouts="page_first")
    r = run(tmp_path, "load", address, "load-down", layouts="page_first")
    st, lo = s["layouts"]["page_first"], r["layouts"]["page_first"]
    assert st["set"] == [False] * PAGES
    assert lo["exists"] == 0 and lo["get"] == [False] * PAGES and lo["rest_untouched"]
    # One connect timeout (2 s) per retry window, not one per call.
    assert st["wall_s"] < 15 and lo["wall_s"] < 15, (st["wall_s"], lo["wall_s"])


def test_real_cache_controller_backs_up_and_prefetches_through_kvtier(start_server, tmp_path):
    server = start_server()
    b = run(tmp_path, "backup", server.address, "backup")["controller"]
    # Attached by SGLang's own attach_storage_backend, on its zero-copy (v1) path.
    assert b["backend"] == "KvtierHiCacheStorage"
    assert b["set_func"] == "_page_set_zero_copy" and b["get_func"] == "_page_get_zero_copy"
    assert b["acked"] and b["completed_tokens"] == PAGES * 4
    # A fresh process: the prefetch thread's batch_exists finds every page under the keys it
    # derives from the tokens itself; the IO thread's batch_get_v1 loads them byte-exact.
    p = run(tmp_path, "prefetch", server.address, "prefetch")["controller"]
    assert p["keys_match"]
    assert p["hit_tokens"] == PAGES * 4 and p["completed_tokens"] == PAGES * 4, p
    assert p["digests"] == b["digests"]
    m = run(tmp_path, "prefetch", server.address, "prefetch-other", seed=2)["controller"]
    assert m["hit_tokens"] == 0 and m["completed_tokens"] == 0
