"""examples/python/engine_adapter.py runs against a real kvtierd: the second request
finds the shared system prompt's three blocks (leased by the lookup), loads them
bit-exactly (the Get ends the lease) and saves the rest."""

import engine_adapter


def test_engine_adapter_example(server, capsys):
    assert engine_adapter.main(["--server", server.address]) == 0
    out = capsys.readouterr().out
    assert "request a: 68 tokens, 0 matched in kvtier, 0 blocks loaded, 4 saved" in out
    assert "request b: 88 tokens, 48 matched in kvtier, 3 blocks loaded, 2 saved" in out
    assert "shared memory: True" in out
    assert "shared prefix KV identical: True" in out
    assert "leases in force after the loads: 0" in out
