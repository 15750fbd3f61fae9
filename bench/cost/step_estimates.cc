// The cost model's estimate of one training step of the demo block (and of
// the same block at a large model's size) on each target: the original,
// the collective-matmul rewrite as written (transfers synchronous), the
// rewrite with async transfers and the list schedule, what the gate picks
// (then scheduled), and the lower bound max(compute, communication) of the
// original; each as a ratio to the bound. The numbers are estimates, not
// timings, so one run is enough and they do not vary between runs.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>

#include "cost/step_time.h"
#include "cost/target_cost_model.h"
#include "ir/parser.h"
#include "pass/registry.h"
#include "support/units.h"

namespace {

using loom::Expected;

// The step estimate of `path` after `rewrite` (passes that decide nothing
// by the target: the ring is forced) and then `passes` on the target.
Expected<loom::cost::StepEstimate> EstimateAfter(
    const std::string& path, const std::string& rewrite, const std::string& passes,
    const std::shared_ptr<const loom::cost::TargetCostModel>& model) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<loom::ir::Module> module, loom::ir::ParseModuleFile(path));
  for (const auto& [spec, context] : {std::pair{rewrite, loom::pass::PassContext{}},
                                      std::pair{passes, loom::pass::PassContext{model}}}) {
    if (spec.empty()) continue;
    LOOM_ASSIGN_OR_RETURN(loom::pass::Pipeline pipeline, loom::pass::ParsePipeline(spec, context));
    LOOM_RETURN_IF_ERROR(pipeline.Run(*module).status());
  }
  return loom::cost::EstimateStep(*module, *model);
}

std::string Cell(double seconds, double bound) {
  const std::string time = loom::FormatSeconds(seconds);
  return fmt::format("{:>11} {:>5.2f}x", time, seconds / bound);
}

}  // namespace

int main() {
  const std::string examples = LOOM_EXAMPLES_DIR;
  const char* kRing = "collective-matmul{min-bytes=0,form=unrolled}";
  struct Variant {
    std::string name;
    std::string rewrite;  // without the target: the ring is forced
    std::string passes;   // on the target
  };
  const std::vector<Variant> variants = {
      {"original", "", ""},
      {"ring, unscheduled", kRing, ""},
      {"ring, scheduled", kRing, "async-collectives,schedule"},
      {"gate, scheduled", "", "collective-matmul,async-collectives,schedule"},
  };
  fmt::print(
      "Estimated step time per device (ratio to the original's max(compute, communication))\n");
  for (const char* block : {"mlp_block_tp4", "mlp_block_tp8_large"}) {
    const std::string path = fmt::format("{}/{}.hlo", examples, block);
    fmt::print("\n{}\n{:<16}", block, "target");
    for (const Variant& variant : variants) fmt::print(" {:>18}", variant.name);
    fmt::print(" {:>18}\n", "bound");
    for (const char* target_name :
         {"tpu-v4-4x4x4", "tpu-v4-8x8x8", "dgx-h100", "dgx-a100", "loopback-2gbit"}) {
      auto target = loom::cost::FindTarget(target_name);
      if (!target.ok()) return 1;
      auto model = std::make_shared<const loom::cost::TargetCostModel>(*target);
      auto original = EstimateAfter(path, "", "", model);
      if (!original.ok()) {
        std::fprintf(stderr, "%s\n", original.error().message.c_str());
        return 1;
      }
      const double bound = std::max(original->compute_seconds, original->transfer_seconds);
      fmt::print("{:<16}", target_name);
      for (const Variant& variant : variants) {
        auto estimate = EstimateAfter(path, variant.rewrite, variant.passes, model);
        if (!estimate.ok()) {
          std::fprintf(stderr, "%s: %s\n", variant.name.c_str(), estimate.error().message.c_str());
          return 1;
        }
        fmt::print(" {:>18}", Cell(estimate->total_seconds, bound));
      }
      fmt::print(" {:>18}\n", Cell(bound, bound));
    }
  }
  return 0;
}
