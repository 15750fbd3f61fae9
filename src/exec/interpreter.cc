#include "exec/interpreter.h"

#include <fmt/format.h>

#include "exec/cpu/cpu_device.h"
#include "exec/executor.h"

namespace loom::exec {
namespace {

// The arguments as device values of the parameters' shapes. Arrays hand
// their bytes over to the CPU device without a copy.
Expected<std::vector<Value>> Bind(Executor& executor, const ir::Computation& computation,
                                  std::vector<Tensor> arguments) {
  std::vector<Value> values;
  for (const ir::Instruction* parameter : computation.parameters()) {
    if (parameter == nullptr) return Error{"parameters are not numbered 0..n-1"};
    const auto number = static_cast<size_t>(*parameter->parameter_number());
    if (number >= arguments.size()) {
      return Error{fmt::format("parameter {} has no argument ({} given) (%{}) at line {}", number,
                               arguments.size(), parameter->name(), parameter->loc().line),
                   parameter->loc()};
    }
    Tensor& argument = arguments[number];
    if (!argument.shape().Compatible(parameter->shape())) {
      return Error{fmt::format("parameter {} expects {}, got {} (%{}) at line {}", number,
                               parameter->shape().ToString(false), argument.shape().ToString(false),
                               parameter->name(), parameter->loc().line),
                   parameter->loc()};
    }
    if (values.size() <= number) values.resize(number + 1);
    if (argument.IsTuple()) {
      LOOM_ASSIGN_OR_RETURN(values[number], executor.Upload(argument, parameter->shape()));
    } else {
      values[number] = Value::OfArray(
          Array{cpu::CpuDevice::Adopt(argument.TakeBytes()), 0, &parameter->shape()});
    }
  }
  return values;
}

}  // namespace

Expected<Tensor> Interpreter::Run(const ir::Computation& computation,
                                  std::span<const Tensor> arguments) const {
  cpu::CpuDevice device(cpu::CpuDeviceOptions{options_.deterministic});
  Executor executor(device, device_);
  LOOM_ASSIGN_OR_RETURN(
      std::vector<Value> values,
      Bind(executor, computation, std::vector<Tensor>(arguments.begin(), arguments.end())));
  LOOM_ASSIGN_OR_RETURN(Value result, executor.Run(computation, std::move(values)));
  return executor.Download(result);
}

Expected<Tensor> Interpreter::RunEntry(const ir::Module& module,
                                       std::span<const Tensor> arguments) const {
  return RunEntry(module, std::vector<Tensor>(arguments.begin(), arguments.end()));
}

Expected<Tensor> Interpreter::RunEntry(const ir::Module& module,
                                       std::vector<Tensor> arguments) const {
  if (module.entry() == nullptr) return Error{"module has no entry computation", SourceLoc{}};
  cpu::CpuDevice device(cpu::CpuDeviceOptions{options_.deterministic});
  Executor executor(device, device_);
  LOOM_ASSIGN_OR_RETURN(std::vector<Value> values,
                        Bind(executor, *module.entry(), std::move(arguments)));
  LOOM_ASSIGN_OR_RETURN(Value result, executor.Run(*module.entry(), std::move(values)));
  return executor.Download(result);
}

}  // namespace loom::exec
