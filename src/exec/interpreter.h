// Running one device's program: who the device is (DeviceContext), and the
// Interpreter, which runs a per-device HLO program on the CPU device with the
// executor (exec/executor.h): every computation lowered once to a flat
// program over buffer slots, typed kernels, BLAS on the operands' own
// memory, buffers dropped after their last use, collectives as rings on a
// worker thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "exec/tensor.h"
#include "ir/computation.h"
#include "ir/module.h"
#include "support/status.h"

namespace loom::exec {

// One device's communicator, device grid and collective tag sequence
// (exec/collective_runtime.h).
class CollectiveRuntime;
// Records what ran when (exec/trace.h).
class TraceRecorder;

// Who this device is.
struct DeviceContext {
  int64_t replica_id = 0;
  int64_t partition_id = 0;
  // Not owned; null means collectives are errors. Mutable state (the tag
  // sequence) lives behind the pointer, so one device's nested computations
  // share it.
  CollectiveRuntime* collectives = nullptr;
  // Not owned; when set, every instruction is recorded on the compute track
  // and every collective, from start to done, on the communication track.
  TraceRecorder* trace = nullptr;
  // Bounds on one run, so that a program that never ends becomes an error:
  // a while loop that runs longer than `loop_timeout` fails (0: no bound),
  // and so does a run of more than `max_steps` instructions (0: no bound).
  std::chrono::milliseconds loop_timeout{0};
  int64_t max_steps = 0;
};

struct InterpreterOptions {
  // Every dot uses the deterministic kernel, whose sums have a fixed order
  // per element, so results are bitwise reproducible (see cpu/matmul.cc).
  bool deterministic = false;
};

class Interpreter {
 public:
  explicit Interpreter(DeviceContext device, InterpreterOptions options = {})
      : device_(device), options_(options) {}

  // Evaluates `computation` on `arguments` (one per parameter, in parameter
  // order) and returns its root's value. Errors name the op and its line.
  Expected<Tensor> Run(const ir::Computation& computation, std::span<const Tensor> arguments) const;
  // Run on the module's entry computation.
  Expected<Tensor> RunEntry(const ir::Module& module, std::span<const Tensor> arguments) const;
  // The same, taking the arguments over (no copy of their bytes is kept).
  Expected<Tensor> RunEntry(const ir::Module& module, std::vector<Tensor> arguments) const;

 private:
  DeviceContext device_;
  InterpreterOptions options_;
};

}  // namespace loom::exec
