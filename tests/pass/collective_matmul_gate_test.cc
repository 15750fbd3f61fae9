// The whole-step gate of collective-matmul on real targets: a product that
// nothing else can hide its gather behind gets a ring; a thin product behind
// a large gather on a fast native collective does not; a collective the
// schedule already hides behind independent work is left alone (the
// baseline is async-collectives + schedule, not the synchronous program);
// of two candidates of one dot the one whose scheduled step is shorter is
// taken; and the program is never estimated slower than scheduling alone.
#include "pass/collective_matmul_gate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <tuple>

#include "ir/clone.h"
#include "ir/parser.h"

namespace loom::pass {
namespace {

struct GateRun {
  bool changed = false;
  std::vector<Decision> decisions;
  std::vector<std::string> explanation;
  std::string Explain() const {
    std::string lines;
    for (const std::string& line : explanation) lines += line + "\n";
    return lines;
  }
  const Decision* Of(const std::string& collective) const {
    for (const Decision& d : decisions) {
      if (d.collective == collective) return &d;
    }
    return nullptr;
  }
};

std::shared_ptr<const cost::TargetCostModel> ModelOf(const std::string& name) {
  auto target = cost::FindTarget(name);
  EXPECT_TRUE(target.ok()) << name;
  return std::make_shared<cost::TargetCostModel>(*target);
}

GateRun RunGate(ir::Module& module, std::shared_ptr<const cost::TargetCostModel> model) {
  GatedCollectiveMatmul pass(CollectiveMatmulOptions{}, std::move(model));
  Expected<bool> changed = pass.Run(module);
  EXPECT_TRUE(changed.ok()) << changed.error().ToString();
  return {changed.ok() && *changed, pass.Decisions(), pass.Explain()};
}

GateRun RunGate(ir::Module& module, const std::string& target) {
  return RunGate(module, ModelOf(target));
}

GateRun RunGate(const std::string& hlo, const std::string& target) {
  auto module = ir::ParseModule(hlo);
  EXPECT_TRUE(module.ok()) << module.error().ToString();
  return RunGate(**module, target);
}

double Scheduled(const ir::Module& module, const std::string& target) {
  Expected<double> seconds = ScheduledStepSeconds(module, *ModelOf(target), ScheduleOptions{});
  EXPECT_TRUE(seconds.ok()) << seconds.error().ToString();
  return seconds.ok() ? *seconds : 0;
}

// x: bf16[R, K] gathered on N devices to [R N, K], times w: bf16[K, F].
std::string GatherDot(int64_t k, int64_t f, int64_t n = 4, int64_t rows = 512) {
  return fmt::format(R"(
HloModule gather_dot, num_partitions={2}
ENTRY %main {{
  %x = bf16[{4},{0}] parameter(0)
  %w = bf16[{0},{1}] parameter(1)
  %x.full = bf16[{3},{0}] all-gather(%x), channel_id=1, replica_groups=[1,{2}]<=[{2}], dimensions={{0}}, use_global_device_ids=true
  ROOT %y = bf16[{3},{1}] dot(%x.full, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
)",
                     k, f, n, rows * n, rows);
}

// (On an H100 a ring step's product needs rows enough to fill the 132 SMs'
// tiles: see the next test.)
TEST(CollectiveMatmulStepGate, AProductNothingElseCanHideItsGatherBehindGetsARing) {
  for (const auto& [target, k, f, rows] :
       {std::tuple{"tpu-v4-4x4x4", 8192, 4096, 512}, std::tuple{"dgx-h100", 8192, 4096, 2048},
        std::tuple{"loopback-2gbit", 4096, 512, 512}}) {
    auto module = ir::ParseModule(GatherDot(k, f, 4, rows));
    ASSERT_TRUE(module.ok());
    const double before = Scheduled(**module, target);
    GateRun run = RunGate(**module, target);
    const Decision* d = run.Of("x.full");
    ASSERT_NE(d, nullptr) << run.Explain();
    EXPECT_TRUE(d->rewritten) << target << ": " << run.Explain();
    EXPECT_NE(d->reason.find(fmt::format("on {}", target)), std::string::npos) << run.Explain();
    EXPECT_NE(d->reason.find("step"), std::string::npos) << run.Explain();
    // The rewritten module's scheduled step is what the gate said, and shorter.
    EXPECT_LT(Scheduled(**module, target), before * (1 - 0.005)) << run.Explain();
  }
}

// A ring step multiplies one shard: 512 rows of a 4096-wide result is 64
// tiles of 128x256, one wave on half of an H100's 132 SMs, where the whole
// product's 256 tiles fill two waves. The same ring on the same GPU with
// its products at the peak whatever their shape (no tiling) pays.
TEST(CollectiveMatmulStepGate, ARingWhoseStepsCannotFillTheSMsIsDeclined) {
  const std::string hlo = GatherDot(8192, 4096);
  GateRun tiled = RunGate(hlo, "dgx-h100");
  const Decision* d = tiled.Of("x.full");
  ASSERT_NE(d, nullptr) << tiled.Explain();
  EXPECT_FALSE(d->rewritten) << tiled.Explain();
  Expected<cost::Target> h100 = cost::FindTarget("dgx-h100");
  ASSERT_TRUE(h100.ok());
  cost::ComputeSpec untiled = h100->compute();
  untiled.tiling = {};
  auto module = ir::ParseModule(hlo);
  ASSERT_TRUE(module.ok());
  GateRun at_peak = RunGate(**module, std::make_shared<cost::TargetCostModel>(cost::Target(
                                          "h100-untiled", "", untiled, h100->topology())));
  d = at_peak.Of("x.full");
  ASSERT_NE(d, nullptr) << at_peak.Explain();
  EXPECT_TRUE(d->rewritten) << at_peak.Explain();
}

TEST(CollectiveMatmulStepGate, AThinProductBehindALargeGatherOnAFastCollectiveIsDeclined) {
  for (const auto& [target, n] :
       {std::pair{"tpu-v4-4x4x4", 4}, std::pair{"tpu-v4-8x8x8", 8}, std::pair{"dgx-h100-x4", 16}}) {
    GateRun run = RunGate(GatherDot(8192, 1, n), target);
    const Decision* d = run.Of("x.full");
    ASSERT_NE(d, nullptr) << run.Explain();
    EXPECT_FALSE(d->rewritten) << target << ": " << run.Explain();
    EXPECT_NE(d->reason.find("its best ring"), std::string::npos) << run.Explain();
    EXPECT_FALSE(run.changed);
  }
}

TEST(CollectiveMatmulStepGate, ACollectiveTheScheduleAlreadyHidesIsLeftAlone) {
  // The gather feeds one dot, but an independent product as long as the
  // gather runs beside it: async-collectives + schedule hide the gather
  // without any ring, and a ring would only add its per-step costs. The
  // local formula of the old gate (collective + dot against the ring)
  // rewrote this pair.
  const std::string hlo = R"(
HloModule hidden, num_partitions=4
ENTRY %main {
  %x = bf16[512,8192] parameter(0)
  %w = bf16[8192,4096] parameter(1)
  %a = bf16[8192,8192] parameter(2)
  %b = bf16[8192,8192] parameter(3)
  %x.full = bf16[2048,8192] all-gather(%x), channel_id=1, replica_groups=[1,4]<=[4], dimensions={0}, use_global_device_ids=true
  %y = bf16[2048,4096] dot(%x.full, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %z = bf16[8192,8192] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %out = (bf16[2048,4096], bf16[8192,8192]) tuple(%y, %z)
}
)";
  for (const char* target : {"tpu-v4-4x4x4", "dgx-h100"}) {
    auto module = ir::ParseModule(hlo);
    ASSERT_TRUE(module.ok());
    const double before = Scheduled(**module, target);
    GateRun run = RunGate(**module, target);
    const Decision* d = run.Of("x.full");
    ASSERT_NE(d, nullptr) << run.Explain();
    EXPECT_FALSE(d->rewritten) << target << ": " << run.Explain();
    EXPECT_FALSE(run.changed);
    EXPECT_DOUBLE_EQ(Scheduled(**module, target), before);
  }
}

TEST(CollectiveMatmulStepGate, OfTwoCandidatesOfOneDotTheShorterStepIsTaken) {
  const std::string hlo = R"(
HloModule two, num_partitions=4
%add (p: bf16[], q: bf16[]) -> bf16[] {
  %p = bf16[] parameter(0)
  %q = bf16[] parameter(1)
  ROOT %s = bf16[] add(%p, %q)
}
ENTRY %main {
  %x = bf16[4096,16384] parameter(0)
  %w = bf16[16384,2048] parameter(1)
  %x.full = bf16[16384,16384] all-gather(%x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  %p = bf16[16384,2048] dot(%x.full, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %out = bf16[4096,2048] reduce-scatter(%p), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=%add
}
)";
  for (const char* target : {"tpu-v4-8x8x8", "dgx-h100", "loopback-2gbit"}) {
    GateRun run = RunGate(hlo, target);
    // Each candidate alone, in its best form, by the same estimate.
    std::map<std::string, double> alone;
    for (const char* collective : {"x.full", "out"}) {
      for (RingDirection direction :
           {RingDirection::kUnidirectional, RingDirection::kBidirectional}) {
        for (RingForm form : {RingForm::kLoop, RingForm::kUnrolled}) {
          auto module = ir::ParseModule(hlo);
          ASSERT_TRUE(module.ok());
          CollectiveMatmulOptions options;
          options.gate = [&](const Candidate& c) {
            return GateVerdict{c.collective == collective, direction, form, 0, ""};
          };
          CollectiveMatmul pass(options);
          ASSERT_TRUE(pass.Run(**module).ok());
          const double seconds = Scheduled(**module, target);
          if (!alone.count(collective) || seconds < alone[collective]) alone[collective] = seconds;
        }
      }
    }
    const std::string better = alone["x.full"] < alone["out"] ? "x.full" : "out";
    const Decision* d = run.Of(better);
    ASSERT_NE(d, nullptr) << run.Explain();
    EXPECT_TRUE(d->rewritten) << target << ": " << run.Explain();
  }
}

// A loop body named `name` that gathers its x over 4 devices and multiplies
// it by its w, with `extra` lines after the product.
std::string GatherDotBody(const std::string& name, const std::string& extra = "") {
  return fmt::format(R"(
%{0} (p: (s32[], bf16[2048,8192], bf16[8192,4096], bf16[8192,4096])) -> (s32[], bf16[2048,8192], bf16[8192,4096], bf16[8192,4096]) {{
  %p = (s32[], bf16[2048,8192], bf16[8192,4096], bf16[8192,4096]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = bf16[2048,8192] get-tuple-element(%p), index=1
  %w = bf16[8192,4096] get-tuple-element(%p), index=2
  %x.full = bf16[8192,8192] all-gather(%x), channel_id=1, replica_groups=[1,4]<=[4], dimensions={{0}}, use_global_device_ids=true
  %y = bf16[8192,4096] dot(%x.full, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
{1}  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  ROOT %out = (s32[], bf16[2048,8192], bf16[8192,4096], bf16[8192,4096]) tuple(%next, %x, %w, %y)
}}
)",
                     name, extra);
}

// The condition of four trips of a GatherDotBody loop.
constexpr std::string_view kFourTrips = R"(
%cond (p: (s32[], bf16[2048,8192], bf16[8192,4096], bf16[8192,4096])) -> pred[] {
  %p = (s32[], bf16[2048,8192], bf16[8192,4096], bf16[8192,4096]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(4)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
)";

// Two loops, each over a body that gathers its x and multiplies it: the
// bodies are named `first` and `second` (or, as a printer names a copy,
// `body` and `body.1`), and with `differ` the second holds one instruction
// more (a constant nothing reads), so it is no copy of the first; and beside
// them a thin product behind a large gather, which a ring only slows (so
// that rewriting every candidate at once does not pay).
std::string TwoLoops(const std::string& first, const std::string& second, bool differ = false) {
  const std::string body_text =
      GatherDotBody(first) + GatherDotBody(second, differ ? "  %unused = s32[] constant(7)\n" : "");
  return fmt::format(R"(
HloModule two_loops, num_partitions=4
{3}
{0}
ENTRY %main {{
  %x = bf16[2048,8192] parameter(0)
  %w = bf16[8192,4096] parameter(1)
  %y = bf16[8192,4096] parameter(2)
  %t = bf16[2048,8192] parameter(3)
  %v = bf16[8192,1] parameter(4)
  %t.full = bf16[8192,8192] all-gather(%t), channel_id=2, replica_groups=[1,4]<=[4], dimensions={{0}}, use_global_device_ids=true
  %thin = bf16[8192,1] dot(%t.full, %v), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %zero = s32[] constant(0)
  %init = (s32[], bf16[2048,8192], bf16[8192,4096], bf16[8192,4096]) tuple(%zero, %x, %w, %y)
  %a = (s32[], bf16[2048,8192], bf16[8192,4096], bf16[8192,4096]) while(%init), condition=%cond, body=%{1}
  %ya = bf16[8192,4096] get-tuple-element(%a), index=3
  %again = (s32[], bf16[2048,8192], bf16[8192,4096], bf16[8192,4096]) tuple(%zero, %x, %w, %ya)
  %b = (s32[], bf16[2048,8192], bf16[8192,4096], bf16[8192,4096]) while(%again), condition=%cond, body=%{2}
  %yb = bf16[8192,4096] get-tuple-element(%b), index=3
  ROOT %result = (bf16[8192,4096], bf16[8192,1]) tuple(%yb, %thin)
}}
)",
                     body_text, first, second, kFourTrips);
}

// Copies of one computation (a layer's body in each phase loop of a
// pipeline) each gain too little alone and are taken together, whatever
// their names; the copy is tried in the form searched in the first; bodies
// that differ are judged one at a time.
TEST(CollectiveMatmulStepGate, ThePairInCopiesOfAComputationIsJudgedTogether) {
  const std::string target = "dgx-h100";
  auto copies = ir::ParseModule(TwoLoops("body", "body.1"));
  ASSERT_TRUE(copies.ok()) << copies.error().ToString();
  const double before = Scheduled(**copies, target);
  // What a ring in one body gains alone, and in both.
  StepGateOptions all;
  all.min_gain = 0;
  auto probe = ir::CloneModule(**copies);
  ASSERT_TRUE(probe.ok());
  GatedCollectiveMatmul measure(CollectiveMatmulOptions{}, ModelOf(target), all);
  ASSERT_TRUE(measure.Run(**probe).ok());
  const double both = Scheduled(**probe, target);
  ASSERT_LT(both, before) << fmt::format("{}", fmt::join(measure.Explain(), "\n"));
  // Half of what both gain is about one body's: ask for three quarters.
  StepGateOptions strict;
  strict.min_gain = 0.75 * (1 - both / before);
  GatedCollectiveMatmul gate(CollectiveMatmulOptions{}, ModelOf(target), strict);
  Expected<bool> changed = gate.Run(**copies);
  ASSERT_TRUE(changed.ok()) << changed.error().ToString();
  const std::string explained = fmt::format("{}", fmt::join(gate.Explain(), "\n"));
  EXPECT_TRUE(*changed) << explained;
  int rewritten = 0;
  for (const Decision& d : gate.Decisions()) {
    if (!d.rewritten) continue;
    ++rewritten;
    EXPECT_NE(d.reason.find("with its copies, in 2 computations at once"), std::string::npos)
        << d.reason;
    const bool in_copy = d.computation == "body.1";
    EXPECT_EQ(d.reason.find("in the form searched in %body, whose copy") != std::string::npos,
              in_copy)
        << d.reason;
  }
  EXPECT_EQ(rewritten, 2) << explained;
  EXPECT_LT(Scheduled(**copies, target), before * (1 - strict.min_gain)) << explained;

  // Copies by structure, not by name.
  auto renamed = ir::ParseModule(TwoLoops("body", "other"));
  ASSERT_TRUE(renamed.ok()) << renamed.error().ToString();
  GatedCollectiveMatmul by_structure(CollectiveMatmulOptions{}, ModelOf(target), strict);
  ASSERT_TRUE(by_structure.Run(**renamed).ok());
  int together = 0;
  for (const Decision& d : by_structure.Decisions()) {
    together += d.rewritten && d.reason.find("with its copies") != std::string::npos;
  }
  EXPECT_EQ(together, 2) << fmt::format("{}", fmt::join(by_structure.Explain(), "\n"));

  // Bodies that differ by an instruction are no copies: neither grouped nor
  // tried in each other's form (here rewriting every candidate at once, the
  // thin one too, is what takes them).
  auto others = ir::ParseModule(TwoLoops("body", "body.1", /*differ=*/true));
  ASSERT_TRUE(others.ok()) << others.error().ToString();
  GatedCollectiveMatmul apart(CollectiveMatmulOptions{}, ModelOf(target), strict);
  ASSERT_TRUE(apart.Run(**others).ok());
  for (const Decision& d : apart.Decisions()) {
    EXPECT_EQ(d.reason.find("cop"), std::string::npos) << d.reason;
  }
}

// A copy can run otherwise than its original: here a large permute,
// started after the first loop, is in flight through the second, so the
// second body's ring steps wait for it. The copy's pair does not gain in
// the form that gains in the original, so its forms are searched too (a
// curve of chunk counts of its own), and it is declined.
TEST(CollectiveMatmulStepGate, ACopyThatRunsOtherwiseGetsItsOwnSearch) {
  const std::string hlo = "HloModule two_loops, num_partitions=4\n" + std::string(kFourTrips) +
                          GatherDotBody("body") + GatherDotBody("body.1") + R"(
ENTRY %main {
  %x = bf16[2048,8192] parameter(0)
  %w = bf16[8192,4096] parameter(1)
  %y = bf16[8192,4096] parameter(2)
  %big = f32[65536,8192] parameter(3)
  %zero = s32[] constant(0)
  %init = (s32[], bf16[2048,8192], bf16[8192,4096], bf16[8192,4096]) tuple(%zero, %x, %w, %y)
  %a = (s32[], bf16[2048,8192], bf16[8192,4096], bf16[8192,4096]) while(%init), condition=%cond, body=%body
  %ya = bf16[8192,4096] get-tuple-element(%a), index=3
  %corner = bf16[1,1] slice(%ya), slice={[0:1], [0:1]}
  %cornerf = f32[1,1] convert(%corner)
  %s = f32[] reshape(%cornerf)
  %sb = f32[65536,8192] broadcast(%s), dimensions={}
  %bigger = f32[65536,8192] add(%big, %sb)
  %shifted = f32[65536,8192] collective-permute(%bigger), channel_id=9, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  %again = (s32[], bf16[2048,8192], bf16[8192,4096], bf16[8192,4096]) tuple(%zero, %x, %w, %ya)
  %b = (s32[], bf16[2048,8192], bf16[8192,4096], bf16[8192,4096]) while(%again), condition=%cond, body=%body.1
  %yb = bf16[8192,4096] get-tuple-element(%b), index=3
  ROOT %result = (bf16[8192,4096], f32[65536,8192]) tuple(%yb, %shifted)
}
)";
  const GateRun run = RunGate(hlo, "dgx-h100");
  EXPECT_TRUE(run.changed) << run.Explain();
  const Decision* original = nullptr;
  const Decision* copy = nullptr;
  for (const Decision& d : run.decisions) {
    if (d.collective != "x.full") continue;
    (d.computation == "body" ? original : copy) = &d;
  }
  ASSERT_NE(original, nullptr) << run.Explain();
  ASSERT_NE(copy, nullptr) << run.Explain();
  EXPECT_TRUE(original->rewritten) << run.Explain();
  EXPECT_FALSE(copy->rewritten) << run.Explain();
  EXPECT_EQ(copy->reason.find("in the form searched in %body"), std::string::npos) << copy->reason;
  EXPECT_NE(copy->reason.find("ring steps in chunks"), std::string::npos) << copy->reason;
}

TEST(CollectiveMatmulStepGate, NeverSlowerThanSchedulingAlone) {
  // The gate's result, through the same pipeline, against the baseline.
  for (const std::string& hlo :
       {GatherDot(8192, 4096), GatherDot(8192, 1), GatherDot(1024, 64, 8)}) {
    for (const char* target : {"tpu-v4-8x8x8", "dgx-h100", "loopback-2gbit"}) {
      auto module = ir::ParseModule(hlo);
      ASSERT_TRUE(module.ok());
      const double before = Scheduled(**module, target);
      GateRun run = RunGate(**module, target);
      EXPECT_LE(Scheduled(**module, target), before) << target << ": " << run.Explain();
      ASSERT_FALSE(run.explanation.empty());
      EXPECT_NE(run.explanation.back().find("with async-collectives and schedule alone"),
                std::string::npos);
    }
  }
}

}  // namespace
}  // namespace loom::pass
