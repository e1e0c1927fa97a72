"""Cross-language agreement without a server: prefix keys and rendezvous owners equal the
C++ results stored in tests/data/golden_vectors.txt (checked on the C++ side by
tests/client/golden_vectors_test.cc), and the pure-Python XXH3 equals libxxhash."""

import random

import conftest
import golden
import pytest

import kvtier
from kvtier import _xxh3


def _golden_lines():
    with open(conftest.GOLDEN) as f:
        return [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#")]


def test_prefix_keys_and_ring_owners_match_cpp_for_10000_inputs_each():
    want = _golden_lines()
    got = ([golden.prefix_line(i) for i in range(golden.CASES)] +
           [golden.ring_line(i) for i in range(golden.CASES)])
    assert len(want) == 2 * golden.CASES
    bad = [(g, w) for g, w in zip(got, want) if g != w]
    assert not bad, "first mismatches (python, c++): %s" % bad[:5]


def test_owners_many_equals_owners_key_by_key():
    # kvtier._native.owners when the extension is built (the C++ placement), the Python
    # loop otherwise: the same owners, in the same order, either way. Node ids of both
    # forms the golden vectors use, and a non-ASCII one (sorted by code point in Python,
    # by UTF-8 bytes in C++: the same order).
    rng = random.Random(11)
    for trial in range(40):
        nodes = ["127.0.0.1:%d" % rng.randrange(1024, 65536) for _ in range(rng.randrange(1, 8))]
        nodes += ["node-%d" % rng.randrange(100) for _ in range(rng.randrange(0, 3))]
        if trial % 5 == 0:
            nodes.append("nœud-%d" % trial)
        ring = kvtier.RendezvousRing(nodes)
        ns = "ns-%d" % trial
        keys = [bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 33)))
                for _ in range(200)]
        for r in range(0, 5):
            assert ring.owners_many(ns, keys, r) == [ring.owners(ns, k, r) for k in keys]


def test_the_native_placement_is_used_when_built():
    from kvtier import rendezvous
    try:
        from kvtier import _native
    except ImportError:
        pytest.skip("kvtier._native is not built")
    assert rendezvous._native_owners is _native.owners


@pytest.mark.skipif(not _xxh3.HAVE_LIBXXHASH, reason="libxxhash0 is not installed")
def test_pure_python_xxh3_equals_libxxhash_at_every_length_class():
    rng = random.Random(3)
    for n in list(range(0, 260)) + [511, 1024, 1025, 2048, 2049, 5000]:
        data = bytes(rng.getrandbits(8) for _ in range(n))
        for seed in (0, rng.getrandbits(64)):
            assert _xxh3.xxh3_64_pure(data, seed) == _xxh3.xxh3_64(data, seed), (n, seed)


def test_prefix_keys_contract():
    keys = kvtier.prefix_keys(list(range(35)), "llama3", tokens_per_block=16)
    assert len(keys) == 2 and all(len(k) == 16 for k in keys)
    assert keys == kvtier.prefix_keys(list(range(32)), "llama3", tenant="default")
    assert keys != kvtier.prefix_keys(list(range(32)), "llama3", tenant="other")
    assert keys[0] == kvtier.prefix_keys(list(range(16)), "llama3")[0]
    import numpy as np
    assert keys == kvtier.prefix_keys(np.arange(32, dtype=np.int64), "llama3")
    for bad in (dict(namespace=""), dict(tokens_per_block=0)):
        args = dict(namespace="n", tokens_per_block=16)
        args.update(bad)
        with pytest.raises(ValueError):
            kvtier.prefix_keys([1] * 16, **args)
    with pytest.raises(ValueError):
        kvtier.prefix_keys([-1] * 16, "n")
    assert kvtier.key_from_hex(kvtier.key_to_hex(keys[0])) == keys[0]


def test_cluster_liveness_rule_equals_the_cpp_rule():
    # tests/data/peer_liveness.txt is checked against protocol/peer_liveness.h by
    # tests/protocol/peer_liveness_test.cc; the Python ClusterClient counts the same codes.
    import os
    import grpc
    from kvtier import cluster
    path = os.path.join(conftest.REPO, "tests", "data", "peer_liveness.txt")
    with open(path) as f:
        rows = [l.split() for l in f if l.strip() and not l.startswith("#")]
    assert len(rows) == 17
    for code, name, unreachable in rows:
        status = grpc.StatusCode[name]
        assert status.value[0] == int(code), name
        assert (status in cluster.UNREACHABLE_CODES) == (unreachable == "1"), name
