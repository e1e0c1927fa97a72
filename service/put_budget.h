// The Put budget shared fairly across tenants (docs/design.md §5 Service, admission and
// limits): ServiceLimits::put_budget_bytes bounds the payload bytes all Put streams may
// buffer at once, and while more than one tenant has a Put stream open, no tenant may
// hold more than budget / (tenants with a Put stream open). A tenant alone may use all
// of it. Payload is charged as it arrives, so streams that stall hold none of it.
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
  // `budget`. RESOURCE_EXHAUSTED "server busy: ..." (charging nothing) when the buffered
  // bytes of all streams would exceed `budget`, or the tenant's would exceed its share
  // while other tenants have streams open.
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
