"""kvtier.Client against a real kvtierd: round trips, codecs, errors, deadlines."""

import grpc
import numpy as np
import pytest

import blocks
import kvtier
from kvtier import codec
from kvtier import lookup_form

# Documented error per codec (kv/codec.h): quantization step of a group
# (range / qmax) for the integer codecs, 2^-4 relative (+ subnormal floor) for fp8.
_QMAX = {"int8": 255, "int4": 15, "kivi4": 15, "kivi2": 3}


def _client(server, spec=None, **kw):
    return kvtier.Client(server.address, namespace=spec, **kw)


# The two paths of the payload calls: the C++ client through kvtier._native, and the
# pure-Python fallback on grpcio.
NATIVE = pytest.mark.parametrize("native", [True, False], ids=["native", "grpcio"])


def test_the_build_ships_the_native_module(server):
    # scripts/build.sh builds kvtier._native into build/python (python3-dev): without it
    # the tests below would exercise the grpcio path twice.
    from kvtier import client
    assert client._native is not None
    with _client(server, shared_memory=False) as c:
        assert c.uses_native
    with _client(server, shared_memory=False, native=False) as c:
        assert not c.uses_native


def test_native_client_rejects_bad_arguments_and_maps_statuses(server):
    # kvtier._native.Client is the C++ client: bad Python arguments are TypeErrors, a
    # failed call is an RpcError whose code and message kvtier.errors maps onto the same
    # class the pure-Python path raises.
    from kvtier import _native
    from kvtier import errors
    with pytest.raises(_native.RpcError) as e:  # nothing listens on port 1
        _native.Client("127.0.0.1:1", connect_deadline_ms=300)
    assert e.value.args[0] in (grpc.StatusCode.UNAVAILABLE.value[0],
                               grpc.StatusCode.DEADLINE_EXCEEDED.value[0])
    c = _native.Client(server.address, shared_memory=False)
    with pytest.raises(TypeError):
        c.lookup("ns", [42], False, 0, False, 1.0)
    with pytest.raises(_native.RpcError) as e:
        c.lookup("no-such-namespace", [b"k" * 16], False, 0, False, 5.0)
    err = errors.from_native_error("Lookup", e.value)
    assert isinstance(err, kvtier.NotFoundError) and not err.message.startswith("Lookup:")
    c.close()
    with pytest.raises(_native.RpcError) as e:
        c.lookup("ns", [b"k" * 16], False, 0, False, 1.0)
    assert e.value.args[0] == grpc.StatusCode.FAILED_PRECONDITION.value[0]


@pytest.mark.parametrize("shm,native", [(True, True), (False, True), (False, False)],
                         ids=["shm", "tcp-native", "tcp-grpcio"])
def test_raw_and_encoded_round_trips_are_bit_exact(server, shm, native):
    lay = blocks.layout()
    spec = kvtier.make_namespace("exact-%d" % shm, lay, codec="fp16")
    # An odd chunk size: chunk messages straddle block boundaries.
    with _client(server, spec, shared_memory=shm, native=native, chunk_bytes=777) as c:
        assert c.uses_shared_memory == shm and c.uses_native == native
        keys, puts, raw = blocks.sequence(spec.name, lay, 6, seed=1)
        res = c.put_blocks(spec.name, puts, format=kvtier.RAW)
        assert res.blocks_stored == 6
        got = c.get_blocks(spec.name, keys, format=kvtier.RAW, numpy=True)
        for g, r in zip(got, raw):
            assert g.info.found and g.data.dtype == np.float16
            assert g.data.shape == kvtier.block_shape(lay)
            assert np.array_equal(g.data.view(np.uint16), r.view(np.uint16))
        enc = c.get_blocks(spec.name, keys)  # ENCODED: fp16 blobs
        info = codec.parse_header(enc[0].data)
        assert (info.codec_name, info.num_tokens, info.shape) == ("fp16", 16, raw[0].shape)
        assert bytes(codec.decode_raw_codec(enc[0].data)) == raw[0].tobytes()
        # Encoded put of those blobs under new keys reads back byte for byte.
        keys2 = [b"enc-%d" % i for i in range(6)]
        c.put_blocks(spec.name, [kvtier.PutBlock(k, e.data) for k, e in zip(keys2, enc)])
        bufs = [bytearray(len(e.data) + 100) for e in enc]
        infos = c.get_blocks_into(spec.name, keys2, [memoryview(b) for b in bufs])
        for b, e, i in zip(bufs, enc, infos):
            assert i.found and i.size == len(e.data) and b[:i.size] == e.data
        # numpy destination buffers, RAW.
        arrs = [np.zeros(kvtier.block_shape(lay), np.float16) for _ in keys]
        infos = c.get_blocks_into(spec.name, keys, arrs, format="raw")
        assert all(i.found for i in infos)
        assert all(np.array_equal(a, r) for a, r in zip(arrs, raw))


def test_bf16_round_trip_is_bit_exact(server):
    lay = blocks.layout("bf16")
    spec = kvtier.make_namespace("bf16", lay, codec="bf16")
    with _client(server, spec) as c:
        keys, puts, raw = blocks.sequence("bf16", lay, 3, seed=2)
        c.put_blocks("bf16", puts, format=kvtier.RAW)
        got = c.get_blocks("bf16", keys, format=kvtier.RAW, numpy=True)
        assert all(g.data.dtype == np.uint16 and np.array_equal(g.data, r)
                   for g, r in zip(got, raw))


@pytest.mark.parametrize("name", ["fp8_e4m3", "int8", "int4", "kivi2", "kivi4"])
def test_every_codec_decodes_within_its_documented_error(server, name):
    lay = blocks.layout()
    spec = kvtier.make_namespace("codec-" + name, lay, codec=name)
    with _client(server, spec) as c:
        keys, puts, raw = blocks.sequence(spec.name, lay, 3, seed=3)
        c.put_blocks(spec.name, puts, format=kvtier.RAW)
        enc = c.get_blocks(spec.name, keys)
        got = c.get_blocks(spec.name, keys, format=kvtier.RAW, numpy=True)
        for i, (g, e, r) in enumerate(zip(got, enc, raw)):
            info = codec.parse_header(e.data)
            assert info.codec_name == name and info.raw_bytes == g.data.nbytes
            assert info.raw_tokens == (4 if i == 0 else 0)  # sink protection, block 0
            assert g.info.codec == kvtier.layout._CODECS[name]
            x, y = r.astype(np.float32), g.data.astype(np.float32)
            err = np.abs(x - y)
            if name == "fp8_e4m3":
                bound = 0.0625 * np.abs(x) + np.abs(x).max() / 448 * 2.0 ** -9
            else:
                bound = (x.max() - x.min()) / _QMAX[name] + 1e-3 * np.abs(x).max()
            assert (err <= bound).all(), (name, float((err - bound).max()))
            if i == 0:  # the sink tokens decode bit-exactly
                assert np.array_equal(g.data[:, :, :, :4, :], r[:, :, :, :4, :])


def test_lookup_pin_unpin_delete_scores_and_stats(server):
    lay = blocks.layout()
    spec = kvtier.make_namespace("ops", lay, codec="int8")
    with _client(server, spec) as c:
        keys, puts, _ = blocks.sequence("ops", lay, 4, seed=4)
        c.put_blocks("ops", puts[:3], format=kvtier.RAW)
        lk = c.lookup("ops", keys)
        assert lk.prefix_blocks == 3
        assert [b.tier for b in lk.blocks] == [kvtier.pb.TIER_HOT] * 3 + [kvtier.pb.TIER_NONE]
        assert lk.blocks[0].owner == c.connect_info.node_id
        assert c.pin("ops", keys[:2]) == 2
        assert c.unpin("ops", keys[:2]) == 2
        c.report_scores("ops", keys[:3], [0.5, 0.25, 0.25])
        st = c.stats("ops")
        assert st.namespaces[0].name == "ops" and st.namespaces[0].puts == 3
        assert st.hash_scheme == kvtier.HASH_SCHEME
        assert c.delete("ops", keys) == 3
        assert c.lookup("ops", keys).prefix_blocks == 0
        got = c.get_blocks("ops", keys[:1])
        assert not got[0].info.found and got[0].data is None


def test_lookup_lease_and_release(server):
    lay = blocks.layout()
    spec = kvtier.make_namespace("leases", lay)
    with _client(server, spec) as c:
        keys, puts, _ = blocks.sequence("leases", lay, 4, seed=5)
        c.put_blocks("leases", puts[:3], format=kvtier.RAW)
        lk = c.lookup("leases", keys, lease_ms=5000)
        assert lk.prefix_blocks == 3 and lk.leased_blocks == 3
        assert lk.lease_limit == kvtier.pb.LEASE_LIMIT_NONE
        ids = {b.lease_id for b in lk.blocks[:3]}
        assert len(ids) == 1 and 0 not in ids and lk.blocks[3].lease_id == 0
        assert c.stats("leases").leases.active >= 1
        assert c.release_lease("leases", ids.pop()) == 3
        assert c.lookup("leases", keys).leased_blocks == 0  # no lease asked
        with pytest.raises(kvtier.InvalidArgumentError):
            c.lookup("leases", keys, lease_ms=10**9)  # over max_lease_ms


def test_compact_lookup_expands_to_the_verbose_answer(server):
    lay = blocks.layout()
    spec = kvtier.make_namespace("compact", lay)
    with _client(server, spec) as c:
        keys, puts, _ = blocks.sequence("compact", lay, 5, seed=6)
        c.put_blocks("compact", puts[:3], format=kvtier.RAW)
        keys = keys[:4] + [keys[1]]  # resident after a miss
        with grpc.insecure_channel(server.address) as ch:
            stub = kvtier.pb_grpc.KvCacheStub(ch)
            for lease_ms in (0, 5000):
                req = kvtier.pb.LookupRequest(namespace="compact", keys=keys, lease_ms=lease_ms)
                verbose = stub.Lookup(req, timeout=5)  # an old client: no compact asked
                req.compact = True
                compact = stub.Lookup(req, timeout=5)
                assert not lookup_form.is_compact(verbose) and len(verbose.blocks) == 5
                assert lookup_form.is_compact(compact) and len(compact.blocks) == 0
                assert compact.ByteSize() < verbose.ByteSize()
                lookup_form.expand(compact)
                assert compact.prefix_blocks == verbose.prefix_blocks == 3
                assert compact.leased_blocks == verbose.leased_blocks
                assert [(b.tier, b.owner, b.lease_id != 0) for b in compact.blocks] == \
                    [(b.tier, b.owner, b.lease_id != 0) for b in verbose.blocks]
        raw = c.lookup("compact", keys, compact=True)
        assert lookup_form.is_compact(raw) and list(raw.owners) == [c.connect_info.node_id]
        assert [b.tier for b in c.lookup("compact", keys).blocks] == \
            [kvtier.pb.TIER_HOT] * 3 + [kvtier.pb.TIER_NONE, kvtier.pb.TIER_HOT]
        bad = kvtier.pb.LookupResponse(tiers=bytes([kvtier.pb.TIER_HOT]), owners=["n"],
                                       owner_index=[1])
        with pytest.raises(kvtier.DataLossError):
            lookup_form.expand(bad)


def _raw_error(server, method, request):
    """The server's own status for a request, sent through the generated stub."""
    with grpc.insecure_channel(server.address) as ch:
        stub = kvtier.pb_grpc.KvCacheStub(ch)
        with pytest.raises(grpc.RpcError) as e:
            r = getattr(stub, method)(request, timeout=5)
            if method == "Get":
                list(r)
        return e.value.code(), e.value.details()


def test_a_native_client_makes_every_call_on_the_cpp_clients_connections(server):
    # With the extension the calls other than the payload calls go through
    # kvtier._native.Client.unary: the same answers and errors as over grpcio, and no
    # grpcio connection is opened at all.
    from kvtier import _native
    spec = kvtier.make_namespace("unary", blocks.layout(), codec="fp16")
    outcomes = {}
    for native in (True, False):
        with _client(server, spec, shared_memory=False, native=native) as c:
            assert c.uses_native == native
            assert (len(c._channels) == 0) == native  # grpcio channels
            got = [[n.name for n in c.stats("unary").namespaces],
                   sorted(n.name for n in c.list_namespaces().namespaces),
                   c.pin("unary", [b"k" * 16]), c.delete("unary", [b"k" * 16])]
            for fn in (lambda: c.stats("nope"), lambda: c.pin("unary", [b""]),
                       lambda: c.drop_namespace("nope")):
                with pytest.raises(kvtier.KvtierError) as e:
                    fn()
                got.append((type(e.value), e.value.code, e.value.rpc, e.value.message))
            outcomes[native] = got
        if native:  # a call after close(); grpcio raises its own ValueError there
            with pytest.raises(kvtier.FailedPreconditionError):
                c.stats()
    assert outcomes[True] == outcomes[False]
    assert outcomes[True][4][0] is kvtier.NotFoundError
    assert outcomes[True][5][0] is kvtier.InvalidArgumentError
    c = _native.Client(server.address, shared_memory=False)
    with pytest.raises(_native.RpcError) as e:
        c.unary("/grpc.health.v1.Health/Check", b"", True, False, 5.0)
    assert e.value.args[0] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    c.close()


@NATIVE
def test_bad_inputs_raise_the_servers_code_and_message(server, native):
    lay = blocks.layout()
    spec = kvtier.make_namespace("bad", lay, codec="int8")
    with _client(server, spec, shared_memory=False, native=native) as c:
        raw = blocks.raw_blocks(lay, 1, 5)[0]
        cases = [
            (lambda: c.put_blocks("nope", [kvtier.PutBlock(b"k", raw)], format=kvtier.RAW),
             kvtier.NotFoundError, 'namespace "nope" is not registered'),
            (lambda: c.put_blocks("bad", [kvtier.PutBlock(b"", raw)], format=kvtier.RAW),
             kvtier.InvalidArgumentError, "header.blocks[0].key"),
            (lambda: c.put_blocks("bad", [kvtier.PutBlock(b"x" * 33, raw)], format=kvtier.RAW),
             kvtier.InvalidArgumentError, "header.blocks[0].key"),
            (lambda: c.put_blocks("bad", [kvtier.PutBlock(b"k", raw[:1])], format=kvtier.RAW),
             kvtier.InvalidArgumentError, "header.blocks[0].size is"),
            (lambda: c.put_blocks("bad", [kvtier.PutBlock(b"k", b"garbage" * 100)]),
             kvtier.InvalidArgumentError, "blocks[0].payload"),
            (lambda: c.get_blocks("nope", [b"k"]), kvtier.NotFoundError, "not registered"),
            (lambda: c.lookup("bad", []), kvtier.InvalidArgumentError, "keys is empty"),
        ]
        for fn, cls, text in cases:
            with pytest.raises(cls) as e:
                fn()
            assert text in e.value.message, (text, e.value.message)
            assert e.value.code == cls.code
            assert type(e.value) is cls
        # The message is the server's, verbatim.
        code, details = _raw_error(server, "Get", kvtier.pb.GetRequest(namespace="nope", keys=[b"k"]))
        with pytest.raises(kvtier.NotFoundError) as e:
            c.get_blocks("nope", [b"k"])
        assert (e.value.code, e.value.message, e.value.rpc) == (code, details, "Get")
        assert str(e.value) == "Get: " + details
        # Client-side argument errors use the same classes.
        with pytest.raises(kvtier.InvalidArgumentError):
            c.report_scores("bad", [b"a", b"b"], [1.0])
        with pytest.raises(kvtier.InvalidArgumentError):
            c.get_blocks_into("bad", [b"a"], [])
        with pytest.raises(kvtier.InvalidArgumentError):
            c.get_blocks_into("bad", [b"a"], [b"read-only bytes"])
        key = b"fits-not"
        c.put_blocks("bad", [kvtier.PutBlock(key, raw)], format=kvtier.RAW)
        for shm in (True, False):
            with _client(server, shared_memory=shm, native=native) as c2:
                with pytest.raises(kvtier.OutOfRangeError) as e:
                    c2.get_blocks_into("bad", [key], [bytearray(100)], format=kvtier.RAW)
                assert "holds 100 bytes" in e.value.message  # server (shm) or client (tcp)


def test_handshake_checks_layout_codec_and_hash_scheme(server):
    lay = blocks.layout()
    with _client(server, kvtier.make_namespace("hs", lay, codec="int8")):
        pass
    other = kvtier.make_layout(3, 2, 64, 16, sink_tokens=4)
    with pytest.raises(kvtier.FailedPreconditionError) as e:
        _client(server, kvtier.make_namespace("hs", other, codec="int8"))
    assert "layout.num_layers" in e.value.message
    with pytest.raises(kvtier.FailedPreconditionError) as e:
        _client(server, kvtier.make_namespace("hs", lay, codec="int4"))
    assert "codec" in e.value.message
    with pytest.raises(kvtier.FailedPreconditionError) as e:
        _client(server, kvtier.make_namespace("hs", lay, codec="int8"), hash_scheme="md5-v0")
    assert "hash_scheme" in e.value.message
    with pytest.raises(kvtier.FailedPreconditionError) as e:
        _client(server, hash_scheme="md5-v0")  # the Stats handshake checks it too
    assert "hash_scheme mismatch" in e.value.message


@NATIVE
def test_deadlines_and_unreachable_servers(server, native):
    with pytest.raises((kvtier.UnavailableError, kvtier.DeadlineExceededError)):
        kvtier.Client("127.0.0.1:1", connect_timeout=0.3, native=native)
    lay = blocks.layout()
    spec = kvtier.make_namespace("dl", lay, codec="int8")
    with _client(server, spec, shared_memory=False, native=native) as c:
        keys, puts, _ = blocks.sequence("dl", lay, 8, seed=6)
        c.put_blocks("dl", puts, format=kvtier.RAW)
        for fn in (lambda: c.put_blocks("dl", puts, format=kvtier.RAW, timeout=1e-6),
                   lambda: c.get_blocks("dl", keys, timeout=1e-6)):
            with pytest.raises(kvtier.DeadlineExceededError) as e:
                fn()
            assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    # A deadline that runs out inside the streams (not before they start): 64 MiB of valid
    # RAW blocks (2 MiB each), far more than loopback moves in 5 ms, so nothing but the
    # deadline can end the call (an invalid block would race the deadline with the
    # server's INVALID_ARGUMENT).
    big_lay = kvtier.make_layout()
    big_spec = kvtier.make_namespace("dl-big", big_lay, codec="fp16")
    with _client(server, big_spec, shared_memory=False, native=native) as c:
        payload = np.zeros(kvtier.block_shape(big_lay), np.float16)
        big = [kvtier.PutBlock(b"dl-big-%d" % i, payload) for i in range(32)]
        with pytest.raises(kvtier.DeadlineExceededError) as e:
            c.put_blocks("dl-big", big, format=kvtier.RAW, timeout=0.005)
        assert e.value.message == "Deadline Exceeded"


@pytest.mark.parametrize("shm", [True, False], ids=["shm", "tcp"])
def test_round_trip_through_grpcios_public_api(server, monkeypatch, shm):
    # kvtier._grpc_fast falls back to the public API on other grpcio versions.
    from kvtier import _grpc_fast
    monkeypatch.setattr(_grpc_fast, "ENABLED", False)
    lay = blocks.layout()
    spec = kvtier.make_namespace("public-api", lay, codec="fp16")
    with _client(server, spec, shared_memory=shm, native=False) as c:
        keys, puts, raw = blocks.sequence(spec.name, lay, 3, seed=7)
        assert c.put_blocks(spec.name, puts, format=kvtier.RAW).blocks_stored == 3
        out = [np.empty_like(r) for r in raw]
        assert all(i.found for i in c.get_blocks_into(spec.name, keys, out, format="raw"))
        assert all(np.array_equal(o, r) for o, r in zip(out, raw))
        with pytest.raises(kvtier.NotFoundError):
            c.put_blocks("nope", puts[:1], format=kvtier.RAW)
