"""kvtier as LMCache storage against lmcache 0.5.6's own code and a real kvtierd:
the in-process engine with the remote_storage_plugins adapter (tests/engines/lmcache_run.py,
each engine a fresh process), and `lmcache server` / `lmcache bench` with the native_plugin
L2 client."""

import json
import os
import subprocess
import sys
import time

import pytest

import conftest
import kvtier

TIMEOUT = 600
CHUNK = 16
TOKENS = 53  # 3 full chunks of 16 (48 tokens) and a partial one LMCache does not store


def env():
    return dict(os.environ, LMCACHE_TRACK_USAGE="false", DO_NOT_TRACK="1",
                PYTHONPATH=os.pathsep.join([os.path.join(conftest.BUILD, "python"),
                                            os.environ.get("PYTHONPATH", "")]))


def write_config(path, address):
    with open(path, "w") as f:
        f.write("chunk_size: %d\nlocal_cpu: true\nmax_local_cpu_size: 0.1\n"
                "save_unfull_chunk: false\nremote_serde: naive\n"
                "remote_storage_plugins: [\"kvtier\"]\nextra_config:\n"
                "  remote_storage_plugin.kvtier.module_path: kvtier.engines.lmcache_adapter\n"
                "  remote_storage_plugin.kvtier.class_name: KvtierConnectorAdapter\n"
                "  remote_storage_plugin.kvtier.address: \"%s\"\n" % (CHUNK, address))
    return path


def run(tmp_path, mode, config, name, salt="", seed=1):
    with open(config) as f:
        address = f.read().split("address: \"")[1].split("\"")[0]
    args = [mode, "--config", config, "--tokens", str(TOKENS), "--seed", str(seed),
            "--kvtier", address]
    if salt:
        args += ["--salt", salt]
    return conftest.run_script(tmp_path, "lmcache_run.py", args, name, env(), TIMEOUT)


def namespaces(server, prefix):
    with kvtier.Client(server.address) as c:
        return [n for n in c.stats().namespaces if n.name.startswith(prefix)]


def test_engine_stores_and_a_fresh_engine_retrieves_byte_exact(start_server, tmp_path):
    server = start_server()
    cfg = write_config(str(tmp_path / "lmcache.yaml"), server.address)
    s = run(tmp_path, "store", cfg, "store")
    assert any(b.startswith("RemoteBackend") for b in s["backends"]), s["backends"]
    assert s["put_failed"] == 0 and s["stored_chunks"] == TOKENS // CHUNK
    ns = namespaces(server, "lmcache/")
    assert len(ns) == 1 and ns[0].puts == TOKENS // CHUNK, ns
    r = run(tmp_path, "retrieve", cfg, "retrieve")
    assert r["lookup"] == TOKENS // CHUNK * CHUNK
    assert r["retrieved"] == TOKENS // CHUNK * CHUNK
    assert r["byte_exact"] and r["rest_untouched"]
    # Another seed (other tokens) is a miss, not someone else's KV.
    m = run(tmp_path, "retrieve", cfg, "other", seed=2)
    assert m["lookup"] == 0 and m["retrieved"] == 0


def test_cache_salt_is_a_kvtier_tenant(start_server, tmp_path):
    server = start_server()
    cfg = write_config(str(tmp_path / "lmcache.yaml"), server.address)
    run(tmp_path, "store", cfg, "store-alice", salt="alice")
    ns = namespaces(server, "lmcache/")
    assert [n.tenant for n in ns] == ["alice"], ns
    assert run(tmp_path, "retrieve", cfg, "as-bob", salt="bob")["retrieved"] == 0
    assert run(tmp_path, "retrieve", cfg, "unsalted")["retrieved"] == 0
    r = run(tmp_path, "retrieve", cfg, "as-alice", salt="alice")
    assert r["retrieved"] == TOKENS // CHUNK * CHUNK and r["byte_exact"]


def test_down_kvtierd_is_a_miss_and_exists_sync_is_a_bool(start_server, tmp_path):
    server = start_server()
    address = server.address
    server.kill()
    cfg = write_config(str(tmp_path / "lmcache.yaml"), address)
    s = run(tmp_path, "store", cfg, "store-down")
    r = run(tmp_path, "retrieve", cfg, "retrieve-down")
    assert r["lookup"] == 0 and r["retrieved"] == 0 and r["rest_untouched"]
    assert s["wall_s"] < 120 and r["wall_s"] < 120
    # The connector itself, built by LMCache's own adapter loader types.
    import asyncio
    import torch
    from lmcache.utils import CacheEngineKey
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.metadata import LMCacheMetadata
    from lmcache.v1.storage_backend.connector import ConnectorContext
    from kvtier.engines.lmcache_adapter import KvtierConnectorAdapter
    config = LMCacheEngineConfig.from_file(cfg)
    meta = LMCacheMetadata(model_name="m", world_size=1, local_world_size=1, worker_id=0,
                           local_worker_id=0, kv_dtype=torch.bfloat16,
                           kv_shape=(4, 2, CHUNK, 2, 32), chunk_size=CHUNK)
    adapter = KvtierConnectorAdapter()
    assert adapter.can_parse("plugin://kvtier") and not adapter.can_parse("plugin://fs")
    loop = asyncio.new_event_loop()
    conn = adapter.create_connector(ConnectorContext("plugin://kvtier", loop, None, config,
                                                     meta, plugin_name="kvtier"))
    key = CacheEngineKey("m", 1, 0, 1234, torch.bfloat16)
    t0 = time.monotonic()
    got = conn.exists_sync(key)
    assert got is False  # a real bool, not a coroutine: a down kvtierd has nothing
    assert loop.run_until_complete(conn.exists(key)) is False
    assert time.monotonic() - t0 < 10
    loop.run_until_complete(conn.close())
    loop.close()


def l2_adapter_json(address):
    return json.dumps({"type": "native_plugin", "module_path": "kvtier.engines.lmcache_adapter",
                       "class_name": "KvtierL2Client", "adapter_params": {"address": address}})


def lmcache_cli(*args, timeout=TIMEOUT):
    lmcache = os.path.join(os.path.dirname(sys.executable), "lmcache")
    proc = subprocess.run([lmcache] + list(args), env=env(), capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def test_lmcache_bench_l2_verifies_through_kvtier(start_server, tmp_path):
    server = start_server()
    rc, log = lmcache_cli("bench", "l2", "--l2-adapter", l2_adapter_json(server.address),
                          "--no-skip-verify")
    with open(str(tmp_path / "bench-l2.log"), "w") as f:
        f.write(log)
    assert rc == 0, log[-5000:]
    assert "success_keys=32/32" in log and "loaded=32/32" in log, log[-3000:]
    assert "All 32 keys data verified OK" in log, log[-3000:]
    assert sum(n.puts for n in namespaces(server, "lmcache-l2/")) >= 32


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LmcacheServer:
    """`lmcache server` with kvtier as its only L2, on free local ports."""

    def __init__(self, tmp_path, address, name):
        self.port, self.http = free_port(), free_port()
        self.log_path = str(tmp_path / (name + ".log"))
        lmcache = os.path.join(os.path.dirname(sys.executable), "lmcache")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [lmcache, "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--http-host", "127.0.0.1", "--http-port", str(self.http),
             "--prometheus-port", str(free_port()), "--l1-size-gb", "1",
             "--eviction-policy", "LRU", "--supported-transfer-mode", "auto",
             "--l2-adapter", l2_adapter_json(address)],
            env=env(), stdout=self.log, stderr=subprocess.STDOUT)
        end = time.monotonic() + 300
        while time.monotonic() < end:
            assert self.proc.poll() is None, self.text()[-4000:]
            if "Uvicorn running" in self.text():
                return
            time.sleep(1)
        raise AssertionError("lmcache server did not start:\n" + self.text()[-4000:])

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def bench(self):
        """One `lmcache bench server` request (1024 tokens, 4 chunks): its output."""
        rc, out = lmcache_cli("bench", "server", "--rpc-url", "tcp://127.0.0.1:%d" % self.port,
                              "--url", "http://127.0.0.1:%d" % self.http, "--mode", "cpu",
                              "--num-tokens", "1024", "--start", "0", "--end", "1")
        assert rc == 0, out[-4000:]
        return out

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def checksum(out):
    lines = [l for l in out.splitlines() if "CHECKSUM:" in l]
    assert lines, out[-3000:]
    return lines[-1].split("CHECKSUM:")[1].split()[0]


def test_restarted_lmcache_server_reads_from_kvtier(start_server, tmp_path):
    server = start_server()
    first = LmcacheServer(tmp_path, server.address, "server1")
    try:
        sum1 = checksum(first.bench())
    finally:
        first.stop()
    stored = sum(n.puts for n in namespaces(server, "lmcache-l2/"))
    assert stored >= 4, stored
    second = LmcacheServer(tmp_path, server.address, "server2")  # empty L1
    try:
        out = second.bench()
        assert "[seq 0/cold] LOOKUP: 4/4 chunks hit" in out, out[-3000:]
        assert checksum(out) == sum1
        assert "4/4 retained keys (0 L1, 4 L2)" in second.text(), second.text()[-3000:]
    finally:
        second.stop()
    assert sum(n.gets for n in namespaces(server, "lmcache-l2/")) >= 4
