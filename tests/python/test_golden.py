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


# -- tests/data/golden/protocol.txt: the protocol's constants and formulas ---------------
# Written and checked by tests/client/golden_protocol_test.cc (its header documents the
# lines); here both Python forms are checked against it: what the package uses (kvtier.
# _native's C++ definitions when built) and the pure-Python fallback.

def _protocol_rows(kind):
    import os
    path = os.path.join(conftest.REPO, "tests", "data", "golden", "protocol.txt")
    with open(path) as f:
        rows = [l.split() for l in f if l.strip() and not l.startswith("#")]
    out = [r[1:] for r in rows if r[0] == kind]
    assert out, "no %s rows in %s" % (kind, path)
    return out


def _unhex(text):
    return b"" if text == "-" else bytes.fromhex(text)


def _same_value(got, want):
    if isinstance(got, bytes):
        return got.hex() == want
    if isinstance(got, bool):
        return int(got) == int(want)
    return str(got) == want


def test_protocol_constants_client_defaults_and_codecs_match_cpp():
    from kvtier import _protocol
    from kvtier import codec
    for name, want in _protocol_rows("C"):
        assert _same_value(_protocol.CONSTANTS[name], want), name
        assert _same_value(_protocol._PURE_CONSTANTS[name], want), name
    for name, want in _protocol_rows("D"):
        assert _same_value(_protocol.CLIENT_DEFAULTS[name], want), name
        assert _same_value(_protocol._PURE_CLIENT_DEFAULTS[name], want), name
    codecs = {name: int(i) for name, i in _protocol_rows("K")}
    assert _protocol.CODECS == codecs and _protocol._PURE_CODECS == codecs
    assert {v: k for k, v in codec.CODEC_NAMES.items()} == codecs
    lay = kvtier.make_layout(2, 2, 64, 16)
    for name, i in codecs.items():  # make_namespace knows every codec (lossless too)
        assert kvtier.make_namespace("n", lay, codec=name).codec == i
    # The client's defaults are the C++ ClientOptions'.
    import inspect
    sig = inspect.signature(kvtier.Client).parameters
    d = _protocol.CLIENT_DEFAULTS
    assert sig["num_channels"].default == d["num_channels"]
    assert sig["chunk_bytes"].default == d["chunk_bytes"]
    assert sig["timeout"].default == d["default_deadline_ms"] / 1000
    assert sig["shared_memory_bytes"].default == d["shared_memory_bytes"]


def test_encoded_sizes_match_cpp():
    from kvtier import codec
    rows = _protocol_rows("E")
    for c, layers, heads, dim, tokens, raw, want in rows:
        args = [int(x) for x in (c, layers, heads, dim, tokens, raw)]
        assert codec.encoded_size(*args) == int(want), args
        if args[0] != codec.LOSSLESS:  # the pure fallback has no lossless bound
            assert codec._encoded_size_pure(*args) == int(want), args


def test_chunk_framing_matches_cpp():
    from kvtier import wire
    for n, want in _protocol_rows("F"):
        assert wire.chunk_prefix(int(n)).hex() == want, n


def test_xxh3_matches_cpp():
    for data, seed, want in _protocol_rows("H"):
        d = _unhex(data)
        assert _xxh3.xxh3_64(d, int(seed)) == int(want), (len(d), seed)
        assert _xxh3.xxh3_64_pure(d, int(seed)) == int(want), (len(d), seed)


def test_prefix_seeds_match_cpp_and_pure_prefix_keys_match_the_package(monkeypatch):
    from kvtier import keys
    for ns, tenant, want in _protocol_rows("S"):
        assert keys.prefix_seed(ns, tenant).hex() == want
        assert keys._prefix_seed_pure(ns.encode(), tenant.encode()).hex() == want
    got = [golden.prefix_line(i) for i in range(500)]
    monkeypatch.setattr(keys, "_native", None)  # the pure-Python chain
    assert [golden.prefix_line(i) for i in range(500)] == got


def test_compact_lookup_expansion_matches_cpp():
    from kvtier import errors, lookup_form
    for compact, want in _protocol_rows("L"):
        for expand in (lookup_form.expand, lookup_form._expand_pure):
            resp = kvtier.pb.LookupResponse.FromString(_unhex(compact))
            if want == "DATA_LOSS":
                with pytest.raises(errors.DataLossError):
                    expand(resp)
                continue
            assert expand(resp) == kvtier.pb.LookupResponse.FromString(_unhex(want)), compact


def test_pure_python_rendezvous_matches_the_package(monkeypatch):
    # The package places keys with the C++ hashes (kvtier._native) when built; the
    # pure-Python hashes give the same owners (the golden file pins the package's).
    from kvtier import rendezvous
    got = [golden.ring_line(i) for i in range(500)]
    monkeypatch.setattr(rendezvous, "_native", None)
    assert [golden.ring_line(i) for i in range(500)] == got
