"""vLLM's KV-event wire format, written from its published schema
(vllm/distributed/kv_events.py: KVEventBatch, BlockStored, BlockRemoved, AllBlocksCleared)
with Debian's python3-msgpack only; it shares no code with kvtier. The two independent
consumers (kv_events_consumer.py against the events library, kvtierd_events_consumer.py
against a real kvtierd) decode with it.
"""
import sys

import msgpack

# Declaration order of each event's fields (the order of the positional array form).
FIELDS = {
    "BlockStored": ["block_hashes", "parent_block_hash", "token_ids", "block_size",
                    "lora_id", "medium", "lora_name", "extra_keys", "group_idx",
                    "kv_cache_spec_kind", "kv_cache_spec_sliding_window"],
    "BlockRemoved": ["block_hashes", "medium", "group_idx"],
    "AllBlocksCleared": [],
}
BATCH_FIELDS = ["ts", "events", "data_parallel_rank"]
END_SEQ = -1  # the replay protocol's end marker


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def decode_batch(payload, form):
    """Returns (batch dict, [event dict with 'type']) for a payload in the expected form
    ("map" or "array"), checking field names, their order, hashes and media."""
    obj = msgpack.unpackb(payload, raw=False)
    if form == "map":
        check(isinstance(obj, dict) and list(obj.keys()) == BATCH_FIELDS, "map batch %r" % obj)
        batch = obj
    else:
        check(isinstance(obj, list) and len(obj) == 3, "array form: [ts, events, dp_rank]")
        batch = dict(zip(BATCH_FIELDS, obj))
    check(isinstance(batch["ts"], float), "ts is a float")
    events = []
    for raw in batch["events"]:
        if form == "map":
            check(isinstance(raw, dict), "map form: an event is a map")
            tag = raw["type"]
            check(list(raw.keys()) == ["type"] + FIELDS[tag], "%s fields %r" % (tag, list(raw)))
            ev = dict(raw)
        else:
            check(isinstance(raw, list), "array form: an event is an array")
            tag = raw[0]
            check(len(raw) == 1 + len(FIELDS[tag]), "%s has %d fields" % (tag, len(raw) - 1))
            ev = dict(zip(FIELDS[tag], raw[1:]))
            ev["type"] = tag
        if tag in ("BlockStored", "BlockRemoved"):
            check(all(isinstance(h, bytes) for h in ev["block_hashes"]), "hashes are bytes")
            check(ev["medium"] in ("CPU", "DISK"), "medium %r" % ev["medium"])
        events.append(ev)
    return batch, events
