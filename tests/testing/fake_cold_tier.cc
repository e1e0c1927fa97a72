#include "tests/testing/fake_cold_tier.h"

#include <vector>

#include "common/mutex.h"
#include "storage/checksum.h"

namespace kvtier::testing {

void FakeColdTier::FailWrites(absl::Status status) {
  common::MutexLock lock(&mu_);
  write_failure_ = std::move(status);
}

bool FakeColdTier::CorruptValue(uint32_t ns_id, std::string_view key) {
  common::MutexLock lock(&disk_->mu);
  auto it = disk_->blocks.find({ns_id, std::string(key)});
  if (it == disk_->blocks.end() || it->second.payload.empty()) return false;
  std::string& p = it->second.payload;
  p[p.size() / 2] ^= 0x5a;
  p[p.size() - 1] ^= 0x01;
  return true;
}

void FakeColdTier::BlockReads(absl::Duration at_most) {
  common::MutexLock lock(&mu_);
  reads_blocked_ = true;
  block_for_ = at_most;
}

void FakeColdTier::ReleaseReads() {
  common::MutexLock lock(&mu_);
  reads_blocked_ = false;
}

void FakeColdTier::WaitForBlockedReads(int n) {
  common::MutexLock lock(&mu_);
  struct AtLeast {
    const int* count;
    int n;
    bool Done() const { return *count >= n; }
  } arg{&blocked_reads_, n};
  mu_.Await(common::Condition(&arg, &AtLeast::Done));
}

bool FakeColdTier::Contains(uint32_t ns_id, std::string_view key) const {
  common::MutexLock lock(&disk_->mu);
  return disk_->blocks.contains({ns_id, std::string(key)});
}

size_t FakeColdTier::num_blocks() const {
  common::MutexLock lock(&disk_->mu);
  return disk_->blocks.size();
}

int64_t FakeColdTier::failed_writes() const {
  common::MutexLock lock(&mu_);
  return failed_writes_;
}

absl::StatusOr<uint32_t> FakeColdTier::PutBlock(storage::ColdIndexRecord record,
                                                std::span<const uint8_t> payload, uint64_t checksum,
                                                bool /*compress*/) {
  {
    common::MutexLock lock(&mu_);
    if (!write_failure_.ok()) {
      ++failed_writes_;
      return write_failure_;
    }
  }
  record.payload_bytes = static_cast<uint32_t>(payload.size());
  record.stored_bytes = record.payload_bytes;
  record.checksum = checksum;
  common::MutexLock lock(&disk_->mu);
  Disk::Block& b = disk_->blocks[{record.ns_id, record.key}];
  b.record = std::move(record);
  b.payload.assign(reinterpret_cast<const char*>(payload.data()), payload.size());
  return b.record.stored_bytes;
}

absl::Status FakeColdTier::GetBlock(uint32_t ns_id, std::string_view key, const PayloadSink& sink) {
  {
    common::MutexLock lock(&mu_);
    if (reads_blocked_) {
      ++blocked_reads_;
      mu_.AwaitWithTimeout(common::Condition(
                               +[](bool* blocked) { return !*blocked; }, &reads_blocked_),
                           block_for_);
      --blocked_reads_;
    }
  }
  std::string payload;
  uint64_t checksum;
  {
    common::MutexLock lock(&disk_->mu);
    auto it = disk_->blocks.find({ns_id, std::string(key)});
    if (it == disk_->blocks.end()) return absl::NotFoundError("block not in cold tier");
    payload = it->second.payload;
    checksum = it->second.record.checksum;
  }
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(payload.data()),
                                       payload.size());
  if (storage::PayloadChecksum(bytes) != checksum) {
    return absl::DataLossError("cold record checksum mismatch");
  }
  sink(bytes, checksum);
  return absl::OkStatus();
}

absl::Status FakeColdTier::DeleteBlock(uint32_t ns_id, std::string_view key) {
  common::MutexLock lock(&disk_->mu);
  disk_->blocks.erase({ns_id, std::string(key)});
  return absl::OkStatus();
}

absl::Status FakeColdTier::PutNamespace(uint32_t ns_id, std::string_view spec) {
  common::MutexLock lock(&disk_->mu);
  disk_->namespaces[ns_id] = std::string(spec);
  return absl::OkStatus();
}

absl::Status FakeColdTier::DeleteNamespace(uint32_t ns_id) {
  common::MutexLock lock(&disk_->mu);
  disk_->namespaces.erase(ns_id);
  return absl::OkStatus();
}

absl::Status FakeColdTier::ForEachNamespace(
    const std::function<void(uint32_t, std::string_view)>& fn) {
  std::map<uint32_t, std::string> copy;
  {
    common::MutexLock lock(&disk_->mu);
    copy = disk_->namespaces;
  }
  for (const auto& [id, spec] : copy) fn(id, spec);
  return absl::OkStatus();
}

absl::Status FakeColdTier::ForEachBlock(
    const std::function<void(const storage::ColdIndexRecord&)>& fn) {
  std::vector<storage::ColdIndexRecord> records;
  {
    common::MutexLock lock(&disk_->mu);
    for (const auto& [k, b] : disk_->blocks) records.push_back(b.record);
  }
  for (const auto& r : records) fn(r);
  return absl::OkStatus();
}

}  // namespace kvtier::testing
