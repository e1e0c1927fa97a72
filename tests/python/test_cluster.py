"""kvtier.ClusterClient against three kvtierd nodes (static peers) with R = 2, one killed:
placement equal to the servers', puts to both owners, gets falling back to the replica."""

import socket

import numpy as np
import pytest

import blocks
import kvtier
from kvtier import lookup_form, pb

NS = "cl"


def _free_ports(n):
    """n distinct free ports: every socket stays bound until all are picked (one at a
    time, the kernel may hand the same port out twice; see tests/testing's
    PickFreePorts)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@pytest.fixture
def cluster(tmp_path, start_server):
    ports = _free_ports(3)
    ids = ["127.0.0.1:%d" % p for p in ports]
    nodes = []
    for i, p in enumerate(ports):
        d = tmp_path / ("n%d" % i)
        d.mkdir()
        cfg = tmp_path / ("n%d.textproto" % i)
        cfg.write_text(
            'listen_address: "127.0.0.1"\nport: %d\ndata_dir: "%s"\n'
            "hot_capacity_bytes: 67108864\nexecutor_threads: 2\n"
            'cluster {\n  node_id: "%s"\n%s  replication_factor: 2\n  peer_deadline_ms: 300\n}\n'
            % (p, d, ids[i], "".join('  static_peers: "%s"\n' % x for x in ids)))
        nodes.append(start_server(config=str(cfg), name="n%d" % i))
    return nodes


def test_three_nodes_r2_with_one_killed(cluster):
    lay = blocks.layout()
    spec = kvtier.make_namespace(NS, lay, codec="fp16")
    with kvtier.ClusterClient(cluster[0].address, spec, per_owner_get_timeout=2.0,
                              connect_timeout=5.0) as cc:
        assert cc.replication_factor == 2
        assert sorted(m.node_id for m in cc.members()) == sorted(n.address for n in cluster)
        assert all(m.connected for m in cc.members())
        keys, puts, raw = blocks.sequence(NS, lay, 12, seed=20)
        res = cc.put_blocks(NS, puts, format=kvtier.RAW)
        assert res.blocks_stored == 24 and res.replicas_skipped == 0
        # Each block lives exactly on its two ring owners.
        clients = {n.address: kvtier.Client(n.address, shared_memory=False) for n in cluster}
        try:
            for k in keys:
                owners = set(cc.ring.owner_ids(NS, k, 2))
                for addr, c in clients.items():
                    lk = c.lookup(NS, [k], local_only=True)
                    assert (lk.prefix_blocks == 1) == (addr in owners), (addr, owners)
        finally:
            for c in clients.values():
                c.close()
        # A leasing lookup: every owner leases its part (with R = 2 the replica whose copy
        # loses the merge holds a lease too); release_leases ends them all.
        lk = cc.lookup(NS, keys, lease_ms=5000)
        assert lk.prefix_blocks == 12 and lk.leased_blocks == 12
        assert all(b.lease_id for b in lk.blocks)
        assert cc.release_leases(NS, lk) >= 12
        # The compact form of an answer names the same leases (the C++ ClusterClient
        # reads either form too).
        lk = cc.lookup(NS, keys, lease_ms=5000)
        compact = pb.LookupResponse(prefix_blocks=lk.prefix_blocks,
                                    leased_blocks=lk.leased_blocks)
        holders = sorted({(b.owner, b.lease_id) for b in lk.blocks})
        compact.owners.extend(o for o, _ in holders)
        compact.owner_lease_ids.extend(i for _, i in holders)
        compact.tiers = bytes(b.tier for b in lk.blocks)
        compact.owner_index.extend(holders.index((b.owner, b.lease_id)) for b in lk.blocks)
        assert lookup_form.is_compact(compact)
        assert cc.release_leases(NS, compact) >= 12
        victim = cluster[1]
        victim.kill()
        got = cc.get_blocks(NS, keys, format=kvtier.RAW, numpy=True)
        assert all(g.info.found and np.array_equal(g.data, r) for g, r in zip(got, raw))
        bufs = [np.empty_like(r) for r in raw]
        infos = cc.get_blocks_into(NS, keys, bufs, format=kvtier.RAW)
        assert all(i.found for i in infos)
        assert all(np.array_equal(b, r) for b, r in zip(bufs, raw))
        # Puts skip the dead owner's copies but store every block at least once.
        keys2, puts2, raw2 = blocks.sequence(NS, lay, 6, seed=21)
        res = cc.put_blocks(NS, puts2, format=kvtier.RAW)
        dead_copies = sum(victim.address in cc.ring.owner_ids(NS, k, 2) for k in keys2)
        assert res.replicas_skipped == dead_copies
        assert res.blocks_stored == 12 - dead_copies
        got = cc.get_blocks(NS, keys2, format=kvtier.RAW, numpy=True)
        assert all(g.info.found and np.array_equal(g.data, r) for g, r in zip(got, raw2))
        assert cc.lookup(NS, keys).prefix_blocks == 12
