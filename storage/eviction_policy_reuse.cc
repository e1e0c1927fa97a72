#include "storage/eviction_policy_reuse.h"

namespace kvtier::storage {

void ReuseLruPolicy::OnInsert(BlockId id, const BlockInfo& info) {
  ++resident_blocks_;
  RankedEvictionPolicy::OnInsert(id, info);
}

void ReuseLruPolicy::OnRemove(BlockId id) {
  if (resident_blocks_ > 0) --resident_blocks_;
  RankedEvictionPolicy::OnRemove(id);
}

void ReuseLruPolicy::UpdateRank(State* state, const BlockInfo& info, double /*attention*/,
                                bool is_insert, bool is_access) {
  // Scores do not matter to this policy; only references move a block.
  if (!is_insert && !is_access) return;
  state->rank = Rank{ReuseRank(info.tick, info.hits, resident_blocks_), info.tick};
}

}  // namespace kvtier::storage
