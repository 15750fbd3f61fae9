// collective-matmul on hand-written modules: CHECK lines on the printed
// output for each form, the cases that must be left alone (with the reason
// the pass gives), and for every rewrite, execution on the threads backend
// against the original.
#include "pass/collective_matmul.h"

#include <gtest/gtest.h>

#include <cstring>

#include "exec/runner.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "pass/check_lines.h"
#include "pass/module_testing.h"
#include "pass/registry.h"

namespace loom::pass {
namespace {

using test::ExpectSameResults;
using test::ExpectVerifies;
constexpr auto Parse = test::ParseOrFail;

struct Outcome {
  bool changed = false;
  std::string text;
  std::vector<Decision> decisions;
  std::string Explain() const {
    std::string lines;
    for (const Decision& d : decisions) lines += FormatDecision(d) + "\n";
    return lines;
  }
};

// Runs the pass; the output must verify and print as a fixed point.
Outcome Rewrite(std::string_view hlo, CollectiveMatmulOptions options = {}) {
  auto module = Parse(hlo);
  if (!module) return {};
  CollectiveMatmul pass(options);
  Expected<bool> changed = pass.Run(*module);
  EXPECT_TRUE(changed.ok()) << changed.error().message;
  Outcome outcome{changed.ok() && *changed, ir::PrintModule(*module), pass.decisions()};
  Expected<ir::VerifyReport> verified = ir::VerifyModule(*module);
  EXPECT_TRUE(verified.ok()) << verified.error().ToString() << "\n" << outcome.text;
  auto reparsed = Parse(outcome.text);
  if (reparsed) {
    EXPECT_EQ(ir::PrintModule(*reparsed), outcome.text);
  }
  return outcome;
}

CollectiveMatmulOptions With(RingDirection direction, RingForm form) {
  CollectiveMatmulOptions options;
  options.min_bytes = 0;
  options.direction = direction;
  options.form = form;
  return options;
}

const CollectiveMatmulOptions kUniUnrolled =
    With(RingDirection::kUnidirectional, RingForm::kUnrolled);
const CollectiveMatmulOptions kUniLoop = With(RingDirection::kUnidirectional, RingForm::kLoop);
const CollectiveMatmulOptions kBiUnrolled =
    With(RingDirection::kBidirectional, RingForm::kUnrolled);
const CollectiveMatmulOptions kBiLoop = With(RingDirection::kBidirectional, RingForm::kLoop);

#define EXPECT_CHECKS(text, checks) EXPECT_EQ("", test::CheckLines(text, checks))

// --- all-gather -> dot ---------------------------------------------------------

// Gathers along a free or batch dimension, through a transpose and reshape,
// and over replicas are lit tests: tests/lit/collective-matmul/gather_*.hlo.

TEST(CollectiveMatmul, GatherContractingDimensionAccumulatesInF32) {
  constexpr std::string_view kHlo = R"(
HloModule ag_contracting, num_partitions=4
%add (p: f32[], q: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  %q = f32[] parameter(1)
  ROOT %s = f32[] add(%p, %q)
}
ENTRY %main {
  %x = bf16[3,2] parameter(0)
  %w = bf16[8,5] parameter(1)
  %x.full = bf16[3,8] all-gather(%x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={1}, use_global_device_ids=true
  ROOT %y = bf16[3,5] dot(%x.full, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)";
  for (const auto& options : {kUniUnrolled, kUniLoop, kBiUnrolled, kBiLoop}) {
    Outcome out = Rewrite(kHlo, options);
    ASSERT_TRUE(out.changed) << out.Explain();
    EXPECT_CHECKS(out.text, R"(
      CHECK: bf16[2,5] dynamic-slice(%w
      CHECK: f32[3,5] dot(
      CHECK: f32[3,5] add(
      CHECK: bf16[3,5] convert(
    )");
    // The sum over the contracting dimension is split: bf16 rounding of one
    // product against four f32 partials rounded once.
    ExpectSameResults(kHlo, out.text, 4, 1.0 / 64);
  }
}

TEST(CollectiveMatmul, SubgroupsOfAMeshUseAPositionTable) {
  // Two groups of 2 on 4 devices, ring order = group order: {0,2} and {1,3}.
  constexpr std::string_view kHlo = R"(
HloModule ag_mesh, num_partitions=4
ENTRY %main {
  %x = f32[2,3] parameter(0)
  %w = f32[3,4] parameter(1)
  %x.full = f32[4,3] all-gather(%x), channel_id=1, replica_groups=[2,2]<=[2,2]T(1,0), dimensions={0}, use_global_device_ids=true
  ROOT %y = f32[4,4] dot(%x.full, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)";
  Outcome out = Rewrite(kHlo, kUniUnrolled);
  ASSERT_TRUE(out.changed) << out.Explain();
  EXPECT_CHECKS(out.text, R"(
    CHECK: s32[4] constant({0, 0, 1, 1})
    CHECK: source_target_pairs={{0,2},{2,0},{1,3},{3,1}}
  )");
  ExpectSameResults(kHlo, out.text, 4);
}

// --- dot -> reduce-scatter / all-reduce -----------------------------------------

// The reduce-scatter ring in every mode is a lit test:
// tests/lit/collective-matmul/reduce_scatter.hlo.

TEST(CollectiveMatmul, ReduceScatterOfABatchDimensionThroughConvert) {
  constexpr std::string_view kHlo = R"(
HloModule rs_batch, num_partitions=6
%add (p: bf16[], q: bf16[]) -> bf16[] {
  %p = bf16[] parameter(0)
  %q = bf16[] parameter(1)
  ROOT %s = bf16[] add(%p, %q)
}
ENTRY %main {
  %a = f32[6,3,4] parameter(0)
  %b = f32[6,4,5] parameter(1)
  %p = f32[6,3,5] dot(%a, %b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  %c = bf16[6,3,5] convert(%p)
  ROOT %out = bf16[1,3,5] reduce-scatter(%c), channel_id=1, replica_groups={{0,1,2,3,4,5}}, dimensions={0}, use_global_device_ids=true, to_apply=%add
}
)";
  for (const auto& options : {kUniUnrolled, kUniLoop}) {
    Outcome out = Rewrite(kHlo, options);
    ASSERT_TRUE(out.changed) << out.Explain();
    EXPECT_CHECKS(out.text, R"(
      CHECK: f32[1,3,4] dynamic-slice(%a
      CHECK: f32[1,4,5] dynamic-slice(%b
      CHECK: f32[1,3,5] dot(
      CHECK: bf16[1,3,5] convert(
    )");
    ExpectSameResults(kHlo, out.text, 6);
  }
}

TEST(CollectiveMatmul, AllReduceSplitsAndTheGatherFeedsTheNextDot) {
  constexpr std::string_view kHlo = R"(
HloModule ar, num_partitions=4
%add (p: f32[], q: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  %q = f32[] parameter(1)
  ROOT %s = f32[] add(%p, %q)
}
ENTRY %main {
  %a = f32[8,3] parameter(0)
  %b = f32[3,5] parameter(1)
  %c = f32[5,2] parameter(2)
  %p = f32[8,5] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %s = f32[8,5] all-reduce(%p), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%add
  ROOT %y = f32[8,2] dot(%s, %c), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)";
  for (const auto& options : {kUniUnrolled, kUniLoop}) {
    Outcome out = Rewrite(kHlo, options);
    ASSERT_TRUE(out.changed) << out.Explain();
    ASSERT_EQ(out.decisions.size(), 2u) << out.Explain();
    EXPECT_EQ(out.decisions[0].form, "dot -> all-reduce (output dimension 0, lhs free, N=4)");
    EXPECT_TRUE(out.decisions[1].rewritten) << out.Explain();
    EXPECT_EQ(out.decisions[1].collective, "s.gather");
    EXPECT_CHECKS(out.text, R"(
      CHECK-NOT: all-reduce
      CHECK-NOT: all-gather
      CHECK: f32[2,5] dot(
      CHECK: f32[2,2] dot(
    )");
    // Both halves are exact: the all-reduce folds chunk q in the order the
    // reduce-scatter ring sums block q.
    ExpectSameResults(kHlo, out.text, 4);
  }
}

// --- what must not be rewritten --------------------------------------------------
// The not-transformed cases are lit tests: tests/lit/collective-matmul/declines_*.hlo.

constexpr std::string_view kGatherWithTwoUsers = R"(
HloModule m, num_partitions=2
ENTRY %main {
  %x = f32[2,3] parameter(0)
  %w = f32[3,4] parameter(1)
  %g = f32[4,3] all-gather(%x), channel_id=1, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
  %y = f32[4,4] dot(%g, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %n = f32[4,3] negate(%g)
  ROOT %t = (f32[4,4], f32[4,3]) tuple(%y, %n)
}
)";

TEST(CollectiveMatmul, GatherWithAnotherUserIsKeptForItWhenAsked) {
  CollectiveMatmulOptions options = kUniUnrolled;
  options.keep_gather_for_other_users = true;
  Outcome out = Rewrite(kGatherWithTwoUsers, options);
  ASSERT_TRUE(out.changed) << out.Explain();
  EXPECT_CHECKS(out.text, R"(
    CHECK-COUNT-1: all-gather(
    CHECK: collective-permute(
    CHECK: negate(%g)
  )");
  ExpectSameResults(kGatherWithTwoUsers, out.text, 2);
}

TEST(CollectiveMatmul, OfTwoCandidatesTheLargerCollectiveWins) {
  constexpr std::string_view kHlo = R"(
HloModule two, num_partitions=2
%add (p: f32[], q: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  %q = f32[] parameter(1)
  ROOT %s = f32[] add(%p, %q)
}
ENTRY %main {
  %x = f32[2,3] parameter(0)
  %w = f32[3,64] parameter(1)
  %g = f32[4,3] all-gather(%x), channel_id=1, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
  %p = f32[4,64] dot(%g, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %out = f32[4,32] reduce-scatter(%p), channel_id=2, replica_groups={{0,1}}, dimensions={1}, use_global_device_ids=true, to_apply=%add
}
)";
  Outcome out = Rewrite(kHlo, kUniUnrolled);
  ASSERT_TRUE(out.changed);
  ASSERT_EQ(out.decisions.size(), 2u) << out.Explain();
  EXPECT_FALSE(out.decisions[0].rewritten);
  EXPECT_EQ(out.decisions[0].collective, "g");
  EXPECT_NE(out.decisions[0].reason.find("%out of the same dot is the better candidate"),
            std::string::npos)
      << out.Explain();
  EXPECT_TRUE(out.decisions[1].rewritten);
  EXPECT_CHECKS(out.text, R"(
    CHECK: all-gather(
    CHECK-NOT: reduce-scatter
  )");
  ExpectSameResults(kHlo, out.text, 2);
}

TEST(CollectiveMatmulRegistry, ParsesOptions) {
  auto pass = CreatePass("collective-matmul{direction=bidirectional, form=unrolled, min-bytes=4K}");
  ASSERT_TRUE(pass.ok()) << pass.error().message;
  EXPECT_EQ((*pass)->name(), "collective-matmul");
  EXPECT_FALSE(CreatePass("collective-matmul{direction=sideways}").ok());
  EXPECT_FALSE(CreatePass("collective-matmul{colour=blue}").ok());
  EXPECT_FALSE(CreatePass("collective-matmul{min-bytes=-3}").ok());
  EXPECT_FALSE(CreatePass("collective-matmul{min-bytes=9223372036854775807M}").ok());
  EXPECT_FALSE(CreatePass("collective-matmul{max-unrolled-steps=0}").ok());
  EXPECT_FALSE(CreatePass("collective-matmul{permutes-in-flight=2K}").ok());
  EXPECT_FALSE(CreatePass("no-such-pass").ok());
  auto pipeline = ParsePipeline("collective-matmul{form=loop,min-bytes=0},collective-matmul");
  ASSERT_TRUE(pipeline.ok()) << pipeline.error().message;
  EXPECT_EQ(pipeline->passes().size(), 2u);
}

}  // namespace
}  // namespace loom::pass
