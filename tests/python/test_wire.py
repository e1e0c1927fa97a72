"""kvtier.wire and kvtier.codec without a server: chunk framing, the Get stream parser's
checks, and the KVTB header validation."""

import numpy as np
import pytest

import kvtier
from kvtier import codec, wire


def _msg(tag, body):
    return bytes([tag]) + wire.chunk_prefix(len(body))[1:] + body


def test_chunk_prefix_is_tag_2_and_a_varint():
    assert wire.chunk_prefix(0) == b"\x12\x00"
    assert wire.chunk_prefix(300) == b"\x12\xac\x02"
    assert wire.chunk_prefix(1 << 20) == b"\x12\x80\x80\x40"


def test_get_stream_parser_routes_chunks_and_rejects_malformed_streams():
    header = kvtier.pb.GetHeader(blocks=[kvtier.pb.GetBlockInfo(key=b"a", found=True, size=5),
                                         kvtier.pb.GetBlockInfo(key=b"b", found=False),
                                         kvtier.pb.GetBlockInfo(key=b"c", found=True, size=3)])
    dest = [np.zeros(8, np.uint8) for _ in range(3)]
    p = wire.GetStreamParser(lambda i, info: dest[i])
    p.consume(_msg(0x0A, header.SerializeToString()))
    p.consume(_msg(0x12, b"hel"))
    p.consume(_msg(0x12, b"loxyz"))
    p.finish()
    assert bytes(dest[0][:5]) == b"hello" and bytes(dest[2][:3]) == b"xyz"
    for stream, text in (([_msg(0x12, b"x")], "chunk before header"),
                         ([_msg(0x0A, b""), _msg(0x0A, b"")], "second header"),
                         ([_msg(0x0A, header.SerializeToString()), _msg(0x12, b"x" * 9)],
                          "more than the header"),
                         ([b"\x12\x05ab"], "malformed message length"),
                         ([_msg(0x1A, b"")], "unexpected field tag")):
        p = wire.GetStreamParser(lambda i, info: np.zeros(8, np.uint8))
        with pytest.raises(kvtier.InternalError) as e:
            for m in stream:
                p.consume(m)
        assert text in e.value.message
    p = wire.GetStreamParser(lambda i, info: np.zeros(8, np.uint8))
    p.consume(_msg(0x0A, header.SerializeToString()))
    with pytest.raises(kvtier.InternalError, match="8 payload bytes short"):
        p.finish()


def test_codec_header_round_trip_and_validation():
    raw = np.arange(2 * 2 * 2 * 4 * 8, dtype=np.float16)  # 2 layers, 2 heads, dim 8, 4 tokens
    blob = codec.encode_raw_codec(raw, 2, 2, 8)
    info = codec.parse_header(blob)
    assert (info.codec_name, info.shape, info.raw_bytes, info.encoded_bytes) == (
        "fp16", (2, 2, 2, 4, 8), raw.nbytes, raw.nbytes + 40)
    assert bytes(codec.decode_raw_codec(blob)) == raw.tobytes()
    assert codec.encoded_size(codec.INT8, 2, 2, 32, 16, 4) > codec.HEADER_BYTES
    for bad, code in ((blob[:10], "DATA_LOSS"), (b"XXXX" + blob[4:], "INVALID_ARGUMENT"),
                      (blob + b"\0", "DATA_LOSS")):
        with pytest.raises(codec.CodecError) as e:
            codec.parse_header(bad)
        assert e.value.code == code
    x = np.array([1.0, -2.5, 3.140625], np.float32)
    assert np.array_equal(codec.bf16_to_float32(codec.float32_to_bf16(x)), x)
