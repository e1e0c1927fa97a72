"""Rendezvous (highest-random-weight) placement, scheme "rendezvous-v1".

Identical to the C++ protocol/rendezvous.h (pinned by tests/data/golden_vectors.txt):
  key_hash(ns, key)    = XXH3_64(u32le(len(ns)) || ns || key, seed 0)
  node_hash(node_id)   = XXH3_64(node_id, seed 0)
  score(ns, key, node) = XXH3_64(u64le(key_hash), seed node_hash)
The owners of (ns, key) are the R nodes with the highest score, best first; equal scores
are ordered by node id. Immutable objects; thread-safe.

With kvtier._native built, the three hashes are the C++ functions (protocol/rendezvous.h),
and RendezvousRing.owners_many places many keys at once in C++ (kvtier._native.owners, the
same protocol/rendezvous.cc as the server) when the extension is built, where Python
spends microseconds per key and node (10 ms for 2,048 keys on 5 nodes).
"""

import struct

from kvtier._xxh3 import xxh3_64

from kvtier import _protocol
from kvtier._protocol import _native

_native_owners = _native.owners if _native is not None else None

SCHEME = _protocol.CONSTANTS["rendezvous_scheme"]


def _b(s):
    return s.encode("utf-8") if isinstance(s, str) else bytes(s)


def key_hash(namespace, key):
    ns = _b(namespace)
    if _native is not None:
        return _native.rendezvous_key_hash(ns, _b(key))
    return xxh3_64(struct.pack("<I", len(ns)) + ns + _b(key))


def node_hash(node_id):
    if _native is not None:
        return _native.rendezvous_node_hash(_b(node_id))
    return xxh3_64(_b(node_id))


def score(khash, nhash):
    if _native is not None:
        return _native.rendezvous_score(khash, nhash)
    return xxh3_64(struct.pack("<Q", khash), nhash)


class RendezvousRing:
    """A set of node ids (empty ids and duplicates dropped, kept sorted)."""

    def __init__(self, node_ids):
        self.nodes = sorted({n for n in node_ids if n})
        self._hashes = [node_hash(n) for n in self.nodes]

    def __len__(self):
        return len(self.nodes)

    def owners_of_hash(self, khash, r):
        """Indices into `nodes` of the min(r, len) owners, best first (r = 0 means 1)."""
        if not self.nodes:
            return []
        r = min(max(r, 1), len(self.nodes))
        scored = sorted(((score(khash, h), i) for i, h in enumerate(self._hashes)),
                        key=lambda t: (-t[0], t[1]))
        return [i for _, i in scored[:r]]

    def owners(self, namespace, key, r):
        return self.owners_of_hash(key_hash(namespace, key), r)

    def owners_many(self, namespace, keys, r):
        """[owners(namespace, k, r) for k in keys], in C++ when kvtier._native is built."""
        if _native_owners is not None and self.nodes:
            return _native_owners(_b(namespace), [_b(k) for k in keys], self.nodes, r)
        return [self.owners(namespace, k, r) for k in keys]

    def owner_ids(self, namespace, key, r):
        return [self.nodes[i] for i in self.owners(namespace, key, r)]

    def primary(self, namespace, key):
        return self.owners(namespace, key, 1)[0]

    def group_by_owner(self, namespace, keys, r):
        """Per node (order of `nodes`), the indices of `keys` it owns, in input order."""
        groups = [[] for _ in self.nodes]
        for k, owners in enumerate(self.owners_many(namespace, keys, r)):
            for i in owners:
                groups[i].append(k)
        return groups
