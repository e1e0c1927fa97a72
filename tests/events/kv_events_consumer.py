#!/usr/bin/python3
"""An independent KV-event consumer, written from vLLM's published schema
(vllm/distributed/kv_events.py: KVEventBatch, BlockStored, BlockRemoved, AllBlocksCleared)
and its replay protocol, using only Debian's python3-zmq and python3-msgpack. It shares no
code with kvtier.

    kv_events_consumer.py <events_driver binary> map|array

It subscribes to the driver's PUB socket, applies the events of a seeded workload to an
index of (model, block hash) -> media, detects sequence gaps (one is provoked by ignoring
a live batch) and heals them through the replay socket, and checks that its index equals
the resident set the driver reports. Then it asks for a sequence older than the replay
buffer and checks that it can tell it must re-sync. Exit status 0 on success.
"""
import subprocess
import sys

import zmq

import vllm_kv_events
from vllm_kv_events import END_SEQ, check, fail

TIMEOUT_MS = 10000


def decode_batch(payload, form):
    """Returns (ts, [event dict with 'type'], dp_rank), accepting only the expected form."""
    batch, events = vllm_kv_events.decode_batch(payload, form)
    for ev in events:
        if ev["type"] == "BlockStored":
            check(ev["block_size"] == 16, "block_size 16")
            check(len(ev["token_ids"]) == 16 * len(ev["block_hashes"]), "16 tokens per block")
            check(ev["parent_block_hash"] is None, "a chain's first block has no parent")
            check(ev["lora_name"] in (None, "adapter-1"), "lora_name %r" % ev["lora_name"])
    return batch["ts"], events, batch["data_parallel_rank"]


class Consumer:
    def __init__(self, ctx, pub_ep, replay_ep, form):
        self.form = form
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"kv@node-py@")
        self.sub.connect(pub_ep)
        self.replay = ctx.socket(zmq.DEALER)
        self.replay.setsockopt(zmq.LINGER, 0)
        self.replay.connect(replay_ep)
        self.index = {}  # (model, hash) -> set of media
        self.next_seq = None  # next sequence number to apply
        self.gaps = 0

    def recv_live(self, timeout_ms):
        if not self.sub.poll(timeout_ms):
            return None
        frames = self.sub.recv_multipart()
        check(len(frames) == 3, "three frames per message")
        topic, seq, payload = frames
        check(len(seq) == 8, "8-byte sequence")
        return topic.decode(), int.from_bytes(seq, "big"), payload

    def request_replay(self, start, with_topic=True):
        """vLLM's replay protocol; with_topic adds kvtier's topic frame to each answer."""
        parts = [b"", start.to_bytes(8, "big")] + ([b"topic"] if with_topic else [])
        self.replay.send_multipart(parts)
        out = []
        while True:
            check(self.replay.poll(TIMEOUT_MS), "replay answers")
            frames = self.replay.recv_multipart()
            check(frames[0] == b"", "delimiter kept")
            check(len(frames) == (4 if with_topic else 3), "replay frame count")
            seq = int.from_bytes(frames[1], "big", signed=True)
            if seq == END_SEQ:
                check(frames[2] == b"", "end marker has an empty payload")
                return out
            out.append((seq, frames[2], frames[3].decode() if with_topic else None))

    def apply(self, topic, seq, payload):
        if seq < self.next_seq:
            return  # already applied (live copy of a replayed batch)
        check(seq == self.next_seq, "apply in order")
        parts = topic.split("@")
        check(len(parts) == 3 and parts[0] == "kv" and parts[1] == "node-py", topic)
        model = parts[2]
        _, events, _ = decode_batch(payload, self.form)
        for ev in events:
            if ev["type"] == "BlockStored":
                for h in ev["block_hashes"]:
                    self.index.setdefault((model, h), set()).add(ev["medium"])
            elif ev["type"] == "BlockRemoved":
                for h in ev["block_hashes"]:
                    media = self.index.get((model, h), set())
                    check(ev["medium"] in media, "removed from a medium it was in")
                    media.discard(ev["medium"])
                    if not media:
                        del self.index[(model, h)]
            else:
                self.index = {k: v for k, v in self.index.items() if k[0] != model}
        self.next_seq = seq + 1

    def heal(self, upto):
        """Fills next_seq..upto from the replay socket."""
        self.gaps += 1
        answers = self.request_replay(self.next_seq)
        if not answers or answers[0][0] > self.next_seq:
            fail("seq %d is no longer replayable: re-sync needed" % self.next_seq)
        for seq, payload, topic in answers:
            if seq <= upto:
                self.apply(topic, seq, payload)

    def consume(self, last, drop_seq):
        """Applies every batch through `last`, ignoring the live copy of drop_seq."""
        while self.next_seq <= last:
            got = self.recv_live(200)
            if got is None:  # nothing more live: the rest comes from replay
                self.heal(last)
                continue
            topic, seq, payload = got
            if seq == drop_seq:
                continue  # provoked loss
            if seq > self.next_seq:
                self.heal(seq - 1)  # a gap: missed next_seq..seq-1
            self.apply(topic, seq, payload)


def main():
    driver, form = sys.argv[1], sys.argv[2]
    proc = subprocess.Popen([driver, form], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)

    def command(line):
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
        return proc.stdout.readline().split()

    try:
        pub_ep = proc.stdout.readline().split()[1]
        replay_ep = proc.stdout.readline().split()[1]
        ctx = zmq.Context()
        c = Consumer(ctx, pub_ep, replay_ep, form)
        # ZMQ gives no signal when the subscription has arrived: warm up until a batch does.
        for _ in range(500):
            command("warmup")
            got = c.recv_live(20)
            if got is not None:
                c.next_seq = got[1] + 1
                break
        check(c.next_seq is not None, "the subscriber never received a warm-up batch")
        while True:  # drain the other warm-ups
            got = c.recv_live(50)
            if got is None:
                break
            c.next_seq = got[1] + 1

        done = command("script")
        check(done[0] == "done", "script: %r" % done)
        first, last = int(done[1]), int(done[2])
        check(first >= c.next_seq, "script starts after the warm-ups")
        c.next_seq = first
        expected = {}
        while True:
            line = proc.stdout.readline().split()
            if line == ["end"]:
                break
            check(line[0] == "expect", "expect line %r" % line)
            expected[(line[1], bytes.fromhex(line[2]))] = set(line[3].split(","))
        c.consume(last, drop_seq=first + 3)
        check(c.gaps >= 1, "the provoked gap was detected")
        check(c.index == expected,
              "index differs: %d vs %d entries; missing %r; extra %r" % (
                  len(c.index), len(expected), sorted(set(expected) - set(c.index))[:3],
                  sorted(set(c.index) - set(expected))[:3]))
        check(len(expected) > 0, "the workload leaves blocks resident")

        # vLLM's exact protocol (no topic frame) answers the same sequence numbers.
        plain = c.request_replay(last - 1, with_topic=False)
        check([s for s, _, _ in plain] == [last - 1, last], "plain replay %r" % plain[:3])

        # Older than the buffer: the first answer is newer than asked, so re-sync.
        flood = command("flood 300")
        check(flood[0] == "done", "flood: %r" % flood)
        answers = c.request_replay(first)
        check(answers and answers[0][0] > first, "a too-old request is recognizable")
        print("PASS %s: %d batches, %d resident blocks, %d gap(s) healed" % (
            form, last - first + 1, len(expected), c.gaps))
    finally:
        try:
            proc.stdin.write("quit\n")
            proc.stdin.flush()
        except BrokenPipeError:
            pass
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
