// Coalescing of consecutive BlockStored events into one per chain, as vLLM publishes
// them: a Put of N blocks of one chain is reported by the store one block at a time, and
// one BlockStored with N block_hashes (parent_block_hash the parent of the first) is what
// routers receive from engines. Pure function; thread-compatible.
#ifndef KVTIER_EVENTS_COALESCE_H_
#define KVTIER_EVENTS_COALESCE_H_

#include <vector>

#include "events/block_event.h"

namespace kvtier::events {

// Merges, in place, each run of consecutive kStored events of `events` that continue one
// chain: same namespace, medium, block size and LoRA name, each event's parent_key the
// previous event's last key, and token ids either sent for both or for neither. The
// merged event has the keys, token ids (concatenated) and extra keys (one entry per key,
// empty for blocks without any) of the run, in order. Every other event, and the order of
// all events, is unchanged, so a consumer applying the result in order reaches the same
// state as with the input.
void CoalesceChains(std::vector<BlockEvent>* events);

}  // namespace kvtier::events

#endif  // KVTIER_EVENTS_COALESCE_H_
