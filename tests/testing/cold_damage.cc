#include "tests/testing/cold_damage.h"

#include <rocksdb/db.h>

#include "gtest/gtest.h"
#include "storage/cold_meta_file.h"
#include "storage/rocksdb_cold_tier_records.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::testing {

void LoseRecordsSilently(const std::string& dir, uint32_t namespace_id,
                         const std::vector<std::string>& keys) {
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {"meta", rocksdb::ColumnFamilyOptions()}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  ASSERT_OK(rocksdb::DB::Open(rocksdb::DBOptions(), dir, cfs, &handles, &raw));
  for (const std::string& key : keys) {
    EXPECT_OK(
        raw->Delete(rocksdb::WriteOptions(), handles[1], storage::IndexKey(namespace_id, key)));
  }
  for (auto* h : handles) raw->DestroyColumnFamilyHandle(h);
  EXPECT_OK(raw->Close());
  delete raw;
  auto meta = storage::ReadColdMetaFile(dir + "/cold.meta");
  ASSERT_OK(meta);
  ASSERT_TRUE(meta->has_value()) << dir << "/cold.meta is missing";
  storage::ColdMeta m = **meta;
  m.clean = false;
  ASSERT_OK(storage::WriteColdMetaFile(dir + "/cold.meta", m));
}

}  // namespace kvtier::testing
