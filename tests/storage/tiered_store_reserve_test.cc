// TieredStore::ReservePut + BlockPut::reservation: a payload written straight into its
// reserved room is stored bit-exactly without a copy (hot, or cold when the hot tier had
// no room); an unused reservation gives its room back (hot room and tenant hot quota);
// a reservation whose bytes are not a valid block, of another namespace, or used twice
// is refused and changes nothing.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/tenant_quota.h"
#include "storage/tiered_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::storage {
namespace {

using ::kvtier::storage::testing::KeyOf;
using ::kvtier::storage::testing::MakePayload;
using ::kvtier::storage::testing::NsStats;
using ::kvtier::storage::testing::RefBytes;
using ::kvtier::storage::testing::SmallLayout;
using ::kvtier::storage::testing::SmallNamespace;
using ::kvtier::storage::testing::TierOf;
using ::testing::HasSubstr;

class TieredStoreReserveTest : public testing::StoreTest {
 protected:
  // Reserves room for `payload` in `ns` and writes it there.
  static std::unique_ptr<PutReservation> Reserve(TieredStore* store, const std::string& payload,
                                                 const std::string& ns = "ns") {
    auto r = store->ReservePut(ns, "", payload.size());
    EXPECT_OK(r);
    if (!r.ok()) return nullptr;
    EXPECT_EQ((*r)->data().size(), payload.size());
    std::memcpy((*r)->data().data(), payload.data(), payload.size());
    return *std::move(r);
  }
  static absl::Status PutReserved(TieredStore* store, const std::string& key, PutReservation* r,
                                  const std::string& ns = "ns") {
    BlockPut put;
    put.key = key;
    put.reservation = r;
    return store->Put(ns, {&put, 1});
  }
};

TEST_F(TieredStoreReserveTest, ReservedPayloadIsStoredHotAndBitExact) {
  auto store = Open(Options());
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  const std::string payload = MakePayload(SmallLayout(), 0, 11);
  auto r = Reserve(store.get(), payload);
  ASSERT_NE(r, nullptr);
  EXPECT_GT(store->Stats().hot_used_bytes, 0u);  // the room is taken before the Put
  ASSERT_OK(PutReserved(store.get(), KeyOf(1, 0), r.get()));
  const uint64_t used = store->Stats().hot_used_bytes;
  r.reset();  // stored: destroying it gives nothing back
  EXPECT_EQ(store->Stats().hot_used_bytes, used);
  auto ref = store->Get("ns", KeyOf(1, 0));
  ASSERT_OK(ref);
  EXPECT_EQ(ref->tier(), Tier::kHot);
  EXPECT_EQ(RefBytes(*ref), payload);
  ref = BlockRef();
  // Demoted (checksummed from the slot) and read back: still bit-exact.
  ASSERT_OK(store->Evict("ns", {}, /*drop=*/false));
  ref = store->Get("ns", KeyOf(1, 0));
  ASSERT_OK(ref);
  EXPECT_EQ(ref->tier(), Tier::kCold);
  EXPECT_EQ(RefBytes(*ref), payload);
  EXPECT_EQ(NsStats(*store).checksum_failures, 0u);
}

TEST_F(TieredStoreReserveTest, UnusedReservationGivesItsRoomBack) {
  auto store = Open(Options());
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  auto r = Reserve(store.get(), MakePayload(SmallLayout(), 0, 12));
  ASSERT_NE(r, nullptr);
  EXPECT_GT(store->Stats().hot_used_bytes, 0u);
  r.reset();  // aborted (a transfer that failed, a client that went away)
  EXPECT_EQ(store->Stats().hot_used_bytes, 0u);
  EXPECT_EQ(NsStats(*store).puts, 0u);
}

TEST_F(TieredStoreReserveTest, ReservationGoesColdWhenTheHotTierHasNoRoom) {
  auto store = Open(Options(/*hot_blocks=*/1));
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  const std::string pinned = MakePayload(SmallLayout(), 0, 13);
  BlockPut put{KeyOf(2, 0), "", 0, pinned};
  ASSERT_OK(store->Put("ns", {&put, 1}));
  const std::vector<std::string> keys = {KeyOf(2, 0)};
  ASSERT_OK(store->Pin("ns", keys, 0));
  const std::string payload = MakePayload(SmallLayout(), 0, 14);
  auto r = Reserve(store.get(), payload);
  ASSERT_NE(r, nullptr);
  ASSERT_OK(PutReserved(store.get(), KeyOf(3, 0), r.get()));
  EXPECT_EQ(TierOf(store.get(), KeyOf(3, 0)), Tier::kCold);
  auto ref = store->Get("ns", KeyOf(3, 0));
  ASSERT_OK(ref);
  EXPECT_EQ(RefBytes(*ref), payload);
}

TEST_F(TieredStoreReserveTest, ReservationsCountAgainstTheTenantsHotQuota) {
  const std::string payload = MakePayload(SmallLayout(), 0, 17);
  StoreOptions o = Options();
  o.tenant_quotas.push_back(TenantQuota{"a", payload.size(), 0, 0});  // one block hot
  auto store = Open(o);
  NamespaceOptions ns = SmallNamespace();
  ns.tenant = "a";
  ASSERT_OK(store->RegisterNamespace(ns));
  auto first = Reserve(store.get(), payload);
  ASSERT_NE(first, nullptr);
  // The quota is held by the reservation, and no block of the tenant can make room.
  auto second = store->ReservePut("ns", "", payload.size());
  EXPECT_TRUE(absl::IsResourceExhausted(second.status())) << second.status();
  EXPECT_EQ(ExhaustedQuotaName(second.status()), "hot_bytes");
  first.reset();  // gives the quota back
  auto third = Reserve(store.get(), payload);
  ASSERT_NE(third, nullptr);
  ASSERT_OK(PutReserved(store.get(), KeyOf(6, 0), third.get()));
  EXPECT_EQ(TierOf(store.get(), KeyOf(6, 0)), Tier::kHot);
}

TEST_F(TieredStoreReserveTest, BadReservationsAreRefusedAndChangeNothing) {
  auto store = Open(Options());
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  ASSERT_OK(store->RegisterNamespace(SmallNamespace("other")));
  EXPECT_TRUE(absl::IsNotFound(store->ReservePut("nope", "", 100).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(store->ReservePut("ns", "", 0).status()));
  // Bytes that are not a valid block: the Put's usual error; the room stays reserved
  // until the reservation goes.
  std::string garbage(MakePayload(SmallLayout(), 0, 15).size(), 'x');
  auto bad = Reserve(store.get(), garbage);
  ASSERT_NE(bad, nullptr);
  absl::Status st = PutReserved(store.get(), "k", bad.get());
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("not a valid encoded block"));
  bad.reset();
  // Another namespace's reservation.
  const std::string payload = MakePayload(SmallLayout(), 0, 16);
  auto other = Reserve(store.get(), payload, "other");
  ASSERT_NE(other, nullptr);
  st = PutReserved(store.get(), "k", other.get());
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("blocks[0].reservation"));
  other.reset();
  EXPECT_EQ(NsStats(*store).puts, 0u);
  EXPECT_EQ(TierOf(store.get(), "k"), Tier::kNone);
  EXPECT_EQ(store->Stats().hot_used_bytes, 0u);
  // Used twice: the second Put is refused, the first block stays as stored.
  auto r = Reserve(store.get(), payload);
  ASSERT_NE(r, nullptr);
  ASSERT_OK(PutReserved(store.get(), KeyOf(4, 0), r.get()));
  st = PutReserved(store.get(), KeyOf(5, 0), r.get());
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_EQ(TierOf(store.get(), KeyOf(5, 0)), Tier::kNone);
  auto ref = store->Get("ns", KeyOf(4, 0));
  ASSERT_OK(ref);
  EXPECT_EQ(RefBytes(*ref), payload);
}

}  // namespace
}  // namespace kvtier::storage
