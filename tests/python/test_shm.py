"""The same-node shared-memory path: used on the same host, zero-copy SharedBuffers,
refused for another server's socket, TCP fallback for calls larger than the region and
after a server restart (as the C++ client, tests/integration/shared_memory_test.cc)."""

import numpy as np
import pytest

import blocks
import kvtier

NS = "shm"

_HAS_ERROR_DETAIL = hasattr(kvtier.pb, "ErrorDetail")


def _spec():
    return kvtier.make_namespace(NS, blocks.layout(), codec="fp16")


def _spy(client):
    """Records the session argument of every Put stream, every shared-memory Get and every
    call the shared-memory socket answered."""
    calls = []
    socket_call = client._socket_call

    def socket_call_spy(region, op, *a, **kw):
        resp, copied = socket_call(region, op, *a, **kw)
        if resp is not None:
            calls.append(("put" if op == kvtier.shm.OP_PUT else "get", True))
        return resp, copied
    client._socket_call = socket_call_spy
    put = client._put_stream

    def put_stream(*a, **kw):
        calls.append(("put", bool(kw.get("session") or (len(a) > 5 and a[5]))))
        return put(*a, **kw)
    shm_get = client._get_shm_attempt

    def get_shm_attempt(req):
        calls.append(("get", True))
        return shm_get(req)
    client._put_stream = put_stream
    client._get_shm_attempt = get_shm_attempt
    return calls


# The C++ client's path loop bound through kvtier._native ("native") and the pure-Python
# fallback, each with socket calls (frames on the region's socket) and without (gRPC
# streams naming the region).
PATHS = pytest.mark.parametrize("socket_calls,native", [(True, True), (False, True),
                                                        (True, False), (False, False)],
                                ids=["socket-native", "grpc-native", "socket-python",
                                     "grpc-python"])


@PATHS
def test_same_host_uses_shared_memory_and_shared_buffers_copy_nothing(server, socket_calls,
                                                                      native):
    with kvtier.Client(server.address, namespace=_spec(), native=native,
                       shared_memory_socket_calls=socket_calls) as c:
        assert c.uses_shared_memory and c.connect_info.shared_memory_error == ""
        assert c.uses_native == native and (c._region is None) == native
        assert c.stats().shm_sessions >= 1
        lay = blocks.layout()
        keys, puts, raw = blocks.sequence(NS, lay, 4, seed=10)
        nbytes = kvtier.bytes_per_block(lay)
        # The engine fills SharedBuffers in place (here from numpy) ...
        src = [c.allocate_shared_buffer(nbytes) for _ in keys]
        for s, r in zip(src, raw):
            s.view(np.float16).reshape(r.shape)[...] = r
        dst = [c.allocate_shared_buffer(nbytes) for _ in keys]
        calls = _spy(c) if not native else [("native", True)]
        if not native:
            c._region.allocate = lambda n: None  # no staging possible: only zero-copy works
        c.put_blocks(NS, [kvtier.PutBlock(k, s) for k, s in zip(keys, src)], format=kvtier.RAW)
        infos = c.get_blocks_into(NS, keys, dst, format=kvtier.RAW)
        assert all(i.found and i.size == nbytes for i in infos)
        assert all(np.array_equal(d.view(np.float16).reshape(r.shape), r)
                   for d, r in zip(dst, raw))
        assert calls and all(shm for _, shm in calls)
        assert c.uses_shared_memory
        # Over the socket every run of both calls is a frame; else gRPC streams carry the
        # headers.
        assert (c.shared_memory_socket_calls > 0) == socket_calls


@PATHS
def test_private_buffers_are_staged_through_the_region(server, socket_calls, native):
    with kvtier.Client(server.address, namespace=_spec(), native=native,
                       shared_memory_socket_calls=socket_calls) as c:
        calls = _spy(c) if not native else [("native", True)]
        keys, puts, raw = blocks.sequence(NS, blocks.layout(), 3, seed=11)
        c.put_blocks(NS, puts, format=kvtier.RAW)
        out = [np.empty_like(r) for r in raw]
        c.get_blocks_into(NS, keys, out, format=kvtier.RAW)
        assert all(np.array_equal(o, r) for o, r in zip(out, raw))
        assert calls and all(shm for _, shm in calls)
        if native:  # staging returned: the whole region can be allocated again
            c.allocate_shared_buffer(64 << 20).release()
        else:
            assert not c._region._used
        assert (c.shared_memory_socket_calls > 0) == socket_calls


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_calls_larger_than_the_region_fall_back_to_tcp(server, native):
    with kvtier.Client(server.address, namespace=_spec(), shared_memory_bytes=32 << 10,
                       max_streams_per_call=1, native=native) as c:
        assert c.uses_shared_memory
        calls = _spy(c) if not native else None
        before = c.shared_memory_socket_calls
        keys, puts, raw = blocks.sequence(NS, blocks.layout(), 4, seed=12)  # 64 KiB
        c.put_blocks(NS, puts, format=kvtier.RAW)
        out = [np.empty_like(r) for r in raw]
        c.get_blocks_into(NS, keys, out, format=kvtier.RAW)
        assert all(np.array_equal(o, r) for o, r in zip(out, raw))
        if native:
            assert c.shared_memory_socket_calls == before  # neither took the region
        else:
            assert calls == [("put", False)]  # TCP put, TCP get (no shared-memory Get)
        assert c.uses_shared_memory  # later calls that fit still use it
        with pytest.raises(kvtier.ResourceExhaustedError):
            c.allocate_shared_buffer(1 << 20)


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_a_socket_of_another_server_is_not_used(server, start_server, native):
    other = start_server(name="other")
    with kvtier.Client(server.address, namespace=_spec(), native=native,
                       shared_memory_socket=other.socket_path) as c:
        assert not c.uses_shared_memory
        assert "another kvtierd" in c.connect_info.shared_memory_error
        with pytest.raises(kvtier.FailedPreconditionError):
            c.allocate_shared_buffer(4096)
        keys, puts, raw = blocks.sequence(NS, blocks.layout(), 1, seed=13)
        c.put_blocks(NS, puts, format=kvtier.RAW)
        got = c.get_blocks(NS, keys, format=kvtier.RAW, numpy=True)
        assert np.array_equal(got[0].data, raw[0])


def test_shm_socket_off_offers_nothing(start_server):
    s = start_server("--shm-socket", "off")
    with kvtier.Client(s.address, namespace=_spec()) as c:
        assert not c.uses_shared_memory and c.connect_info.shared_memory_error == ""
        assert c.stats().shared_memory.socket_path == ""


@pytest.mark.skipif(not _HAS_ERROR_DETAIL, reason=(
    "needs the server's structured error details (kvtier.v1.ErrorDetail with reason "
    "SHM_SESSION_UNKNOWN in grpc-status-details-bin), added by the wt-protocol branch"))
@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_after_a_server_restart_the_client_falls_back_to_tcp(start_server, native):
    s = start_server()
    with kvtier.Client(s.address, namespace=_spec(), native=native) as c:
        assert c.uses_shared_memory
        keys, puts, raw = blocks.sequence(NS, blocks.layout(), 2, seed=14)
        c.put_blocks(NS, puts[:1], format=kvtier.RAW)
        s.restart()  # same address and data dir; the session is gone
        c.stats()  # retried until the channel reconnects
        c.put_blocks(NS, puts[1:], format=kvtier.RAW)
        assert not c.uses_shared_memory
        out = [np.empty_like(r) for r in raw]
        c.get_blocks_into(NS, keys, out, format=kvtier.RAW)
        assert all(np.array_equal(o, r) for o, r in zip(out, raw))  # persisted


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_a_put_right_after_a_server_restart_is_redone_on_a_new_connection(start_server, native):
    # No call in between notices the old connections closed: the Put's stream breaks
    # ("Broken pipe") and is retried, as the idempotent calls are.
    s = start_server()
    with kvtier.Client(s.address, namespace=_spec(), native=native, shared_memory=False) as c:
        keys, puts, raw = blocks.sequence(NS, blocks.layout(), 513, seed=15)  # 8 MiB
        c.put_blocks(NS, puts[:1], format=kvtier.RAW)
        s.restart()
        assert c.put_blocks(NS, puts[1:], format=kvtier.RAW).blocks_stored == 512
        out = [np.empty_like(r) for r in raw]
        c.get_blocks_into(NS, keys, out, format=kvtier.RAW)
        assert all(np.array_equal(o, r) for o, r in zip(out, raw))


def test_lost_session_is_detected_by_the_structured_detail_only():
    from kvtier import errors
    import grpc
    field = b"header.shm_session"
    detail = b"\x08\x01\x12" + bytes([len(field)]) + field  # ErrorDetail{reason: 1, field}
    url = errors.ERROR_DETAIL_TYPE_URL.encode()
    anyv = b"\x0a" + bytes([len(url)]) + url + b"\x12" + bytes([len(detail)]) + detail
    status = b"\x08\x09\x12\x02no\x1a" + bytes([len(anyv)]) + anyv
    assert errors.decode_status_details(status) == (1, "header.shm_session")
    assert errors.decode_status_details(b"\xff\xff") == (0, "")
    assert errors.decode_status_details(b"") == (0, "")

    class FakeRpcError(grpc.RpcError):
        def __init__(self, trailers):
            self._t = trailers

        def code(self):
            return grpc.StatusCode.FAILED_PRECONDITION

        def details(self):
            return "header.shm_session names no open shared-memory session"

        def trailing_metadata(self):
            return self._t
    e = errors.from_rpc_error("Put", FakeRpcError((("grpc-status-details-bin", status),)))
    assert isinstance(e, kvtier.FailedPreconditionError)
    assert (e.reason, e.field) == (errors.REASON_SHM_SESSION_UNKNOWN, "header.shm_session")
    e = errors.from_rpc_error("Put", FakeRpcError(()))
    assert e.reason == errors.REASON_UNSPECIFIED  # message text alone is not enough


def test_a_closed_region_refuses_copies_instead_of_touching_unmapped_memory(server):
    # Client.close() may run while another thread copies through the region: a copy
    # either holds the mapping alive or, after the close, raises (it used to write into
    # the unmapped region and crash the process).
    with kvtier.Client(server.address, namespace=_spec(), native=False) as c:
        region = c._region
        off = region.allocate(4096)
        region.copy_in(off, np.full(4096, 7, np.uint8))
        out = np.zeros(4096, np.uint8)
        region.copy_out(off, out, 4096)
        assert (out == 7).all()
    with pytest.raises(kvtier.errors.UnavailableError):
        region.copy_in(off, np.ones(4096, np.uint8))
    with pytest.raises(kvtier.errors.UnavailableError):
        region.copy_out(off, out, 4096)


@PATHS
def test_staged_gets_write_found_blocks_only(server, socket_calls, native):
    # Staged Get destinations (copied out of the region within the native call, or by
    # Python) receive exactly their block's bytes; a miss's buffer and every tail stay
    # as they were.
    with kvtier.Client(server.address, namespace=_spec(), native=native,
                       shared_memory_socket_calls=socket_calls) as c:
        keys, puts, raw = blocks.sequence(NS, blocks.layout(), 2, seed=31)
        assert c.put_blocks(NS, puts[:1], format=kvtier.RAW).blocks_stored == 1
        n = raw[0].nbytes
        outs = [np.full(n + 4096, 0xA5, np.uint8) for _ in keys]
        infos = c.get_blocks_into(NS, keys, outs, format=kvtier.RAW)
        assert [i.found for i in infos] == [True, False]
        assert np.array_equal(outs[0][:n], raw[0].view(np.uint8).reshape(-1))
        assert (outs[0][n:] == 0xA5).all() and (outs[1] == 0xA5).all()


@PATHS
def test_lookups_take_the_socket_and_answer_as_over_grpc(server, socket_calls, native):
    with kvtier.Client(server.address, namespace=_spec(), native=native,
                       shared_memory_socket_calls=socket_calls) as c, \
            kvtier.Client(server.address, shared_memory=False, native=False) as tcp:
        assert native or c._socket_lookup == socket_calls  # the server offers it
        keys, puts, _ = blocks.sequence(NS, blocks.layout(), 3, seed=16)
        c.put_blocks(NS, puts[:2], format=kvtier.RAW)
        before = c.shared_memory_socket_calls
        for ks, lease_ms in ((keys, 0), (keys, 60000), ([b"\x01" * 32], 0)):
            got = c.lookup(NS, ks, lease_ms=lease_ms)
            want = tcp.lookup(NS, ks)
            assert got.prefix_blocks == want.prefix_blocks
            assert [b.tier for b in got.blocks] == [b.tier for b in want.blocks]
            assert [b.owner for b in got.blocks] == [b.owner for b in want.blocks]
            if not lease_ms:  # the full form written from the compact one in C++ (native)
                assert got == want  # equals the pure-Python expansion over gRPC
            if lease_ms:
                assert got.leased_blocks == 2 and got.blocks[0].lease_id != 0
                assert c.release_lease(NS, got.blocks[0].lease_id) == 2
        assert c.lookup(NS, keys).prefix_blocks == 2
        assert c.shared_memory_socket_calls - before == (4 if socket_calls else 0)
        # Errors are the server's, as over gRPC.
        with pytest.raises(kvtier.NotFoundError):
            c.lookup("no-such-namespace", keys)


def test_with_auth_lookups_take_the_socket_once_the_session_is_bound(start_server, tmp_path):
    config = tmp_path / "auth.textproto"
    config.write_text('tenants { tenant: "team-a" token_sha256: '
                      '"a70bf50e531ce1a817561f2f5d5b6645d4e806becf58ccc5e8cf6b8045a090a8" }\n')
    s = start_server("--config", str(config))
    spec = kvtier.make_namespace(NS, blocks.layout(), codec="fp16", tenant="team-a")
    with kvtier.Client(s.address, namespace=spec, auth_token="token-a", native=False) as c:
        assert c.uses_shared_memory and c._socket_lookup
        keys, puts, _ = blocks.sequence(NS, blocks.layout(), 2, seed=17, tenant="team-a")
        # No gRPC call has named the session yet: the socket refuses the Lookup, which is
        # asked over gRPC, and later Lookups wait for a bound session.
        assert c.lookup(NS, keys).prefix_blocks == 0
        assert c.shared_memory_socket_calls == 0 and not c._socket_lookup
        c.put_blocks(NS, puts[:1], format=kvtier.RAW)  # refused too, then over gRPC: binds
        assert c.shared_memory_socket_calls == 0
        c.put_blocks(NS, puts[1:], format=kvtier.RAW)
        assert c.shared_memory_socket_calls == 1 and c._socket_lookup
        assert c.lookup(NS, keys).prefix_blocks == 2
        assert c.shared_memory_socket_calls == 2
