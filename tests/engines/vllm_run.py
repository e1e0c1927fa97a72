"""One vLLM engine process for tests/engines/test_vllm.py: serves the SmolLM2 folder on CPU
(fp16, greedy), with kvtier's connector when --kvtier names a kvtierd, answers one chat
prompt twice and writes a JSON report:

  first (max_tokens=1): wall seconds (time to first token), num_cached_tokens, prompt tokens
  full  (max_tokens=--max-tokens): the greedy text and token ids

The kv_transfer_config is the one line of docs/engines.md. vLLM starts engine-core and worker
processes, hence the __main__ guard; the connector module is found through PYTHONPATH.
"""

import argparse
import json
import os
import sys
import time

PROMPT = (
    "Read these notes about Paris, then answer the question at the end.\n"
    "Paris is the capital and largest city of France. It sits on the Seine river in the north "
    "of the country, in the Ile-de-France region. The city is divided into twenty districts "
    "called arrondissements, which spiral outward from the centre like a snail shell. The Louvre, "
    "once a royal palace, is now the world's most visited art museum and holds the Mona Lisa. "
    "The Eiffel Tower was built by Gustave Eiffel's company for the 1889 World's Fair and was at "
    "first criticised by many artists; it is now the symbol of the city. Notre-Dame cathedral, "
    "on the Ile de la Cite, was badly damaged by a fire in 2019 and reopened in December 2024 "
    "after a long restoration. The Paris Metro opened in 1900 and today has sixteen lines; it is "
    "the most common way to cross the city, together with buses, trams and bicycles. Montmartre, "
    "a hill in the north, is known for the white basilica of the Sacre-Coeur and for the painters "
    "who lived there, such as Picasso and Modigliani. The Latin Quarter on the left bank is home "
    "to the Sorbonne university, founded in the thirteenth century. The Champs-Elysees runs from "
    "the Place de la Concorde to the Arc de Triomphe, which Napoleon ordered after the battle of "
    "Austerlitz. Paris hosted the Summer Olympic Games in 1900, 1924 and 2024. The city is also "
    "famous for its cafes, bakeries and markets, and for fashion houses whose shows take place "
    "twice a year. About two million people live in the city itself and more than twelve million "
    "in the whole metropolitan area.\n"
    "Question: according to the notes, what is the most common way to cross the city?")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--kvtier", default="", help="kvtierd host:port; empty: no connector")
    p.add_argument("--out", required=True)
    p.add_argument("--max-tokens", type=int, default=24)
    args = p.parse_args()
    from vllm import LLM, SamplingParams
    kw = {}
    if args.kvtier:
        kw["kv_transfer_config"] = {
            "kv_connector": "KvtierConnector",
            "kv_connector_module_path": "kvtier.engines.vllm_connector",
            "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": {"kvtier_address": args.kvtier}}
    t0 = time.perf_counter()
    llm = LLM(model=args.model, tokenizer=args.model, max_model_len=2048, enforce_eager=True,
              dtype="float16", seed=0, **kw)
    started = time.perf_counter() - t0
    msgs = [{"role": "user", "content": PROMPT}]
    t1 = time.perf_counter()
    first = llm.chat(msgs, SamplingParams(temperature=0.0, max_tokens=1), use_tqdm=False)[0]
    ttft = time.perf_counter() - t1
    full = llm.chat(msgs, SamplingParams(temperature=0.0, max_tokens=args.max_tokens),
                    use_tqdm=False)[0]
    report = {"engine_start_s": started, "ttft_s": ttft,
              "prompt_tokens": len(first.prompt_token_ids),
              "first_cached_tokens": first.num_cached_tokens or 0,
              "first_token": list(first.outputs[0].token_ids),
              "text": full.outputs[0].text, "token_ids": list(full.outputs[0].token_ids)}
    with open(args.out, "w") as f:
        json.dump(report, f)
    print(json.dumps(report), flush=True)
    # Ends the engine (and the worker's connector, which finishes its queued Puts first).
    llm.llm_engine.engine_core.shutdown()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    sys.exit(main())
