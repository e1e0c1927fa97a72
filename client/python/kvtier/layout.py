"""Helpers for kvtier.v1.Layout / NamespaceSpec: block shapes, sizes and numpy dtypes.

A RAW block is [layer][k|v][kv_head][token][head_dim] in the namespace's source dtype
(fp16, or bf16 carried as uint16 bit patterns since numpy has no bf16): numpy shape
block_shape(layout), bytes_per_block(layout) bytes. Pure functions; thread-safe.
"""

import numpy as np

from kvtier._proto import pb

_CODECS = {"fp16": pb.CODEC_FP16, "bf16": pb.CODEC_BF16, "fp8_e4m3": pb.CODEC_FP8_E4M3,
           "int8": pb.CODEC_INT8, "int4": pb.CODEC_INT4, "kivi2": pb.CODEC_KIVI2,
           "kivi4": pb.CODEC_KIVI4,
           "lossless": pb.CODEC_LOSSLESS}
_DTYPES = {"fp16": pb.DTYPE_FP16, "bf16": pb.DTYPE_BF16}


def make_layout(num_layers=32, num_kv_heads=8, head_dim=128, tokens_per_block=16,
                dtype="fp16", sink_tokens=4):
    """A kvtier.v1.Layout (defaults: kv::Layout's, a Llama-3-8B block)."""
    return pb.Layout(num_layers=num_layers, num_kv_heads=num_kv_heads, head_dim=head_dim,
                     tokens_per_block=tokens_per_block,
                     dtype=_DTYPES[dtype] if isinstance(dtype, str) else dtype,
                     sink_tokens=sink_tokens)


def make_namespace(name, layout, codec="fp16", tenant="", model_id="", **fields):
    """A kvtier.v1.NamespaceSpec; codec by name ("int8", ...) or Codec value; other
    NamespaceSpec fields (write_through, cold_zstd, sink_blocks, ...) as keywords."""
    return pb.NamespaceSpec(name=name, tenant=tenant, model_id=model_id, layout=layout,
                            codec=_CODECS[codec] if isinstance(codec, str) else codec,
                            **fields)


def block_shape(layout):
    """numpy shape of a RAW block: (num_layers, 2, num_kv_heads, tokens_per_block, head_dim)."""
    return (layout.num_layers, 2, layout.num_kv_heads, layout.tokens_per_block, layout.head_dim)


def bytes_per_block(layout):
    return 4 * layout.num_layers * layout.num_kv_heads * layout.tokens_per_block * layout.head_dim


def numpy_dtype(layout):
    """float16 for fp16 layouts, uint16 (bf16 bit patterns) for bf16 ones."""
    return np.dtype(np.uint16) if layout.dtype == pb.DTYPE_BF16 else np.dtype(np.float16)


def check_spec_matches(requested, stored):
    """The C++ CheckSpecMatches: a message naming the first layout field (or the codec)
    where `stored` differs from `requested`, or None when they agree."""
    a, b = requested.layout, stored.layout

    def mismatch(field, want, have):
        return "namespace '%s': %s mismatch: client has %s, server has %s" % (
            stored.name, field, want, have)

    for field in ("num_layers", "num_kv_heads", "head_dim", "tokens_per_block"):
        if getattr(a, field) != getattr(b, field):
            return mismatch("layout." + field, getattr(a, field), getattr(b, field))
    if a.dtype != b.dtype:
        return mismatch("layout.dtype", pb.Dtype.Name(a.dtype), pb.Dtype.Name(b.dtype))
    if a.sink_tokens != b.sink_tokens:
        return mismatch("layout.sink_tokens", a.sink_tokens, b.sink_tokens)
    if (requested.codec != pb.CODEC_UNSPECIFIED and stored.codec != pb.CODEC_UNSPECIFIED
            and requested.codec != stored.codec):
        return mismatch("codec", pb.Codec.Name(requested.codec), pb.Codec.Name(stored.codec))
    return None
