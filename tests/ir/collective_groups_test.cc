// Who takes part in a collective, in each of XLA's group modes, against
// hand-written device lists (device (r, p) has id r * partitions + p).
#include "ir/collective_groups.h"

#include <gtest/gtest.h>

#include "ir/parser.h"

namespace loom::ir {
namespace {

using Groups = std::vector<std::vector<int64_t>>;

// The groups of the root of a one-collective module on `grid`.
Expected<Groups> GroupsOf(const std::string& collective, DeviceGrid grid) {
  static std::vector<std::unique_ptr<Module>> keep;  // instructions must outlive the call
  auto module = ParseModule(R"(
HloModule m
%add {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
ENTRY %e {
  %p = f32[4] parameter(0)
  ROOT %c = f32[4] )" + collective +
                            "\n}\n");
  if (!module.ok()) return module.error();
  keep.push_back(std::move(module).value());
  return ParticipantGroups(*keep.back()->entry()->root(), grid);
}

TEST(CollectiveGroupsTest, CrossReplicaRepeatsTheGroupsInEveryPartition) {
  auto groups = GroupsOf("all-reduce(%p), replica_groups={{0,1}}, to_apply=%add", {2, 3});
  ASSERT_TRUE(groups.ok()) << groups.error().ToString();
  EXPECT_EQ(*groups, (Groups{{0, 3}, {1, 4}, {2, 5}}));
}

TEST(CollectiveGroupsTest, ChannelWithoutGlobalIdsSpansEveryPartitionOfItsReplicas) {
  // all-reduce always has use_global_device_ids in XLA (false by default):
  // cross-replica-and-partition, so one group of replicas {0,1} x 3 partitions.
  auto groups =
      GroupsOf("all-reduce(%p), channel_id=1, replica_groups={{0,1}}, to_apply=%add", {2, 3});
  ASSERT_TRUE(groups.ok()) << groups.error().ToString();
  EXPECT_EQ(*groups, (Groups{{0, 1, 2, 3, 4, 5}}));
}

TEST(CollectiveGroupsTest, AllToAllWithAChannelIsCrossPartition) {
  auto groups = GroupsOf(
      "all-to-all(%p), channel_id=1, replica_groups={{0,2},{1,3}}, "
      "dimensions={0}",
      {2, 4});
  ASSERT_TRUE(groups.ok()) << groups.error().ToString();
  EXPECT_EQ(*groups, (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
}

TEST(CollectiveGroupsTest, FlattenedIdsAreGlobalDeviceIds) {
  auto groups = GroupsOf(
      "all-reduce(%p), channel_id=1, replica_groups=[2,2]<=[2,2]T(1,0), "
      "use_global_device_ids=true, to_apply=%add",
      {1, 4});
  ASSERT_TRUE(groups.ok()) << groups.error().ToString();
  EXPECT_EQ(*groups, (Groups{{0, 2}, {1, 3}}));
}

TEST(CollectiveGroupsTest, RejectsIdsOutOfRangeAndDevicesLeftOut) {
  EXPECT_FALSE(GroupsOf("all-reduce(%p), replica_groups={{0,2}}, to_apply=%add", {2, 1}).ok());
  auto partial = GroupsOf(
      "all-reduce(%p), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, "
      "to_apply=%add",
      {1, 4});
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.error().message.find("cover 2 of the 4 devices"), std::string::npos)
      << partial.error().message;
  EXPECT_FALSE(GroupsOf("all-reduce(%p), use_global_device_ids=true, replica_groups={{0}}, "
                        "to_apply=%add",
                        {1, 1})
                   .ok());
}

TEST(CollectiveGroupsTest, PermutePairsRepeatInEveryReplica) {
  auto module = ParseModule(R"(
HloModule m
ENTRY %e {
  %p = f32[4] parameter(0)
  ROOT %c = f32[4] collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}
}
)");
  ASSERT_TRUE(module.ok());
  auto pairs = GlobalSourceTargetPairs(*(*module)->entry()->root(), {2, 2});
  ASSERT_TRUE(pairs.ok()) << pairs.error().ToString();
  EXPECT_EQ(*pairs, (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 0}, {2, 3}, {3, 2}}));
}

}  // namespace
}  // namespace loom::ir
