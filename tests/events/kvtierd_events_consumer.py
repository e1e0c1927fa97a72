#!/usr/bin/python3
"""An independent KV-event consumer against a REAL kvtierd.

    kvtierd_events_consumer.py <kvtierd binary> <build dir> map|array

The events are decoded by field name from vLLM's published schema
(vllm/distributed/kv_events.py) with Debian's python3-zmq and python3-msgpack only; no
kvtier code is used to read them. kvtierd is driven through the generated gRPC stubs
(<build>/python/kvtier/v1). A seeded workload puts shared-prefix chains under hot and
cold capacity pressure (so blocks demote, promote and get evicted), gets, deletes,
evicts by admin call, flushes and restarts kvtierd. At quiescent points the consumer's
index (key -> media) must equal what kvtierd reports, exactly:
  - per key, the tier Lookup reports (HOT when the index holds CPU, else COLD
    when it holds DISK, else NONE), and
  - per tier, the block counts of the Stats call (namespace hot.blocks = keys holding
    CPU, cold.blocks = keys holding DISK).
It ignores one live batch on purpose and must heal the gap through the replay socket;
after a restart (the sequence starts again at 0) it re-syncs from replay. Exit status 0
on success.
"""
import json
import os
import queue
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time

import grpc
import zmq

import vllm_kv_events
from vllm_kv_events import END_SEQ, check, fail

NODE = "node-py"
MODEL = "evmodel"
NS = "evns"
TOKENS_PER_BLOCK = 16
READY = "kvtierd listening on "
WATCH_BUFFER = 100  # events.grpc_buffer_events of the watch run


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def decode_batch(payload, form):
    """Returns the batch's events as dicts with 'type', accepting only the expected form."""
    _, events = vllm_kv_events.decode_batch(payload, form)
    for ev in events:
        if ev["type"] == "BlockStored":
            check(ev["block_size"] == TOKENS_PER_BLOCK, "block_size %r" % ev["block_size"])
            check(ev["parent_block_hash"] is None or isinstance(ev["parent_block_hash"], bytes),
                  "parent_block_hash is bytes or nil")
    return events


class Consumer:
    """SUB + replay DEALER; index: key -> set of media."""

    def __init__(self, ctx, pub_ep, replay_ep, form):
        self.form = form
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, ("kv@%s@" % NODE).encode())
        # kvtierd connects to an endpoint without "*" (as to llm-d's indexer, which binds).
        self.sub.bind(pub_ep)
        # Connected only while kvtierd runs: a TCP connect to a local port nobody listens
        # on can connect to itself, which would hold the port's traffic.
        self.replay_ep = replay_ep
        self.replay = ctx.socket(zmq.DEALER)
        self.replay.setsockopt(zmq.LINGER, 0)
        self.index = {}
        self.next_seq = 0
        self.gaps_healed = 0
        self.dropped_live = 0
        self.token_events = 0
        self.chain_events = 0  # BlockStored events with more than one block
        self.cleared = 0       # AllBlocksCleared applied
        self.removed = 0       # BlockRemoved events applied
        self.live_received = 0

    def request_replay(self, start):
        self.replay.send_multipart([b"", start.to_bytes(8, "big"), b"topic"])
        out = []
        while True:
            check(self.replay.poll(10000), "replay answers")
            frames = self.replay.recv_multipart()
            check(frames[0] == b"" and len(frames) == 4, "replay frames %r" % frames[:2])
            seq = int.from_bytes(frames[1], "big", signed=True)
            if seq == END_SEQ:
                return out
            out.append((frames[3].decode(), seq, frames[2]))

    def apply(self, topic, seq, payload):
        if seq < self.next_seq:
            return
        check(seq == self.next_seq, "apply in order (%d, expected %d)" % (seq, self.next_seq))
        check(topic == "kv@%s@%s" % (NODE, MODEL), "topic %r" % topic)
        for ev in decode_batch(payload, self.form):
            if ev["type"] == "BlockStored":
                if ev["token_ids"]:
                    check(len(ev["token_ids"]) == TOKENS_PER_BLOCK * len(ev["block_hashes"]),
                          "token_ids cover the blocks")
                    check(ev["lora_name"] == "adapter-1", "lora_name %r" % ev["lora_name"])
                    check(ev["extra_keys"] == [["salt-" + h[:4].hex()]
                                               for h in ev["block_hashes"]],
                          "extra_keys %r" % ev["extra_keys"])
                    self.token_events += 1
                # One event per chain run of a Put (as vLLM): count the multi-block ones.
                if len(ev["block_hashes"]) > 1:
                    self.chain_events += 1
                for h in ev["block_hashes"]:
                    media = self.index.setdefault(h, set())
                    check(ev["medium"] not in media, "stored twice in %s" % ev["medium"])
                    media.add(ev["medium"])
            elif ev["type"] == "BlockRemoved":
                self.removed += 1
                for h in ev["block_hashes"]:
                    media = self.index.get(h, set())
                    check(ev["medium"] in media, "removed from %s, not held" % ev["medium"])
                    media.discard(ev["medium"])
                    if not media:
                        del self.index[h]
            else:
                check(ev["type"] == "AllBlocksCleared", "event type %r" % ev["type"])
                self.cleared += 1
                self.index = {}
        self.next_seq = seq + 1

    def heal(self):
        """Applies every buffered batch from next_seq on. Returns True if any came."""
        answers = self.request_replay(self.next_seq)
        if not answers:
            return False
        check(answers[0][1] == self.next_seq,
              "seq %d no longer replayable (first %d): re-sync" % (self.next_seq, answers[0][1]))
        for topic, seq, payload in answers:
            self.apply(topic, seq, payload)
        return True

    def recv_live(self, timeout_ms):
        """The next live batch not applied yet (live copies of replayed ones are skipped)."""
        while self.sub.poll(timeout_ms):
            frames = self.sub.recv_multipart()
            check(len(frames) == 3 and len(frames[1]) == 8, "three frames, 8-byte seq")
            seq = int.from_bytes(frames[1], "big")
            self.live_received += 1
            if seq >= self.next_seq:
                return frames[0].decode(), seq, frames[2]
        return None

    def process(self, topic, seq, payload):
        """Applies one live batch; a gap before it is healed through replay first."""
        if seq > self.next_seq:
            self.gaps_healed += 1
            self.heal()
        self.apply(topic, seq, payload)

    def drain(self):
        """Applies what arrived live."""
        while True:
            got = self.recv_live(0)
            if got is None:
                return
            self.process(*got)

    def server_started(self):
        self.replay.connect(self.replay_ep)

    def server_stopping(self):
        self.replay.disconnect(self.replay_ep)

    def discard_live(self):
        """kvtierd stopped: what the old process sent is superseded by the new one."""
        while self.sub.poll(200):
            self.sub.recv_multipart()

    def restart(self):
        """kvtierd restarted: its sequence starts at 0; rebuild from the recovered blocks."""
        self.index = {}
        self.next_seq = 0


class WatchConsumer:
    """The same index fed by the gRPC stream (KvEvents.WatchEvents, protobuf events)."""

    def __init__(self, pb, pb_grpc):
        self.pb, self.pb_grpc = pb, pb_grpc
        self.index = {}
        self.next_seq = 0
        self.gaps_healed = 0   # resyncs from EventsSnapshot after OUT_OF_RANGE
        self.resumed = 0       # streams resumed from next_seq without loss
        self.dropped_live = 0
        self.token_events = 0
        self.chain_events = 0  # one event per block on this stream
        self.cleared = 0
        self.removed = 0
        self.call = None

    def connect(self, channel):
        self.stub = self.pb_grpc.KvEventsStub(channel)

    def start(self):
        self.queue = queue.Queue()
        q = self.queue
        self.call = self.stub.WatchEvents(
            self.pb.WatchEventsRequest(namespace=NS, from_seq=self.next_seq))
        call = self.call

        def run():
            try:
                for resp in call:
                    for ev in resp.events:
                        q.put(ev)
            except grpc.RpcError as e:
                q.put(e)
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def stop(self):
        if self.call is not None:
            self.call.cancel()
            self.thread.join()
            self.call = None

    def apply(self, ev):
        pb = self.pb
        check(ev.seq == self.next_seq, "watch: seq %d, expected %d" % (ev.seq, self.next_seq))
        check(ev.namespace == NS and ev.model_id == MODEL, "watch: namespace/model")
        medium = {pb.TIER_HOT: "CPU", pb.TIER_COLD: "DISK"}.get(ev.tier)
        if ev.kind == pb.BLOCK_STORED:
            check(ev.block_size == TOKENS_PER_BLOCK, "watch: block_size")
            if ev.token_ids:
                check(ev.lora_name == "adapter-1" and len(ev.extra_keys) == 1, "watch: extras")
                self.token_events += 1
            for h in ev.keys:
                media = self.index.setdefault(h, set())
                check(medium not in media, "watch: stored twice")
                media.add(medium)
        elif ev.kind == pb.BLOCK_REMOVED:
            self.removed += 1
            for h in ev.keys:
                media = self.index.get(h, set())
                check(medium in media, "watch: removed from %s, not held" % medium)
                media.discard(medium)
                if not media:
                    del self.index[h]
        else:
            check(ev.kind == pb.ALL_BLOCKS_CLEARED, "watch: kind %d" % ev.kind)
            self.cleared += 1
            self.index = {}
        self.next_seq = ev.seq + 1

    def resync(self):
        snap = self.stub.EventsSnapshot(self.pb.EventsSnapshotRequest(namespace=NS))
        self.index = {}
        for b in snap.blocks:
            self.index[b.key] = set(m for m, on in (("CPU", b.hot), ("DISK", b.cold)) if on)
        self.next_seq = snap.next_seq
        self.start()

    def drain(self):
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, grpc.RpcError):
                check(item.code() == grpc.StatusCode.OUT_OF_RANGE, "watch ended: %s" % item)
                self.thread.join()
                self.gaps_healed += 1
                self.resync()
                return
            self.apply(item)

    def heal(self):
        return False

    def snapshot_matches(self):
        snap = self.stub.EventsSnapshot(self.pb.EventsSnapshotRequest(namespace=NS))
        got = {b.key: set(m for m, on in (("CPU", b.hot), ("DISK", b.cold)) if on)
               for b in snap.blocks}
        if snap.next_seq != self.next_seq:
            return "snapshot at seq %d, index at %d" % (snap.next_seq, self.next_seq)
        if got != self.index:
            return "snapshot differs from the index (%d vs %d blocks)" % (len(got),
                                                                           len(self.index))
        return None

    def server_started(self):
        pass

    def server_stopping(self):
        pass

    def discard_live(self):
        self.stop()

    def restart(self):
        self.index = {}
        self.next_seq = 0


class Kvtierd:
    started = []  # killed at exit, whatever happened
    def __init__(self, binary, data_dir, config, pub_ep, replay_ep):
        self.cmd = [binary, "--config", config, "--port", str(free_port()), "--data-dir",
                    data_dir, "--hot-capacity", "1M", "--cold-capacity", "3M",
                    "--node-id", NODE, "--shm-socket", "off"]
        if pub_ep:
            self.cmd += ["--events-endpoint", pub_ep, "--events-replay-endpoint", replay_ep]
        self.proc = None
        self.address = None

    def start(self):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, text=True)
        Kvtierd.started.append(self)
        line = self.proc.stdout.readline()
        while line.startswith("kvtierd bound on "):  # port bound, index still loading
            line = self.proc.stdout.readline()
        check(line.startswith(READY), "kvtierd did not start: %r" % line)
        self.address = line[len(READY):].strip()

    def stop(self):
        self.proc.terminate()
        check(self.proc.wait(30) == 0, "kvtierd exited with an error")

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def main():
    kvtierd, build, form = sys.argv[1], sys.argv[2], sys.argv[3]
    sys.path.insert(0, os.path.join(build, "python"))
    from kvtier.v1 import kvtier_pb2 as pb  # the generated stubs only, to drive kvtierd
    from kvtier.v1 import kvtier_pb2_grpc as pb_grpc

    rng = random.Random(15)          # the workload
    payload_rng = random.Random(16)  # payload bytes and tokens (their count varies)
    tmp = tempfile.mkdtemp(prefix="kvtier-events-")
    config = os.path.join(tmp, "kvtierd.textproto")
    watch = form == "watch"
    with open(config, "w") as f:
        if watch:
            f.write("events { grpc: true grpc_buffer_events: %d }\n" % WATCH_BUFFER)
        else:
            f.write('events { format: "%s" batch_ms: 2 send_all_blocks_cleared: true }\n'
                    % form)
    pub_ep = None if watch else "tcp://127.0.0.1:%d" % free_port()
    replay_ep = None if watch else "tcp://127.0.0.1:%d" % free_port()
    server = Kvtierd(kvtierd, os.path.join(tmp, "data"), config, pub_ep, replay_ep)
    # The SUB binds before kvtierd starts; kvtierd connects to it (as to llm-d's indexer).
    if watch:
        c = WatchConsumer(pb, pb_grpc)
    else:
        c = Consumer(zmq.Context(), pub_ep, replay_ep, form)
    server.start()
    c.server_started()

    layout = pb.Layout(num_layers=4, num_kv_heads=2, head_dim=64,
                       tokens_per_block=TOKENS_PER_BLOCK, dtype=pb.DTYPE_FP16, sink_tokens=4)
    raw_bytes = 4 * 4 * 2 * TOKENS_PER_BLOCK * 64  # 32 KiB: ~28 hot, ~96 cold blocks

    def connect():
        ch = grpc.insecure_channel(server.address)
        if watch:
            c.connect(ch)
        return pb_grpc.KvCacheStub(ch), pb_grpc.KvCacheAdminStub(ch)

    data, admin = connect()
    events_stub = c.stub if watch else None

    def register():
        data.RegisterNamespace(pb.RegisterNamespaceRequest(
            spec=pb.NamespaceSpec(name=NS, model_id=MODEL, layout=layout)))

    register()
    if watch:
        c.start()

    def put_chain(keys, first_index, with_tokens):
        req = pb.PutRequest()
        req.header.namespace = NS
        req.header.format = pb.PAYLOAD_FORMAT_RAW
        for i, k in enumerate(keys):
            idx = first_index + i
            parent = b"" if idx == 0 else (keys[i - 1] if i > 0 else parent_of[k])
            b = req.header.blocks.add(key=k, parent_key=parent, block_index=idx, size=raw_bytes)
            if with_tokens:
                b.token_ids.extend(payload_rng.randrange(50000) for _ in range(TOKENS_PER_BLOCK))
                b.lora_name = "adapter-1"
                b.extra_keys.append("salt-" + k[:4].hex())
        chunks = [bytes(payload_rng.getrandbits(8) for _ in range(64)) * (raw_bytes // 64)
                  for _ in keys]
        data.Put(iter([req] + [pb.PutRequest(chunk=ch) for ch in chunks]), timeout=30)

    universe = []  # every key ever put, in order
    parent_of = {}
    chains = []

    def expected_tier(key):
        media = c.index.get(key, set())
        return pb.TIER_HOT if "CPU" in media else (
            pb.TIER_COLD if "DISK" in media else pb.TIER_NONE)

    def compare():
        """Returns None when the index equals kvtierd, else what differs."""
        if not universe:
            return None
        resp = data.Lookup(pb.LookupRequest(namespace=NS, keys=universe, local_only=True))
        for k, loc in zip(universe, resp.blocks):
            if loc.tier != expected_tier(k):
                return "key %s: Lookup %d, index %r" % (k.hex(), loc.tier, c.index.get(k))
        extra = [k for k in c.index if k not in parent_of]
        if extra:
            return "index holds keys never put: %r" % extra[:3]
        st = admin.Stats(pb.StatsRequest(namespace=NS)).namespaces[0]
        hot = sum(1 for m in c.index.values() if "CPU" in m)
        cold = sum(1 for m in c.index.values() if "DISK" in m)
        if (st.hot.blocks, st.cold.blocks) != (hot, cold):
            return "Stats hot/cold %d/%d, index %d/%d" % (st.hot.blocks, st.cold.blocks, hot,
                                                            cold)
        if watch:
            return c.snapshot_matches()  # the per-tier resident set, exactly
        return None

    def quiescent_check(step):
        # The background demoter and the 2 ms batches settle quickly; poll until equal.
        deadline = time.monotonic() + 10
        diff = "never compared"
        while time.monotonic() < deadline:
            c.drain()
            c.heal()  # the tail that has no successor yet to reveal a gap
            diff = compare()
            if diff is None:
                return
            time.sleep(0.02)
        fail("step %d: the index differs from kvtierd: %s" % (step, diff))

    def put_one():
        nonlocal seq_counter
        seq_counter += 1
        k = ("g%d" % seq_counter).encode().ljust(16, b".")
        parent_of[k] = b""
        universe.append(k)
        put_chain([k], 0, with_tokens=False)
        chains.append([k])

    def provoke_watch_gap():
        """Stops watching: a short pause resumes from next_seq without loss; a pause longer
        than the retained events ends in OUT_OF_RANGE, then a re-sync from EventsSnapshot."""
        quiescent_check(-1)
        c.stop()
        put_one()
        c.start()
        quiescent_check(-1)
        c.resumed += 1
        c.stop()
        start = c.next_seq
        while data_next_seq() - start <= WATCH_BUFFER:
            put_one()
        c.dropped_live += 1
        c.start()
        quiescent_check(-1)
        check(c.gaps_healed == 1, "the stream said OUT_OF_RANGE and the index re-synced")

    def data_next_seq():
        return events_stub.EventsSnapshot(pb.EventsSnapshotRequest(namespace=NS)).next_seq

    def provoke_gap():
        """Loses one live batch on purpose; the next live batch reveals the gap, which
        replay heals."""
        if watch:
            return provoke_watch_gap()
        quiescent_check(-1)
        put_one()
        lost = c.recv_live(10000)
        check(lost is not None and lost[1] == c.next_seq, "a live batch after a put: %r, next %d, %d live so far, %d restarts" % (
                  lost and lost[:2], c.next_seq, c.live_received, restarts))
        c.dropped_live += 1
        put_one()
        got = c.recv_live(10000)
        check(got is not None and got[1] > c.next_seq, "the next live batch shows a gap")
        healed = c.gaps_healed
        c.process(*got)
        check(c.gaps_healed == healed + 1, "the gap was healed through replay")

    cli = os.path.join(build, "client", "cli", "kvtier")

    def drop_namespace(step):
        """DropNamespace: refused while a lease of the namespace is in force, then forced
        through `kvtier drop-namespace`; BlockRemoved events listing the resident blocks
        (each key once per tier it was in) empty the index, then one AllBlocksCleared; the
        name is registered again and starts empty."""
        quiescent_check(step)
        add_stats()  # the namespace's counters go with it
        resident = len(c.index)
        removed, cleared = c.removed, c.cleared
        # Lookup leases the leading resident prefix: ask for one resident key.
        held = [k for k in universe if k in c.index][:1]
        check(held, "blocks are resident before the drop")
        leased = data.Lookup(pb.LookupRequest(namespace=NS, keys=held, local_only=True,
                                              lease_ms=60000))
        check(leased.leased_blocks == 1, "a lease is in force: %s" % leased)
        try:
            admin.DropNamespace(pb.DropNamespaceRequest(namespace=NS))
            fail("DropNamespace while a lease is in force was not refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.FAILED_PRECONDITION, "leased drop: %s" % e)
        out = subprocess.run([cli, "drop-namespace", "--server", server.address, "--namespace",
                              NS, "--force", "--json"], capture_output=True, text=True)
        check(out.returncode == 0, "kvtier drop-namespace: %s" % out.stderr)
        check(json.loads(out.stdout)["blocks"] == resident, "dropped %s, index held %d"
              % (out.stdout.strip(), resident))
        register()
        quiescent_check(step)
        check(c.cleared == cleared + 1 and c.removed > removed,
              "BlockRemoved lists, then one AllBlocksCleared (%d, %d)"
              % (c.cleared - cleared, c.removed - removed))
        check(not c.index, "the index is empty after the drop")

    totals = {}

    def add_stats():
        st = admin.Stats(pb.StatsRequest(namespace=NS)).namespaces[0]
        for f in ("demotions", "promotions", "evictions_hot_capacity", "evictions_cold_capacity",
                  "evictions_admin"):
            totals[f] = totals.get(f, 0) + getattr(st, f)

    restarts = 0
    seq_counter = 0
    # ZMQ has no signal for "subscribed": everything before the first drain is replayed.
    for step in range(140):
        op = rng.randrange(100)
        if op < 50 or not universe:
            keys, first = [], 0
            if chains and rng.random() < 0.6:
                base = rng.choice(chains)
                shared = rng.randrange(len(base) + 1)
                prefix = base[:shared]
            else:
                prefix = []
            seq_counter += 1
            n = rng.randrange(1, 6)
            keys = [("c%d-%d" % (seq_counter, len(prefix) + i)).encode().ljust(16, b".")
                    for i in range(n)]
            full = prefix + keys
            for i, k in enumerate(keys):
                parent_of[k] = full[len(prefix) + i - 1] if len(prefix) + i > 0 else b""
                universe.append(k)
            put_chain(keys, len(prefix), with_tokens=rng.random() < 0.5)
            chains.append(full)
        elif op < 70:
            k = rng.choice(universe)
            list(data.Get(pb.GetRequest(namespace=NS, keys=[k])))
        elif op < 78:
            data.Delete(pb.DeleteRequest(namespace=NS, keys=[rng.choice(universe)]))
        elif op < 88:
            admin.Evict(pb.EvictRequest(namespace=NS, keys=[rng.choice(universe)],
                                        drop=rng.random() < 0.5))
        else:
            admin.Flush(pb.FlushRequest(namespace=NS))
        if step in (60, 110):  # restarts at fixed steps
            quiescent_check(step)
            add_stats()
            c.server_stopping()
            server.stop()
            c.discard_live()
            server.start()
            c.server_started()
            c.restart()
            data, admin = connect()
            if watch:
                events_stub = c.stub
                c.start()
            restarts += 1
        if step == 20:
            provoke_gap()
        if step == 125:  # late: the pressure before it reached every eviction kind
            drop_namespace(step)
        if step % 10 == 9:
            quiescent_check(step)
    quiescent_check(140)
    add_stats()
    server.stop()
    for f, n in totals.items():
        check(n > 0, "the workload reached %s" % f)
    check(restarts >= 1, "the workload restarted kvtierd")
    check(c.dropped_live == 1 and c.gaps_healed >= 1, "the provoked gap was healed (%d, %d)"
          % (c.dropped_live, c.gaps_healed))
    check(c.token_events > 0, "token_ids / lora_name / extra_keys reached the events")
    check(c.cleared == 1, "the drop was seen (%d AllBlocksCleared)" % c.cleared)
    if not watch:
        check(c.chain_events > 0, "a Put of a chain became one BlockStored")
    print("PASS %s: %d keys put, %d resident at the end, %d gap(s) healed, %d restart(s), %r"
          % (form, len(universe), len(c.index), c.gaps_healed, restarts, totals))


if __name__ == "__main__":
    try:
        main()
    finally:
        for s in Kvtierd.started:
            s.kill()
