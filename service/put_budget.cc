#include "service/put_budget.h"

#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace kvtier::service {

void PutBudget::OpenStream(std::string_view tenant) {
  common::MutexLock lock(&mu_);
  tenants_[std::string(tenant)].streams++;
}

absl::Status PutBudget::Charge(std::string_view tenant, uint64_t bytes, uint64_t budget) {
  common::MutexLock lock(&mu_);
  Use& use = tenants_[std::string(tenant)];
  const size_t putting = tenants_.size();
  const uint64_t share = budget / putting;
  if (putting > 1 && use.bytes + bytes > share) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "server busy: tenant '", Sv(tenant), "' has ", use.bytes,
        " payload bytes of puts buffered; this put's next ", bytes, " would exceed its share (",
        share, ") of put_budget_bytes (", budget, ") while ", putting, " tenants are putting"));
  }
  // Within its share while others put, a tenant is admitted even over a full budget: the
  // tenant that filled it alone cannot lock the others out.
  if (putting == 1 && bytes_ + bytes > budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "server busy: ", bytes_, " payload bytes of puts are buffered; this put's next ", bytes,
        " would exceed put_budget_bytes (", budget, ")"));
  }
  use.bytes += bytes;
  bytes_ += bytes;
  return absl::OkStatus();
}

void PutBudget::CloseStream(std::string_view tenant, uint64_t charged) {
  common::MutexLock lock(&mu_);
  auto it = tenants_.find(std::string(tenant));
  if (it == tenants_.end()) return;
  it->second.bytes -= charged;
  bytes_ -= charged;
  if (--it->second.streams == 0) tenants_.erase(it);
}

uint64_t PutBudget::bytes_in_flight() const {
  common::MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace kvtier::service
