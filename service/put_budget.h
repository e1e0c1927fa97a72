// The Put budget shared fairly across tenants (docs/design.md §5 Service, admission and
// limits): ServiceLimits::put_budget_bytes bounds the payload bytes Put streams may
// buffer at once. A tenant putting alone may use all of it; while K > 1 tenants have a
// Put stream open, each may hold at most budget / K, and one under that share is admitted
// even when the budget is full (a tenant that filled it alone, e.g. with stalled streams,
// cannot lock the others out). So the streams hold at most 2 * budget in all, and exactly
// the old single bound when one tenant (or, without authentication, everyone as one)
// puts. Payload is charged as it arrives, so streams that stall before sending hold none.
//
// Thread-safe.
#ifndef KVTIER_SERVICE_PUT_BUDGET_H_
#define KVTIER_SERVICE_PUT_BUDGET_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/mutex.h"

namespace kvtier::service {

class PutBudget {
 public:
  // A Put stream of `tenant` started (its tenant now competes for a share).
  void OpenStream(std::string_view tenant);
  // Charges `bytes` just received by a stream of `tenant` (OpenStream first) against
  // `budget`. RESOURCE_EXHAUSTED "server busy: ..." (charging nothing) when the tenant
  // puts alone and the buffered bytes would exceed `budget`, or when others put too and
  // its bytes would exceed its share.
  absl::Status Charge(std::string_view tenant, uint64_t bytes, uint64_t budget);
  // The stream ended: gives back the `charged` bytes it was charged and ends it.
  void CloseStream(std::string_view tenant, uint64_t charged);

  // Payload bytes charged now (all tenants).
  uint64_t bytes_in_flight() const;

 private:
  struct Use {
    uint32_t streams = 0;
    uint64_t bytes = 0;
  };
  mutable common::Mutex mu_;
  absl::flat_hash_map<std::string, Use> tenants_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_PUT_BUDGET_H_
