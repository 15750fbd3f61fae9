// Which ops the fusion model puts inside their users' kernels
// (analysis/fusion.h), on HLO text: the elementwise chains it must fuse and
// the producers it must not.
#include "analysis/fusion.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "ir/parser.h"

namespace loom::analysis {
namespace {

std::unique_ptr<ir::Module> Parse(const std::string& text) {
  auto module = ir::ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.error().ToString();
  return std::move(*module);
}

constexpr const char* kModule = R"(
HloModule fusion

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main {
  %x = f32[64,32] parameter(0)
  %w = f32[32,16] parameter(1)
  %h = f32[64,16] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %half = f32[] constant(0.5)
  %b = f32[64,16] broadcast(%half), dimensions={}
  %m = f32[64,16] multiply(%h, %b)
  %t = f32[64,16] tanh(%m)
  %e = f32[64,16] exponential(%t)
  %u = f32[64,16] add(%e, %b)
  %zero = f32[] constant(0)
  %r = f32[64] reduce(%u, %zero), dimensions={1}, to_apply=%add
  %c = f32[64,16] convert(%h)
  %w2 = f32[16,16] parameter(2)
  %d = f32[64,16] dot(%c, %w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %n = f32[64,16] negate(%u)
  ROOT %out = (f32[64], f32[64,16], f32[64,16]) tuple(%r, %d, %n)
}
)";

TEST(FusionPlan, FusesElementwiseChainsIntoTheirKernel) {
  auto module = Parse(kModule);
  ASSERT_NE(module, nullptr);
  const ir::Computation& entry = *module->entry();
  const FusionPlan plan(entry);
  const auto fused = [&](const char* name) {
    return plan.FusedIntoUsers(*entry.FindInstruction(name));
  };
  // multiply -> tanh -> exponential feed one user each: one kernel.
  EXPECT_TRUE(fused("m"));
  EXPECT_TRUE(fused("t"));
  EXPECT_TRUE(fused("e"));
  // A broadcast is duplicated into each of its consumers.
  EXPECT_TRUE(fused("b"));
  // %u has two users (the reduce and the negate): it stays a kernel.
  EXPECT_FALSE(fused("u"));
  // Dots never fuse, nor does a value a dot reads (%c) or the tuple takes.
  EXPECT_FALSE(fused("h"));
  EXPECT_FALSE(fused("c"));
  EXPECT_FALSE(fused("d"));
  EXPECT_FALSE(fused("n"));
  // The reduce is a kernel of its own (an input fusion root).
  EXPECT_FALSE(fused("r"));
  EXPECT_EQ(plan.fused_count(), 4u);
}

TEST(FusionPlan, FusesAReducesInputAndADynamicUpdateSlicesUpdateOnly) {
  auto module = Parse(R"(
HloModule fusion2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main {
  %x = f32[64,16] parameter(0)
  %sq = f32[64,16] multiply(%x, %x)
  %zero = f32[] constant(0)
  %r = f32[64] reduce(%sq, %zero), dimensions={1}, to_apply=%add
  %buffer = f32[128,16] parameter(1)
  %big = f32[128,16] negate(%buffer)
  %update = f32[64,16] tanh(%x)
  %i = s32[] parameter(2)
  %j = s32[] constant(0)
  %dus = f32[128,16] dynamic-update-slice(%big, %update, %i, %j)
  ROOT %out = (f32[64], f32[128,16]) tuple(%r, %dus)
}
)");
  ASSERT_NE(module, nullptr);
  const ir::Computation& entry = *module->entry();
  const FusionPlan plan(entry);
  EXPECT_TRUE(plan.FusedIntoUsers(*entry.FindInstruction("sq")));
  EXPECT_TRUE(plan.FusedIntoUsers(*entry.FindInstruction("update")));
  // The buffer updated in place is not computed inside the update.
  EXPECT_FALSE(plan.FusedIntoUsers(*entry.FindInstruction("big")));
}

}  // namespace
}  // namespace loom::analysis
