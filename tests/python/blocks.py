"""Test data: small layouts, seeded random RAW blocks and their keys."""

import numpy as np

import kvtier
from kvtier import codec

LAYOUT = dict(num_layers=2, num_kv_heads=2, head_dim=64, tokens_per_block=16, sink_tokens=4)


def layout(dtype="fp16"):
    return kvtier.make_layout(dtype=dtype, **LAYOUT)


def raw_blocks(lay, n, seed):
    """n RAW blocks of `lay` (numpy, source dtype), seeded."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.standard_normal(kvtier.block_shape(lay)).astype(np.float32)
        if lay.dtype == kvtier.pb.DTYPE_BF16:
            out.append(codec.float32_to_bf16(x))
        else:
            out.append(x.astype(np.float16))
    return out


def sequence(ns, lay, n, seed, tenant=""):
    """(keys, put blocks, raw arrays) of an n-block token sequence."""
    rng = np.random.default_rng(seed + 1000)
    tokens = rng.integers(0, 128000, n * lay.tokens_per_block)
    keys = kvtier.prefix_keys(tokens, ns, tenant=tenant, tokens_per_block=lay.tokens_per_block)
    raw = raw_blocks(lay, n, seed)
    puts = [kvtier.PutBlock(k, raw[i], keys[i - 1] if i else b"", i) for i, k in enumerate(keys)]
    return keys, puts, raw


def as_float(raw, lay):
    if lay.dtype == kvtier.pb.DTYPE_BF16:
        return codec.bf16_to_float32(raw)
    return np.asarray(raw, dtype=np.float32)
