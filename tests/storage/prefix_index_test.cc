#include "storage/prefix_index.h"

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
    for (BlockId id = index_.cold_head(); id != kNoEntry; id = index_.at(id).cold_next) {
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
  EXPECT_EQ(index_.at(a).key_view(), "a");
}

TEST_F(PrefixIndexTest, OnlyColdLeavesAreInTheColdList) {
  const BlockId root = Cold("root");
  const BlockId child = Cold("child");
  EXPECT_EQ(ColdList(), (std::vector<BlockId>{root, child}));
  index_.SetParent(child, root);  // root is no leaf any more
  EXPECT_EQ(ColdList(), std::vector<BlockId>{child});
  EXPECT_EQ(index_.at(root).children, 1u);
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
  EXPECT_EQ(index_.at(parent).hot_children, 1u);
  EXPECT_EQ(changed_, std::vector<BlockId>{parent});
  index_.SetHot(child, true);  // no change, no callback
  EXPECT_EQ(changed_.size(), 1u);
  index_.SetHot(child, false);
  EXPECT_EQ(index_.at(parent).hot_children, 0u);
  EXPECT_EQ(index_.at(parent).children, 1u);
}

}  // namespace
}  // namespace kvtier::storage
