// The whole-step gate over every corpus module and example that has a
// candidate, on a TPU v4 slice and a DGX H100 cluster sized to it:
//
//   V0  the program as written (synchronous collectives), estimated;
//   V1  async-collectives + schedule;
//   V2  collective-matmul with the target (the gate), then the same;
//   V2d the same with deterministic=true (only rewrites that keep every
//       sum's order: what bitwise reproducibility costs);
//   forced: collective-matmul{min-bytes=0} in each direction and form,
//       without a target, then async-collectives + schedule: the best.
//
// V2 and V2d must never be more than 0.5% slower than V1, V2 within 1% of
// the best forced form. The table is printed (module, target, V0, V1, V2,
// V2d, best forced, decisions).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "corpus_files.h"
#include "cost/step_time.h"
#include "ir/clone.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "pass/collective_matmul_gate.h"
#include "support/units.h"

namespace loom::pass {
namespace {

namespace fs = std::filesystem;

int64_t CandidateCount(const ir::Module& module) {
  auto copy = ir::CloneModule(module);
  if (!copy.ok()) return 0;
  int64_t count = 0;
  CollectiveMatmulOptions options;
  options.gate = [&](const Candidate&) {
    ++count;
    return GateVerdict{};
  };
  CollectiveMatmul pass(options);
  if (!pass.Run(**copy).ok()) return 0;
  return count;
}

TEST(CollectiveMatmulStepGateCorpus, NeverSlowerThanScheduleAloneAndAsGoodAsTheBestForcedForm) {
  std::string table =
      "module | target | V0 | V1 | V2 | V2d | best forced | V2/V1 | V2d/V2 | decisions\n"
      "---|---|---|---|---|---|---|---|---|---\n";
  int rows = 0;
  for (const std::string& path : test::CorpusAndExamplePaths()) {
    auto parsed = ir::ParseModuleFile(path);
    ASSERT_TRUE(parsed.ok()) << path << ": " << parsed.error().ToString();
    if (!ir::VerifyModule(**parsed).ok() || CandidateCount(**parsed) == 0) continue;
    const auto grid = ir::DeviceGridOf(**parsed);
    ASSERT_TRUE(grid.ok());
    for (const char* family : {"tpu-v4:auto", "dgx-h100:auto"}) {
      auto target = cost::FindTarget(family, grid->size());
      ASSERT_TRUE(target.ok()) << target.error().message;
      auto model = std::make_shared<cost::TargetCostModel>(*target);
      const std::string name = fs::path(path).filename().string();
      SCOPED_TRACE(name + " on " + target->name());
      const double v0 = cost::EstimateStep(**parsed, *model, *grid).total_seconds;
      auto v1 = ScheduledStepSeconds(**parsed, *model, ScheduleOptions{});
      ASSERT_TRUE(v1.ok()) << v1.error().ToString();
      auto gated = ir::CloneModule(**parsed);
      ASSERT_TRUE(gated.ok());
      GatedCollectiveMatmul gate(CollectiveMatmulOptions{}, model);
      ASSERT_TRUE(gate.Run(**gated).ok());
      auto v2 = ScheduledStepSeconds(**gated, *model, ScheduleOptions{});
      ASSERT_TRUE(v2.ok()) << v2.error().ToString();
      auto exact = ir::CloneModule(**parsed);
      ASSERT_TRUE(exact.ok());
      GatedCollectiveMatmul exact_gate(CollectiveMatmulOptions{.deterministic = true}, model);
      ASSERT_TRUE(exact_gate.Run(**exact).ok());
      auto v2d = ScheduledStepSeconds(**exact, *model, ScheduleOptions{});
      ASSERT_TRUE(v2d.ok()) << v2d.error().ToString();
      double forced = *v1;  // rewriting nothing is one of the choices
      for (RingDirection direction :
           {RingDirection::kUnidirectional, RingDirection::kBidirectional}) {
        for (RingForm form : {RingForm::kLoop, RingForm::kUnrolled}) {
          auto all = ir::CloneModule(**parsed);
          ASSERT_TRUE(all.ok());
          CollectiveMatmulOptions options;
          options.min_bytes = 0;
          options.direction = direction;
          options.form = form;
          CollectiveMatmul pass(options);
          ASSERT_TRUE(pass.Run(**all).ok());
          auto seconds = ScheduledStepSeconds(**all, *model, ScheduleOptions{});
          ASSERT_TRUE(seconds.ok()) << seconds.error().ToString();
          forced = std::min(forced, *seconds);
        }
      }
      int rewritten = 0, declined = 0;
      for (const Decision& d : gate.Decisions()) (d.rewritten ? rewritten : declined)++;
      std::string why;
      for (const std::string& line : gate.Explain()) why += "\n  " + line;
      EXPECT_LE(*v2, *v1 * 1.005) << why;
      EXPECT_LE(*v2, forced * 1.01) << why;
      EXPECT_LE(*v2d, *v1 * 1.005);
      table += fmt::format(
          "{} | {} | {} | {} | {} | {} | {} | {:.3f}x | {:.3f}x | {} rewritten, {} declined\n",
          name, target->name(), FormatSeconds(v0), FormatSeconds(*v1), FormatSeconds(*v2),
          FormatSeconds(*v2d), FormatSeconds(forced), *v1 / *v2, *v2d / *v2, rewritten, declined);
      ++rows;
    }
  }
  EXPECT_GT(rows, 0) << "no module with a candidate (corpus at " << LOOM_CORPUS_DIR << "?)";
  std::printf("%s", table.c_str());
}

}  // namespace
}  // namespace loom::pass
