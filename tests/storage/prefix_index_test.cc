#include "storage/prefix_index.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvtier::storage {
namespace {

class PrefixIndexTest : public ::testing::Test {
 protected:
  PrefixIndex index_{[this](BlockId id) { changed_.push_back(id); }};
  std::vector<BlockId> changed_;

  BlockId Cold(std::string_view key) {
    const BlockId id = index_.FindOrCreate(0, key);
    index_.at(id).flags |= Entry::kCold;
    index_.UpdateColdList(id, false);
    return id;
  }
  std::vector<BlockId> ColdList() const {
    std::vector<BlockId> out;
    for (BlockId id = index_.cold_head(); id != kNoEntry; id = index_.at(id).cold_next()) {
      out.push_back(id);
    }
    return out;
  }
};

TEST_F(PrefixIndexTest, FindsByNamespaceAndKey) {
  const BlockId a = index_.FindOrCreate(0, "a");
  EXPECT_EQ(index_.Find(0, "a"), a);
  EXPECT_EQ(index_.Find(1, "a"), kNoEntry);
  EXPECT_NE(index_.FindOrCreate(1, "a"), a);
  EXPECT_EQ(index_.FindOrCreate(0, "a"), a);
  EXPECT_EQ(index_.size(), 2u);
  EXPECT_EQ(index_.key(a), "a");
}

TEST_F(PrefixIndexTest, FindAfterAgreesWithFindWhateverTheHint) {
  // Consecutive ids (the guess holds), another namespace at the guessed id, a freed id
  // that still holds the key's bytes, a long key, the last id, no hint: always Find's answer.
  const BlockId a = index_.FindOrCreate(0, "a");
  const BlockId b = index_.FindOrCreate(0, "b");
  const BlockId other_ns = index_.FindOrCreate(1, "c");
  const BlockId c = index_.FindOrCreate(0, "c");
  const std::string long_key(32, 'k');
  const BlockId l = index_.FindOrCreate(0, long_key);
  ASSERT_EQ(b, a + 1);
  EXPECT_EQ(index_.FindAfter(0, "b", a), b);
  EXPECT_EQ(index_.FindAfter(0, "c", b), c);  // b + 1 holds "c" of namespace 1
  EXPECT_EQ(index_.FindAfter(1, "c", b), other_ns);
  EXPECT_EQ(index_.FindAfter(0, long_key, c), l);
  EXPECT_EQ(index_.FindAfter(0, "zz", l), kNoEntry);  // past the last id
  EXPECT_EQ(index_.FindAfter(0, "a", kNoEntry), a);
  EXPECT_EQ(index_.FindAfter(0, "a", l), a);  // a wrong hint
  index_.MaybeFree(b);                        // a childless ghost: freed, its bytes stay
  EXPECT_EQ(index_.Find(0, "b"), kNoEntry);
  EXPECT_EQ(index_.FindAfter(0, "b", a), kNoEntry);
}

TEST_F(PrefixIndexTest, FindsEveryKeyThroughGrowthFreesAndReuse) {
  // The hash set keeps each key's hash beside its id and rehashes from it: through many
  // doublings, frees (ids and their slots reused) and keys of both sizes, Find agrees
  // with a plain map.
  std::vector<std::string> keys;
  for (int i = 0; i < 50000; ++i) {
    keys.push_back(i % 7 == 0 ? std::string(24, 'a' + i % 26) + std::to_string(i)
                              : "key" + std::to_string(i));
  }
  std::vector<BlockId> ids;
  for (const std::string& k : keys) ids.push_back(index_.FindOrCreate(0, k));
  for (size_t i = 0; i < keys.size(); i += 2) index_.MaybeFree(ids[i]);  // ghosts: freed
  for (size_t i = 0; i < keys.size(); i += 2) {
    ASSERT_EQ(index_.Find(0, keys[i]), kNoEntry) << keys[i];
    ids[i] = index_.FindOrCreate(1, keys[i]);  // another namespace reuses the ids
  }
  EXPECT_EQ(index_.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint16_t ns = i % 2 == 0 ? 1 : 0;
    ASSERT_EQ(index_.Find(ns, keys[i]), ids[i]) << keys[i];
    ASSERT_EQ(index_.Find(1 - ns, keys[i]), kNoEntry) << keys[i];
    ASSERT_EQ(index_.key(ids[i]), keys[i]);
  }
}

TEST_F(PrefixIndexTest, OnlyColdLeavesAreInTheColdList) {
  const BlockId root = Cold("root");
  const BlockId child = Cold("child");
  EXPECT_EQ(ColdList(), (std::vector<BlockId>{root, child}));
  index_.SetParent(child, root);  // root is no leaf any more
  EXPECT_EQ(ColdList(), std::vector<BlockId>{child});
  EXPECT_EQ(index_.at(root).children(), 1u);
  EXPECT_EQ(changed_, std::vector<BlockId>{root});
  index_.SetParent(child, kNoEntry);  // a leaf again, older than child: at the head
  EXPECT_EQ(ColdList(), (std::vector<BlockId>{root, child}));
  index_.TouchCold(root);
  EXPECT_EQ(ColdList(), (std::vector<BlockId>{child, root}));
}

TEST_F(PrefixIndexTest, GhostsLiveWhileTheyHaveChildren) {
  const BlockId child = Cold("child");
  const BlockId ghost = index_.FindOrCreate(0, "parent");  // never stored itself
  index_.SetParent(child, ghost);
  index_.MaybeFree(ghost);  // has a child: stays
  EXPECT_EQ(index_.Find(0, "parent"), ghost);
  index_.at(child).flags &= ~Entry::kCold;
  index_.UpdateColdList(child, false);
  index_.MaybeFree(child);  // frees the child, then the ghost it left childless
  EXPECT_EQ(index_.Find(0, "child"), kNoEntry);
  EXPECT_EQ(index_.Find(0, "parent"), kNoEntry);
  EXPECT_EQ(index_.size(), 0u);
  EXPECT_EQ(index_.FindOrCreate(0, "reused"), ghost);  // the last freed id is reused first
}

TEST_F(PrefixIndexTest, HotChildrenAreCountedThroughSetHot) {
  const BlockId parent = Cold("p");
  const BlockId child = index_.FindOrCreate(0, "c");
  index_.SetParent(child, parent);
  changed_.clear();
  index_.SetHot(child, true);
  EXPECT_EQ(index_.at(parent).hot_children(), 1u);
  EXPECT_EQ(changed_, std::vector<BlockId>{parent});
  index_.SetHot(child, true);  // no change, no callback
  EXPECT_EQ(changed_.size(), 1u);
  index_.SetHot(child, false);
  EXPECT_EQ(index_.at(parent).hot_children(), 0u);
  EXPECT_EQ(index_.at(parent).children(), 1u);
}

// Keys up to Entry::kInlineKeyBytes live in the entry, longer ones in a long-key cell:
// both must read back exactly and never match each other's prefixes.
TEST_F(PrefixIndexTest, InlineAndLongKeysReadBackAndStayDistinct) {
  const std::string inline_key(Entry::kInlineKeyBytes, 'k');
  const std::string long_key = inline_key + "x";
  const std::string longest(kMaxKeyBytes, 'k');
  const BlockId a = index_.FindOrCreate(0, inline_key);
  const BlockId b = index_.FindOrCreate(0, long_key);
  const BlockId c = index_.FindOrCreate(0, longest);
  EXPECT_EQ(index_.key(a), inline_key);
  EXPECT_EQ(index_.key(b), long_key);
  EXPECT_EQ(index_.key(c), longest);
  EXPECT_EQ(index_.Find(0, long_key), b);
  EXPECT_EQ(index_.Find(0, std::string(kMaxKeyBytes - 1, 'k')), kNoEntry);
  EXPECT_EQ(index_.Find(1, longest), kNoEntry);
  // Freeing a long key's entry frees its cell; a new long key reuses it and reads back.
  index_.MaybeFree(b);
  EXPECT_EQ(index_.Find(0, long_key), kNoEntry);
  const std::string other(kMaxKeyBytes - 2, 'z');
  const BlockId d = index_.FindOrCreate(0, other);
  EXPECT_EQ(index_.key(d), other);
  EXPECT_EQ(index_.key(c), longest);
  EXPECT_EQ(index_.Find(0, longest), c);
}

// A listed cold leaf keeps its list links where its child counts are: gaining a child
// must take it off the list with exact counts, losing it must put it back.
TEST_F(PrefixIndexTest, ChildCountsSurviveColdListMembership) {
  const BlockId older = Cold("older");
  const BlockId leaf = Cold("leaf");
  const BlockId newer = Cold("newer");
  EXPECT_EQ(ColdList(), (std::vector<BlockId>{older, leaf, newer}));
  EXPECT_EQ(index_.at(leaf).children(), 0u);
  EXPECT_EQ(index_.at(leaf).hot_children(), 0u);
  const BlockId child = index_.FindOrCreate(0, "child");
  index_.SetHot(child, true);
  index_.SetParent(child, leaf);
  EXPECT_EQ(ColdList(), (std::vector<BlockId>{older, newer}));
  EXPECT_EQ(index_.at(leaf).children(), 1u);
  EXPECT_EQ(index_.at(leaf).hot_children(), 1u);
  EXPECT_EQ(index_.at(leaf).cold_next(), kNoEntry);
  index_.SetHot(child, false);
  EXPECT_EQ(index_.at(leaf).hot_children(), 0u);
  EXPECT_EQ(index_.at(leaf).children(), 1u);
  index_.MaybeFree(child);  // a childless ghost: freed, `leaf` is a leaf again
  EXPECT_EQ(ColdList(), (std::vector<BlockId>{leaf, older, newer}));
  EXPECT_EQ(index_.at(leaf).children(), 0u);
  EXPECT_EQ(index_.at(older).cold_next(), newer);
  index_.at(leaf).flags &= ~Entry::kCold;
  index_.UpdateColdList(leaf, false);
  EXPECT_EQ(ColdList(), (std::vector<BlockId>{older, newer}));
  EXPECT_EQ(index_.at(leaf).children(), 0u);
  EXPECT_EQ(index_.at(leaf).hot_children(), 0u);
}

}  // namespace
}  // namespace kvtier::storage
