"""Client.recover (admin RPC Recover, docs/recovery.md "On demand") against a real kvtierd:
verify reports and changes nothing, rebuild answers its counts, a tenant is refused."""

import hashlib

import pytest

import blocks
import kvtier


def test_recover_verify_and_rebuild_report_the_slab(start_server):
    server = start_server()
    lay = blocks.layout()
    spec = kvtier.make_namespace("rec", lay, write_through=True)
    with kvtier.Client(server.address, namespace=spec, shared_memory=False) as c:
        keys, puts, _ = blocks.sequence("rec", lay, 8, seed=8)
        c.put_blocks("rec", puts, format=kvtier.RAW)
        v = c.recover(verify=True)
        assert not v.rebuilt
        assert v.extents_scanned == 8 and v.records_verified == 8
        assert v.records_recreated == 0 and v.damaged_records == 0
        assert v.scan_bytes > 0 and v.seconds >= 0
        r = c.recover()
        assert r.rebuilt and r.records_verified == 8 and r.records_recreated == 0
        assert c.lookup("rec", keys).prefix_blocks == 8


def test_recover_needs_an_operator(start_server, tmp_path):
    digest = hashlib.sha256(b"token-a").hexdigest()
    config = tmp_path / "auth.textproto"
    config.write_text('tenants { tenant: "team-a" token_sha256: "%s" }\n' % digest)
    server = start_server("--config", str(config))
    with kvtier.Client(server.address, auth_token="token-a", shared_memory=False) as c:
        with pytest.raises(kvtier.errors.PermissionDeniedError):
            c.recover(verify=True)
