#include "service/peer_health.h"

#include <algorithm>
#include <iterator>
#include <set>
#include "common/mutex.h"

namespace kvtier::service {

PeerHealth::PeerHealth(common::Clock* clock, int failures_to_unhealthy, int64_t probe_interval_ms)
    : clock_(clock),
      failures_to_unhealthy_(std::max(1, failures_to_unhealthy)),
      probe_interval_ms_(probe_interval_ms) {}

void PeerHealth::MarkAnswered(State& s) {
  s.consecutive_failures = 0;
  s.last_success_ms = clock_->NowMillis();
}

void PeerHealth::RecordSuccess(const std::string& id) {
  common::MutexLock lock(&mu_);
  MarkAnswered(peers_[id]);
}

void PeerHealth::RecordFailure(const std::string& id) {
  common::MutexLock lock(&mu_);
  State& s = peers_[id];
  const bool was_down = IsDown(s);
  ++s.consecutive_failures;
  if (!was_down && IsDown(s)) s.next_probe_ms = clock_->NowMillis() + probe_interval_ms_;
}

bool PeerHealth::IsHealthy(const std::string& id) const {
  common::MutexLock lock(&mu_);
  auto it = peers_.find(id);
  return it == peers_.end() || !IsDown(it->second);
}

bool PeerHealth::TakeProbe(const std::string& id) {
  common::MutexLock lock(&mu_);
  auto it = peers_.find(id);
  if (it == peers_.end() || !IsDown(it->second) || it->second.probe_in_flight) return false;
  if (clock_->NowMillis() < it->second.next_probe_ms) return false;
  it->second.probe_in_flight = true;
  return true;
}

void PeerHealth::FinishProbe(const std::string& id, bool answered) {
  common::MutexLock lock(&mu_);
  auto it = peers_.find(id);
  if (it == peers_.end()) return;
  State& s = it->second;
  s.probe_in_flight = false;
  if (answered) {
    MarkAnswered(s);
  } else {
    s.next_probe_ms = clock_->NowMillis() + probe_interval_ms_;
  }
}

int64_t PeerHealth::LastSeenMsAgo(const std::string& id) const {
  common::MutexLock lock(&mu_);
  auto it = peers_.find(id);
  if (it == peers_.end() || it->second.last_success_ms < 0) return -1;
  return clock_->NowMillis() - it->second.last_success_ms;
}

void PeerHealth::Retain(const std::vector<Peer>& members) {
  std::set<std::string> ids;
  for (const Peer& p : members) ids.insert(p.id);
  common::MutexLock lock(&mu_);
  for (auto it = peers_.begin(); it != peers_.end();) {
    it = ids.count(it->first) != 0 ? std::next(it) : peers_.erase(it);
  }
}

}  // namespace kvtier::service
