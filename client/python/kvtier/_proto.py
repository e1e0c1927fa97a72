"""The generated kvtier.v1 messages and stubs, with a clear error when they are missing.

They are generated from proto/kvtier/v1/kvtier.proto by the CMake build (target
kvtier_python, into build/python/kvtier/v1) or by `pip install` (client/python/setup.py).
"""

try:
    from kvtier.v1 import kvtier_pb2 as pb
    from kvtier.v1 import kvtier_pb2_grpc as pb_grpc
except ImportError as e:  # pragma: no cover - packaging error
    raise ImportError(
        "kvtier: the generated stubs kvtier.v1.kvtier_pb2 are missing (%s). Use the package "
        "from build/python after scripts/build.sh, or pip install client/python." % e) from e

__all__ = ["pb", "pb_grpc"]
