"""kvtier.hf on the real model (SmolLM2-135M, CPU, float32 compute) against real kvtierd
processes: a 256-token prefix saved and reloaded is bit-identical for the exact codecs and
gives the full prefill's greedy tokens; int8 / kivi4 stay within measured agreement; a
kvtierd killed in the middle of a load degrades to recomputation with the same output."""

import numpy as np
import pytest

import kvtier
import kvtier.hf as hf

PREFIX = 256   # tokens saved (16 blocks of 16)
TAIL = 8       # prompt tokens after the prefix, computed on load
GEN = 24       # greedy tokens compared
# Greedy agreement (fraction of the GEN positions equal to the full prefill's) of a prefix
# reloaded through a lossy codec, lowest over the prompts below. Measured with these
# prompts: int8 1.0, 1.0, 1.0, 0.79 (one near tie flips at token 19 of 24 on the last);
# kivi4 1.0, 0.42, 1.0, 0.79 (the second diverges after 10 tokens).
MIN_AGREEMENT = {"int8": 0.75, "kivi4": 0.4}
OFFSETS = (0, 700, 1400, 2100)  # where in the GPL-3 text each prompt starts


_FULL = {}


def _full(model, ids):
    """Greedy tokens and cache of a full prefill of `ids` (memoized: the cache is only read)."""
    if tuple(ids) not in _FULL:
        _FULL[tuple(ids)] = hf.greedy(model, ids, GEN)
    return _FULL[tuple(ids)]


def _agreement(a, b):
    return float(np.mean(np.asarray(a) == np.asarray(b)))


@pytest.mark.parametrize("codec,dtype", [("fp16", "fp16"), ("bf16", "bf16"),
                                         ("lossless", "fp16")])
def test_exact_codecs_are_bit_identical_and_generate_the_same(server, model_and_tokenizer,
                                                              prompt_ids, codec, dtype):
    model, _ = model_and_tokenizer
    ids = prompt_ids[:PREFIX + TAIL]
    want, cache = _full(model, ids)
    with kvtier.Client(server.address) as c:
        pc = hf.PrefixCache.for_model(c, model, "exact-" + codec, codec=codec, dtype=dtype)
        saved = pc.save(ids, cache)
        assert saved.error == ""
        assert (saved.blocks, saved.stored) == (16, 16)
        assert pc.save(ids, cache).stored == 0  # resident already: nothing is put twice
        blocks, res = pc.load_raw(ids)
        assert res.error == "" and res.blocks == 16 and res.tokens == PREFIX
        assert res.shared_memory == c.uses_shared_memory
        stored = pc.blocks_of(cache, 16)
        assert blocks.dtype == stored.dtype
        assert np.array_equal(blocks.view(np.uint16), stored.view(np.uint16))
        loaded = pc.load(ids)
        assert loaded.tokens == PREFIX
        got, _ = hf.greedy(model, ids, GEN, loaded.cache, loaded.tokens)
    assert got == want


@pytest.mark.parametrize("codec", ["int8", "kivi4"])
def test_lossy_codecs_agree_with_full_prefill(server, model_and_tokenizer, prompt_ids, codec):
    model, _ = model_and_tokenizer
    agreements = []
    with kvtier.Client(server.address) as c:
        pc = hf.PrefixCache.for_model(c, model, "lossy-" + codec, codec=codec)
        for off in OFFSETS:
            ids = prompt_ids[off:off + PREFIX + TAIL]
            want, cache = _full(model, ids)
            assert pc.save(ids, cache).stored == 16
            loaded = pc.load(ids)
            assert loaded.tokens == PREFIX, loaded.error
            k_ref = pc.to_torch(pc.blocks_of(cache, 16)).numpy()
            k_got = pc.to_torch(pc.load_raw(ids)[0]).numpy()
            rel = np.linalg.norm(k_got - k_ref) / np.linalg.norm(k_ref)
            assert 0 < rel < (0.02 if codec == "int8" else 0.2), rel  # lossy, but close
            got, _ = hf.greedy(model, ids, GEN, loaded.cache, loaded.tokens)
            agreements.append(_agreement(got, want))
    print("%s greedy agreement per prompt: %s" % (codec, agreements))
    assert min(agreements) >= MIN_AGREEMENT[codec], agreements


def test_server_killed_mid_load_recomputes_the_same(start_server, model_and_tokenizer,
                                                    prompt_ids):
    model, _ = model_and_tokenizer
    ids = prompt_ids[:PREFIX + TAIL]
    want, cache = _full(model, ids)
    srv = start_server()
    with kvtier.Client(srv.address, timeout=3.0, connect_timeout=3.0) as c:
        pc = hf.PrefixCache.for_model(c, model, "killed", codec="fp16")
        assert pc.save(ids, cache).stored == 16
        get = c.get_blocks_into
        killed = []

        def kill_then_get(*a, **kw):  # the leased Lookup answered; the server dies now
            srv.kill()
            killed.append(True)
            return get(*a, **kw)
        c.get_blocks_into = kill_then_get
        res = pc.load(ids)
        assert killed and res.resident_blocks == 16
        assert res.tokens == 0 and res.cache is None and res.error
        got, _ = hf.greedy(model, ids, GEN, res.cache, res.tokens)
        assert got == want
        # Server down from the start: a Lookup that fails is no cached prefix either.
        res = pc.load(ids)
        assert res.tokens == 0 and res.error
        assert pc.save(ids, cache).error  # a failed save is reported, not raised


def test_at_least_one_token_is_computed_and_partial_blocks_are_not_stored(
        server, model_and_tokenizer, prompt_ids):
    model, _ = model_and_tokenizer
    ids = prompt_ids[:PREFIX]  # exactly 16 blocks
    want, cache = _full(model, ids)
    with kvtier.Client(server.address) as c:
        pc = hf.PrefixCache.for_model(c, model, "edges", codec="fp16")
        assert pc.save(ids[:PREFIX - 5], cache).stored == 15  # the partial block is not put
        assert pc.save(ids, cache).stored == 1
        res = pc.load(ids)
        assert res.tokens == PREFIX - 16  # the last block would leave nothing to compute
        got, _ = hf.greedy(model, ids, GEN, res.cache, res.tokens)
        assert got == want
        out = pc.generate(model, ids + [want[0]], max_new_tokens=GEN - 1)
        assert out.cached_tokens == PREFIX and out.tokens == want[1:]


def test_missing_model_names_the_fetch_script(monkeypatch, tmp_path):
    monkeypatch.setenv("KVTIER_MODEL_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="scripts/model.sh"):
        hf.model_path()
