"""Builds the kvtier Python package; generates kvtier/v1/kvtier_pb2*.py from
proto/kvtier/v1/kvtier.proto when they are not there yet (a source checkout: pip install
client/python), with protoc + grpc_python_plugin (Debian protobuf-compiler-grpc) or, when
installed, grpcio-tools. A build tree copy (pip install build/python) already has them."""

import os
import shutil
import subprocess
import sys

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _generate():
    if os.path.exists(os.path.join(HERE, "kvtier", "v1", "kvtier_pb2.py")):
        return
    proto_root = os.environ.get("KVTIER_PROTO_DIR",
                                os.path.join(HERE, "..", "..", "proto"))
    proto = os.path.join(proto_root, "kvtier", "v1", "kvtier.proto")
    if not os.path.exists(proto):
        sys.exit("kvtier: %s not found (set KVTIER_PROTO_DIR)" % proto)
    os.makedirs(os.path.join(HERE, "kvtier", "v1"), exist_ok=True)
    plugin = shutil.which("grpc_python_plugin")
    if shutil.which("protoc") and plugin:
        cmd = ["protoc", "--plugin=protoc-gen-grpc_python=" + plugin]
    else:
        cmd = [sys.executable, "-m", "grpc_tools.protoc"]
    subprocess.check_call(cmd + ["--proto_path=" + proto_root, "--python_out=" + HERE,
                                 "--grpc_python_out=" + HERE, proto])
    open(os.path.join(HERE, "kvtier", "v1", "__init__.py"), "a").close()


_generate()  # before setup(): metadata generation already needs the kvtier.v1 package
setup()
