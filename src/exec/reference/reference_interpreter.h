// The reference interpreter: evaluates a computation of a per-device HLO
// program element by element through double and int64, with the semantics
// of exec/scalar_ops.h, keeping every value until the computation returns.
// It is slow on purpose: short and obviously right, it is the oracle every
// op of the fast executor (exec/executor.h) is checked against, one harness
// for every device (tests/exec/executor_differential_test.cc), as ggml checks
// its backends against its CPU reference.
#pragma once

#include <span>

#include "exec/interpreter.h"

namespace loom::exec {

class ReferenceInterpreter {
 public:
  explicit ReferenceInterpreter(DeviceContext device, InterpreterOptions options = {})
      : device_(device), options_(options) {}

  // Evaluates `computation` on `arguments` (one per parameter, in parameter
  // order) and returns its root's value. Errors name the op and its line.
  Expected<Tensor> Run(const ir::Computation& computation, std::span<const Tensor> arguments) const;
  Expected<Tensor> RunEntry(const ir::Module& module, std::span<const Tensor> arguments) const;

 private:
  DeviceContext device_;
  InterpreterOptions options_;
};

}  // namespace loom::exec
