// Per-peer liveness for the cluster fan-out: which peers to call and when to probe a
// dead one. docs/design.md §6 Cluster.
#ifndef KVTIER_SERVICE_PEER_HEALTH_H_
#define KVTIER_SERVICE_PEER_HEALTH_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "service/membership.h"

namespace kvtier::service {

// The call outcomes of each peer, and the decision they drive. Pure bookkeeping: it makes
// no calls itself (PeerFanout does).
//
// A peer is up until `failures_to_unhealthy` consecutive calls to it fail (no answer:
// refused, reset, deadline exceeded), then down. Requests are never sent to a down peer
// (ShouldCall() is false), so it costs the survivors' calls nothing: no connect attempt,
// no deadline wait. Instead the caller sends one cheap probe when TakeProbe() allows it,
// at most one in flight and at most one per `probe_interval_ms`, and reports it with
// FinishProbe(); the first answer (probe or any other call) makes the peer up again.
// Unknown peers are up. Time comes from `clock` (a FakeClock in tests).
//
// Thread-safe.
class PeerHealth {
 public:
  // `clock` is not owned and must outlive this object. failures_to_unhealthy < 1 counts
  // as 1.
  explicit PeerHealth(common::Clock* clock, int failures_to_unhealthy = 3,
                      int64_t probe_interval_ms = 1000);

  // Records that `id` answered a call (any answer, an error status included).
  void RecordSuccess(const std::string& id);
  // Records that a call to `id` got no answer. The failure that reaches
  // failures_to_unhealthy makes the peer down, with its first probe due
  // probe_interval_ms later.
  void RecordFailure(const std::string& id);

  // Returns false for a down peer.
  bool IsHealthy(const std::string& id) const;
  // Returns true if requests should be sent to `id` now, i.e. it is not down.
  bool ShouldCall(const std::string& id) const { return IsHealthy(id); }

  // Returns true if the caller should probe `id` now: it is down, no probe is in flight
  // and the last probe (or the detection) was probe_interval_ms ago or more. A true
  // result takes the probe slot; the caller must then send the probe and call
  // FinishProbe(id, ...) exactly once.
  bool TakeProbe(const std::string& id);
  // Reports the probe taken by TakeProbe(): `answered` makes the peer up; otherwise the
  // next probe is due probe_interval_ms from now. No-op for a peer Retain() dropped.
  void FinishProbe(const std::string& id, bool answered);

  // Returns ms since the last answer from `id`, or -1 if never.
  int64_t LastSeenMsAgo(const std::string& id) const;
  // Forgets peers that are no longer members.
  void Retain(const std::vector<Peer>& members);

 private:
  struct State {
    int consecutive_failures = 0;
    int64_t last_success_ms = -1;
    int64_t next_probe_ms = 0;
    bool probe_in_flight = false;
  };
  bool IsDown(const State& s) const { return s.consecutive_failures >= failures_to_unhealthy_; }
  void MarkAnswered(State& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  common::Clock* const clock_;
  const int failures_to_unhealthy_;
  const int64_t probe_interval_ms_;
  mutable common::Mutex mu_;
  std::map<std::string, State> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_PEER_HEALTH_H_
