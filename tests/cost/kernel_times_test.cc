// Where one device's compute goes (cost/kernel_times.h), on HLO text with a
// counted loop: each kernel's runs follow the trip counts, the times are the
// cost model's, and the total is the step's compute.
#include "cost/kernel_times.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "cost/step_time.h"
#include "cost/target_cost_model.h"
#include "ir/collective_groups.h"
#include "ir/parser.h"

namespace loom::cost {
namespace {

constexpr const char* kLoop = R"(
HloModule loop

%cond (s: (s32[], f32[64,64])) -> pred[] {
  %s = (s32[], f32[64,64]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(4)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (s: (s32[], f32[64,64])) -> (s32[], f32[64,64]) {
  %s = (s32[], f32[64,64]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %x = f32[64,64] get-tuple-element(%s), index=1
  %d = f32[64,64] dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %t = f32[64,64] tanh(%d)
  %e = f32[64,64] exponential(%t)
  ROOT %r = (s32[], f32[64,64]) tuple(%next, %e)
}

ENTRY %main {
  %x = f32[64,64] parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[64,64]) tuple(%zero, %x)
  %w = (s32[], f32[64,64]) while(%init), condition=%cond, body=%body
  %y = f32[64,64] get-tuple-element(%w), index=1
  ROOT %n = f32[64,64] negate(%y)
}
)";

TEST(TopKernels, RunsFollowTheTripCountsAndTheTotalIsTheStepsCompute) {
  auto module = ir::ParseModule(kLoop);
  ASSERT_TRUE(module.ok()) << module.error().ToString("<test>");
  auto target = FindTarget("dgx-h100");
  ASSERT_TRUE(target.ok());
  const TargetCostModel model(*target);
  const KernelTimes top = TopKernels(**module, model, 10);
  // The dot and the tanh -> exponential kernel four times each, the negate once.
  ASSERT_EQ(top.kernels.size(), 3u);
  EXPECT_EQ(top.kernel_runs, 9);
  const ComputeTimes times(model);
  const ir::Computation* body = (*module)->FindComputation("body");
  for (const KernelTime& kernel : top.kernels) {
    EXPECT_EQ(kernel.runs, kernel.root->parent() == body ? 4 : 1) << kernel.root->name();
    EXPECT_EQ(kernel.seconds_per_run, times.Of(*kernel.root)) << kernel.root->name();
  }
  // The exponential roots a kernel with the tanh in it.
  const auto exponential = std::find_if(top.kernels.begin(), top.kernels.end(),
                                        [](const KernelTime& k) { return k.root->name() == "e"; });
  ASSERT_NE(exponential, top.kernels.end());
  EXPECT_EQ(exponential->fused, 1);
  // Longest first, and the whole is the estimated step's compute.
  for (size_t k = 1; k < top.kernels.size(); ++k) {
    EXPECT_GE(top.kernels[k - 1].Total(), top.kernels[k].Total());
  }
  const StepEstimate step = EstimateStep(**module, model, ir::DeviceGrid{1, 1});
  EXPECT_NEAR(top.total_seconds, step.compute_seconds, 1e-12 * step.compute_seconds);
  // Asked for one, it keeps the longest.
  const KernelTimes one = TopKernels(**module, model, 1);
  ASSERT_EQ(one.kernels.size(), 1u);
  EXPECT_EQ(one.kernels[0].root, top.kernels[0].root);
  EXPECT_EQ(one.total_seconds, top.total_seconds);
}

}  // namespace
}  // namespace loom::cost
