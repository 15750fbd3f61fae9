// async-collectives with options the CLI does not take (the kinds to
// convert). The text tests of the pass, transformed and not, are lit tests
// in tests/lit/async-collectives/.
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

}  // namespace
}  // namespace loom::pass
