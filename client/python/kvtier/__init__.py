"""kvtier: the Python client of kvtierd (KV-cache offload and tiering).

  import kvtier
  ns = kvtier.make_namespace("llama3", kvtier.make_layout(32, 8, 128, 16), codec="int8")
  with kvtier.Client("127.0.0.1:50051", namespace=ns) as client:
      keys = kvtier.prefix_keys(token_ids, "llama3", tokens_per_block=16)
      ...

Modules: client (Client), cluster (ClusterClient), keys (prefix_keys), rendezvous
(placement), codec (the KVTB header), shm (the same-node shared-memory path), errors,
layout, lookup_form (the compact Lookup answer); kvtier.v1 holds the generated messages
(kvtier.pb) and stubs.
"""

from kvtier import codec, errors, layout, lookup_form, rendezvous, shm
from kvtier._proto import pb, pb_grpc
from kvtier.client import (ENCODED, RAW, Client, ConnectInfo, FetchedBlock, PutBlock,
                           PutResult)
from kvtier.cluster import ClusterClient, ClusterMember
from kvtier.errors import *  # noqa: F401,F403 - the exception classes
from kvtier.keys import HASH_SCHEME, key_from_hex, key_to_hex, prefix_keys, prefix_seed
from kvtier.layout import (block_shape, bytes_per_block, make_layout, make_namespace,
                           numpy_dtype)
from kvtier.rendezvous import RendezvousRing

__version__ = "0.1.0"
