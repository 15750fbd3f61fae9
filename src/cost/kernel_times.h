// Where one device's compute goes over one run of a module: every kernel
// (an instruction the cost model prices, with what the target fuses into
// it) with how often it runs and what it takes, most first. What `loom
// stats --target T --kernels N` prints; the op table of `loom simulate`
// sums the same times by the opcode of the kernels' roots.
//
// A run follows the entry computation into while bodies (times their trip
// counts; a loop whose count is unknown, once), their conditions (one more
// time), the callees of calls and async-starts, and every branch of a
// conditional (each once: the report bounds every branch). A fusion the
// program wrote is one kernel; nothing else is entered.
#pragma once

#include <cstdint>
#include <vector>

#include "cost/cost_model.h"
#include "ir/module.h"

namespace loom::cost {

struct KernelTime {
  const ir::Instruction* root = nullptr;
  int64_t runs = 0;
  double seconds_per_run = 0;
  int64_t fused = 0;  // instructions computed inside it besides the root
  double Total() const { return static_cast<double>(runs) * seconds_per_run; }
};

struct KernelTimes {
  std::vector<KernelTime> kernels;  // the longest `count`, longest first
  double total_seconds = 0;         // all kernels' time over the run
  int64_t kernel_runs = 0;          // all kernels' runs
};

KernelTimes TopKernels(const ir::Module& module, const CostModel& model, size_t count);

}  // namespace loom::cost
