#include "study/pipelines.h"

#include <memory>

#include "cost/target_cost_model.h"
#include "ir/clone.h"
#include "pass/registry.h"
#include "sim/simulator.h"

namespace loom::study {

std::string_view PipelineName(Pipeline pipeline) {
  switch (pipeline) {
    case Pipeline::kAsWritten:
      return "as written";
    case Pipeline::kAsyncSchedule:
      return "async+schedule";
    case Pipeline::kFull:
      return "full pipeline";
  }
  return "";
}

std::string_view PipelinePasses(Pipeline pipeline, std::string_view full) {
  switch (pipeline) {
    case Pipeline::kAsWritten:
      return "";
    case Pipeline::kAsyncSchedule:
      return "async-collectives,schedule";
    case Pipeline::kFull:
      return full;
  }
  return "";
}

Expected<std::unique_ptr<ir::Module>> Apply(const ir::Module& module, Pipeline pipeline,
                                            const cost::Target& target, bool deterministic,
                                            std::string_view full) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> copy, ir::CloneModule(module));
  if (pipeline == Pipeline::kAsWritten) return copy;
  pass::PassContext context;
  context.cost_model = std::make_shared<cost::TargetCostModel>(target);
  context.deterministic = deterministic;
  LOOM_ASSIGN_OR_RETURN(pass::Pipeline passes,
                        pass::ParsePipeline(std::string(PipelinePasses(pipeline, full)), context));
  LOOM_RETURN_IF_ERROR(passes.Run(*copy).status());
  return copy;
}

Expected<std::array<sim::SimReport, 3>> SimulatePipelines(const ir::Module& module,
                                                          const cost::Target& target,
                                                          const sim::SimOptions& options,
                                                          bool deterministic,
                                                          std::string_view full) {
  std::array<sim::SimReport, 3> reports;
  for (size_t i = 0; i < kPipelines.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> program,
                          Apply(module, kPipelines[i], target, deterministic, full));
    LOOM_ASSIGN_OR_RETURN(reports[i], sim::Simulate(*program, target, options));
  }
  return reports;
}

}  // namespace loom::study
