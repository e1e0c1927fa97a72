"""llm-d's own KV-cache indexer (tests/router/main.go, the version its go.mod pins) scores
what real kvtierd processes hold, with kvtierd's default events settings plus a pod id,
and the indexer configuration of docs/routers.md (cpu 0.8, disk 0.5).

Prompts are put through the Python client with their token ids; the indexer's
ScoreTokens must give the kvtierd pod (blocks of the longest held prefix) x (the weight of
the tier each block is in), exactly what kvtier's own Lookup says, and nothing for
unrelated prompts. Run by tests/router/run.sh:
  python3 -m pytest tests/router/test_llmd_indexer.py  (KVTIER_LLMD_INDEXER=<binary>)
"""

import json
import os
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("KVTIER_BINARY_DIR") or os.path.join(REPO, "build")
sys.path.insert(0, os.path.join(BUILD, "python"))
import kvtier  # noqa: E402
from kvtier import pb  # noqa: E402

KVTIERD = os.environ.get("KVTIER_KVTIERD") or os.path.join(BUILD, "service", "kvtierd")
INDEXER = os.environ.get("KVTIER_LLMD_INDEXER") or os.path.join(BUILD, "llmd_indexer")
INDEXER_CONFIG = os.path.join(HERE, "indexer.json")
WEIGHT = {pb.TIER_HOT: 0.8, pb.TIER_COLD: 0.5}  # indexer.json: cpu 0.8, disk 0.5
BLOCK = 16
LAYOUT = kvtier.make_layout(num_layers=2, num_kv_heads=2, head_dim=64, tokens_per_block=BLOCK)
SCORE_WAIT_S = 15.0  # bounded polls: parent_wait_ms is 1 s, llm-d re-dials every 5 s


class Indexer:
    """The Go harness: llm-d's pool + indexer, one JSON request per line."""

    def __init__(self):
        self.proc = subprocess.Popen([INDEXER, "-config", INDEXER_CONFIG], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self._read().get("ready"), "the indexer did not start"

    def _read(self):
        line = self.proc.stdout.readline()
        assert line, "the indexer exited"
        return json.loads(line)

    def call(self, **req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        r = self._read()
        assert r["ok"], r
        return r

    def scores(self, tokens, model):
        return self.call(op="score", tokens=[int(t) for t in tokens], model=model)["scores"] or {}

    def close(self):
        if self.proc.poll() is None:
            try:
                self.call(op="quit")
            except (AssertionError, BrokenPipeError):
                pass
            self.proc.kill()
            self.proc.wait()


class Node:
    """One kvtierd with events on (PUB and replay bound on ephemeral ports) and pod id
    `pod`; restart() starts it again on the same ports and data dir."""

    def __init__(self, tmp, pod, port=0, cluster=""):
        self.dir = os.path.join(tmp, pod)
        os.makedirs(self.dir, exist_ok=True)
        self.pod, self.port, self.cluster = pod, port, cluster
        self.pub = "tcp://127.0.0.1:*"
        self.replay = "tcp://127.0.0.1:*"
        self.proc = None

    def start(self):
        cfg = os.path.join(self.dir, "kvtierd.textproto")
        with open(cfg, "w") as f:
            f.write('listen_address: "127.0.0.1"\ndata_dir: "%s"\n'
                    "hot_capacity_bytes: 268435456\nexecutor_threads: 2\n%s"
                    'events {\n  endpoint: "%s"\n  replay_endpoint: "%s"\n  pod_id: "%s"\n}\n'
                    % (os.path.join(self.dir, "data"), self.cluster, self.pub,
                       self.replay, self.pod))
        self.log = os.path.join(self.dir, "stderr.log")
        with open(self.log, "a") as err:
            self.proc = subprocess.Popen([KVTIERD, "--config", cfg, "--port", str(self.port)],
                                         stdout=subprocess.PIPE, stderr=err, text=True)
        for _ in range(10):  # kvtierd prints its ready line once it serves
            line = self.proc.stdout.readline()
            if not line or line.startswith("kvtierd listening on "):
                break
        assert line.startswith("kvtierd listening on "), "kvtierd did not start: %r" % line
        self.address = line.split()[-1]
        self.port = int(self.address.rsplit(":", 1)[1])
        with open(self.log) as f:
            m = re.findall(r"KV events on (\S+), topic \S+, replay on (\S+)", f.read())
        assert m, "no events line in %s" % self.log
        # The bound ports; a restart binds new ones (as a rescheduled pod gets a new IP)
        # and the indexer is pointed at the new one, as llm-d's pod reconciler does.
        self.bound_pub, self.bound_replay = m[-1]
        return self

    def stop(self):
        self.proc.terminate()
        assert self.proc.wait(30) == 0

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def prompt(rng, n):
    return rng.integers(0, 128000, n * BLOCK)


def put_prompt(client, ns, tokens, seed=0):
    """Puts `tokens` (whole blocks) into `ns` with their token ids; returns the keys."""
    keys = kvtier.prefix_keys(tokens, ns, tokens_per_block=BLOCK)
    rng = np.random.default_rng(seed)
    shape = kvtier.block_shape(LAYOUT)
    blocks = [kvtier.PutBlock(k, rng.standard_normal(shape).astype(np.float16),
                              keys[i - 1] if i else b"", i,
                              token_ids=tokens[i * BLOCK:(i + 1) * BLOCK])
              for i, k in enumerate(keys)]
    client.put_blocks(ns, blocks, format=kvtier.RAW)
    return keys


def expected(client, ns, keys):
    """What kvtier's own Lookup says a router should score: the held prefix, each block
    at its tier's weight (the best tier when it is in both)."""
    lk = client.lookup(ns, keys, local_only=True)
    return round(sum(WEIGHT[b.tier] for b in lk.blocks[:lk.prefix_blocks]), 6)


def score_of(indexer, tokens, model, pod):
    return round(indexer.scores(tokens, model).get(pod, 0.0), 6)


def wait_score(indexer, tokens, model, pod, want):
    """Polls ScoreTokens until the pod scores `want` (bounded); returns the last score."""
    end = time.monotonic() + SCORE_WAIT_S
    got = None
    while time.monotonic() < end:
        got = score_of(indexer, tokens, model, pod)
        if abs(got - want) < 1e-6:
            return got
        time.sleep(0.05)
    return got


def subscribe(indexer, node, client, rng):
    """llm-d's pod-discovery wiring: the indexer dials the pod's bound PUB socket. Returns
    once a probe prompt scores (the subscription has reached kvtierd)."""
    indexer.call(op="subscribe", pod=node.pod, endpoint=node.bound_pub, remote=True)
    client.register_namespace(kvtier.make_namespace("probe", LAYOUT, model_id="probe-model"))
    end = time.monotonic() + SCORE_WAIT_S
    while time.monotonic() < end:
        tokens = prompt(rng, 1)
        put_prompt(client, "probe", tokens)  # lost while the subscription is on its way
        probe_end = time.monotonic() + 1.0
        while time.monotonic() < probe_end:
            if score_of(indexer, tokens, "probe-model", node.pod) > 0:
                return
            time.sleep(0.05)
    pytest.fail("the indexer never saw %s's events" % node.pod)


@pytest.fixture
def indexer():
    ix = Indexer()
    yield ix
    ix.close()


@pytest.fixture
def nodes(tmp_path):
    started = []
    yield started
    for n in started:
        n.kill()


def test_scores_follow_puts_demotion_and_delete(indexer, nodes, tmp_path):
    node = Node(str(tmp_path), "kvtier-0").start()
    nodes.append(node)
    rng = np.random.default_rng(1)
    with kvtier.Client(node.address, shared_memory=False) as c:
        subscribe(indexer, node, c, rng)
        c.register_namespace(kvtier.make_namespace("chat", LAYOUT, model_id="llama"))
        a, b = prompt(rng, 4), prompt(rng, 2)
        ka = put_prompt(c, "chat", a)
        put_prompt(c, "chat", b)
        # Full prefix x the hot tier's weight; an unrelated prompt 0; a shared head 2 blocks.
        assert wait_score(indexer, a, "llama", node.pod, 4 * 0.8) == pytest.approx(3.2)
        assert wait_score(indexer, b, "llama", node.pod, 2 * 0.8) == pytest.approx(1.6)
        assert score_of(indexer, prompt(rng, 4), "llama", node.pod) == 0
        head = np.concatenate([a[:2 * BLOCK], prompt(rng, 2)])
        assert score_of(indexer, head, "llama", node.pod) == pytest.approx(1.6)
        assert score_of(indexer, a, "mistral", node.pod) == 0  # the model is in the key
        assert expected(c, "chat", ka) == pytest.approx(3.2)

        # Demotion to cold: the score reflects the cold tier's weight.
        c.flush("chat")
        c.evict("chat", ka)
        assert expected(c, "chat", ka) == pytest.approx(4 * 0.5)
        assert wait_score(indexer, a, "llama", node.pod, 2.0) == pytest.approx(2.0)

        # Delete of block 2: the score falls to the remaining prefix.
        c.delete("chat", [ka[2]])
        assert expected(c, "chat", ka) == pytest.approx(1.0)
        assert wait_score(indexer, a, "llama", node.pod, 1.0) == pytest.approx(1.0)



def test_drop_namespace_clears_its_prompts(indexer, nodes, tmp_path):
    node = Node(str(tmp_path), "kvtier-0").start()
    nodes.append(node)
    rng = np.random.default_rng(2)
    with kvtier.Client(node.address, shared_memory=False) as c:
        subscribe(indexer, node, c, rng)
        c.register_namespace(kvtier.make_namespace("keep", LAYOUT, model_id="m-keep"))
        c.register_namespace(kvtier.make_namespace("gone", LAYOUT, model_id="m-gone"))
        keep, gone = prompt(rng, 3), prompt(rng, 5)
        put_prompt(c, "keep", keep)
        put_prompt(c, "gone", gone)
        assert wait_score(indexer, gone, "m-gone", node.pod, 4.0) == pytest.approx(4.0)
        c.drop_namespace("gone")
        assert wait_score(indexer, gone, "m-gone", node.pod, 0.0) == 0
        assert score_of(indexer, keep, "m-keep", node.pod) == pytest.approx(2.4)


def test_64_blocks_over_4_parallel_streams_score_whole_20_of_20(indexer, nodes, tmp_path):
    node = Node(str(tmp_path), "kvtier-0").start()
    nodes.append(node)
    rng = np.random.default_rng(3)
    with kvtier.Client(node.address, shared_memory=False, max_streams_per_call=4) as c:
        subscribe(indexer, node, c, rng)
        c.register_namespace(kvtier.make_namespace("long", LAYOUT, model_id="llama"))
        whole = 0
        for run in range(20):
            tokens = prompt(rng, 64)
            put_prompt(c, "long", tokens, seed=run)
            if wait_score(indexer, tokens, "llama", node.pod, 64 * 0.8) == pytest.approx(51.2):
                whole += 1
        assert whole == 20


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def test_three_nodes_with_replication_match_lookup_through_a_restart(indexer, nodes, tmp_path):
    ports = free_ports(3)
    ids = ["127.0.0.1:%d" % p for p in ports]
    peers = "".join('  static_peers: "%s"\n' % x for x in ids)
    for i, p in enumerate(ports):
        cluster = ('cluster {\n  node_id: "%s"\n%s  replication_factor: 2\n'
                   "  peer_deadline_ms: 300\n}\n" % (ids[i], peers))
        nodes.append(Node(str(tmp_path), "kvtier-%d" % i, port=p, cluster=cluster).start())
    rng = np.random.default_rng(4)
    clients = [kvtier.Client(n.address, shared_memory=False) for n in nodes]
    spec = kvtier.make_namespace("cl", LAYOUT, model_id="llama")
    try:
        for n, c in zip(nodes, clients):
            subscribe(indexer, n, c, rng)
        with kvtier.ClusterClient(nodes[0].address, spec, connect_timeout=5.0,
                                  shared_memory=False) as cc:
            prompts = [prompt(rng, int(rng.integers(2, 9))) for _ in range(8)]
            keys = [put_prompt(cc, "cl", t, seed=i) for i, t in enumerate(prompts)]

            def check_all(live):
                for t, k in zip(prompts, keys):
                    for n, c in zip(nodes, clients):
                        if n not in live:
                            continue
                        want = expected(c, "cl", k)
                        got = wait_score(indexer, t, "llama", n.pod, want)
                        assert got == pytest.approx(want), (n.pod, got, want)

            check_all(nodes)
            assert any(expected(c, "cl", keys[0]) > 0 for c in clients)

            # kvtier-1 restarts while the indexer runs: its hot blocks leave with it, the
            # others' events keep arriving (each pod has its own subscriber).
            nodes[1].stop()
            clients[1].close()
            late = prompt(rng, 4)
            prompts.append(late)
            keys.append(put_prompt(cc, "cl", late, seed=99))
            check_all([nodes[0], nodes[2]])
            nodes[1].start()
            clients[1] = kvtier.Client(nodes[1].address, shared_memory=False)
            subscribe(indexer, nodes[1], clients[1], rng)
            # What it announced on open (its recovered cold blocks), before the indexer
            # was pointed at it, comes back through its replay endpoint.
            assert indexer.call(op="replay", endpoint=nodes[1].bound_replay, start=0)["batches"] > 0
            check_all(nodes)
    finally:
        for c in clients:
            c.close()
