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
// The full pipeline's passes unless a study names a variant of it (its
// gate judged by the simulator, a pass option set, ...).
inline constexpr std::string_view kFullPipelinePasses =
    "collective-matmul,async-collectives,schedule";
// The passes that make it ("" for the module as written; `full` for the
// full pipeline).
std::string_view PipelinePasses(Pipeline pipeline, std::string_view full = kFullPipelinePasses);

// `module` after `pipeline`'s passes for `target` (deterministic: the
// rewrites that keep every sum's order; `full`: the full pipeline's passes).
Expected<std::unique_ptr<ir::Module>> Apply(const ir::Module& module, Pipeline pipeline,
                                            const cost::Target& target, bool deterministic,
                                            std::string_view full = kFullPipelinePasses);

// The three programs simulated on `target`, in kPipelines order.
Expected<std::array<sim::SimReport, 3>> SimulatePipelines(
    const ir::Module& module, const cost::Target& target, const sim::SimOptions& options,
    bool deterministic = false, std::string_view full = kFullPipelinePasses);

}  // namespace loom::study
