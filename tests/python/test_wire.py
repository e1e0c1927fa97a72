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


def test_hand_encoded_put_header_is_what_protobuf_writes():
    # wire.put_request / put_block_field build a Put's header per call: protobuf must read
    # the same message, and each block field must be protobuf's bytes, for any block
    # (defaults, long keys, large values).
    rng = np.random.default_rng(4)
    fields = kvtier.pb.PutHeader(namespace="ns-é", format=kvtier.RAW, shm_session=b"s" * 16)
    fields.layout.num_layers = 32
    for _ in range(500):
        blocks = []
        for _ in range(int(rng.integers(0, 4))):
            blocks.append((bytes(rng.integers(0, 256, int(rng.integers(1, 200)), np.uint8)),
                           bytes(rng.integers(0, 256, int(rng.integers(0, 3)) * 16, np.uint8)),
                           int(rng.choice([0, 1, 127, 128, 2**32 - 1])),
                           int(rng.choice([0, 5, 2097192, 2**40])),
                           int(rng.choice([0, 4096, 2**63]))))
        want = kvtier.pb.PutRequest()
        want.header.CopyFrom(fields)
        for key, parent, index, size, offset in blocks:
            want.header.blocks.add(key=key, parent_key=parent, block_index=index, size=size,
                                   shm_offset=offset)
        got = wire.put_request(fields.SerializeToString(),
                               [wire.put_block_field(*b) for b in blocks])
        # The same message (protobuf writes the blocks before layout and shm_session).
        assert kvtier.pb.PutRequest.FromString(got) == want
        for key, parent, index, size, offset in blocks:
            one = kvtier.pb.PutHeader()
            one.blocks.add(key=key, parent_key=parent, block_index=index, size=size,
                           shm_offset=offset)
            assert wire.put_block_field(key, parent, index, size, offset) == \
                one.SerializeToString()


def test_hand_encoded_get_request_is_what_protobuf_writes():
    rng = np.random.default_rng(5)
    for _ in range(500):
        n = int(rng.integers(0, 4))
        keys = [bytes(rng.integers(0, 256, int(rng.integers(1, 200)), np.uint8))
                for _ in range(n)]
        dests = [(int(rng.choice([0, 4096, 2**40])), int(rng.choice([0, 2097192])))
                 for _ in range(n)]
        ns = str(rng.choice(["", "ns", "名前"]))
        fmt = int(rng.choice([kvtier.ENCODED, kvtier.RAW]))
        lease = [0, 7, 2**64 - 1][int(rng.integers(0, 3))]
        session = bytes(rng.integers(0, 256, int(rng.choice([0, 16])), np.uint8))
        want = kvtier.pb.GetRequest(namespace=ns, keys=keys, format=fmt, lease_id=lease,
                                    shm_session=session)
        for offset, capacity in dests:
            want.shm_destinations.add(offset=offset, capacity=capacity)
        got = wire.get_request(ns, keys, fmt, lease, session, dests)
        assert got == want.SerializeToString()


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
