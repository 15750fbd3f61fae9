// The executor: runs per-device HLO programs on a Device (exec/device/
// device.h). It lowers every computation once (exec/program.h) and then runs
// steps: array ops on the device; control flow (while, conditional, call),
// tuples and aliases itself; collectives over the device's Communicator on
// host views of device memory, as rings on the device's collective worker so
// that they progress while the device computes (collective-permutes are
// posted at their start and waited at their done).
//
// Memory: a value's buffer lives while some slot or in-flight collective
// holds it; each step drops the slots it read last. An element-wise op,
// a convert of one width and dynamic-update-slice write into the operand's
// buffer when that operand is read by nothing else, so a ring's accumulator
// is updated in place and a chain of element-wise ops reuses one buffer.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "exec/device/device.h"
#include "exec/interpreter.h"
#include "exec/program.h"
#include "exec/tensor.h"
#include "ir/computation.h"
#include "ir/verifier.h"

namespace loom::exec {

class Executor {
 public:
  // Calls nest no deeper than this (while, conditional, call, fusion, async),
  // so that a hostile module gets an error, not a stack overflow.
  static constexpr int kMaxCallDepth = static_cast<int>(ir::kMaxCallDepth);

  Executor(Device& device, const DeviceContext& context) : device_(device), context_(context) {}
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Lowers `computation` and everything it calls, if not done already.
  Status Prepare(const ir::Computation& computation);
  // Runs `computation` (prepared on demand) on `arguments`, which it takes
  // over: buffers nothing else holds are freed after their last use.
  Expected<Value> Run(const ir::Computation& computation, std::vector<Value> arguments);

  // Host tensors to device values of `shape` (which must outlive the value)
  // and back.
  Expected<Value> Upload(const Tensor& tensor, const ir::Shape& shape);
  Expected<Tensor> Download(const Value& value);

 private:
  class Evaluation;

  Expected<const Program*> Lower(const ir::Computation& computation, int depth);
  Expected<Step> LowerStep(const ir::Instruction& instruction, int depth);
  Expected<Step> LowerTopKCustomCall(const ir::Instruction& instruction, int depth);
  Expected<Value> Execute(const Program& program, std::vector<Value> arguments, int depth);

  Device& device_;
  DeviceContext context_;
  int64_t steps_run_ = 0;  // instructions run, against context_.max_steps
  std::unordered_map<const ir::Computation*, std::unique_ptr<Program>> programs_;
};

}  // namespace loom::exec
