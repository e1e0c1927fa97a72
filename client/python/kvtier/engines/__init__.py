"""kvtier inside serving engines, each loaded by the engine's own out-of-tree mechanism:

  kvtier.engines.vllm_connector   vLLM KVConnectorBase_V1 (kv_connector_module_path)
  kvtier.engines.lmcache_adapter  LMCache remote_storage_plugins ConnectorAdapter, and the
                                  native_plugin L2 client of `lmcache server`
  kvtier.engines.sglang_backend   SGLang HiCache v1 storage backend (not yet checked)
  kvtier.engines.common           identity -> namespace, keys from the engine's hashes, and
                                  the Link that turns a down kvtierd into a miss

Each engine module imports its engine; this package and `common` import none. The one
config line per engine is in docs/engines.md.
"""
