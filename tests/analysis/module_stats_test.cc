// `loom stats` numbers against hand-computed values.
#include "analysis/module_stats.h"

#include <gtest/gtest.h>

#include <string>

#include "analysis/live_bytes.h"
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

// Parses and verifies `text`, then computes its stats.
ModuleStats StatsOf(const std::string& text) {
  auto module = ir::ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.error().ToString();
  if (!module.ok()) return {};
  auto report = ir::VerifyModule(**module);
  EXPECT_TRUE(report.ok()) << report.error().ToString();
  if (!report.ok()) return {};
  return ComputeStats(**module, *report);
}

TEST(ModuleStatsTest, DynamicCountsOfTheExampleMatchItsStaticOnes) {
  // No loops: each instruction runs once.
  auto module = ir::ParseModuleFile(std::string(LOOM_EXAMPLES_DIR) + "/mlp_block_tp4.hlo");
  ASSERT_TRUE(module.ok()) << module.error().ToString();
  auto report = ir::VerifyModule(**module);
  ASSERT_TRUE(report.ok()) << report.error().ToString();
  const ModuleStats stats = ComputeStats(**module, *report);
  const DynamicStats& dynamic = stats.dynamic;
  constexpr int64_t kMiB = 1 << 20;
  // all-gather: bf16[2048,1024] = 4 MiB gathered, 3/4 of it sent; reduce-
  // scatter: 3/4 of its 4 MiB operand.
  EXPECT_EQ(dynamic.collectives.at("all-gather").ring_bytes_per_device, 3 * kMiB);
  EXPECT_EQ(dynamic.collectives.at("reduce-scatter").ring_bytes_per_device, 3 * kMiB);
  EXPECT_EQ(dynamic.bytes_sent_per_device, 6 * kMiB);
  EXPECT_EQ(dynamic.dot_count, 2);
  EXPECT_EQ(dynamic.dot_flops, 2 * (2LL * 2048 * 1024 * 1024));
  EXPECT_EQ(dynamic.dot_flops, stats.dot_flops);
  EXPECT_EQ(dynamic.unknown_trip_count_loops, 0);

  // Peak live bytes, in MiB: the parameters x, w1, w2 (1 + 2 + 2 = 5) live
  // throughout, and every bf16[2048,1024] value is 4. The peak is at
  // %h.cube = multiply(%h.sq, %h), with the parameters, %h (read until
  // %half.h), the four broadcasts (read later), %h.sq and %h.cube live:
  // 5 + 7 x 4 = 33; %h.cube.scaled is the same (%h.sq freed, %h.cube.scaled
  // new). Every scalar constant is freed at its broadcast, and the earlier
  // steps hold less (%x.full and %h: 5 + 8 = 13).
  EXPECT_EQ(PeakLiveBytes(**module), 33 * kMiB);
}

// The shape of the rewrite `loom stats` compares: all-gather + dot against a
// while loop that passes the local block around the ring with a
// collective-permute each trip and multiplies it (4 trips on 4 devices).
constexpr const char* kRingLoop = R"(
HloModule ring, num_partitions=4
%cond {
  %state = (s32[], f32[64,128], f32[128,96], f32[256,96]) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %n = s32[] constant(4)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
%body {
  %state = (s32[], f32[64,128], f32[128,96], f32[256,96]) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %x = f32[64,128] get-tuple-element(%state), index=1
  %w = f32[128,96] get-tuple-element(%state), index=2
  %y = f32[256,96] get-tuple-element(%state), index=3
  %p = f32[64,96] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %rows = s32[] constant(64)
  %offset = s32[] multiply(%i, %rows)
  %zero = s32[] constant(0)
  %y.next = f32[256,96] dynamic-update-slice(%y, %p, %offset, %zero)
  %x.next = f32[64,128] collective-permute(%x), channel_id=1, source_target_pairs={{1,0},{2,1},{3,2},{0,3}}
  %one = s32[] constant(1)
  %i.next = s32[] add(%i, %one)
  ROOT %next = (s32[], f32[64,128], f32[128,96], f32[256,96]) tuple(%i.next, %x.next, %w, %y.next)
}
ENTRY %main {
  %x = f32[64,128] parameter(0)
  %w = f32[128,96] parameter(1)
  %f0 = f32[] constant(0)
  %y.init = f32[256,96] broadcast(%f0), dimensions={}
  %c0 = s32[] constant(0)
  %init = (s32[], f32[64,128], f32[128,96], f32[256,96]) tuple(%c0, %x, %w, %y.init)
  %loop = (s32[], f32[64,128], f32[128,96], f32[256,96]) while(%init), condition=%cond, body=%body
  ROOT %y = f32[256,96] get-tuple-element(%loop), index=3
}
)";

TEST(ModuleStatsTest, ConvolutionsCountTheMultiplyAddsThatLand) {
  // A 3x3 window padded by 1 over an 8x8 image: along each spatial
  // dimension the 8 output positions read 3 taps each, less the one that
  // falls on the padding at either edge, 8 x 3 - 2 = 22 (position, tap)
  // pairs; 22 x 22 in two dimensions, times batch 2, 4 output and 3 input
  // features, 2 FLOPs each. The fused copy counts as the entry's does.
  const ModuleStats stats = StatsOf(R"(
HloModule conv
%fused {
  %p0 = f32[2,8,8,3] parameter(0)
  %p1 = f32[3,3,3,4] parameter(1)
  ROOT %c = f32[2,8,8,4] convolution(%p0, %p1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}
ENTRY %e {
  %x = f32[2,8,8,3] parameter(0)
  %k = f32[3,3,3,4] parameter(1)
  %y = f32[2,8,8,4] convolution(%x, %k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  %z = f32[2,8,8,4] fusion(%x, %k), kind=kOutput, calls=%fused
  ROOT %s = f32[2,8,8,4] add(%y, %z)
}
)");
  constexpr int64_t kFlops = 2LL * 2 * 4 * 3 * 22 * 22;
  EXPECT_EQ(stats.dot_count, 0);
  EXPECT_EQ(stats.dot_flops, 0);
  EXPECT_EQ(stats.convolution_count, 2);
  EXPECT_EQ(stats.convolution_flops, 2 * kFlops);
  EXPECT_EQ(stats.dynamic.convolution_count, 2);
  EXPECT_EQ(stats.dynamic.convolution_flops, 2 * kFlops);
}

TEST(ModuleStatsTest, DynamicCountsMultiplyLoopBodiesByTheirTripCounts) {
  const ModuleStats stats = StatsOf(kRingLoop);
  // Static: one collective-permute of f32[64,128] (32 KiB), one dot.
  EXPECT_EQ(stats.collectives.at("collective-permute").ring_bytes_per_device, 64 * 128 * 4);
  EXPECT_EQ(stats.dot_flops, 2 * 64 * 96 * 128);
  // Dynamic: 4 trips of each; the same FLOPs as all-gather + dot of the
  // whole f32[256,128].
  const DynamicStats& dynamic = stats.dynamic;
  EXPECT_EQ(dynamic.collectives.at("collective-permute").count, 4);
  EXPECT_EQ(dynamic.collectives.at("collective-permute").ring_bytes_per_device, 4 * 64 * 128 * 4);
  EXPECT_EQ(dynamic.bytes_sent_per_device, 4 * 64 * 128 * 4);
  EXPECT_EQ(dynamic.dot_count, 4);
  EXPECT_EQ(dynamic.dot_flops, 2 * 256 * 96 * 128);
  EXPECT_EQ(dynamic.unknown_trip_count_loops, 0);
}

TEST(ModuleStatsTest, DynamicCountsFollowCallsBranchesAndFusions) {
  const ModuleStats stats = StatsOf(R"(
HloModule m, num_partitions=4
%add {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
%callee {
  %v = f32[256] parameter(0)
  ROOT %r = f32[256] all-reduce(%v), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%add
}
%gather {
  %v = f32[16] parameter(0)
  ROOT %g = f32[64] all-gather(%v), channel_id=2, replica_groups={{0,1,2,3}}, use_global_device_ids=true, dimensions={0}
}
%square {
  %v = f32[16] parameter(0)
  %m = f32[4,4] reshape(%v)
  %d = f32[4,4] dot(%m, %m), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %flat = f32[16] reshape(%d)
  ROOT %twice = f32[64] concatenate(%flat, %flat, %flat, %flat), dimensions={0}
}
%fused {
  %v = f32[8,8] parameter(0)
  ROOT %d = f32[8,8] dot(%v, %v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
%data_cond {
  %state = (f32[16]) parameter(0)
  %x = f32[16] get-tuple-element(%state), index=0
  %x0 = f32[1] slice(%x), slice={[0:1]}
  %s = f32[] reshape(%x0)
  %limit = f32[] constant(100)
  ROOT %lt = pred[] compare(%s, %limit), direction=LT
}
%data_body {
  %state = (f32[16]) parameter(0)
  %x = f32[16] get-tuple-element(%state), index=0
  %x.next = f32[16] collective-permute(%x), channel_id=3, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  ROOT %next = (f32[16]) tuple(%x.next)
}
ENTRY %e {
  %v = f32[256] parameter(0)
  %small = f32[16] parameter(1)
  %which = pred[] parameter(2)
  %m = f32[8,8] parameter(3)
  %called = f32[256] call(%v), to_apply=%callee
  %branch = f32[64] conditional(%which, %small, %small), true_computation=%gather, false_computation=%square
  %fusion = f32[8,8] fusion(%m), kind=kOutput, calls=%fused
  %init = (f32[16]) tuple(%small)
  %loop = (f32[16]) while(%init), condition=%data_cond, body=%data_body
  ROOT %out = (f32[256], f32[64], f32[8,8], (f32[16])) tuple(%called, %branch, %fusion, %loop)
}
)");
  const DynamicStats& dynamic = stats.dynamic;
  // The call: one all-reduce of 1 KiB, 2 x 3/4 of it sent. Its reducer %add
  // is not walked (it holds no collective anyway).
  EXPECT_EQ(dynamic.collectives.at("all-reduce").count, 1);
  EXPECT_EQ(dynamic.collectives.at("all-reduce").ring_bytes_per_device, 2 * 1024 * 3 / 4);
  // The conditional: the larger of each branch's numbers, the all-gather of
  // %gather (3/4 of 256 B) and the dot of %square (2 x 16 x 4).
  EXPECT_EQ(dynamic.collectives.at("all-gather").ring_bytes_per_device, 256 * 3 / 4);
  // The fusion's dot (2 x 64 x 8) counts; so does %square's.
  EXPECT_EQ(dynamic.dot_count, 2);
  EXPECT_EQ(dynamic.dot_flops, 2 * 64 * 8 + 2 * 16 * 4);
  // The data-dependent loop: its body counted once, and reported.
  EXPECT_EQ(dynamic.collectives.at("collective-permute").count, 1);
  EXPECT_EQ(dynamic.collectives.at("collective-permute").ring_bytes_per_device, 64);
  EXPECT_EQ(dynamic.unknown_trip_count_loops, 1);
  EXPECT_EQ(dynamic.bytes_sent_per_device, 1536 + 192 + 64);
}

}  // namespace
}  // namespace loom::analysis
