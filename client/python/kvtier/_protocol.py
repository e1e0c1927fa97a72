"""The one place the Python package takes protocol constants, codec ids and client
defaults from: kvtier._native (the C++ definitions: kv/codec.h, protocol/frame.h,
protocol/shm_wire.h, kv/prefix_key.h, client/client.h ClientOptions) when the
extension is built, else the pure-Python values below. tests/data/golden/protocol.txt pins
both (tests/python/test_golden.py for Python, tests/client/golden_protocol_test.cc for
C++), so a C++ change that is not mirrored here fails a test instead of becoming a Python
bug. Thread-safe (read-only after import).
"""

try:
    from kvtier import _native
except ImportError:  # not built (pip install client/python), or its libgrpc++ is missing
    _native = None

# Pure-Python mirrors, used only without kvtier._native.
_PURE_CONSTANTS = {
    "header_tag": 0x0A, "chunk_tag": 0x12, "max_varint_bytes": 10,
    "encoded_header_bytes": 40, "hash_scheme": "kvtier-prefix-sha256-v1",
    "prefix_key_bytes": 16, "shm_magic": b"KVTSHM01", "shm_session_bytes": 16,
    "shm_instance_bytes": 16, "shm_frame_magic": b"KVF1", "shm_max_frame_bytes": 128 << 10,
    "rendezvous_scheme": "rendezvous-v1",
}
_PURE_CODECS = {"fp16": 1, "bf16": 2, "fp8_e4m3": 3, "int8": 4, "int4": 5, "kivi2": 6,
                "kivi4": 7, "lossless": 8}
_PURE_CLIENT_DEFAULTS = {
    "num_channels": 4, "default_deadline_ms": 10000, "connect_deadline_ms": 5000,
    "max_attempts": 3, "retry_backoff_ms": 20, "chunk_bytes": 1 << 20,
    "max_streams_per_call": 4, "max_receive_message_bytes": 64 << 20,
    "http2_stream_window_bytes": 8 << 20, "shared_memory": True,
    "shared_memory_bytes": 64 << 20, "shared_memory_socket_calls": True,
    "coalesce_max_delay_us": 200, "coalesce_max_bytes": 2 << 20,
    "ucx_coalesce_max_bytes": 16 << 20,
}

CONSTANTS = dict(_native.CONSTANTS) if _native is not None else dict(_PURE_CONSTANTS)
CODECS = _native.codecs() if _native is not None else dict(_PURE_CODECS)  # name -> id
CLIENT_DEFAULTS = (_native.client_defaults() if _native is not None
                   else dict(_PURE_CLIENT_DEFAULTS))
