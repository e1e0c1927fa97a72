// FakeResolver: a service::Resolver scripted by the test (a name -> IPs table, IP ->
// reverse names, the local IPs, an injected failure) that counts Resolve() calls.
// Header-only: include it only from tests that link kvtier_service. Thread-safe.
#ifndef KVTIER_TESTS_TESTING_FAKE_RESOLVER_H_
#define KVTIER_TESTS_TESTING_FAKE_RESOLVER_H_

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "service/membership.h"

namespace kvtier::testing {

class FakeResolver final : public service::Resolver {
 public:
  absl::StatusOr<std::vector<std::string>> Resolve(const std::string& host) override {
    common::MutexLock lock(&mu_);
    ++resolves_;
    if (!fail_.ok()) return fail_;
    auto it = names_.find(host);
    if (it == names_.end()) return absl::NotFoundError(host);
    return it->second;
  }
  absl::StatusOr<std::string> ReverseLookup(const std::string& ip) override {
    common::MutexLock lock(&mu_);
    auto it = reverse_.find(ip);
    if (it == reverse_.end()) return absl::NotFoundError(ip);
    return it->second;
  }
  bool IsLocalAddress(const std::string& ip) override {
    common::MutexLock lock(&mu_);
    return local_.count(ip) != 0;
  }

  void Set(const std::string& host, std::vector<std::string> ips) {
    common::MutexLock lock(&mu_);
    names_[host] = std::move(ips);
  }
  void SetReverse(const std::string& ip, const std::string& name) {
    common::MutexLock lock(&mu_);
    reverse_[ip] = name;
  }
  void AddLocal(const std::string& ip) {
    common::MutexLock lock(&mu_);
    local_.insert(ip);
  }
  void Fail(absl::Status s) {
    common::MutexLock lock(&mu_);
    fail_ = std::move(s);
  }
  // Blocks until Resolve() has been called at least n times (or 10 s passed).
  bool AwaitResolves(int n) {
    common::MutexLock lock(&mu_);
    want_ = n;
    return mu_.AwaitWithTimeout(common::Condition(this, &FakeResolver::Reached), absl::Seconds(10));
  }

 private:
  common::Mutex mu_;
  std::map<std::string, std::vector<std::string>> names_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> reverse_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> local_ ABSL_GUARDED_BY(mu_);
  absl::Status fail_ ABSL_GUARDED_BY(mu_);
  int resolves_ ABSL_GUARDED_BY(mu_) = 0;
  int want_ ABSL_GUARDED_BY(mu_) = 0;
  bool Reached() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return resolves_ >= want_; }
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_FAKE_RESOLVER_H_
