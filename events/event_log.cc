#include "events/event_log.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"

namespace kvtier::events {

EventLog::EventLog(size_t capacity, EventSink* next)
    : capacity_(std::max<size_t>(capacity, 1)), next_(next) {}

void EventLog::Publish(BlockEvent event) {
  {
    common::MutexLock lock(&mu_);
    if (event.kind == EventKind::kAllCleared) {
      resident_.erase(event.ns);
    } else {
      const uint8_t bit = event.medium == Medium::kCpuPinned ? 1 : 2;
      auto& keys = resident_[event.ns];
      for (const std::string& key : event.keys) {
        if (event.kind == EventKind::kStored) {
          keys[key] |= bit;
        } else if (auto it = keys.find(key); it != keys.end()) {
          it->second &= static_cast<uint8_t>(~bit);
          if (it->second == 0) keys.erase(it);
        }
      }
      if (keys.empty()) resident_.erase(event.ns);
    }
    if (next_ == nullptr) {
      entries_.push_back({next_seq_++, std::move(event)});
    } else {
      entries_.push_back({next_seq_++, event});
    }
    if (entries_.size() > capacity_) entries_.pop_front();
    cv_.SignalAll();
  }
  // The store calls Publish under the lock that orders its tier changes, so the next
  // sink sees the same order without our lock.
  if (next_ != nullptr) next_->Publish(std::move(event));
}

absl::StatusOr<std::vector<EventLog::Entry>> EventLog::Read(uint64_t from, size_t max,
                                                            absl::Time deadline) const {
  common::MutexLock lock(&mu_);
  while (!closed_ && next_seq_ <= from) {
    if (cv_.WaitWithDeadline(&mu_, deadline)) break;
  }
  std::vector<Entry> out;
  if (entries_.empty() || next_seq_ <= from) return out;
  const uint64_t oldest = entries_.front().seq;
  if (from < oldest) {
    return absl::OutOfRangeError(absl::StrCat("from_seq ", from, " is no longer retained (oldest ",
                                              oldest, "): re-sync from EventsSnapshot"));
  }
  for (size_t i = from - oldest; i < entries_.size() && out.size() < max; ++i) {
    out.push_back(entries_[i]);
  }
  return out;
}

uint64_t EventLog::Snapshot(std::string_view ns, std::vector<Resident>* out) const {
  common::MutexLock lock(&mu_);
  const size_t first = out->size();
  for (const auto& [name, keys] : resident_) {
    if (!ns.empty() && name != ns) continue;
    for (const auto& [key, bits] : keys) {
      out->push_back({name, key, (bits & 1) != 0, (bits & 2) != 0});
    }
  }
  std::sort(out->begin() + static_cast<std::ptrdiff_t>(first), out->end(),
            [](const Resident& a, const Resident& b) {
              return a.ns != b.ns ? a.ns < b.ns : a.key < b.key;
            });
  return next_seq_;
}

uint64_t EventLog::next_seq() const {
  common::MutexLock lock(&mu_);
  return next_seq_;
}

void EventLog::Close() {
  common::MutexLock lock(&mu_);
  closed_ = true;
  cv_.SignalAll();
}

}  // namespace kvtier::events
