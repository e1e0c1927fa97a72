"""kvtier for Hugging Face transformers programs: a prompt's KV cache saved to kvtierd and
reloaded on a later request, so only the rest of the prompt is computed.

  import kvtier, kvtier.hf
  model, tok = kvtier.hf.load_model()               # SmolLM2-135M (scripts/model.sh)
  with kvtier.Client("127.0.0.1:50051") as c:
      cache = kvtier.hf.PrefixCache.for_model(c, model, "smollm2", codec="fp16")
      ids = tok("...long prompt...", return_tensors="pt").input_ids[0].tolist()
      out = cache.generate(model, ids, max_new_tokens=32)   # loads, computes the rest, saves
      print(tok.decode(out.tokens), out.cached_tokens)

Contract:
- Layout: one kvtier block is `tokens_per_block` tokens of every layer,
  [layer][k|v][kv_head][token][head_dim] in the namespace's source dtype (fp16, or bf16),
  keyed by kvtier.prefix_keys (chained over the block's token ids); each Put carries the
  block's token ids so KV-aware routers index it. Only full blocks are ever stored.
- Load: a leased Lookup of the prompt's keys, then one RAW Get of the leading resident run
  straight into preallocated arrays (in the client's shared-memory region when it has one),
  converted to the model's compute dtype (float32 on CPU) into a transformers DynamicCache.
  At least one prompt token is always left to compute (the model needs its logits).
- Failures never give wrong KV: a server that is down, a block that is missing or fails its
  checksum (a miss), a lost lease, a short or mis-sized read, or any client error makes the
  cached prefix shorter (down to none) and the rest is recomputed. Saving is best effort:
  a failed Put is reported (SaveResult.error), never raised.
- torch and transformers are imported lazily, so `import kvtier` (and this module) works on
  Debian's Python without them; the model functions need the venv of scripts/model_env.sh.
Thread-compatible: one PrefixCache per thread, or guard it (the Client itself is thread-safe).
"""

import dataclasses
import os

import numpy as np

from kvtier import errors
from kvtier import keys as keys_mod
from kvtier import layout as layout_mod
from kvtier.client import RAW, PutBlock

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def model_dir():
    """The folder scripts/model.sh fills: $KVTIER_MODEL_DIR, else
    ${KVTIER_CACHE:-~/.cache/kvtier}/models/smollm2-135m."""
    cache = os.environ.get("KVTIER_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                           "kvtier")
    return os.environ.get("KVTIER_MODEL_DIR") or os.path.join(cache, "models", "smollm2-135m")


def model_path():
    """Path of the GGUF; FileNotFoundError naming scripts/model.sh when it is missing."""
    path = os.path.join(model_dir(), MODEL_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            "kvtier.hf: the model %s is missing; fetch it with scripts/model.sh "
            "(or set KVTIER_MODEL_DIR to the folder holding it)" % path)
    return path


def load_model(path=None):
    """(model, tokenizer) of a GGUF (default: SmolLM2-135M from model_path()) through
    transformers, float32 on CPU, eval mode. ImportError naming scripts/model_env.sh when
    torch / transformers are not installed."""
    path = path or model_path()
    torch, transformers = _torch(), _transformers()
    folder, name = os.path.split(path)
    tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                              dtype=torch.float32)
    model.eval()
    return model, tok


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("kvtier.hf needs torch: run it with the interpreter "
                          "scripts/model_env.sh prints (%s)" % e) from e
    return torch


def _transformers():
    try:
        import transformers
    except ImportError as e:
        raise ImportError("kvtier.hf needs transformers: run it with the interpreter "
                          "scripts/model_env.sh prints (%s)" % e) from e
    return transformers


def model_shape(config):
    """(num_layers, num_kv_heads, head_dim) of a transformers config."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return config.num_hidden_layers, kv_heads, head_dim


def cache_tensors(cache):
    """[(key, value)] per layer of a DynamicCache (transformers 4.x or 5.x), each
    [batch, kv_heads, tokens, head_dim]."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


def make_cache(kv):
    """A DynamicCache holding `kv`, a [layer][2][kv_heads][tokens][head_dim] torch tensor
    (batch 1)."""
    transformers = _transformers()
    cache = transformers.DynamicCache()
    for i in range(kv.shape[0]):
        cache.update(kv[i, 0].unsqueeze(0).contiguous(), kv[i, 1].unsqueeze(0).contiguous(), i)
    return cache


@dataclasses.dataclass
class SaveResult:
    blocks: int = 0         # full blocks of the prompt (keys computed)
    stored: int = 0         # blocks this call put (the others were resident already)
    bytes_stored: int = 0   # encoded bytes the server stored
    error: str = ""         # why the put failed ("" = it did not)


@dataclasses.dataclass
class LoadResult:
    cache: object = None    # DynamicCache of the first `tokens` tokens, None when 0
    tokens: int = 0         # prompt tokens whose KV was loaded
    blocks: int = 0         # blocks loaded
    resident_blocks: int = 0  # blocks the Lookup reported (before any failure)
    bytes: int = 0          # RAW bytes moved from kvtierd
    shared_memory: bool = False  # the Get went through the shared-memory region
    error: str = ""         # why fewer blocks than resident were used ("" = none)


@dataclasses.dataclass
class GenerateResult:
    tokens: list            # generated token ids (the prompt excluded)
    cached_tokens: int      # prompt tokens loaded from kvtierd
    load: LoadResult = None
    save: SaveResult = None


class PrefixCache:
    """Saves and loads a model's prompt KV through one kvtier namespace (module docstring).

    client: a kvtier.Client (thread-safe, shared). namespace: its name. layout: the
    namespace's kvtier.v1.Layout (for_model builds it from a model). tenant / extra: the
    prefix-key salt (kvtier.prefix_keys). lease_ms: how long a Lookup leases the prefix it
    reports until the Get reads it."""

    def __init__(self, client, namespace, layout, tenant="", extra=b"", lease_ms=10_000):
        self.client = client
        self.namespace = namespace
        self.layout = layout
        self.tenant = tenant
        self.extra = extra
        self.lease_ms = lease_ms
        self.tokens_per_block = layout.tokens_per_block
        self.block_shape = layout_mod.block_shape(layout)
        self.block_bytes = layout_mod.bytes_per_block(layout)
        self.bf16 = layout_mod.numpy_dtype(layout) == np.dtype(np.uint16)

    @classmethod
    def for_model(cls, client, model, namespace, codec="fp16", dtype="fp16",
                  tokens_per_block=16, sink_tokens=4, **kwargs):
        """Registers (or checks) namespace `namespace` for `model`'s KV shape with `codec`
        and source `dtype` ("fp16" or "bf16") and returns a PrefixCache over it."""
        layers, kv_heads, head_dim = model_shape(model.config)
        layout = layout_mod.make_layout(layers, kv_heads, head_dim, tokens_per_block, dtype,
                                        sink_tokens)
        client.register_namespace(layout_mod.make_namespace(namespace, layout, codec=codec))
        return cls(client, namespace, layout, **kwargs)

    def keys(self, token_ids):
        """Chained keys of the full blocks of `token_ids`."""
        return keys_mod.prefix_keys(token_ids, self.namespace, self.tenant,
                                    self.tokens_per_block, self.extra)

    # -- save ---------------------------------------------------------------------------

    def blocks_of(self, cache, num_blocks, first_block=0):
        """The RAW payloads of blocks [first_block, num_blocks) of a DynamicCache: one numpy
        array (blocks, layer, 2, kv_head, tokens_per_block, head_dim) in the source dtype
        (bf16 as uint16 bit patterns, rounded to nearest even)."""
        torch = _torch()
        b = self.tokens_per_block
        lo, hi = first_block * b, num_blocks * b
        kv = torch.stack([torch.stack([k[0, :, lo:hi], v[0, :, lo:hi]])
                          for k, v in cache_tensors(cache)])  # [L, 2, H, T, D]
        n = num_blocks - first_block
        L, _, H, _, D = kv.shape
        kv = kv.reshape(L, 2, H, n, b, D).permute(3, 0, 1, 2, 4, 5)
        if self.bf16:
            return kv.to(torch.bfloat16).contiguous().view(torch.int16).numpy().view(np.uint16)
        return kv.to(torch.float16).contiguous().numpy()

    def save(self, token_ids, cache, timeout=None):
        """Puts the full blocks of `token_ids` whose KV `cache` holds (a DynamicCache of at
        least those tokens) that kvtierd does not hold yet. Never raises for server
        failures: they are in SaveResult.error."""
        token_ids = [int(t) for t in token_ids]
        held = cache_tensors(cache)[0][0].shape[2] if cache_tensors(cache) else 0
        n = min(len(token_ids), held) // self.tokens_per_block
        result = SaveResult(blocks=n)
        if n == 0:
            return result
        keys = self.keys(token_ids[:n * self.tokens_per_block])
        try:
            first = self.client.lookup(self.namespace, keys, timeout=timeout).prefix_blocks
            if first >= n:
                return result
            payloads = self.blocks_of(cache, n, first)
            b = self.tokens_per_block
            blocks = [PutBlock(keys[i], payloads[i - first], keys[i - 1] if i else b"", i,
                               token_ids=token_ids[i * b:(i + 1) * b]) for i in range(first, n)]
            put = self.client.put_blocks(self.namespace, blocks, format=RAW, timeout=timeout)
            result.stored, result.bytes_stored = put.blocks_stored, put.bytes_stored
        except (errors.KvtierError, OSError) as e:  # OSError: a failed shm socket
            result.error = str(e)
        return result

    # -- load ---------------------------------------------------------------------------

    def _buffers(self, n):
        """n block buffers, in the shared region when the client has one (else the heap):
        (array of shape (n,) + block_shape, True if shared)."""
        dtype = layout_mod.numpy_dtype(self.layout)
        if self.client.uses_shared_memory:
            try:
                raw = self.client.allocate_shared_buffer(n * self.block_bytes)
                return raw.view(dtype).reshape((n,) + self.block_shape), True
            except errors.KvtierError:
                pass  # no room: the heap, staged by the client
        return np.empty((n,) + self.block_shape, dtype), False

    def load_raw(self, token_ids, max_blocks=None, timeout=None):
        """The leading cached run of `token_ids`'s blocks as RAW arrays: (array (n,) +
        block_shape in the source dtype, LoadResult without cache). Leaves at least one
        token uncached. Never raises for server failures (module docstring)."""
        usable = max(len(token_ids) - 1, 0) // self.tokens_per_block
        if max_blocks is not None:
            usable = min(usable, max_blocks)
        result = LoadResult()
        empty = np.empty((0,) + self.block_shape, layout_mod.numpy_dtype(self.layout))
        if usable == 0:
            return empty, result
        keys = self.keys([int(t) for t in token_ids[:usable * self.tokens_per_block]])
        lease_id, other_leases = 0, ()
        try:
            resp = self.client.lookup(self.namespace, keys, timeout=timeout,
                                      lease_ms=self.lease_ms)
            n = result.resident_blocks = resp.prefix_blocks
            if n == 0:
                return empty, result
            # The leased run (the server bounds leased bytes, lease_limit) is loaded with the
            # unleased rest: a block evicted meanwhile is a miss and ends the prefix there.
            leases = sorted({resp.blocks[i].lease_id for i in range(n)} - {0})
            lease_id = leases[0] if len(leases) == 1 else 0
            other_leases = leases if len(leases) > 1 else ()  # several owners: released below
            bufs, result.shared_memory = self._buffers(n)
            infos = self.client.get_blocks_into(self.namespace, keys[:n], list(bufs),
                                                format=RAW, timeout=timeout, lease_id=lease_id)
            lease_id = 0  # the Get ended it
            self._release(other_leases)
            good = 0
            for info in infos:
                if not info.found or info.size != self.block_bytes or len(info.positions):
                    break
                good += 1
            if good < n:
                result.error = "block %d: %s" % (good, "missing (or failed its checksum)"
                                                 if not infos[good].found else
                                                 "%d bytes, want %d" % (infos[good].size,
                                                                        self.block_bytes))
            result.blocks, result.tokens = good, good * self.tokens_per_block
            result.bytes = good * self.block_bytes
            return bufs[:good], result
        except (errors.KvtierError, OSError) as e:  # OSError: a failed shm socket
            result.error = str(e)
            self._release(([lease_id] if lease_id else []) + list(other_leases))
            return empty, result

    def _release(self, lease_ids):
        for lease in lease_ids:
            try:
                self.client.release_lease(self.namespace, lease, timeout=1.0)
            except errors.KvtierError:
                pass  # it ends at its deadline anyway

    def to_torch(self, blocks, dtype=None):
        """RAW block arrays (n,) + block_shape -> a [layer][2][kv_head][n * tokens][head_dim]
        torch tensor of `dtype` (default float32). Copies out of the buffers."""
        torch = _torch()
        dtype = dtype or torch.float32
        n = blocks.shape[0]
        if self.bf16:
            t = torch.from_numpy(np.ascontiguousarray(blocks).view(np.int16)).view(torch.bfloat16)
        else:
            t = torch.from_numpy(np.ascontiguousarray(blocks))
        L, _, H, b, D = self.block_shape
        return t.permute(1, 2, 3, 0, 4, 5).reshape(L, 2, H, n * b, D).to(dtype)

    def load(self, token_ids, dtype=None, max_blocks=None, timeout=None):
        """A LoadResult whose cache holds the KV of the leading cached run of `token_ids`
        (tokens of it; at least one token is left to compute), converted to `dtype`
        (default float32). Never raises for server failures (module docstring)."""
        blocks, result = self.load_raw(token_ids, max_blocks, timeout)
        if result.blocks:
            result.cache = make_cache(self.to_torch(blocks, dtype))
        return result

    # -- generate -----------------------------------------------------------------------

    def generate(self, model, token_ids, max_new_tokens=32, save=True, timeout=None):
        """Greedy generation after `token_ids` with the cached prefix loaded from kvtierd
        and the rest computed; then (save) the prompt's full blocks are saved. Returns a
        GenerateResult."""
        token_ids = [int(t) for t in token_ids]
        load = self.load(token_ids, timeout=timeout)
        tokens, cache = greedy(model, token_ids, max_new_tokens, load.cache, load.tokens)
        saved = self.save(token_ids, cache, timeout=timeout) if save else None
        return GenerateResult(tokens, load.tokens, load, saved)


def greedy(model, token_ids, max_new_tokens, cache=None, cached=0, kv_len=None):
    """Greedy decoding: feeds token_ids[cached:] (at positions cached, cached + 1, ...) on
    top of `cache` (None, or the KV of the first `cached` tokens), then max_new_tokens - 1
    more steps. kv_len: the tokens `cache` holds when that is not `cached` (a compacted
    cache keeps fewer tokens at their original positions). Returns (generated ids, the
    final DynamicCache)."""
    torch = _torch()
    transformers = _transformers()
    cache = cache if cache is not None else transformers.DynamicCache()
    rest = torch.tensor([token_ids[cached:]], dtype=torch.long)
    out = []
    pos, kv_len = cached, cached if kv_len is None else kv_len
    with torch.no_grad():
        for _ in range(max_new_tokens):
            n = rest.shape[1]
            o = model(input_ids=rest, past_key_values=cache, use_cache=True,
                      position_ids=torch.arange(pos, pos + n).unsqueeze(0),
                      cache_position=torch.arange(kv_len, kv_len + n))
            cache = o.past_key_values
            nxt = int(o.logits[0, -1].argmax())
            out.append(nxt)
            pos += n
            kv_len += n
            rest = torch.tensor([[nxt]], dtype=torch.long)
    return out, cache
