#include "cost/kernel_times.h"

#include <algorithm>
#include <unordered_map>

#include "analysis/fusion.h"
#include "analysis/while_loop.h"
#include "ir/computation.h"

namespace loom::cost {

namespace {

using ir::Opcode;

// How many times each computation runs in one run of the entry (see the
// header); runs saturate rather than overflow.
void CountRuns(const ir::Computation& computation, int64_t runs,
               std::unordered_map<const ir::Computation*, int64_t>& counts) {
  int64_t& total = counts[&computation];
  total = total > INT64_MAX - runs ? INT64_MAX : total + runs;
  for (const auto& instruction : computation.instructions()) {
    const Opcode opcode = instruction->opcode();
    if (opcode == Opcode::kWhile) {
      const int64_t trips = analysis::KnownTripCount(*instruction).value_or(1);
      const int64_t body_runs = trips > 0 && runs > INT64_MAX / trips ? INT64_MAX : runs * trips;
      if (const ir::Computation* body = instruction->called("body")) {
        CountRuns(*body, body_runs, counts);
      }
      if (const ir::Computation* condition = instruction->called("condition")) {
        CountRuns(*condition, body_runs == INT64_MAX ? INT64_MAX : body_runs + runs, counts);
      }
    } else if (opcode == Opcode::kCall || opcode == Opcode::kAsyncStart ||
               opcode == Opcode::kConditional) {
      for (const ir::Computation* callee : instruction->called_computations()) {
        CountRuns(*callee, runs, counts);
      }
    }
  }
}

}  // namespace

KernelTimes TopKernels(const ir::Module& module, const CostModel& model, size_t count) {
  KernelTimes result;
  if (module.entry() == nullptr) return result;
  std::unordered_map<const ir::Computation*, int64_t> runs;
  CountRuns(*module.entry(), 1, runs);
  const ComputeTimes times(model);
  // In the module's order of computations and instructions, so that ties
  // keep the text's order.
  for (const auto& computation : module.computations()) {
    const auto found = runs.find(computation.get());
    if (found == runs.end()) continue;
    const analysis::FusionPlan plan(*computation);
    for (const auto& instruction : computation->instructions()) {
      const double seconds = times.Of(*instruction);
      if (!(seconds > 0)) continue;
      KernelTime kernel{instruction.get(), found->second, seconds, 0};
      if (model.FusesElementwise()) kernel.fused = plan.MembersBesidesRoot(*instruction);
      result.total_seconds += kernel.Total();
      result.kernel_runs = result.kernel_runs > INT64_MAX - kernel.runs
                               ? INT64_MAX
                               : result.kernel_runs + kernel.runs;
      result.kernels.push_back(kernel);
    }
  }
  std::stable_sort(result.kernels.begin(), result.kernels.end(),
                   [](const KernelTime& a, const KernelTime& b) { return a.Total() > b.Total(); });
  if (result.kernels.size() > count) result.kernels.resize(count);
  return result;
}

}  // namespace loom::cost
