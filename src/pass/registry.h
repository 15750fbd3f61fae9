// Passes by name, for `loom opt --passes=...`. A pass may take options in
// braces, MLIR style:
//
//   collective-matmul{direction=bidirectional,form=unrolled,min-bytes=0}
//
// and a pipeline is a comma-separated list of them.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cost/target_cost_model.h"
#include "pass/pipeline.h"

namespace loom::pass {

// What passes may need beyond their options.
struct PassContext {
  // The target to decide and schedule for (`loom opt --target`); without
  // one, collective-matmul falls back to its size threshold and schedule
  // cannot run.
  std::shared_ptr<const cost::TargetCostModel> cost_model;
};

// One pass from `name` or `name{key=value,...}`.
Expected<std::unique_ptr<Pass>> CreatePass(std::string_view spec, const PassContext& context = {});
// Passes separated by commas outside braces.
Expected<Pipeline> ParsePipeline(std::string_view spec, const PassContext& context = {});
// Every pass name with a line of help, including its options.
std::vector<std::string> DescribePasses();

}  // namespace loom::pass
