// The cost-model gate of collective-matmul on real targets: a large product
// behind a small gather is rewritten, a thin product behind a large gather
// on a fast native collective is declined, and of two candidates of one dot
// the one that saves more is taken.
#include "pass/collective_matmul_gate.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <tuple>

#include "ir/parser.h"

namespace loom::pass {
namespace {

struct GateRun {
  bool changed = false;
  std::vector<Decision> decisions;
  std::string Explain() const {
    std::string lines;
    for (const Decision& d : decisions) lines += FormatDecision(d) + "\n";
    return lines;
  }
};

GateRun RunGate(const std::string& hlo, const std::string& target_name) {
  auto module = ir::ParseModule(hlo);
  EXPECT_TRUE(module.ok()) << module.error().ToString();
  auto target = cost::FindTarget(target_name);
  EXPECT_TRUE(target.ok());
  CollectiveMatmulOptions options;
  options.gate = MakeCostGate(std::make_shared<cost::TargetCostModel>(*target));
  CollectiveMatmul pass(options);
  Expected<bool> changed = pass.Run(**module);
  EXPECT_TRUE(changed.ok());
  return {changed.ok() && *changed, pass.decisions()};
}

// x: bf16[512, K] gathered on N devices to [512 N, K], times w: bf16[K, F].
std::string GatherDot(int64_t k, int64_t f, int64_t n = 4) {
  return fmt::format(R"(
HloModule gather_dot, num_partitions={2}
ENTRY %main {{
  %x = bf16[512,{0}] parameter(0)
  %w = bf16[{0},{1}] parameter(1)
  %x.full = bf16[{3},{0}] all-gather(%x), channel_id=1, replica_groups=[1,{2}]<=[{2}], dimensions={{0}}, use_global_device_ids=true
  ROOT %y = bf16[{3},{1}] dot(%x.full, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
)",
                     k, f, n, 512 * n);
}

TEST(CollectiveMatmulGate, LargeProductBehindASmallGatherIsRewritten) {
  // "Large" and "small" relative to each target: the gather takes well
  // under the product's time there, but not a negligible share of it.
  for (const auto& [target, k, f] :
       {std::tuple{"tpu-v4-4x4x4", 8192, 4096}, std::tuple{"dgx-h100", 8192, 4096},
        std::tuple{"loopback-2gbit", 4096, 512}}) {
    GateRun run = RunGate(GatherDot(k, f), target);
    ASSERT_EQ(run.decisions.size(), 1u);
    EXPECT_TRUE(run.decisions[0].rewritten) << target << ": " << run.Explain();
    EXPECT_NE(run.decisions[0].reason.find(fmt::format("on {}: original", target)),
              std::string::npos)
        << run.Explain();
  }
}

TEST(CollectiveMatmulGate, ThinProductBehindALargeGatherOnAFastCollectiveIsDeclined) {
  // A 4-chip x ring with wraparound (the native gather uses both
  // directions), an 8-chip one, and 16 GPUs on two DGX nodes (the native
  // gather crosses nodes through all eight NICs, the ring through one).
  for (const auto& [target, n] :
       {std::pair{"tpu-v4-4x4x4", 4}, std::pair{"tpu-v4-8x8x8", 8}, std::pair{"dgx-h100-x4", 16}}) {
    GateRun run = RunGate(GatherDot(8192, 1, n), target);
    ASSERT_EQ(run.decisions.size(), 1u);
    EXPECT_FALSE(run.decisions[0].rewritten) << target << ": " << run.Explain();
    EXPECT_NE(run.decisions[0].reason.find("the ring does not pay"), std::string::npos)
        << run.Explain();
    EXPECT_FALSE(run.changed);
  }
}

TEST(CollectiveMatmulGate, OfTwoCandidatesOfOneDotTheBetterIsTaken) {
  // Both collectives sit on one dot; which ring saves more depends on the
  // target, and the gate must take that one.
  const std::string hlo = R"(
HloModule two, num_partitions=4
%add (p: bf16[], q: bf16[]) -> bf16[] {
  %p = bf16[] parameter(0)
  %q = bf16[] parameter(1)
  ROOT %s = bf16[] add(%p, %q)
}
ENTRY %main {
  %x = bf16[1024,16384] parameter(0)
  %w = bf16[16384,2048] parameter(1)
  %x.full = bf16[4096,16384] all-gather(%x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  %p = bf16[4096,2048] dot(%x.full, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %out = bf16[1024,2048] reduce-scatter(%p), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=%add
}
)";
  // On tpu-v4-8x8x8 the 4 devices are half of an x ring: no wraparound, so
  // the native collectives run one way like the ring.
  for (const char* target_name : {"tpu-v4-8x8x8", "dgx-h100", "loopback-2gbit"}) {
    GateRun run = RunGate(hlo, target_name);
    ASSERT_EQ(run.decisions.size(), 2u) << run.Explain();
    // One is rewritten, the other declined (because the first is better,
    // or because its own ring does not pay).
    const bool first = run.decisions[0].rewritten;
    const Decision& taken = run.decisions[first ? 0 : 1];
    const Decision& declined = run.decisions[first ? 1 : 0];
    EXPECT_TRUE(taken.rewritten) << run.Explain();
    EXPECT_FALSE(declined.rewritten) << run.Explain();
    // The gate's own estimates agree with the choice.
    auto module = ir::ParseModule(hlo);
    ASSERT_TRUE(module.ok());
    auto target = cost::FindTarget(target_name);
    const cost::TargetCostModel model(*target);
    std::map<std::string, double> saving;
    CollectiveMatmulOptions options;
    options.gate = [&](const Candidate& c) {
      const RingEstimate e = EstimateRing(model, c);
      saving[c.collective] = e.original - std::min(e.unidirectional, e.bidirectional);
      return GateVerdict{true, RingDirection::kUnidirectional, RingForm::kUnrolled,
                         saving[c.collective], ""};
    };
    CollectiveMatmul probe(options);
    ASSERT_TRUE(probe.Run(**module).ok());
    const std::string better = saving["x.full"] > saving["out"] ? "x.full" : "out";
    EXPECT_EQ(taken.collective, better) << target_name << ": " << run.Explain();
  }
}

TEST(CollectiveMatmulGate, EstimatesFollowTheRingFormulas) {
  auto module = ir::ParseModule(GatherDot(1024, 4096));
  ASSERT_TRUE(module.ok());
  auto target = cost::FindTarget("tpu-v4-4x4x4");
  const cost::TargetCostModel model(*target);
  std::optional<RingEstimate> estimate;
  CollectiveMatmulOptions options;
  options.gate = [&](const Candidate& c) {
    estimate = EstimateRing(model, c);
    EXPECT_EQ(c.shard_bytes, 512 * 1024 * 2);
    EXPECT_EQ(c.ring_pairs.size(), 4u);
    return GateVerdict{};
  };
  CollectiveMatmul pass(options);
  ASSERT_TRUE(pass.Run(**module).ok());
  ASSERT_TRUE(estimate);
  const double tc = estimate->step_compute;
  const double tp = estimate->step_transfer;
  EXPECT_DOUBLE_EQ(estimate->unidirectional, 3 * std::max(tc, tp) + tc);
  // One shard between neighbours of the x ring (wraparound): a hop and
  // 1 MiB at 45 GB/s, plus the permute's launch.
  EXPECT_DOUBLE_EQ(tp, 1e-6 + 1048576 / 45e9 + 1e-6);
  EXPECT_DOUBLE_EQ(estimate->original, estimate->collective + estimate->dot);
}

}  // namespace
}  // namespace loom::pass
