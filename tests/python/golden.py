"""The input generator of the cross-language golden vectors: a mirror of
tests/client/golden_vectors_test.cc (splitmix64 per case, same draw order)."""

import kvtier

CASES = 10000
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789._/-"
_M64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & _M64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & _M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        return z ^ (z >> 31)

    def below(self, n):
        return self.next() % n

    def name(self, max_len):
        n = 1 + self.below(max_len)
        return "".join(_ALPHABET[self.below(len(_ALPHABET))] for _ in range(n))

    def bytes(self, lo, hi):
        n = lo + self.below(hi - lo + 1)
        return bytes(self.next() & 0xFF for _ in range(n))


def prefix_line(i):
    g = SplitMix64(0x6B76746965720000 + i)
    ns = g.name(24)
    tenant = "" if g.below(3) == 0 else g.name(12)
    tpb = 1 + g.below(16)
    n = g.below(97)
    small = g.below(2) == 0
    tokens = [g.below(200000) if small else g.next() & 0xFFFFFFFF for _ in range(n)]
    extra = g.bytes(1, 8) if g.below(4) == 0 else b""
    keys = kvtier.prefix_keys(tokens, ns, tenant=tenant, tokens_per_block=tpb, extra=extra)
    return "P %d %d %s" % (i, len(keys), keys[-1].hex() if keys else "-")


def ring_line(i):
    g = SplitMix64(0x72656E6400000000 + i)
    n = 1 + g.below(8)
    nodes = [("127.0.0.1:%d" % (1024 + g.below(60000))) if g.below(2) == 0 else g.name(20)
             for _ in range(n)]
    ns = g.name(24)
    key = g.bytes(1, 32)
    r = g.below(5)
    owners = kvtier.RendezvousRing(nodes).owners(ns, key, r)
    return "R %d %s" % (i, ",".join(map(str, owners)) if owners else "-")
