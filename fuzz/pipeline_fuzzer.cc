// libFuzzer target over everything after the parser: every pass, `stats`,
// the simulator on a small target, and the executor on tiny shapes.
//
// A module that parses and verifies is taken through:
//  - each pipeline below on a clone; whatever a pass returns must verify
//    again and survive print -> parse (a pass that makes an invalid module
//    is a finding);
//  - ComputeStats and PeakLiveBytes of the original and of each result;
//  - sim::Simulate on a TPU v4 slice sized to the module, of the original
//    and each result, with bounds on the messages it may move and the steps
//    it may replay, for modules of at most 16 devices;
//  - when the module is tiny (at most 8 devices and 256 KiB per device),
//    the executor on in-process devices with the
//    deterministic dot kernels and a budget of steps and time: the original
//    and each result, whose outputs must agree bitwise (async-collectives
//    and schedule change no arithmetic, nor does joint-schedule, nor
//    collective-matmul in deterministic mode) or, after collective-matmul,
//    within the rounding of reordered sums (exec/tensor_compare.h).
// Any input may be rejected with an error anywhere; none may crash, hang,
// leak, trip a sanitizer, or break one of the properties above.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/flops.h"
#include "analysis/live_bytes.h"
#include "analysis/module_stats.h"
#include "cost/target.h"
#include "cost/target_cost_model.h"
#include "exec/cpu/cpu_device.h"
#include "exec/runner.h"
#include "exec/tensor_compare.h"
#include "ir/clone.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "pass/registry.h"
#include "sim/simulator.h"

namespace {

using loom::Expected;
using loom::ir::Module;

// Only modules this small are run: each input must take milliseconds.
constexpr int64_t kMaxRunDevices = 8;
constexpr int64_t kMaxRunBytesPerDevice = int64_t{1} << 18;
constexpr int64_t kMaxRunSteps = 200'000;
constexpr int64_t kMaxSimulatedMessages = 200'000;
constexpr int64_t kMaxSimulatedSteps = 2'000'000;
constexpr int64_t kMaxSimulatedDevices = 16;
constexpr int64_t kMaxInstructions = 20'000;  // per module, for the passes

// What a pipeline may do to the arithmetic.
enum class Arithmetic { kUnchanged, kReordered };

struct PipelineCase {
  const char* spec;
  bool needs_target;
  Arithmetic arithmetic;
};

constexpr PipelineCase kPipelines[] = {
    {"async-collectives", false, Arithmetic::kUnchanged},
    {"collective-matmul{min-bytes=0}", false, Arithmetic::kReordered},
    // rounds-per-product=2: all-to-all exchanges of an even group multiply
    // rounds in pairs (rings ignore it).
    {"collective-matmul{min-bytes=0,direction=bidirectional,form=unrolled,rounds-per-product=2}",
     false, Arithmetic::kReordered},
    {"async-collectives,schedule", true, Arithmetic::kUnchanged},
    {"collective-matmul,async-collectives,schedule", true, Arithmetic::kReordered},
    // Deterministic mode: whatever it rewrites folds every sum as before,
    // so the result must be bitwise the original's.
    // (chunks=2: the reduce-scatters chunked, exact; all-reduces of three or
    // more devices not, so they get the ring; step-chunks=2: every ring's
    // steps in two chunks, exact.)
    {"collective-matmul{min-bytes=0,direction=bidirectional,deterministic=true,chunks=2,"
     "step-chunks=2}",
     false, Arithmetic::kUnchanged},
    {"collective-matmul{min-bytes=0,chunks=3,step-chunks=2}", false, Arithmetic::kReordered},
    // joint-schedule only reorders; its simulations bounded as the fuzzer's.
    {"async-collectives,schedule,joint-schedule{max-trials=6,max-messages=200000,max-steps="
     "2000000}",
     true, Arithmetic::kUnchanged},
};

[[noreturn]] void Finding(const std::string& what, const std::string& detail) {
  std::fprintf(stderr, "pipeline_fuzzer: %s\n%s\n", what.c_str(), detail.c_str());
  __builtin_trap();
}

// A module a pass returned: it must verify and round-trip like any input.
void CheckPassOutput(const Module& module, const std::string& spec) {
  auto verified = loom::ir::VerifyModule(module);
  const std::string printed = loom::ir::PrintModule(module);
  if (!verified.ok()) {
    Finding(spec + " returned a module that does not verify",
            verified.error().ToString() + "\n--- module ---\n" + printed);
  }
  auto reparsed = loom::ir::ParseModule(printed);
  if (!reparsed.ok()) {
    Finding(spec + " returned a module whose print does not parse",
            reparsed.error().ToString() + "\n--- module ---\n" + printed);
  }
}

void Analyse(const Module& module) {
  auto report = loom::ir::VerifyModule(module);
  if (!report.ok()) return;
  (void)loom::analysis::ComputeStats(module, *report);
  (void)loom::analysis::PeakLiveBytes(module);
}

void Simulate(const Module& module, const loom::cost::Target& target,
              const loom::ir::DeviceGrid& grid) {
  // Many devices exchanging all at once (an all-to-all of 64) make every
  // event recompute the rates of thousands of flows: seconds under the
  // sanitizers, for nothing the small grids do not reach.
  if (grid.size() > kMaxSimulatedDevices) return;
  loom::sim::SimOptions options;
  options.max_messages = kMaxSimulatedMessages;
  options.max_steps = kMaxSimulatedSteps;
  (void)loom::sim::Simulate(module, target, options);
}

bool Runnable(const Module& module, const loom::ir::DeviceGrid& grid) {
  return grid.size() <= kMaxRunDevices &&
         loom::exec::DeviceMemoryBound(module) <= kMaxRunBytesPerDevice;
}

Expected<std::vector<loom::exec::DeviceResult>> Run(const Module& module,
                                                    const loom::ir::DeviceGrid& grid) {
  loom::exec::RunOptions options;
  options.seed = 1;
  options.deterministic = true;
  options.timeout = std::chrono::milliseconds(2000);
  options.max_steps = kMaxRunSteps;
  return loom::exec::RunOnThreads(module, grid, options);
}

bool AllFinite(const loom::exec::Tensor& tensor) {
  for (const loom::exec::Tensor* leaf : loom::exec::OutputLeaves(tensor)) {
    if (!loom::ir::IsFloatingPoint(leaf->type())) continue;
    for (int64_t i = 0; i < leaf->ElementCount(); ++i) {
      if (!std::isfinite(leaf->GetDouble(i))) return false;
    }
  }
  return true;
}

// The rewritten program's outputs against the original's, device by device.
void CompareRuns(const std::vector<loom::exec::DeviceResult>& original,
                 const std::vector<loom::exec::DeviceResult>& rewritten, Arithmetic arithmetic,
                 int64_t longest_sum, const std::string& spec, const Module& before,
                 const Module& after) {
  const auto detail = [&] {
    return "--- before ---\n" + loom::ir::PrintModule(before) + "--- after ---\n" +
           loom::ir::PrintModule(after);
  };
  if (original.size() != rewritten.size()) Finding(spec + " changed the device count", detail());
  for (size_t d = 0; d < original.size(); ++d) {
    const loom::exec::Tensor& a = rewritten[d].output;
    const loom::exec::Tensor& b = original[d].output;
    const loom::exec::TensorDifference difference = loom::exec::CompareTensors(a, b);
    if (!difference.shapes_match) Finding(spec + " changed the output's shape", detail());
    if (difference.bitwise) continue;
    if (arithmetic == Arithmetic::kUnchanged) {
      Finding(spec + " changed the result bitwise on device " + std::to_string(d), detail());
    }
    // A rounding difference may overflow or cancel into a NaN on one side.
    if (!AllFinite(a) || !AllFinite(b)) continue;
    const std::vector<const loom::exec::Tensor*> leaves = loom::exec::OutputLeaves(b);
    const std::vector<const loom::exec::Tensor*> other = loom::exec::OutputLeaves(a);
    for (size_t i = 0; i < leaves.size(); ++i) {
      const loom::exec::TensorDifference leaf = loom::exec::CompareTensors(*other[i], *leaves[i]);
      if (leaf.bitwise) continue;
      if (!loom::exec::IsRoundingDifference(leaf, leaves[i]->type(), longest_sum)) {
        Finding(spec + " changed the result by more than rounding on device " + std::to_string(d) +
                    " (" + std::to_string(leaf.error_in_u) + " u)",
                detail());
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  loom::exec::cpu::SetBlasThreads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto module = loom::ir::ParseModule(text);
  if (!module.ok()) return 0;
  auto report = loom::ir::VerifyModule(**module);
  if (!report.ok() || (*module)->instruction_count() > kMaxInstructions) return 0;
  const loom::ir::DeviceGrid grid = report->grid();
  Expected<loom::cost::Target> target = loom::cost::FindTarget("tpu-v4", grid.size());
  if (!target.ok()) return 0;
  auto cost_model = std::make_shared<loom::cost::TargetCostModel>(*target);

  Analyse(**module);
  Simulate(**module, *target, grid);
  const bool runnable = Runnable(**module, grid);
  Expected<std::vector<loom::exec::DeviceResult>> original =
      runnable ? Run(**module, grid)
               : Expected<std::vector<loom::exec::DeviceResult>>(loom::Error{"not run"});
  const int64_t longest = runnable ? loom::analysis::LongestSum(**module, grid) : 0;

  for (const PipelineCase& pipeline_case : kPipelines) {
    loom::pass::PassContext context;
    if (pipeline_case.needs_target) context.cost_model = cost_model;
    auto pipeline = loom::pass::ParsePipeline(pipeline_case.spec, context);
    if (!pipeline.ok()) Finding("a fixed pipeline does not parse", pipeline.error().message);
    auto copy = loom::ir::CloneModule(**module);
    if (!copy.ok()) continue;
    Expected<bool> changed = pipeline->Run(**copy);
    if (!changed.ok()) continue;
    CheckPassOutput(**copy, pipeline_case.spec);
    if (!*changed) continue;  // the same module: nothing new to analyse or run
    Analyse(**copy);
    Simulate(**copy, *target, grid);
    if (!original.ok() || !Runnable(**copy, grid)) continue;
    auto rewritten = Run(**copy, grid);
    if (!rewritten.ok()) {
      // More steps, or slower under the sanitizers: the budgets may end a
      // rewritten program the original fit in. Anything else is a finding.
      const std::string& why = rewritten.error().message;
      if (why.find("budget") != std::string::npos || why.find("time") != std::string::npos ||
          why.find("memory") != std::string::npos || why.find("may hold") != std::string::npos) {
        continue;
      }
      Finding(std::string(pipeline_case.spec) + " made a program that runs fail: " + why,
              loom::ir::PrintModule(**module) + "--- after ---\n" + loom::ir::PrintModule(**copy));
    }
    const int64_t longest_sum = std::max(longest, loom::analysis::LongestSum(**copy, grid));
    CompareRuns(*original, *rewritten, pipeline_case.arithmetic, longest_sum, pipeline_case.spec,
                **module, **copy);
  }
  return 0;
}
