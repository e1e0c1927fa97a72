#include "events/coalesce.h"

#include <iterator>
#include <utility>

namespace kvtier::events {
namespace {

// Whether `next` continues the chain of the stored event `last`.
bool Continues(const BlockEvent& last, const BlockEvent& next) {
  return next.kind == EventKind::kStored && next.ns == last.ns && next.medium == last.medium &&
         next.block_size == last.block_size && next.lora_name == last.lora_name &&
         next.token_ids.empty() == last.token_ids.empty() && next.parent_key.has_value() &&
         !last.keys.empty() && *next.parent_key == last.keys.back();
}

// Appends the blocks of `next` to `into` (Continues(into, next)).
void Append(BlockEvent& into, BlockEvent& next) {
  if (!into.extra_keys.empty() || !next.extra_keys.empty()) {
    into.extra_keys.resize(into.keys.size());
    next.extra_keys.resize(next.keys.size());
    into.extra_keys.insert(into.extra_keys.end(), std::make_move_iterator(next.extra_keys.begin()),
                           std::make_move_iterator(next.extra_keys.end()));
  }
  into.keys.insert(into.keys.end(), std::make_move_iterator(next.keys.begin()),
                   std::make_move_iterator(next.keys.end()));
  into.token_ids.insert(into.token_ids.end(), next.token_ids.begin(), next.token_ids.end());
}

}  // namespace

void CoalesceChains(std::vector<BlockEvent>* events) {
  size_t out = 0;
  for (size_t i = 0; i < events->size(); ++i) {
    BlockEvent& e = (*events)[i];
    if (out > 0 && (*events)[out - 1].kind == EventKind::kStored && Continues((*events)[out - 1], e)) {
      Append((*events)[out - 1], e);
      continue;
    }
    if (out != i) (*events)[out] = std::move(e);
    ++out;
  }
  events->resize(out);
}

}  // namespace kvtier::events
