// The simulator and the step estimate describe each collective the same way
// (cost/collective_algorithm.h) and run a device's transfers of one kind on
// one stream, so contention can only slow a simulated step down: on every
// corpus module and example, as written, after async-collectives+schedule and
// after the full pipeline, on a TPU v4 slice and a DGX H100 cluster sized to
// it, the simulated step is never below the cost model's contention-free
// estimate.
#include <gtest/gtest.h>

#include <filesystem>

#include "corpus_files.h"
#include "cost/target_cost_model.h"
#include "ir/clone.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "pass/registry.h"
#include "sim/simulator.h"

namespace loom::sim {
namespace {

namespace fs = std::filesystem;

std::string TestName(const ::testing::TestParamInfo<std::string>& info) {
  const fs::path path(info.param);
  ::testing::TestParamInfo<std::string> file(
      (path.parent_path().filename() == "ring" ? "ring_" : "") + path.filename().string(),
      info.index);
  return test::CorpusTestName(file);
}

class SimulatedStepCorpus : public ::testing::TestWithParam<std::string> {};

TEST_P(SimulatedStepCorpus, NeverBelowTheContentionFreeEstimate) {
  auto parsed = ir::ParseModuleFile(GetParam());
  ASSERT_TRUE(parsed.ok()) << parsed.error().ToString();
  auto verified = ir::VerifyModule(**parsed);
  if (!verified.ok()) GTEST_SKIP() << "does not verify: " << verified.error().message;
  const int64_t devices = verified->partition_count * verified->replica_count;
  for (const char* family : {"tpu-v4:auto", "dgx-h100:auto"}) {
    auto target = cost::FindTarget(family, devices);
    ASSERT_TRUE(target.ok()) << target.error().message;
    pass::PassContext context;
    context.cost_model = std::make_shared<cost::TargetCostModel>(*target);
    for (const char* passes :
         {"", "async-collectives,schedule", "collective-matmul,async-collectives,schedule"}) {
      SCOPED_TRACE(target->name() + " after '" + passes + "'");
      auto module = ir::CloneModule(**parsed);
      ASSERT_TRUE(module.ok());
      if (*passes != '\0') {
        auto pipeline = pass::ParsePipeline(passes, context);
        ASSERT_TRUE(pipeline.ok()) << pipeline.error().message;
        auto ran = pipeline->Run(**module);
        ASSERT_TRUE(ran.ok()) << ran.error().ToString();
      }
      auto report = Simulate(**module, *target);
      ASSERT_TRUE(report.ok()) << report.error().ToString();
      EXPECT_GT(report->step_seconds, 0);
      EXPECT_GE(report->step_seconds, report->cost_model_step_seconds * (1 - 1e-9))
          << "simulated " << report->step_seconds << " s, estimated "
          << report->cost_model_step_seconds << " s";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, SimulatedStepCorpus,
                         ::testing::ValuesIn(test::CorpusAndExamplePaths()), TestName);

}  // namespace
}  // namespace loom::sim
