// Damage a test does to a closed cold tier's directory (storage/rocksdb_cold_tier.h) that
// a restart cannot see: the loss an unclean shutdown can leave (docs/recovery.md
// "Unclean shutdown"). Thread-compatible; the tier must be closed.
#ifndef KVTIER_TESTS_TESTING_COLD_DAMAGE_H_
#define KVTIER_TESTS_TESTING_COLD_DAMAGE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace kvtier::testing {

// Deletes the index records of `keys` in namespace `namespace_id` (the cold tier's own
// numbering: 0 for the first namespace registered) with RocksDB directly, and marks the
// last close unclean in cold.meta, so Open trusts the index. Fails the current test
// (gtest) when the database or cold.meta cannot be opened or written.
void LoseRecordsSilently(const std::string& dir, uint32_t namespace_id,
                         const std::vector<std::string>& keys);

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_COLD_DAMAGE_H_
