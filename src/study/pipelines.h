// The three programs a rewrite is judged against, simulated side by side:
// the module as written (synchronous collectives), with async-collectives
// and schedule (the honest baseline: what XLA's latency-hiding scheduler
// does without decomposing anything), and with the full collective-matmul
// pipeline. `loom simulate --baseline` and `loom study` both run them.
#pragma once

#include <array>
#include <string>

#include "cost/target.h"
#include "ir/module.h"
#include "sim/options.h"
#include "sim/report.h"
#include "support/status.h"

namespace loom::study {

enum class Pipeline { kAsWritten, kAsyncSchedule, kFull };
inline constexpr std::array<Pipeline, 3> kPipelines = {Pipeline::kAsWritten,
                                                       Pipeline::kAsyncSchedule, Pipeline::kFull};
// "as written", "async+schedule", "full pipeline".
std::string_view PipelineName(Pipeline pipeline);
// The passes that make it ("" for the module as written).
std::string_view PipelinePasses(Pipeline pipeline);

// `module` after `pipeline`'s passes for `target` (deterministic: the
// rewrites that keep every sum's order).
Expected<std::unique_ptr<ir::Module>> Apply(const ir::Module& module, Pipeline pipeline,
                                            const cost::Target& target, bool deterministic);

// The three programs simulated on `target`, in kPipelines order.
Expected<std::array<sim::SimReport, 3>> SimulatePipelines(const ir::Module& module,
                                                          const cost::Target& target,
                                                          const sim::SimOptions& options,
                                                          bool deterministic = false);

}  // namespace loom::study
