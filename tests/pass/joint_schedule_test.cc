// joint-schedule against closed forms on two chips joined by one link each
// way (1 GB/s, 1 us), compute at 1 TFLOP/s: a permute the next dot waits
// for shares the link with an all-gather needed only at the end.
#include "pass/joint_schedule.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ir/printer.h"
#include "module_testing.h"
#include "sim/simulator.h"

namespace loom::pass {
namespace {

cost::Target TwoChips() {
  cost::ComputeSpec compute;
  compute.peak_flops = {{"f32", 1e12}};
  compute.memory_bytes_per_second = 1e12;
  compute.memory_bytes = 1e9;
  compute.launch_seconds = 1e-6;
  cost::TorusTopology torus;
  torus.dims = {2, 1, 1};
  torus.wraparound = {false, false, false};
  torus.link = {1e9, 1e-6};
  return cost::Target("two-chips", "", compute, torus);
}

double SimulatedStep(const ir::Module& module, const cost::Target& target) {
  auto report = sim::Simulate(module, target);
  EXPECT_TRUE(report.ok()) << report.error().ToString();
  return report.ok() ? report->step_seconds : 0;
}

// A 1 MB permute 0 -> 1 that the dot waits for, and an all-gather of 1 MB
// shards over {0,1} started with it (its 0 -> 1 flow on the same link);
// `between` goes between the gather's done and the permute's.
std::string Module(std::string_view gather_done_at, std::string_view between = "") {
  return fmt::format(
      R"(
HloModule two_axes, num_partitions=2
ENTRY %main {{
  %a = f32[250000] parameter(0)
  %b = f32[250000] parameter(1)
  %w = f32[1000,1000] parameter(2)
  %g-start = (f32[250000], f32[500000]) all-gather-start(%b), channel_id=2, replica_groups={{{{0,1}}}}, dimensions={{0}}, use_global_device_ids=true
  %p-start = (f32[250000], f32[250000]) collective-permute-start(%a), channel_id=1, source_target_pairs={{{{0,1}}}}
  {}{}
  %p-done = f32[250000] collective-permute-done(%p-start)
  %x = f32[250,1000] bitcast(%p-done)
  %d = f32[250,1000] dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  {}
  ROOT %t = (f32[250,1000], f32[500000]) tuple(%d, %g-done)
}}
)",
      gather_done_at == "early" ? "%g-done = f32[500000] all-gather-done(%g-start)\n  " : "",
      between, gather_done_at == "late" ? "%g-done = f32[500000] all-gather-done(%g-start)" : "");
}

TEST(JointSchedule, HoldsBackTheGatherBehindThePermuteTheDotWaitsFor) {
  // Per axis: the permute's flow and the gather's 0 -> 1 flow cross link
  // 0 -> 1 at half rate from 1 us on, so both end at 1 us + 2 ms, and then
  // the dot runs (0.5 GFLOP: 0.5 ms, and a 1 us launch). Held back behind
  // the permute's done, the gather starts at 1 us + 1 ms, when the permute
  // had the link to itself; the dot is over before the gather (1 us + 1 ms
  // more) ends the step.
  auto module = test::ParseOrFail(Module("late"));
  ASSERT_TRUE(module);
  const cost::Target target = TwoChips();
  const double per_axis = SimulatedStep(*module, target);
  JointSchedule pass(target);
  auto changed = pass.Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.error().ToString();
  EXPECT_TRUE(*changed);
  test::ExpectVerifies(*module);
  const double joint = SimulatedStep(*module, target);
  EXPECT_NEAR(per_axis, 1e-6 + 2e-3 + 0.5e-3 + 1e-6, 1e-9);
  EXPECT_NEAR(joint, 2 * (1e-6 + 1e-3), 1e-9);
  const std::string printed = ir::PrintModule(*module);
  EXPECT_LT(printed.find("%p-done ="), printed.find("%g-start ="));
  ASSERT_FALSE(pass.Explain().empty());
  EXPECT_NE(pass.Explain().front().find("held back %g-start (all-gather) behind %p-done "
                                        "(collective-permute) in main: 1 shared link(s)"),
            std::string::npos)
      << pass.Explain().front();
}

TEST(JointSchedule, DoesNotMoveAStartPastWhatNeedsItsDone) {
  // The gather's result is used before the permute's done: its start cannot
  // go behind that done, so that move is not even tried. The one tried (two
  // simulations: the module as given, and that) holds the permute back
  // behind the gather instead, which makes the step longer; the order stays.
  const std::string text = Module("early", "%use = f32[500000] negate(%g-done)\n  ");
  auto module = test::ParseOrFail(text);
  ASSERT_TRUE(module);
  const std::string before = ir::PrintModule(*module);
  JointSchedule pass(TwoChips());
  auto changed = pass.Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.error().ToString();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(ir::PrintModule(*module), before);
  ASSERT_FALSE(pass.Explain().empty());
  EXPECT_NE(pass.Explain().back().find("with 0 move(s), 2 simulation(s)"), std::string::npos)
      << pass.Explain().back();
}

}  // namespace
}  // namespace loom::pass
