"""kvtier.engines.common (no engine needed): identities as namespaces, derived keys, and the
Link that turns a down kvtierd into a miss, against real kvtierd processes. The adapters
themselves are checked against the engines' own code by scripts/test-engines.sh."""

import re
import time

import numpy as np
import pytest

import kvtier
from kvtier.engines import common


def ident(**over):
    fields = {"model": "/m/SmolLM2", "dtype": "float16", "block_size": 128, "tp_rank": 0}
    fields.update(over)
    return common.Identity("vllm", "SmolLM2 135M/Instruct", fields)


def test_identity_names_a_valid_namespace_and_differs_per_field():
    a = ident()
    assert re.fullmatch(r"vllm/SmolLM2-135M-Instruct/[0-9a-f]{24}", a.namespace), a.namespace
    assert len(a.namespace) <= 128
    assert ident().namespace == a.namespace  # deterministic
    for field, value in (("dtype", "bfloat16"), ("block_size", 32), ("tp_rank", 1),
                         ("model", "/m/other")):
        assert ident(**{field: value}).namespace != a.namespace, field


def test_derived_keys_are_16_bytes_and_separate_identities():
    hashes = [bytes([i]) * 32 for i in range(3)]
    a = common.derive_keys(ident(), hashes)
    assert [len(k) for k in a] == [16, 16, 16] and len(set(a)) == 3
    assert common.derive_keys(ident(), hashes) == a
    assert not set(a) & set(common.derive_keys(ident(tp_rank=1), hashes))
    # str and int engine hashes (SGLang hex keys, LMCache int hashes) work too.
    assert common.derive_keys(ident(), ["ab", -5]) == common.derive_keys(ident(), [b"ab", b"-5"])


@pytest.mark.parametrize("nbytes", [8, 4096, 8220 - 28, 32 << 20, 3 * 8 * 1000])
def test_opaque_layout_holds_exactly_the_object(nbytes):
    layout = common.opaque_layout(nbytes)
    assert kvtier.bytes_per_block(layout) == nbytes


def test_opaque_layout_rejects_sizes_it_cannot_hold():
    for n in (0, 4, 6, 12):
        with pytest.raises(ValueError):
            common.opaque_layout(n)


def spec_of(identity, layout):
    return kvtier.make_namespace(identity.namespace, layout, codec="fp16",
                                 model_id=identity.label)


def test_link_round_trip_against_kvtierd(start_server):
    server = start_server()
    layout = common.block_layout(2, 1, 4, 8, "fp16")
    link = common.Link(server.address, spec_of(ident(), layout))
    keys = common.derive_keys(ident(), [b"h0", b"h1"])
    data = np.arange(kvtier.bytes_per_block(layout), dtype=np.uint8)
    r = link.call("put", lambda c: c.put_blocks(link.ns, [kvtier.PutBlock(keys[0], data)],
                                                format=kvtier.RAW), None)
    assert r.blocks_stored == 1
    resp = link.call("lookup", lambda c: c.lookup(link.ns, keys), None)
    assert resp.prefix_blocks == 1
    out = np.zeros_like(data)
    infos = link.call("get", lambda c: c.get_blocks_into(link.ns, keys[:1], [out],
                                                         format=kvtier.RAW), None)
    assert infos[0].found and np.array_equal(out, data)
    # A reader that did not register the namespace finds it by name.
    reader = common.Link(server.address, None, name=link.ns)
    assert reader.call("lookup", lambda c: c.lookup(reader.ns, keys), None).prefix_blocks == 1
    link.close()
    reader.close()


def test_link_to_a_down_kvtierd_is_a_quick_miss_then_reconnects(start_server):
    server = start_server()
    address = server.address
    server.kill()
    layout = common.block_layout(1, 1, 2, 4, "fp16")
    link = common.Link(address, spec_of(ident(), layout), timeout_s=1.0,
                       connect_timeout_s=1.0, retry_s=0.5)
    t0 = time.monotonic()
    assert link.call("lookup", lambda c: c.lookup(link.ns, [b"k" * 16]), "miss") == "miss"
    assert time.monotonic() - t0 < 5.0
    t0 = time.monotonic()
    assert link.call("lookup", lambda c: c.lookup(link.ns, [b"k" * 16]), "miss") == "miss"
    assert time.monotonic() - t0 < 0.1  # within retry_s: no new connect attempt
    server.start(server.port)
    time.sleep(0.6)
    resp = link.call("lookup", lambda c: c.lookup(link.ns, [b"k" * 16]), None)
    assert resp is not None and resp.prefix_blocks == 0
    link.close()


def test_link_refused_by_a_layout_mismatch_is_a_miss(start_server):
    server = start_server()
    a = common.Link(server.address, spec_of(ident(), common.block_layout(1, 1, 2, 4, "fp16")))
    assert a.client() is not None
    b = common.Link(server.address, spec_of(ident(), common.block_layout(2, 1, 2, 4, "fp16")))
    assert b.call("lookup", lambda c: c.lookup(b.ns, [b"k" * 16]), "miss") == "miss"
    assert b.failures == 1
    a.close()
