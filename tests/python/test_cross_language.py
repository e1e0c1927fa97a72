"""C++ put / Python get and Python put / C++ get are bit-exact (the C++ side is the
`kvtier` tool, build/client/cli/kvtier, which uses the C++ client)."""

import os
import subprocess

import numpy as np
import pytest

import blocks
import conftest
import kvtier

pytestmark = pytest.mark.skipif(not os.path.exists(conftest.KVTIER_CLI),
                                reason="build/client/cli/kvtier is not built")


def _cli(server, *args):
    return subprocess.run([conftest.KVTIER_CLI, args[0], "--server", server.address] +
                          list(args[1:]), check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("codec_name", ["fp16", "int4"])
def test_cpp_put_python_get_and_back_are_bit_exact(server, tmp_path, codec_name):
    lay = blocks.layout()
    ns = "xl-" + codec_name
    spec = kvtier.make_namespace(ns, lay, codec=codec_name)
    with kvtier.Client(server.address, namespace=spec) as c:
        keys, puts, raw = blocks.sequence(ns, lay, 2, seed=30)
        # C++ put (RAW from a file, the server encodes) -> Python get, RAW and ENCODED.
        f = tmp_path / "raw0"
        f.write_bytes(raw[0].tobytes())
        _cli(server, "put", "--namespace", ns, "--key", keys[0].hex(), "--index", "0",
             "--file", str(f), "--raw")
        py_raw = c.get_blocks(ns, keys[:1], format=kvtier.RAW)[0].data
        py_enc = c.get_blocks(ns, keys[:1])[0].data
        out = tmp_path / "cpp0"
        _cli(server, "get", "--namespace", ns, "--keys", keys[0].hex(), "--out", str(out), "--raw")
        assert out.read_bytes() == bytes(py_raw)
        _cli(server, "get", "--namespace", ns, "--keys", keys[0].hex(), "--out", str(out))
        assert out.read_bytes() == bytes(py_enc)
        if codec_name == "fp16":
            assert bytes(py_raw) == raw[0].tobytes()
        # Python put (shm and TCP paths) -> C++ get.
        for shm in (True, False):
            with kvtier.Client(server.address, namespace=spec, shared_memory=shm) as c2:
                k = keys[1] + bytes([shm])
                c2.put_blocks(ns, [kvtier.PutBlock(k, raw[1], keys[0], 1)], format=kvtier.RAW)
                _cli(server, "get", "--namespace", ns, "--keys", k.hex(), "--out", str(out),
                     "--raw")
                assert out.read_bytes() == bytes(c2.get_blocks(ns, [k], format="raw")[0].data)
                if codec_name == "fp16":
                    assert out.read_bytes() == raw[1].tobytes()
        # An ENCODED blob put by Python is stored and served byte for byte to C++.
        k = b"enc-from-python"
        c.put_blocks(ns, [kvtier.PutBlock(k, py_enc)])
        _cli(server, "get", "--namespace", ns, "--keys", k.hex(), "--out", str(out))
        assert out.read_bytes() == bytes(py_enc)
