"""`kvtier eval model`: the seed's KV-compression evaluation on a real model's cache.

  $(scripts/model_env.sh | tail -1) -m kvtier.eval_model --kvtierd build/service/kvtierd \
      --quick --json model.json

SmolLM2-135M-Instruct (scripts/model.sh) runs on CPU in float32 through transformers; every
K/V byte it evaluates goes through a running kvtierd: put RAW fp16/bf16 into a namespace of
the codec under test and read back RAW (the server encodes and decodes), or compacted by the
server's Compact RPC on the stored blocks and the entry read back RAW. Sections (the --json
object's keys):
  roundtrip   fp16 / bf16 / lossless bit-identical after a round trip
  sinks       attention mass of late queries on the first 1 and 4 tokens, per layer
  outliers    per head max/median of the per-channel max |K| (before / after RoPE), |V|
  codecs      per codec: bits per value, K / V / attention-output relative error, next-token
              KL against fp16, greedy agreement, perplexity of the fixed text
  passkey     retrieval accuracy (and the smallest logit margin of the key's digits) per
              length for the full cache, each codec, each compaction policy and budget;
              needle at depths 0.1-0.9 (see _Haystack for the task)
  perplexity  perplexity after a context under each compaction policy and budget
  ttft        time to first token with the prefix loaded (shared memory, gRPC TCP) against
              recomputing it, per prefix length and codec; bytes moved
The fixed text is Debian base-files' /usr/share/common-licenses/GPL-3. Positions: compacted
entries keep their keys' original RoPE positions (POSITION_POLICY_KEEP_ORIGINAL); the tokens
computed after them continue at the original positions, so kept keys and new queries keep
their true relative distances. Figures vary with the machine's load (timings) but the
accuracy figures are deterministic for a given build.
"""

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

import kvtier
from kvtier import hf
from kvtier._proto import pb

TEXT = "/usr/share/common-licenses/GPL-3"
CODECS = ["fp16", "bf16", "fp8_e4m3", "int8", "int4", "kivi4", "kivi2", "lossless"]
FOIL = "token2"  # per-token 2-bit (groups of 32 channels), computed client-side: the foil
POLICIES = ["window", "sinks+window", "h2o", "snapkv"]
N_SINK, OBS_WINDOW, POOL = 4, 32, 7
TPB = 16


class Env:
    """The model, tokenizer, text and a client of the kvtierd under test."""

    def __init__(self, address, log, model_and_tokenizer=None):
        import torch
        self.torch = torch
        self.model, self.tok = model_and_tokenizer or hf.load_model()
        self.L, self.H, self.D = hf.model_shape(self.model.config)
        self.Hq = self.model.config.num_attention_heads
        self.theta = float(getattr(self.model.config, "rope_theta", 0) or
                           self.model.config.rope_parameters["rope_theta"])
        with open(TEXT, encoding="utf-8") as f:
            self.text_ids = self.tok(f.read())["input_ids"]
        self.address = address
        self.client = kvtier.Client(address, timeout=60.0)
        self.tcp = kvtier.Client(address, timeout=60.0, shared_memory=False)
        self.caches = {}
        self.seq = 0
        self.made = []  # namespaces made since the last drop_namespaces()
        self.log = log

    def prefix_cache(self, codec, tag, client=None):
        """A PrefixCache over a fresh namespace of `codec` (a fresh namespace per use, so KV
        computed one way is never read back as another's)."""
        self.seq += 1
        dtype = "bf16" if codec == "bf16" else "fp16"
        ns = "eval-%s-%s-%d" % (tag, codec, self.seq)
        self.made.append(ns)
        return hf.PrefixCache.for_model(client or self.client, self.model, ns, codec=codec,
                                        dtype=dtype, tokens_per_block=TPB)

    def drop_namespaces(self):
        """Drops every namespace made since the last call (keeps kvtierd's memory flat)."""
        for ns in self.made:
            self.client.drop_namespace(ns, force=True)
        self.made = []

    def forward(self, ids, cache=None, pos=0, kv_len=None, capture=False):
        """Logits of `ids` at positions pos.. on top of `cache`; with capture, also the
        per-layer pre-RoPE keys and post-RoPE queries [heads, T, D]. Returns (logits[T, V],
        cache, captured)."""
        torch = self.torch
        kv_len = pos if kv_len is None else kv_len
        cache = cache if cache is not None else hf._transformers().DynamicCache()
        captured = {"q": [None] * self.L, "k": [None] * self.L}
        hooks = []
        if capture:
            for i, layer in enumerate(self.model.model.layers):
                a = layer.self_attn
                hooks.append(a.q_proj.register_forward_hook(
                    lambda m, inp, out, i=i: captured["q"].__setitem__(i, out.detach())))
                hooks.append(a.k_proj.register_forward_hook(
                    lambda m, inp, out, i=i: captured["k"].__setitem__(i, out.detach())))
        n = len(ids)
        try:
            with torch.no_grad():
                o = self.model(input_ids=torch.tensor([ids]), past_key_values=cache,
                               use_cache=True, position_ids=torch.arange(pos, pos + n)[None],
                               cache_position=torch.arange(kv_len, kv_len + n))
        finally:
            for h in hooks:
                h.remove()
        if capture:
            from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
            posids = torch.arange(pos, pos + n)[None]
            for i in range(self.L):
                q = captured["q"][i].view(1, n, self.Hq, self.D).transpose(1, 2)
                k = captured["k"][i].view(1, n, self.H, self.D).transpose(1, 2)
                cos, sin = self.model.model.rotary_emb(q, posids)
                q_rot, _ = apply_rotary_pos_emb(q, q, cos, sin)
                captured["q"][i] = q_rot[0]
                captured["k"][i] = k[0]
        return o.logits[0].float(), o.past_key_values, captured

    def through(self, pc, ids, cache, n_blocks=None):
        """Puts the full blocks of `ids` from `cache` into pc's namespace and reads them
        back RAW: (float32 tensor [L, 2, H, tokens, D], PutResult-like SaveResult)."""
        n_blocks = len(ids) // TPB if n_blocks is None else n_blocks
        saved = pc.save(ids[:n_blocks * TPB], cache)
        if saved.error:
            raise RuntimeError("put into kvtierd failed: " + saved.error)
        blocks, res = pc.load_raw(list(ids[:n_blocks * TPB]) + [0])
        if res.blocks != n_blocks:
            raise RuntimeError("kvtierd returned %d of %d blocks: %s"
                               % (res.blocks, n_blocks, res.error))
        return pc.to_torch(blocks), saved

    def compact(self, pc, ids, n_blocks, policy, budget, scores=None, queries=None):
        """Compact RPC on the stored blocks of pc's namespace, the entry read back RAW:
        (float32 tensor [L, 2, H, kept, D], CompactResponse)."""
        keys = pc.keys(ids[:n_blocks * TPB])
        req = pb.CompactRequest(namespace=pc.namespace, keys=keys,
                                position_policy=pb.POSITION_POLICY_KEEP_ORIGINAL,
                                rope_theta=self.theta)
        if policy == "window":
            req.sink_window.CopyFrom(pb.SinkWindowParams(n_sink=0, window=budget))
        elif policy == "sinks+window":
            req.sink_window.CopyFrom(pb.SinkWindowParams(n_sink=N_SINK, window=budget - N_SINK))
        elif policy == "h2o":
            recent = budget // 2
            req.h2o.CopyFrom(pb.H2oParams(n_sink=N_SINK, heavy=budget - recent - N_SINK,
                                          recent=recent, scores=scores))
        else:
            req.snapkv.CopyFrom(pb.SnapKvParams(n_sink=N_SINK, obs_window=OBS_WINDOW,
                                                pool_kernel=POOL, capacity=budget,
                                                num_query_heads=self.Hq, obs_queries=queries))
        resp = self.client.compact(req, timeout=120.0)
        layout = pc.layout
        shape = (self.L, 2, self.H, resp.kept_tokens, self.D)
        buf = np.empty(shape, kvtier.layout.numpy_dtype(layout))
        info = self.client.get_blocks_into(pc.namespace, [resp.entry_key], [buf],
                                           format=kvtier.RAW)[0]
        if not info.found or info.size != buf.nbytes:
            raise RuntimeError("compacted entry: found=%s size=%d, want %d"
                               % (info.found, info.size, buf.nbytes))
        return self.torch.from_numpy(buf).float(), resp


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def _attention(env, q, k, v, n_query):
    """Attention output and probabilities of the last n_query queries q [Hq, T, D] over
    k, v [H, T, D] (causal)."""
    torch = env.torch
    T = k.shape[1]
    g = env.Hq // env.H
    kk = k.repeat_interleave(g, 0)
    vv = v.repeat_interleave(g, 0)
    qq = q[:, T - n_query:]
    s = qq @ kk.transpose(1, 2) / math.sqrt(env.D)
    mask = torch.arange(T)[None, :] > torch.arange(T - n_query, T)[:, None]
    s = s.masked_fill(mask, float("-inf"))
    p = torch.softmax(s, -1)
    return p @ vv, p


def _h2o_scores(env, captured, kv):
    """Accumulated attention [layer][kv_head][token] of every query of the prompt."""
    torch = env.torch
    out = []
    g = env.Hq // env.H
    for i in range(env.L):
        q = captured["q"][i]
        k = kv[i, 0]
        T = k.shape[1]
        acc = torch.zeros(env.Hq, T)
        for b in range(0, T, 512):
            e = min(b + 512, T)
            s = q[:, b:e] @ k.repeat_interleave(g, 0).transpose(1, 2) / math.sqrt(env.D)
            mask = torch.arange(T)[None, :] > torch.arange(b, e)[:, None]
            acc += torch.softmax(s.masked_fill(mask, float("-inf")), -1).sum(1)
        out.append(acc.view(env.H, g, T).sum(1))
    return torch.stack(out).flatten().tolist()


def _obs_queries(env, captured, T):
    return env.torch.stack([captured["q"][i][:, T - OBS_WINDOW:T] for i in range(env.L)]
                           ).flatten().tolist()


def _token2(kv16):
    """The foil: per-token 2-bit asymmetric quantization in groups of 32 channels (fp16
    scale and min per group: 3 bits per value), on float32 K/V [L, 2, H, T, D]."""
    x = kv16.numpy().astype(np.float32)
    shp = x.shape
    g = x.reshape(shp[:-1] + (shp[-1] // 32, 32))
    lo, hi = g.min(-1, keepdims=True), g.max(-1, keepdims=True)
    lo, hi = lo.astype(np.float16).astype(np.float32), hi.astype(np.float16).astype(np.float32)
    scale = np.maximum((hi - lo) / 3, 1e-8)
    qv = np.clip(np.round((g - lo) / scale), 0, 3)
    return env_torch().from_numpy((qv * scale + lo).reshape(shp).astype(np.float32)), 3.0


def env_torch():
    import torch
    return torch


def _kv_codec(env, codec, ids, cache, n_blocks, tag):
    """K/V of the first n_blocks of ids through `codec`: (float32 [L,2,H,T,D], bits per
    value)."""
    values = n_blocks * TPB * env.L * 2 * env.H * env.D
    if codec == FOIL:
        ref, _ = env.through(env.prefix_cache("fp16", tag), ids, cache, n_blocks)
        return _token2(ref)
    got, saved = env.through(env.prefix_cache(codec, tag), ids, cache, n_blocks)
    return got, saved.bytes_stored * 8.0 / values


def section_sinks_outliers(env, ids):
    torch = env.torch
    logits, cache, cap = env.forward(ids, capture=True)
    kv, _ = env.through(env.prefix_cache("fp16", "so"), ids, cache)
    T = kv.shape[3]
    nq = min(256, T // 4)
    sinks = []
    outliers = []
    for i in range(env.L):
        _, p = _attention(env, cap["q"][i][:, :T], kv[i, 0], kv[i, 1], nq)
        sinks.append({"layer": i, "first1": float(p[..., :1].sum(-1).mean()),
                      "first4": float(p[..., :4].sum(-1).mean()),
                      "uniform1": float((1.0 / torch.arange(T - nq + 1, T + 1).float()).mean())})

        def ratio(x):  # x [H, T, D] -> per head max/median of per-channel max |x|
            m = x.abs().amax(1)
            return (m.amax(-1) / m.median(-1).values).tolist()
        outliers.append({"layer": i, "k_pre_rope": ratio(cap["k"][i][:, :T]),
                         "k_post_rope": ratio(kv[i, 0]), "v": ratio(kv[i, 1])})
    del logits
    return sinks, outliers


def _kl(p_logits, q_logits):
    torch = env_torch()
    lp = torch.log_softmax(p_logits.double(), -1)
    lq = torch.log_softmax(q_logits.double(), -1)
    return float((lp.exp() * (lp - lq)).sum(-1).mean())


def _load_cache(kv):
    return hf.make_cache(kv.contiguous())


def section_codecs(env, args):
    text = env.text_ids
    # Fidelity on one context: K / V / attention-output error of late queries.
    ctx = text[:args.codec_context]
    _, cache, cap = env.forward(ctx, capture=True)
    nb = len(ctx) // TPB
    ref, _ = env.through(env.prefix_cache("fp16", "cf"), ctx, cache, nb)
    out = {}
    codecs = args.codecs
    for codec in codecs:
        kv, bits = _kv_codec(env, codec, ctx, cache, nb, "cf")
        ao = []
        for i in range(env.L):
            a_ref, _ = _attention(env, cap["q"][i][:, :nb * TPB], ref[i, 0], ref[i, 1], 64)
            a_got, _ = _attention(env, cap["q"][i][:, :nb * TPB], kv[i, 0], kv[i, 1], 64)
            ao.append(_rel(a_got, a_ref))
        out[codec] = {"bits_per_value": bits, "k_rel_err": _rel(kv[:, 0], ref[:, 0]),
                      "v_rel_err": _rel(kv[:, 1], ref[:, 1]),
                      "attn_out_rel_err": float(np.mean(ao))}
        env.log("codecs fidelity %-9s %s" % (codec, out[codec]))
    env.drop_namespaces()
    # Next-token KL and greedy agreement: prompts from the text, prefix via the codec. Each
    # prompt's prefill, fp16 reference and its greedy tokens are computed once for all codecs.
    rng = random.Random(1)
    starts = [rng.randrange(0, len(text) - args.prompt_len - 1) for _ in range(args.prompts)]
    prompts = [text[s:s + args.prompt_len] for s in starts]
    kls = {c: [] for c in codecs}
    agree = {c: [] for c in codecs}
    for n, p in enumerate(prompts):
        npb = (len(p) - args.tail) // TPB
        _, pcache, _ = env.forward(p[:npb * TPB])
        kv_ref, _ = env.through(env.prefix_cache("fp16", "cg"), p, pcache, npb)
        lr, _, _ = env.forward(p[npb * TPB:], _load_cache(kv_ref), pos=npb * TPB)
        g_ref, _ = hf.greedy(env.model, p, args.gen, _load_cache(kv_ref), npb * TPB)
        for codec in codecs:
            kv, _ = _kv_codec(env, codec, p, pcache, npb, "cg")
            lg, _, _ = env.forward(p[npb * TPB:], _load_cache(kv), pos=npb * TPB)
            kls[codec].append(_kl(lr, lg))
            g_got, _ = hf.greedy(env.model, p, args.gen, _load_cache(kv), npb * TPB)
            agree[codec].append(float(np.mean(np.asarray(g_ref) == np.asarray(g_got))))
        env.drop_namespaces()
        env.log("codecs prompt %d: agreement %s" % (n, {c: agree[c][-1] for c in codecs}))
    for codec in codecs if prompts else ():  # --prompts 0: fidelity and perplexity only
        out[codec].update({"next_token_kl": float(np.mean(kls[codec])),
                           "greedy_agreement": float(np.mean(agree[codec])),
                           "greedy_identical_prompts": int(sum(a == 1.0 for a in agree[codec])),
                           "prompts": len(prompts), "greedy_tokens": args.gen})
    if args.ppl_tokens:
        for codec in codecs:
            out[codec]["perplexity"] = _ppl_codec(env, codec, text[:args.ppl_tokens],
                                                  args.ppl_chunk)
            out[codec]["perplexity_tokens"] = args.ppl_tokens
            env.drop_namespaces()
            env.log("codecs %-9s %s" % (codec, out[codec]))
    return out


def _ppl_codec(env, codec, ids, chunk):
    """Perplexity of `ids`, chunk by chunk, each chunk's context loaded from kvtierd through
    `codec` (the chunk's own KV is computed, then stored for the next chunks)."""
    torch = env.torch
    pc = env.prefix_cache("fp16" if codec == FOIL else codec, "ppl")
    nll, count, prev_last = 0.0, 0, None
    for start in range(0, len(ids), chunk):
        part = ids[start:start + chunk]
        cache = None
        if start:
            nb = start // TPB
            blocks, res = pc.load_raw(list(ids[:start]) + [0])
            if res.blocks != nb:
                raise RuntimeError("perplexity: kvtierd returned %d of %d blocks" % (res.blocks, nb))
            kv = pc.to_torch(blocks)
            if codec == FOIL:
                kv, _ = _token2(kv)
            cache = _load_cache(kv)
        logits, cache, _ = env.forward(part, cache, pos=start)
        lp = torch.log_softmax(logits.double(), -1)
        tgt = torch.tensor(part[1:])
        nll -= float(lp[:-1].gather(1, tgt[:, None]).sum())
        count += len(part) - 1
        if prev_last is not None:
            nll -= float(prev_last[part[0]])
            count += 1
        prev_last = lp[-1]
        if start + chunk < len(ids):
            saved = pc.save(ids[:start + len(part)], cache)
            if saved.error:
                raise RuntimeError(saved.error)
    return math.exp(nll / count)


_FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
_INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it and "
          "memorize it. I will quiz you about the important information there.\n")
_QUESTION = "\nWhat is the pass key? The pass key is"
DEPTHS = (0.1, 0.3, 0.5, 0.7, 0.9)


class _Haystack:
    """The passkey task. A prompt is intro + filler (repeated, cut at a sentence end near
    the needle's depth) + needle + the rest of the filler + question + the " " token that
    precedes digits. SmolLM2's tokenizer splits digits and writes " 71432" as " " + five
    digit tokens, so ending the prompt with that " " asks for exactly the digits; the
    answer is the five digit tokens, scored teacher-forced (a trial passes when the argmax
    at each of the 5 positions is the key's digit, which is what greedy decoding would
    emit). Without the " " the first answer token was a near tie between " " and " the"
    (logit margin 0.01-1.4 on the full cache at 1K) that a 0.2% perturbation (bf16)
    flipped: a test of phrasing, not of retrieval.

    Every prompt's tokens before its needle are a prefix of intro + filler repeated, so
    their K/V (and post-RoPE queries, for H2O / SnapKV) are computed once, for the longest
    prompt, and each trial computes only needle onwards: exact up to float32 summation
    order, and half the CPU on average."""

    def __init__(self, env, max_len, capture, space_in_prompt=True):
        tok = env.tok
        self.env = env
        self.space_in_prompt = space_in_prompt  # False: the old task (answer " " + digits)
        self.intro = tok(_INTRO)["input_ids"]
        self.filler = tok(_FILLER)["input_ids"]
        self.question = tok(_QUESTION)["input_ids"]
        probe = tok(" 71432", add_special_tokens=False)["input_ids"]
        if len(probe) != 6 or tok.decode(probe[1:]) != "71432":
            raise RuntimeError("passkey: the tokenizer does not split digits as expected: %r"
                               % probe)
        self.space = probe[0]  # " ", then one token per digit
        n = max_len + len(self.filler)
        self.hay = (self.filler * (n // len(self.filler) + 1))[:n]
        self.dots = [i + 1 for i, t in enumerate(self.hay) if tok.decode([t]).strip() == "."]
        base = self.intro + self.hay
        _, cache, cap = env.forward(base[:max_len], capture=capture)
        self.kv = _stack(cache)  # float32 [L, 2, H, max_len, D]
        self.q = [cap["q"][i] for i in range(env.L)] if capture else None

    def prompt(self, length, depth, key):
        """(ids, T = stored prefix tokens, a multiple of TPB, P = tokens before the needle,
        answer ids). `length` is the stored prefix; the last 4 tokens are computed."""
        tok = self.env.tok
        needle = tok(" The pass key is %s. Remember it. %s is the pass key. " % (key, key),
                     add_special_tokens=False)["input_ids"]
        tail = self.question + ([self.space] if self.space_in_prompt else [])
        n_fill = length - len(self.intro) - len(needle) - len(tail) + 4
        at = int(round(depth * n_fill))
        at = min((d for d in self.dots if d <= n_fill), key=lambda d: abs(d - at))
        ids = self.intro + self.hay[:at] + needle + self.hay[at:n_fill] + tail
        T = (len(ids) - 4) // TPB * TPB
        answer = tok(key, add_special_tokens=False)["input_ids"]
        if not self.space_in_prompt:
            answer = [self.space] + answer
        return ids, T, len(self.intro) + at, answer

    def prefill(self, ids, T, P, capture):
        """K/V float32 [L, 2, H, T, D] of ids[:T] (the first P tokens from the shared
        haystack) and, with capture, the post-RoPE queries of all T positions."""
        env = self.env
        _, cache, cap = env.forward(ids[P:T], _load_cache(self.kv[:, :, :, :P]), pos=P,
                                    capture=capture)
        q = None
        if capture:
            q = {"q": [env.torch.cat([self.q[i][:, :P], cap["q"][i]], 1) for i in range(env.L)]}
        return _stack(cache), q


def _stack(cache):
    torch = env_torch()
    return torch.stack([torch.stack([k[0], v[0]]) for k, v in hf.cache_tensors(cache)])


def _passkey_score(env, ids, T, answer, kv, kv_len=None):
    """(passed, margin): the prompt's last tokens and the answer teacher-forced on the
    cache kv (T tokens at positions < T; kv_len tokens when compacted); passed when the
    argmax at every answer position is the answer token; margin = the smallest logit lead
    of the answer token over the best other token (negative when it failed)."""
    feed = list(ids[T:]) + list(answer[:-1])
    logits, _, _ = env.forward(feed, _load_cache(kv), pos=T,
                               kv_len=kv.shape[3] if kv_len is None else kv_len)
    first = len(ids) - T - 1
    margins = []
    for j, t in enumerate(answer):
        row = logits[first + j].clone()
        want = float(row[t])
        row[t] = float("-inf")
        margins.append(want - float(row.max()))
    m = min(margins)
    return m > 0, m


def _variants(args):
    if args.passkey_variants:
        return args.passkey_variants
    return (["full"] + CODECS + [FOIL] +
            ["%s@%d%%" % (p, b) for p in POLICIES for b in (25, 50)])


def section_passkey(env, args):
    variants = _variants(args)
    policies = [v for v in variants if "@" in v]
    capture = bool(policies)
    hay = _Haystack(env, max(args.passkey_lengths), capture,
                    not getattr(args, "passkey_old_prompt", False))
    env.log("passkey: haystack of %d tokens computed" % hay.kv.shape[3])
    out = {}
    for length in args.passkey_lengths:
        res = {v: 0 for v in variants}
        margins = {v: [] for v in variants}
        by_depth = {v: {str(d): 0 for d in DEPTHS} for v in variants}
        bits = {}  # codec -> bits per value (headers included) of each trial's prefix
        n = 0
        rng = random.Random(length)
        # Depths interleaved (0.1, 0.3, ..., 0.9, 0.1, ...), so a run stopped early still
        # covers every depth.
        for t in range(args.passkey_seeds * len(DEPTHS)):
            depth = DEPTHS[t % len(DEPTHS)]
            key = "%05d" % rng.randrange(0, 100000)
            ids, T, P, answer = hay.prompt(length, depth, key)
            nb = T // TPB
            kv32, cap = hay.prefill(ids, T, P, capture)
            cache = _load_cache(kv32)  # what the codecs' namespaces are filled from
            n += 1
            base = kv_base = None
            if policies or "fp16" in variants or FOIL in variants:
                base = env.prefix_cache("fp16", "pk")
                kv_base, _ = env.through(base, ids, cache, nb)
            for v in variants:
                if v == "full":
                    ok, m = _passkey_score(env, ids, T, answer, kv32)
                elif v == "fp16":
                    ok, m = _passkey_score(env, ids, T, answer, kv_base)
                elif "@" in v:
                    policy, b = v.split("@")
                    if cap.get("scores") is None:
                        cap["scores"] = _h2o_scores(env, cap, kv_base)
                        cap["queries"] = _obs_queries(env, cap, T)
                    kv, _ = env.compact(base, ids, nb, policy, T * int(b[:-1]) // 100,
                                        cap["scores"], cap["queries"])
                    ok, m = _passkey_score(env, ids, T, answer, kv, kv.shape[3])
                else:
                    if v == FOIL:
                        kv, _ = _token2(kv_base)
                    else:
                        pc = env.prefix_cache(v, "pk")
                        kv, saved = env.through(pc, ids, cache, nb)
                        bits.setdefault(v, []).append(
                            saved.bytes_stored * 8.0 / (T * env.L * 2 * env.H * env.D))
                    ok, m = _passkey_score(env, ids, T, answer, kv)
                res[v] += ok
                by_depth[v][str(depth)] += ok
                margins[v].append(m)
            env.drop_namespaces()  # keeps kvtierd's memory flat over many trials
            if args.passkey_log:
                env.log("passkey %d depth %.1f key %s: %s" % (
                    length, depth, key, " ".join("%s=%+.2f" % (v, margins[v][-1])
                                                 for v in variants)))
        out[str(length)] = {
            "trials": n, "accuracy": {v: res[v] / n for v in variants},
            "passed": {v: res[v] for v in variants},
            "by_depth": by_depth,
            "margin_median": {v: float(np.median(margins[v])) for v in variants},
            "margin_min": {v: float(np.min(margins[v])) for v in variants},
            "bits_per_value": {v: float(np.mean(x)) for v, x in bits.items()}}
        env.log("passkey %d: %s" % (length, out[str(length)]["passed"]))
    return out


def section_perplexity(env, args):
    """Perplexity of ppl_eval tokens after a ppl_context-token context of the text, the
    context full or compacted by kvtierd (positions kept)."""
    torch = env.torch
    C, E = args.ppl_context, args.ppl_eval
    out = {}
    for start in args.ppl_offsets:
        ids = env.text_ids[start:start + C + E]
        _, cache, cap = env.forward(ids[:C], capture=True)
        base = env.prefix_cache("fp16", "pp")
        kv_full, _ = env.through(base, ids, cache, C // TPB)
        scores = _h2o_scores(env, cap, kv_full)
        queries = _obs_queries(env, cap, C)

        def ppl(kv):
            logits, _, _ = env.forward(ids[C:], _load_cache(kv), pos=C, kv_len=kv.shape[3])
            lp = torch.log_softmax(logits.double(), -1)
            tgt = torch.tensor(ids[C + 1:])
            return float(-(lp[:-1].gather(1, tgt[:, None]).sum()) / (E - 1))
        nlls = {"full": ppl(kv_full)}
        for policy in POLICIES:
            for b in (25, 50):
                kv, _ = env.compact(base, ids, C // TPB, policy, C * b // 100, scores, queries)
                nlls["%s@%d%%" % (policy, b)] = ppl(kv)
        for k, v in nlls.items():
            out.setdefault(k, []).append(v)
    res = {k: math.exp(float(np.mean(v))) for k, v in out.items()}
    full = res["full"]
    return {"context": C, "eval_tokens": E, "offsets": list(args.ppl_offsets),
            "perplexity": res, "ratio_to_full": {k: v / full for k, v in res.items()}}


def section_ttft(env, args):
    out = {}
    for length in args.ttft_lengths:
        ids = env.text_ids[:length + args.tail]
        nb = length // TPB
        _, cache, _ = env.forward(ids[:length])
        row = {}
        pcs = {}
        for codec in args.ttft_codecs:
            pcs[codec] = env.prefix_cache(codec, "tt")
            pcs[codec].save(ids, cache)
            pcs[(codec, "tcp")] = hf.PrefixCache(env.tcp, pcs[codec].namespace, pcs[codec].layout)
        times = {"recompute": []}
        for _ in range(args.ttft_reps):  # alternate A / B within one run
            t0 = time.perf_counter()
            env.forward(ids)
            times["recompute"].append(time.perf_counter() - t0)
            for codec in args.ttft_codecs:
                for path, pc in (("shm", pcs[codec]), ("tcp", pcs[(codec, "tcp")])):
                    t0 = time.perf_counter()
                    res = pc.load(ids)
                    t1 = time.perf_counter()
                    env.forward(ids[res.tokens:], res.cache, pos=res.tokens)
                    t2 = time.perf_counter()
                    if res.tokens != nb * TPB:
                        raise RuntimeError("ttft: loaded %d tokens: %s" % (res.tokens, res.error))
                    if path == "shm" and not res.shared_memory:
                        raise RuntimeError("ttft: the shared-memory path was not used")
                    times.setdefault("%s/%s" % (codec, path), []).append(t2 - t0)
                    times.setdefault("%s/%s/load" % (codec, path), []).append(t1 - t0)
                    row.setdefault("bytes_moved", {})[codec] = res.bytes
        med = {k: float(np.median(v)) for k, v in times.items()}
        row["seconds"] = med
        row["ratio_to_recompute"] = {k: v / med["recompute"] for k, v in med.items()
                                     if k != "recompute" and not k.endswith("/load")}
        out[str(length)] = row
        env.log("ttft %d: %s" % (length, row))
    return out


def _print_tables(r):
    p = print
    if "roundtrip" in r:
        p("\n== roundtrip (put RAW, get RAW through kvtierd) ==")
        for c, v in r["roundtrip"].items():
            p("  %-9s bit-identical=%s tokens=%d" % (c, v["bit_identical"], v["tokens"]))
    if "sinks" in r:
        p("\n== sinks: attention mass of late queries on the first 1 / 4 tokens ==")
        p("  layer  first1  first4  (uniform first1)")
        for s in r["sinks"]:
            p("  %5d  %6.3f  %6.3f  (%.4f)" % (s["layer"], s["first1"], s["first4"], s["uniform1"]))
    if "outliers" in r:
        p("\n== outliers: per head max/median of per-channel max|x| (min-max over heads) ==")
        p("  layer  K pre-RoPE    K post-RoPE   V")
        for o in r["outliers"]:
            f = lambda xs: "%5.2f-%5.2f" % (min(xs), max(xs))  # noqa: E731
            p("  %5d  %s  %s  %s" % (o["layer"], f(o["k_pre_rope"]), f(o["k_post_rope"]), f(o["v"])))
    if "codecs" in r:
        p("\n== codecs ==")
        p("  codec      bits/val  K relerr  V relerr  attn-out  next-KL    greedy  ppl")
        for c, v in r["codecs"].items():
            p("  %-9s  %8.2f  %8.4f  %8.4f  %8.4f  %9.2e  %6.3f  %.3f" % (
                c, v["bits_per_value"], v["k_rel_err"], v["v_rel_err"], v["attn_out_rel_err"],
                v.get("next_token_kl", float("nan")), v.get("greedy_agreement", float("nan")),
                v.get("perplexity", float("nan"))))
    if "passkey" in r:
        p("\n== passkey retrieval (accuracy; trials per length) ==")
        lengths = list(r["passkey"])
        p("  %-18s" % "variant" + "".join("%10s" % (l + "(%d)" % r["passkey"][l]["trials"])
                                          for l in lengths))
        for v in r["passkey"][lengths[0]]["accuracy"]:
            p("  %-18s" % v + "".join("%10.2f" % r["passkey"][l]["accuracy"][v] for l in lengths))
    if "perplexity" in r:
        pp = r["perplexity"]
        p("\n== perplexity of %d tokens after a %d-token context (compacted by kvtierd) ==" % (
            pp["eval_tokens"], pp["context"]))
        for k, v in pp["perplexity"].items():
            p("  %-18s %8.2f  (%.2fx full)" % (k, v, pp["ratio_to_full"][k]))
    if "ttft" in r:
        p("\n== time to first token (median s; ratio to recompute) ==")
        for length, row in r["ttft"].items():
            p("  prefix %s: recompute %.3f s" % (length, row["seconds"]["recompute"]))
            for k, v in row["ratio_to_recompute"].items():
                p("    %-16s %.3f s  %.3fx  (load %.3f s)" % (
                    k, row["seconds"][k], v, row["seconds"][k + "/load"]))
            p("    bytes moved: %s" % row["bytes_moved"])


@contextlib.contextmanager
def _server(args):
    if args.server:
        yield args.server
        return
    d = tempfile.mkdtemp(prefix="kvtier-eval-model-")
    proc = subprocess.Popen([args.kvtierd, "--port", "0", "--data-dir", d],
                            stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(100):  # its contract: one line "kvtierd listening on HOST:PORT"
            line = proc.stdout.readline()
            if not line or line.startswith("kvtierd listening on "):
                break
        if not line.startswith("kvtierd listening on "):
            raise RuntimeError("kvtierd %s did not start" % args.kvtierd)
        yield line.split()[-1]
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(d, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="kvtier eval model", description=__doc__.split("\n")[0])
    ap.add_argument("--server", default="", help="address of a running kvtierd")
    ap.add_argument("--kvtierd", default=os.environ.get("KVTIER_KVTIERD") or os.path.join(
        os.path.dirname(os.path.abspath(kvtier.__file__)), "..", "..", "service", "kvtierd"),
                    help="kvtierd started on 127.0.0.1:0 without --server (default: the "
                         "build tree's, next to this package in <build>/python)")
    ap.add_argument("--quick", action="store_true", help="the under-10-minute settings")
    ap.add_argument("--json", default="", help="write the results object to this file")
    ap.add_argument("--sections", default="roundtrip,sinks,codecs,passkey,perplexity,ttft")
    ap.add_argument("--passkey-seeds", type=int, default=None,
                    help="trials per depth (5 depths); default 10, --quick 2")
    ap.add_argument("--passkey-lengths", default=None, help="default 1024,2048,4096; --quick 1024")
    ap.add_argument("--passkey-variants", default="",
                    help="comma list of full, codecs, token2, POLICY@25%%/@50%% (default all)")
    ap.add_argument("--passkey-log", action="store_true", help="log every trial's margins")
    ap.add_argument("--passkey-old-prompt", action="store_true",
                    help="the old task: no ' ' after the question, the answer is ' ' + digits "
                         "(shows its first-token near ties)")
    ap.add_argument("--prompts", type=int, default=None,
                    help="codecs: prompts for KL and greedy agreement (0: none); default 20, "
                         "--quick 4")
    ap.add_argument("--gen", type=int, default=None,
                    help="codecs: greedy tokens compared per prompt; default 64, --quick 32")
    ap.add_argument("--codecs", default=",".join(CODECS + [FOIL]),
                    help="codecs section: the codecs compared (default all and the foil)")
    ap.add_argument("--ppl-tokens", type=int, default=None,
                    help="codecs: tokens of the fixed text for perplexity (0 = skip it); "
                         "default 4096, --quick 2048")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = cores)")
    args = ap.parse_args(argv)
    q = args.quick
    args.passkey_seeds = args.passkey_seeds or (2 if q else 10)
    args.passkey_lengths = [int(x) for x in (args.passkey_lengths or
                                             ("1024" if q else "1024,2048,4096")).split(",")]
    args.codecs = [c for c in args.codecs.split(",") if c]
    args.passkey_variants = [v for v in args.passkey_variants.split(",") if v]
    args.codec_context = 1024 if q else 1536
    args.prompts = args.prompts if args.prompts is not None else (4 if q else 20)
    args.ppl_tokens = args.ppl_tokens if args.ppl_tokens is not None else (2048 if q else 4096)
    args.prompt_len = 256 if q else 512
    args.tail = 16
    args.gen = args.gen or (32 if q else 64)
    args.ppl_chunk = 512
    args.ppl_context, args.ppl_eval = 1536, 512
    args.ppl_offsets = [0] if q else [0, 2048, 4096]
    args.ttft_lengths = [512, 1024, 2048]
    args.ttft_codecs = ["fp16", "int8", "kivi2"] if q else ["fp16", "bf16", "int8", "kivi4",
                                                            "kivi2", "lossless"]
    args.ttft_reps = 3 if q else 5
    # A terminated run still stops the kvtierd it started (the finally of _server).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    import torch
    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    sections = args.sections.split(",")
    t_start = time.time()

    def log(msg):
        print("[%6.1fs] %s" % (time.time() - t_start, msg), file=sys.stderr, flush=True)
    results = {"model": os.path.basename(hf.model_path()), "text": TEXT, "quick": q,
               "tokens_per_block": TPB}
    with _server(args) as address:
        env = Env(address, log)
        results["kvtierd"] = address
        results["shared_memory"] = env.client.uses_shared_memory
        log("model loaded; text %d tokens; shared memory %s" % (len(env.text_ids),
                                                               env.client.uses_shared_memory))
        if "roundtrip" in sections:
            results["roundtrip"] = section_roundtrip_exact(env, env.text_ids[:1024])
            log("roundtrip %s" % results["roundtrip"])
        if "sinks" in sections:
            results["sinks"], results["outliers"] = section_sinks_outliers(
                env, env.text_ids[:args.codec_context])
            log("sinks/outliers done")
        for name, fn in (("codecs", section_codecs), ("passkey", section_passkey),
                         ("perplexity", section_perplexity), ("ttft", section_ttft)):
            if name in sections:
                results[name] = fn(env, args)
                log("%s done" % name)
        env.client.close()
        env.tcp.close()
    results["seconds"] = time.time() - t_start
    _print_tables(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


def section_roundtrip_exact(env, ids):
    """fp16 / bf16 / lossless: the blocks read back equal the blocks put, bit for bit."""
    _, cache, _ = env.forward(ids)
    out = {}
    n = len(ids) // TPB
    values = n * TPB * env.L * 2 * env.H * env.D
    for codec in ("fp16", "bf16", "lossless"):
        pc = env.prefix_cache(codec, "rt")
        saved = pc.save(ids, cache)
        blocks, res = pc.load_raw(list(ids) + [0])
        ref = pc.blocks_of(cache, n)
        out[codec] = {"tokens": res.tokens, "bits_per_value": saved.bytes_stored * 8.0 / values,
                      "bit_identical": bool(res.blocks == n and np.array_equal(
                          blocks.view(np.uint16), ref.view(np.uint16)))}
    return out


if __name__ == "__main__":
    sys.exit(main())
