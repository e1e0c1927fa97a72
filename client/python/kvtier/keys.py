"""kvtier's canonical chained prefix keys (scheme "kvtier-prefix-sha256-v1").

The same scheme as the C++ helper client/prefix_keys.h (one implementation shared with
the server in kv/prefix_key.h); tests/data/golden_vectors.txt pins both:

  seed   = SHA-256("kvtier-prefix-sha256-v1" || 0x00 || u32le(len(ns)) || ns
                   || u32le(len(tenant)) || tenant)                      (tenant "" = "default")
  key_0  = SHA-256(seed      || tokens_0 || extra)[0:16]
  key_i  = SHA-256(key_{i-1} || tokens_i || extra)[0:16]
where tokens_i are the tokens_per_block token ids of block i as little-endian uint32. A
trailing partial block gets no key. With kvtier._native built the seed and the chain are
the C++ kv::MakePrefixSeed / kv::ComputePrefixKeys. Pure functions; thread-safe.
"""

import hashlib
import struct

import numpy as np

from kvtier import _protocol
from kvtier._protocol import _native

HASH_SCHEME = _protocol.CONSTANTS["hash_scheme"]
KEY_BYTES = _protocol.CONSTANTS["prefix_key_bytes"]


def _b(s):
    return s.encode("utf-8") if isinstance(s, str) else bytes(s)


def prefix_seed(namespace, tenant=""):
    """Returns the 32-byte seed of `namespace` for `tenant` ("" means "default")."""
    ns, tn = _b(namespace), _b(tenant or "default")
    if _native is not None:
        return _native.prefix_seed(ns, tn)
    return _prefix_seed_pure(ns, tn)


def _prefix_seed_pure(ns, tn):
    h = hashlib.sha256()
    h.update(HASH_SCHEME.encode() + b"\0")
    h.update(struct.pack("<I", len(ns)) + ns)
    h.update(struct.pack("<I", len(tn)) + tn)
    return h.digest()


def _token_bytes(tokens):
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        arr = arr.reshape(-1)
    if arr.size and arr.dtype.kind not in "iu":
        raise ValueError("tokens must be integers")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > 0xFFFFFFFF):
        raise ValueError("token ids must be in [0, 2^32)")
    return arr.astype("<u4", copy=False).tobytes()


def prefix_keys(tokens, namespace, tenant="", tokens_per_block=16, extra=b""):
    """Returns one 16-byte key (bytes) per *full* block of `tokens`, block 0 first.

    tokens: a sequence or numpy array of token ids (uint32 range). namespace: the
    namespace name (non-empty). tenant: the seed's salt, "" = "default". extra: opaque
    bytes (LoRA / adapter id), appended to every block's hash input.
    Raises ValueError when namespace is empty, tokens_per_block < 1 or a token id is out
    of range (the C++ helper's INVALID_ARGUMENT cases).
    """
    if not namespace:
        raise ValueError("namespace_name is empty")
    if tokens_per_block < 1:
        raise ValueError("tokens_per_block must be > 0")
    raw = _token_bytes(tokens)
    ex = _b(extra)
    if _native is not None:
        return _native.prefix_keys(raw, _b(namespace), _b(tenant or "default"),
                                   tokens_per_block, ex)
    step = 4 * tokens_per_block
    parent = _prefix_seed_pure(_b(namespace), _b(tenant or "default"))
    keys = []
    for off in range(0, len(raw) // step * step, step):
        parent = hashlib.sha256(parent + raw[off:off + step] + ex).digest()[:KEY_BYTES]
        keys.append(parent)
    return keys


def key_to_hex(key):
    """Lowercase hex of a key, as the CLI and logs print it."""
    return bytes(key).hex()


def key_from_hex(text):
    """Inverse of key_to_hex. ValueError on odd length, empty input or non-hex digits."""
    if not text or len(text) % 2:
        raise ValueError("key '%s' must be an even, non-zero number of hex digits" % text)
    return bytes.fromhex(text)
