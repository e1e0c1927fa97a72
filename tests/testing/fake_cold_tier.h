// FakeColdTier: an in-memory storage::ColdTier with injectable faults, for TieredStore
// tests (on the model of leveldb's helpers/memenv and db/fault_injection_test.cc). It
// keeps the ColdTier contract (cold_tier.h): records are written atomically, every read
// verifies storage::PayloadChecksum and answers DATA_LOSS on a mismatch.
//
// Faults:
//  - FailWrites(status): every PutBlock returns `status` and stores nothing, until
//    FailWrites(absl::OkStatus()).
//  - CorruptValue(ns, key): flips bytes of a stored payload (not its checksum), so the
//    next read of it fails verification.
//  - BlockReads(): GetBlock waits until ReleaseReads() (or until the given duration has
//    passed); WaitForBlockedReads(n) returns once n reads are waiting.
//
// The stored records live in a Disk that may be shared with a later FakeColdTier, so a
// test can "restart" a store over the same contents.
//
// Thread-safe.
#ifndef KVTIER_TESTS_TESTING_FAKE_COLD_TIER_H_
#define KVTIER_TESTS_TESTING_FAKE_COLD_TIER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "storage/cold_tier.h"

namespace kvtier::testing {

class FakeColdTier final : public storage::ColdTier {
 public:
  // The stored contents, guarded by `mu`.
  struct Disk {
    struct Block {
      storage::ColdIndexRecord record;
      std::string payload;
    };
    common::Mutex mu;
    std::map<std::pair<uint32_t, std::string>, Block> blocks ABSL_GUARDED_BY(mu);
    std::map<uint32_t, std::string> namespaces ABSL_GUARDED_BY(mu);
  };

  explicit FakeColdTier(std::shared_ptr<Disk> disk = std::make_shared<Disk>())
      : disk_(std::move(disk)) {}

  // The contents, to build a later FakeColdTier over them.
  const std::shared_ptr<Disk>& disk() const { return disk_; }

  // Faults (see the file comment).
  void FailWrites(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // Returns false if the block is not stored.
  bool CorruptValue(uint32_t ns_id, std::string_view key);
  void BlockReads(absl::Duration at_most = absl::InfiniteDuration()) ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseReads() ABSL_LOCKS_EXCLUDED(mu_);
  void WaitForBlockedReads(int n) ABSL_LOCKS_EXCLUDED(mu_);

  // Inspection.
  bool Contains(uint32_t ns_id, std::string_view key) const;
  size_t num_blocks() const;
  int64_t failed_writes() const ABSL_LOCKS_EXCLUDED(mu_);

  // storage::ColdTier. `compress` is ignored (stored_bytes == payload bytes).
  absl::StatusOr<uint32_t> PutBlock(storage::ColdIndexRecord record,
                                    std::span<const uint8_t> payload, uint64_t checksum,
                                    bool compress) override;
  absl::Status GetBlock(uint32_t ns_id, std::string_view key, const PayloadSink& sink) override;
  absl::Status DeleteBlock(uint32_t ns_id, std::string_view key) override;
  absl::Status PutNamespace(uint32_t ns_id, std::string_view spec) override;
  absl::Status DeleteNamespace(uint32_t ns_id) override;
  absl::Status ForEachNamespace(
      const std::function<void(uint32_t ns_id, std::string_view spec)>& fn) override;
  absl::Status ForEachBlock(
      const std::function<void(const storage::ColdIndexRecord&)>& fn) override;
  absl::Status Sync() override { return absl::OkStatus(); }

 private:
  const std::shared_ptr<Disk> disk_;

  mutable common::Mutex mu_;
  absl::Status write_failure_ ABSL_GUARDED_BY(mu_);
  int64_t failed_writes_ ABSL_GUARDED_BY(mu_) = 0;
  bool reads_blocked_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration block_for_ ABSL_GUARDED_BY(mu_) = absl::InfiniteDuration();
  int blocked_reads_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_FAKE_COLD_TIER_H_
