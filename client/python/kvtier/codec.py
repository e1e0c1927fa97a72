"""The kvtier encoded block format ("KVTB", version 1; version 2 for kivi2): header
decoding and sizes.

A block travels either RAW (the namespace's source dtype, [layer][k|v][kv_head][token]
[head_dim], no header) or ENCODED: a self-describing blob that starts with this 40-byte
little-endian header (kv/codec.h has the body layout of every codec):

   0 u8[4] magic "KVTB"        4 u16 format version (1; kivi2 is written as 2)
   6 u8    codec id (Codec)    7 u8  source dtype (1 fp16, 2 bf16)
   8 u32   num_layers         12 u32 num_kv_heads
  16 u32   head_dim           20 u32 num_tokens
  24 u32   raw_tokens         28 u32 reserved (0)
  32 u64   body bytes (= blob size - 40)

This module validates headers exactly as the server does (kv/codec.cc
ParseHeaderPrefix), computes encoded sizes, and encodes / decodes the two raw codecs
(fp16, bf16: the body is the raw payload). Dequantizing the other codecs is left to the
server: ask for PAYLOAD_FORMAT_RAW. With kvtier._native built, the codec table,
encoded_size and parse_header are the C++ ones (kv::AllCodecs, kv::EncodedSize,
kv::ParseHeader*); the pure-Python versions below are the fallback, and
tests/data/golden/protocol.txt pins both. Pure functions; thread-safe.
"""

import dataclasses
import struct

import numpy as np

from kvtier import _protocol
from kvtier._protocol import _native

HEADER_BYTES = _protocol.CONSTANTS["encoded_header_bytes"]
MAGIC = b"KVTB"
FORMAT_VERSION = 1
KIVI2_FORMAT_VERSION = 2  # kivi2's 3-bit-key / 2-bit-value body (kv/codec_kivi2.h)
GROUP = 32

FP16, BF16, FP8_E4M3, INT8, INT4, KIVI2, KIVI4, LOSSLESS = 1, 2, 3, 4, 5, 6, 7, 8
# id -> name, every codec the C++ side knows (lossless included).
CODEC_NAMES = {i: name for name, i in _protocol.CODECS.items()}
DTYPE_FP16, DTYPE_BF16 = 1, 2
_BITS = {INT8: 8, INT4: 4, KIVI2: 2, KIVI4: 4}
_HEADER = struct.Struct("<4sHBBIIIIIIQ")


class CodecError(ValueError):
    """A blob that is not a valid encoded block; `code` is the gRPC code name the server
    would answer with ("INVALID_ARGUMENT" or "DATA_LOSS")."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


@dataclasses.dataclass(frozen=True)
class EncodedInfo:
    codec: int          # Codec id (see CODEC_NAMES)
    dtype: int          # 1 fp16, 2 bf16
    num_layers: int
    num_kv_heads: int
    head_dim: int
    num_tokens: int     # tokens in this blob
    raw_tokens: int     # leading tokens stored unquantized (sink protection)
    encoded_bytes: int  # whole blob, header included
    raw_bytes: int      # size of the decoded RAW payload

    @property
    def codec_name(self):
        return CODEC_NAMES[self.codec]

    @property
    def shape(self):
        """Shape of the decoded payload: (layers, 2, kv_heads, tokens, head_dim)."""
        return (self.num_layers, 2, self.num_kv_heads, self.num_tokens, self.head_dim)


def _ceil(a, b):
    return -(-a // b)


def _slab_bytes(codec, kv, d, m, version=None):
    if codec == KIVI2 and version != FORMAT_VERSION:
        if kv == 0:  # 16-token chunks: A, d min and d max codes, 3-bit codes per channel
            return sum(2 + 2 * d + d * _ceil(3 * min(16, m - t0), 8) for t0 in range(0, m, 16))
        return m * (2 + 2 * _ceil(d, 16) + _ceil(2 * d, 8))
    if codec in (FP16, BF16):
        return m * d * 2
    if codec == FP8_E4M3:
        return 4 + m * d
    bits = _BITS[codec]
    if codec in (KIVI2, KIVI4) and kv == 0:
        return d * _ceil(m, GROUP) * 4 + d * _ceil(m, 8 // bits)
    return m * _ceil(d, GROUP) * 4 + m * _ceil(d * bits, 8)


def encoded_size(codec, num_layers, num_kv_heads, head_dim, num_tokens, raw_tokens=0,
                 version=None):
    """Exact size of a blob (header included), as kv::EncodedSize (lossless: its upper
    bound); `version` 1 gives a kivi2 blob's size in format version 1 (default: the
    version written today)."""
    if _native is not None and (version is None or codec != KIVI2):
        try:
            return _native.encoded_size(codec, num_layers, num_kv_heads, head_dim,
                                        num_tokens, raw_tokens)
        except ValueError:
            pass  # the checks below raise or compute as the pure version does
    return _encoded_size_pure(codec, num_layers, num_kv_heads, head_dim, num_tokens,
                              raw_tokens, version)


def _encoded_size_pure(codec, num_layers, num_kv_heads, head_dim, num_tokens, raw_tokens=0,
                       version=None):
    if codec == LOSSLESS:
        raise ValueError("the lossless size bound comes from kvtier._native")
    bpt = 4 * num_layers * num_kv_heads * head_dim
    if codec in (FP16, BF16):
        return HEADER_BYTES + num_tokens * bpt
    raw_tokens = min(raw_tokens, num_tokens)
    m = num_tokens - raw_tokens
    q = 0
    if m:
        q = num_layers * num_kv_heads * (_slab_bytes(codec, 0, head_dim, m, version) +
                                         _slab_bytes(codec, 1, head_dim, m, version))
    return HEADER_BYTES + raw_tokens * bpt + q


def parse_header(blob, encoded_size_=None):
    """Validates the header of `blob` (bytes-like; at least its first 40 bytes) and returns
    an EncodedInfo. `encoded_size_` is the whole blob's size when only a prefix is given.
    Raises CodecError with the server's code and wording on anything inconsistent."""
    if _native is not None:
        try:
            t = _native.parse_header(blob, -1 if encoded_size_ is None else encoded_size_)
        except _native.RpcError as e:
            raise CodecError(_CODE_NAMES.get(e.args[0], "UNKNOWN"), e.args[1]) from None
        return EncodedInfo(*t[1:])
    return _parse_header_pure(blob, encoded_size_)


_CODE_NAMES = {3: "INVALID_ARGUMENT", 15: "DATA_LOSS"}


def _parse_header_pure(blob, encoded_size_=None):
    mv = memoryview(blob).cast("B")
    size = len(mv) if encoded_size_ is None else encoded_size_
    if size < HEADER_BYTES or len(mv) < HEADER_BYTES:
        raise CodecError("DATA_LOSS", "encoded block is %d bytes, shorter than its %d-byte "
                         "header" % (size, HEADER_BYTES))
    (magic, version, codec, dtype, layers, heads, dim, tokens, raw_tokens, reserved,
     body) = _HEADER.unpack_from(mv, 0)
    if magic != MAGIC:
        raise CodecError("INVALID_ARGUMENT", 'encoded block has a bad magic (want "KVTB")')
    if version not in (FORMAT_VERSION, KIVI2_FORMAT_VERSION):
        raise CodecError("INVALID_ARGUMENT", "encoded block format version %d is not "
                         "supported (want %d or %d)" % (version, FORMAT_VERSION,
                                                        KIVI2_FORMAT_VERSION))
    if codec not in CODEC_NAMES:
        raise CodecError("INVALID_ARGUMENT", "encoded block has unknown codec id %d" % codec)
    if version == KIVI2_FORMAT_VERSION and codec != KIVI2:
        raise CodecError("INVALID_ARGUMENT", "encoded block format version 2 is only defined "
                         "for kivi2, not codec id %d" % codec)
    if dtype not in (DTYPE_FP16, DTYPE_BF16):
        raise CodecError("INVALID_ARGUMENT", "encoded block has unknown dtype %d" % dtype)
    if reserved != 0:
        raise CodecError("INVALID_ARGUMENT", "encoded block has nonzero reserved header bits")
    if layers == 0 or heads == 0 or dim == 0 or dim % 2 or tokens == 0:
        raise CodecError("INVALID_ARGUMENT", "encoded block header: a dimension is 0 or "
                         "head_dim is odd")
    if codec in (FP16, BF16):
        if (codec == FP16) != (dtype == DTYPE_FP16):
            raise CodecError("INVALID_ARGUMENT", "encoded block codec does not match its dtype")
        if raw_tokens != tokens:
            raise CodecError("INVALID_ARGUMENT",
                             "encoded block raw_tokens must equal num_tokens for a raw codec")
    elif raw_tokens > tokens:
        raise CodecError("INVALID_ARGUMENT", "encoded block raw_tokens %d exceeds num_tokens "
                         "%d" % (raw_tokens, tokens))
    if body != size - HEADER_BYTES:
        raise CodecError("DATA_LOSS", "encoded block body_bytes %d but %d bytes follow the "
                         "header" % (body, size - HEADER_BYTES))
    want = (size if codec == LOSSLESS else  # its size depends on the data
            encoded_size(codec, layers, heads, dim, tokens, raw_tokens, version))
    if want != size:
        raise CodecError("DATA_LOSS", "encoded block is %d bytes; its header implies %d"
                         % (size, want))
    return EncodedInfo(codec, dtype, layers, heads, dim, tokens, raw_tokens, size,
                       tokens * 4 * layers * heads * dim)


def encode_raw_codec(raw, num_layers, num_kv_heads, head_dim, dtype=DTYPE_FP16):
    """Wraps a RAW payload as an fp16 / bf16 encoded blob (codec = the dtype): what
    kv::Encode produces for those codecs. Returns bytes."""
    mv = memoryview(raw).cast("B")
    bpt = 4 * num_layers * num_kv_heads * head_dim
    if len(mv) == 0 or len(mv) % bpt:
        raise CodecError("INVALID_ARGUMENT", "raw payload size %d is not a positive multiple "
                         "of %d bytes per token" % (len(mv), bpt))
    tokens = len(mv) // bpt
    codec = FP16 if dtype == DTYPE_FP16 else BF16
    head = _HEADER.pack(MAGIC, FORMAT_VERSION, codec, dtype, num_layers, num_kv_heads,
                        head_dim, tokens, tokens, 0, len(mv))
    return head + mv.tobytes()


def decode_raw_codec(blob):
    """The RAW payload of an fp16 / bf16 blob (a memoryview into `blob`, no copy).
    CodecError for other codecs (ask the server for a RAW get instead)."""
    info = parse_header(blob)
    if info.codec not in (FP16, BF16):
        raise CodecError("UNIMPLEMENTED", "codec %s is decoded by the server: get the block "
                         "with format=RAW" % info.codec_name)
    return memoryview(blob).cast("B")[HEADER_BYTES:]


def numpy_dtype(dtype):
    """numpy dtype of a source dtype: float16 for fp16; uint16 (the bit pattern) for bf16,
    which numpy lacks (bf16_to_float32 converts)."""
    return np.dtype(np.float16) if dtype == DTYPE_FP16 else np.dtype(np.uint16)


def bf16_to_float32(bits):
    """bf16 bit patterns (uint16 array) to float32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(x):
    """float32 to bf16 bit patterns (uint16), round to nearest even (finite inputs)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
