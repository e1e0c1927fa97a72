"""XXH3-64 (xxHash 0.8), the hash of kvtier's rendezvous placement (rendezvous-v1).

Pure Python, so the package needs nothing beyond the standard library for placement; with
kvtier._native built, or the system's libxxhash (Debian libxxhash0) loadable, that is used
instead (same results, faster). tests/python/test_golden.py checks both against each other and against C++.
"""

import ctypes
import ctypes.util
import struct

_M64 = (1 << 64) - 1
_P32_1 = 0x9E3779B1
_P32_2 = 0x85EBCA77
_P32_3 = 0xC2B2AE3D
_P64_1 = 0x9E3779B185EBCA87
_P64_2 = 0xC2B2AE3D27D4EB4F
_P64_3 = 0x165667B19E3779F9
_P64_4 = 0x85EBCA77C2B2AE63
_P64_5 = 0x27D4EB2F165667C5
_PMX1 = 0x165667919E3779F9
_PMX2 = 0x9FB21C651E98DF25

_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e")
assert len(_SECRET) == 192


def _r64(b, i):
    return struct.unpack_from("<Q", b, i)[0]


def _r32(b, i):
    return struct.unpack_from("<I", b, i)[0]


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M64


def _swap64(x):
    return int.from_bytes(x.to_bytes(8, "little"), "big")


def _mul_fold(a, b):
    p = a * b
    return (p ^ (p >> 64)) & _M64


def _xxh64_avalanche(h):
    h ^= h >> 33
    h = (h * _P64_2) & _M64
    h ^= h >> 29
    h = (h * _P64_3) & _M64
    return h ^ (h >> 32)


def _avalanche(h):
    h ^= h >> 37
    h = (h * _PMX1) & _M64
    return h ^ (h >> 32)


def _rrmxmx(h, n):
    h ^= _rotl(h, 49) ^ _rotl(h, 24)
    h = (h * _PMX2) & _M64
    h ^= (h >> 35) + n
    h = (h * _PMX2) & _M64
    return h ^ (h >> 28)


def _mix16(d, i, s, j, seed):
    lo = _r64(d, i) ^ ((_r64(s, j) + seed) & _M64)
    hi = _r64(d, i + 8) ^ ((_r64(s, j + 8) - seed) & _M64)
    return _mul_fold(lo, hi)


def _short(d, seed):
    n = len(d)
    s = _SECRET
    if n > 8:
        f1 = ((_r64(s, 24) ^ _r64(s, 32)) + seed) & _M64
        f2 = ((_r64(s, 40) ^ _r64(s, 48)) - seed) & _M64
        lo = _r64(d, 0) ^ f1
        hi = _r64(d, n - 8) ^ f2
        return _avalanche((n + _swap64(lo) + hi + _mul_fold(lo, hi)) & _M64)
    if n >= 4:
        s32 = seed & 0xFFFFFFFF
        seed ^= int.from_bytes(s32.to_bytes(4, "little"), "big") << 32
        in1, in2 = _r32(d, 0), _r32(d, n - 4)
        flip = ((_r64(s, 8) ^ _r64(s, 16)) - seed) & _M64
        return _rrmxmx(((in2 + (in1 << 32)) & _M64) ^ flip, n)
    if n > 0:
        combined = (d[0] << 16) | (d[n >> 1] << 24) | d[n - 1] | (n << 8)
        flip = ((_r32(s, 0) ^ _r32(s, 4)) + seed) & _M64
        return _xxh64_avalanche(combined ^ flip)
    return _xxh64_avalanche(seed ^ _r64(s, 56) ^ _r64(s, 64))


def _mid(d, seed):
    n = len(d)
    s = _SECRET
    acc = (n * _P64_1) & _M64
    if n <= 128:
        if n > 32:
            if n > 64:
                if n > 96:
                    acc += _mix16(d, 48, s, 96, seed) + _mix16(d, n - 64, s, 112, seed)
                acc += _mix16(d, 32, s, 64, seed) + _mix16(d, n - 48, s, 80, seed)
            acc += _mix16(d, 16, s, 32, seed) + _mix16(d, n - 32, s, 48, seed)
        acc += _mix16(d, 0, s, 0, seed) + _mix16(d, n - 16, s, 16, seed)
        return _avalanche(acc & _M64)
    for i in range(8):
        acc += _mix16(d, 16 * i, s, 16 * i, seed)
    acc = _avalanche(acc & _M64)
    for i in range(8, n // 16):
        acc += _mix16(d, 16 * i, s, 16 * (i - 8) + 3, seed)
    acc += _mix16(d, n - 16, s, 136 - 17, seed)
    return _avalanche(acc & _M64)


def _accumulate512(acc, d, i, s, j):
    for k in range(8):
        v = _r64(d, i + 8 * k)
        key = v ^ _r64(s, j + 8 * k)
        acc[k ^ 1] = (acc[k ^ 1] + v) & _M64
        acc[k] = (acc[k] + (key & 0xFFFFFFFF) * (key >> 32)) & _M64


def _long(d, secret):
    n = len(d)
    acc = [_P32_3, _P64_1, _P64_2, _P64_3, _P64_4, _P32_2, _P64_5, _P32_1]
    stripes_per_block = (len(secret) - 64) // 8
    block_len = 64 * stripes_per_block
    blocks = (n - 1) // block_len
    for b in range(blocks):
        for st in range(stripes_per_block):
            _accumulate512(acc, d, b * block_len + st * 64, secret, st * 8)
        for k in range(8):
            a = acc[k]
            a ^= a >> 47
            a ^= _r64(secret, len(secret) - 64 + 8 * k)
            acc[k] = (a * _P32_1) & _M64
    stripes = ((n - 1) - block_len * blocks) // 64
    for st in range(stripes):
        _accumulate512(acc, d, blocks * block_len + st * 64, secret, st * 8)
    _accumulate512(acc, d, n - 64, secret, len(secret) - 64 - 7)
    result = (n * _P64_1) & _M64
    for k in range(4):
        result += _mul_fold(acc[2 * k] ^ _r64(secret, 11 + 16 * k),
                            acc[2 * k + 1] ^ _r64(secret, 11 + 16 * k + 8))
    return _avalanche(result & _M64)


def _custom_secret(seed):
    out = bytearray(192)
    for i in range(12):
        lo = (_r64(_SECRET, 16 * i) + seed) & _M64
        hi = (_r64(_SECRET, 16 * i + 8) - seed) & _M64
        struct.pack_into("<QQ", out, 16 * i, lo, hi)
    return bytes(out)


def xxh3_64_pure(data, seed=0):
    """XXH3_64bits_withSeed(data, seed) in pure Python."""
    d = bytes(data)
    seed &= _M64
    if len(d) <= 16:
        return _short(d, seed)
    if len(d) <= 240:
        return _mid(d, seed)
    return _long(d, _SECRET if seed == 0 else _custom_secret(seed))


def _load_lib():
    for name in ("libxxhash.so.0", ctypes.util.find_library("xxhash")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            fn = lib.XXH3_64bits_withSeed
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_uint64
        fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
        return fn
    return None


_lib_fn = _load_lib()
HAVE_LIBXXHASH = _lib_fn is not None


try:
    from kvtier._native import xxh3_64 as _native_xxh3
except ImportError:
    _native_xxh3 = None


def xxh3_64(data, seed=0):
    """XXH3_64bits_withSeed(data, seed): kvtier._native's (the libxxhash the C++ side
    links) when built, else libxxhash through ctypes when loadable, else pure Python."""
    if _native_xxh3 is not None:
        return _native_xxh3(data, seed & _M64)
    if _lib_fn is not None:
        d = bytes(data)
        return _lib_fn(d, len(d), seed & _M64)
    return xxh3_64_pure(data, seed)
