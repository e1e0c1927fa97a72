"""The Python client's router-facing calls against a real kvtierd with events over gRPC:
PutBlock's token_ids / lora_name / extra_keys reach the BlockStored events, a Get ends a
lease (one stream or several), drop_namespace."""

import queue
import threading

import pytest

import blocks
import kvtier

TOKENS = 16  # blocks.layout() tokens per block


@pytest.fixture
def events_server(start_server, tmp_path):
    config = tmp_path / "events.textproto"
    config.write_text("events { grpc: true }\n")
    return start_server("--config", str(config))


def _watch(server, ns):
    """A WatchEvents stream of `ns` from seq 0, read on a thread into a queue."""
    import grpc
    ch = grpc.insecure_channel(server.address)
    stub = kvtier.pb_grpc.KvEventsStub(ch)
    call = stub.WatchEvents(kvtier.pb.WatchEventsRequest(namespace=ns, from_seq=0))
    q = queue.Queue()

    def run():
        try:
            for resp in call:
                for ev in resp.events:
                    q.put(ev)
        except grpc.RpcError:
            pass
    threading.Thread(target=run, daemon=True).start()
    return call, q, ch


def _next_event(q, kind):
    while True:
        ev = q.get(timeout=10)
        if ev.kind == kind:
            return ev


def test_put_blocks_carry_router_fields_into_the_events(events_server):
    lay = blocks.layout()
    spec = kvtier.make_namespace("routed", lay, model_id="m1")
    with kvtier.Client(events_server.address, namespace=spec) as c:
        call, q, ch = _watch(events_server, "routed")
        try:
            keys, puts, _ = blocks.sequence("routed", lay, 2, seed=3)
            import numpy as np
            puts[0].token_ids = np.arange(TOKENS, dtype=np.int64)
            puts[0].lora_name = "adapter-x"
            puts[0].extra_keys = ["img-7", "salt"]
            c.put_blocks("routed", puts, format=kvtier.RAW)
            # put_blocks may use several streams: the two events come in either order.
            stored = {}
            for _ in range(2):
                ev = _next_event(q, kvtier.pb.BLOCK_STORED)
                assert len(ev.keys) == 1  # the gRPC stream has one event per block
                stored[ev.keys[0]] = ev
            first, second = stored[keys[0]], stored[keys[1]]
            assert list(first.token_ids) == list(range(TOKENS))
            assert first.lora_name == "adapter-x"
            assert [list(e.keys) for e in first.extra_keys] == [["img-7", "salt"]]
            assert second.parent_key == keys[0]
            assert not second.token_ids and not second.lora_name and not second.extra_keys

            # drop_namespace: its blocks as BLOCK_REMOVED (per tier), then one
            # ALL_BLOCKS_CLEARED on the stream.
            assert c.drop_namespace("routed") == 2
            removed = set()
            cleared = q.get(timeout=10)
            while cleared.kind == kvtier.pb.BLOCK_REMOVED:
                removed.update(cleared.keys)
                cleared = q.get(timeout=10)
            assert removed == set(keys)
            assert cleared.kind == kvtier.pb.ALL_BLOCKS_CLEARED
            assert cleared.namespace == "routed"
        finally:
            call.cancel()
            ch.close()


@pytest.mark.parametrize("streams", [1, 4])
def test_get_ends_the_lease_it_names(server, streams):
    lay = blocks.layout()
    ns = "getlease%d" % streams
    spec = kvtier.make_namespace(ns, lay)
    with kvtier.Client(server.address, namespace=spec, max_streams_per_call=streams,
                       shared_memory=False) as c:
        keys, puts, raws = blocks.sequence(ns, lay, 6, seed=11)
        c.put_blocks(ns, puts, format=kvtier.RAW)
        lk = c.lookup(ns, keys, lease_ms=60000)
        assert lk.leased_blocks == 6
        lease = lk.blocks[0].lease_id
        active = c.stats().leases.active
        bufs = [bytearray(kvtier.bytes_per_block(lay)) for _ in keys]
        infos = c.get_blocks_into(ns, keys, bufs, format=kvtier.RAW, lease_id=lease)
        assert all(i.found for i in infos)
        assert [bytes(b) for b in bufs] == [bytes(r) for r in raws]
        assert c.stats().leases.active == active - 1
        assert c.release_lease(ns, lease) == 0  # already ended by the Get
        # get_blocks too.
        lease = c.lookup(ns, keys, lease_ms=60000).blocks[0].lease_id
        got = c.get_blocks(ns, keys, lease_id=lease)
        assert all(g.info.found for g in got)
        assert c.release_lease(ns, lease) == 0


def test_drop_namespace_refuses_leases_unless_forced(server):
    lay = blocks.layout()
    spec = kvtier.make_namespace("dropme", lay)
    with kvtier.Client(server.address, namespace=spec) as c:
        keys, puts, _ = blocks.sequence("dropme", lay, 3, seed=2)
        c.put_blocks("dropme", puts, format=kvtier.RAW)
        c.lookup("dropme", keys, lease_ms=60000)
        with pytest.raises(kvtier.FailedPreconditionError) as e:
            c.drop_namespace("dropme")
        assert "lease" in e.value.message
        assert c.drop_namespace("dropme", force=True) == 3
        with pytest.raises(kvtier.NotFoundError):
            c.drop_namespace("dropme")
        with pytest.raises(kvtier.NotFoundError):
            c.lookup("dropme", keys)
        assert "dropme" not in [n.name for n in c.list_namespaces().namespaces]
        # The name comes back empty, with another spec.
        other = kvtier.make_namespace("dropme", lay, codec="int8")
        c.register_namespace(other)
        assert c.lookup("dropme", keys).prefix_blocks == 0
