// `loom stats` numbers against hand-computed values.
#include "analysis/module_stats.h"

#include <gtest/gtest.h>

#include "ir/parser.h"

namespace loom::analysis {
namespace {

TEST(ModuleStatsTest, CountsOpsBytesAndFlops) {
  auto module = ir::ParseModule(R"(
HloModule m, num_partitions=4
%add {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
ENTRY %e {
  %a = f32[16,32] parameter(0)
  %w = f32[32,8] parameter(1)
  %g = f32[64,32] all-gather(%a), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, dimensions={0}
  %d = f32[64,8] dot(%g, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %r = f32[16,8] reduce-scatter(%d), channel_id=2, replica_groups={{0,1,2,3}}, use_global_device_ids=true, dimensions={0}, to_apply=%add
  ROOT %c = f32[16,8] collective-permute(%r), channel_id=3, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString();
  auto report = ir::VerifyModule(**module);
  ASSERT_TRUE(report.ok()) << report.error().ToString();
  ModuleStats stats = ComputeStats(**module, *report);
  EXPECT_EQ(stats.devices, 4);
  EXPECT_EQ(stats.instruction_count, 9);
  EXPECT_EQ(stats.opcode_counts.at("parameter"), 4);
  EXPECT_EQ(stats.dot_count, 1);
  EXPECT_EQ(stats.dot_flops, 2 * 64 * 8 * 32);
  // all-gather: result 64x32 f32 = 8192 B; each device sends 3/4 of it.
  EXPECT_EQ(stats.collectives.at("all-gather").result_bytes, 8192);
  EXPECT_EQ(stats.collectives.at("all-gather").ring_bytes_per_device, 6144);
  // reduce-scatter: operand 64x8 f32 = 2048 B, 3/4 sent.
  EXPECT_EQ(stats.collectives.at("reduce-scatter").ring_bytes_per_device, 1536);
  EXPECT_EQ(stats.collectives.at("collective-permute").ring_bytes_per_device, 512);
  EXPECT_EQ(stats.entry_parameter_bytes, 16 * 32 * 4 + 32 * 8 * 4);
}

TEST(ModuleStatsTest, GroupSizesFollowXlasGroupModes) {
  // A channel_id without use_global_device_ids: the group {0} of replicas
  // spans all 4 partitions, so 3/4 of the result crosses the ring.
  auto module = ir::ParseModule(R"(
HloModule m, num_partitions=4
ENTRY %e {
  %a = f32[4,8] parameter(0)
  ROOT %g = f32[16,8] all-gather(%a), channel_id=1, replica_groups={{0}}, dimensions={0}
}
)");
  ASSERT_TRUE(module.ok()) << module.error().ToString();
  auto report = ir::VerifyModule(**module);
  ASSERT_TRUE(report.ok()) << report.error().ToString();
  ModuleStats stats = ComputeStats(**module, *report);
  EXPECT_EQ(stats.collectives.at("all-gather").ring_bytes_per_device, 16 * 8 * 4 * 3 / 4);
}

}  // namespace
}  // namespace loom::analysis
