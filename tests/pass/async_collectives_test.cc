// async-collectives: every kind of collective becomes its start/done pair
// (or XLA's generic async-start/async-done), the result verifies, prints as
// a fixed point and runs on the threads backend bitwise like the original;
// modules already asynchronous are left alone.
#include "pass/async_collectives.h"

#include <gtest/gtest.h>

#include <cstring>

#include "exec/runner.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "pass/check_lines.h"
#include "pass/module_testing.h"

namespace loom::pass {
namespace {

using test::ExpectSameResults;
using test::ExpectVerifies;
constexpr auto Parse = test::ParseOrFail;

struct Outcome {
  bool changed = false;
  std::string text;
  std::vector<std::string> explanation;
};

// Runs the pass; the output must verify and print as a fixed point.
Outcome Convert(std::string_view hlo, AsyncCollectivesOptions options = {}) {
  auto module = Parse(hlo);
  if (!module) return {};
  AsyncCollectives pass(options);
  Expected<bool> changed = pass.Run(*module);
  EXPECT_TRUE(changed.ok()) << changed.error().message;
  Outcome outcome{changed.ok() && *changed, ir::PrintModule(*module), pass.Explain()};
  Expected<ir::VerifyReport> verified = ir::VerifyModule(*module);
  EXPECT_TRUE(verified.ok()) << verified.error().ToString() << "\n" << outcome.text;
  auto reparsed = Parse(outcome.text);
  if (reparsed) {
    EXPECT_EQ(ir::PrintModule(*reparsed), outcome.text);
  }
  return outcome;
}

#define EXPECT_CHECKS(text, checks) EXPECT_EQ("", test::CheckLines(text, checks))

// One of each kind, on 4 partitions.
constexpr std::string_view kEveryKind = R"(
HloModule every_kind, num_partitions=4
%add {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main {
  %x = f32[8,6] parameter(0)
  %ag = f32[32,6] all-gather(%x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, metadata={op_name="ag"}
  %ar = f32[8,6] all-reduce(%x), channel_id=2, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%add
  %cp = f32[8,6] collective-permute(%x), channel_id=3, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  %rs = f32[2,6] reduce-scatter(%x), channel_id=4, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=%add, metadata={op_name="rs"}
  %a2a = f32[8,6] all-to-all(%x), channel_id=5, replica_groups={{0,1,2,3}}, dimensions={0}
  %n = f32[8,6] negate(%ar)
  ROOT %t = (f32[32,6], f32[8,6], f32[8,6], f32[2,6], f32[8,6]) tuple(%ag, %n, %cp, %rs, %a2a)
}
)";

TEST(AsyncCollectives, ConvertsEveryKind) {
  Outcome out = Convert(kEveryKind);
  ASSERT_TRUE(out.changed);
  EXPECT_CHECKS(out.text, R"(
    CHECK-NOT: all-gather(
    CHECK-NOT: all-reduce(
    CHECK-NOT: collective-permute(
    CHECK-COUNT-1: reduce-scatter(
    CHECK-COUNT-1: all-to-all(
    CHECK: %rs.async
    CHECK: %param = f32[8,6] parameter(0)
    CHECK: ROOT %rs = f32[2,6] reduce-scatter(%param), dimensions={0}, channel_id=4
    CHECK: metadata={op_name="rs"}
    CHECK: %a2a.async
    CHECK: ROOT %a2a = f32[8,6] all-to-all(
    CHECK: ENTRY %main
    CHECK: %ag-start = (f32[8,6], f32[32,6]) all-gather-start(%x), dimensions={0}, channel_id=1
    CHECK: metadata={op_name="ag"}
    CHECK: %ag-done = f32[32,6] all-gather-done(%ag-start), metadata={op_name="ag"}
    CHECK: %ar-start = f32[8,6] all-reduce-start(%x), channel_id=2
    CHECK: to_apply=%add
    CHECK: %ar-done = f32[8,6] all-reduce-done(%ar-start)
    CHECK: %cp-start = (f32[8,6], f32[8,6]) collective-permute-start(%x), channel_id=3, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
    CHECK: %cp-done = f32[8,6] collective-permute-done(%cp-start)
    CHECK: %rs-start = ((f32[8,6]), f32[2,6]) async-start(%x), calls=%rs.async, metadata={op_name="rs"}
    CHECK: %rs-done = f32[2,6] async-done(%rs-start), calls=%rs.async, metadata={op_name="rs"}
    CHECK: %a2a-start = ((f32[8,6]), f32[8,6]) async-start(%x), calls=%a2a.async
    CHECK: %a2a-done = f32[8,6] async-done(%a2a-start), calls=%a2a.async
    CHECK: %n = f32[8,6] negate(%ar-done)
    CHECK: ROOT %t = (f32[32,6], f32[8,6], f32[8,6], f32[2,6], f32[8,6]) tuple(%ag-done, %n, %cp-done, %rs-done, %a2a-done)
  )");
  EXPECT_EQ(out.explanation.size(), 5u);
  ExpectSameResults(kEveryKind, out.text, 4);
}

TEST(AsyncCollectives, RootAndLoopBodiesAndControlEdges) {
  constexpr std::string_view kHlo = R"(
HloModule loop, num_partitions=2
%cond {
  %cp = (s32[], f32[4]) parameter(0)
  %ci = s32[] get-tuple-element(%cp), index=0
  %limit = s32[] constant(3)
  ROOT %lt = pred[] compare(%ci, %limit), direction=LT
}
%body {
  %bp = (s32[], f32[4]) parameter(0)
  %bi = s32[] get-tuple-element(%bp), index=0
  %bx = f32[4] get-tuple-element(%bp), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%bi, %one)
  %sent = f32[4] collective-permute(%bx), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %twice = f32[4] add(%sent, %sent), control-predecessors={%sent}
  ROOT %bt = (s32[], f32[4]) tuple(%next, %twice)
}
ENTRY %main {
  %x = f32[4] parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4]) tuple(%zero, %x)
  %w = (s32[], f32[4]) while(%init), condition=%cond, body=%body
  %y = f32[4] get-tuple-element(%w), index=1
  ROOT %g = f32[8] all-gather(%y), channel_id=2, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
}
)";
  Outcome out = Convert(kHlo);
  ASSERT_TRUE(out.changed);
  EXPECT_CHECKS(out.text, R"(
    CHECK: %sent-start = (f32[4], f32[4]) collective-permute-start(%bx)
    CHECK: %sent-done = f32[4] collective-permute-done(%sent-start)
    CHECK: %twice = f32[4] add(%sent-done, %sent-done), control-predecessors={%sent-done}
    CHECK: %g-start = (f32[4], f32[8]) all-gather-start(%y)
    CHECK: ROOT %g-done = f32[8] all-gather-done(%g-start)
  )");
  ExpectSameResults(kHlo, out.text, 2);
}

TEST(AsyncCollectives, ConvertsOnlyTheKindsAsked) {
  AsyncCollectivesOptions options;
  options.all_gather = false;
  options.all_reduce = false;
  options.reduce_scatter = false;
  options.all_to_all = false;
  Outcome out = Convert(kEveryKind, options);
  ASSERT_TRUE(out.changed);
  EXPECT_CHECKS(out.text, R"(
    CHECK-COUNT-1: all-gather(
    CHECK-COUNT-1: all-reduce(
    CHECK-COUNT-1: reduce-scatter(
    CHECK-COUNT-1: all-to-all(
    CHECK-NOT: async-start
    CHECK: collective-permute-start(%x)
  )");
  ExpectSameResults(kEveryKind, out.text, 4);
}

TEST(AsyncCollectives, LeavesAsynchronousModulesAlone) {
  constexpr std::string_view kHlo = R"(
HloModule already, num_partitions=2
%a2a.async {
  %p = f32[4,2] parameter(0)
  ROOT %a2a = f32[4,2] all-to-all(%p), channel_id=3, replica_groups={{0,1}}, dimensions={0}
}
ENTRY %main {
  %x = f32[4,2] parameter(0)
  %ag-start = (f32[4,2], f32[8,2]) all-gather-start(%x), channel_id=1, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
  %cp-start = (f32[4,2], f32[4,2], u32[], u32[]) collective-permute-start(%x), channel_id=2, source_target_pairs={{0,1},{1,0}}
  %a2a-start = ((f32[4,2]), f32[4,2]) async-start(%x), calls=%a2a.async
  %ag-done = f32[8,2] all-gather-done(%ag-start)
  %cp-done = f32[4,2] collective-permute-done(%cp-start)
  %a2a-done = f32[4,2] async-done(%a2a-start), calls=%a2a.async
  ROOT %t = (f32[8,2], f32[4,2], f32[4,2]) tuple(%ag-done, %cp-done, %a2a-done)
}
)";
  auto module = Parse(kHlo);
  ASSERT_TRUE(module);
  const std::string before = ir::PrintModule(*module);
  AsyncCollectives pass;
  Expected<bool> changed = pass.Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.error().message;
  EXPECT_FALSE(*changed);
  EXPECT_EQ(ir::PrintModule(*module), before);
  EXPECT_TRUE(pass.Explain().empty());
  // And running it again on its own output changes nothing either.
  auto converted = Parse(Convert(kEveryKind).text);
  ASSERT_TRUE(converted);
  const std::string once = ir::PrintModule(*converted);
  changed = pass.Run(*converted);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(ir::PrintModule(*converted), once);
}

}  // namespace
}  // namespace loom::pass
