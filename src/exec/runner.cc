#include "exec/runner.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include "exec/collective_runtime.h"
#include "exec/comm/inprocess_communicator.h"
#include "exec/cpu/cpu_device.h"
#include "exec/cpu/float_formats.h"
#include "exec/executor.h"
#include "exec/interpreter.h"
#include "exec/npy.h"
#include "ir/verifier.h"
#include "support/saturating.h"
#include "support/units.h"

namespace loom::exec {
namespace {

// splitmix64: a small, well-mixed generator whose streams depend only on
// the seed, so every platform draws the same inputs.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1), on a grid of 2^-24 so that f32 holds it exactly.
  double NextSigned() { return static_cast<double>(Next() >> 40) / double(1 << 23) - 1.0; }

 private:
  uint64_t state_;
};

// Floats uniform in [-1, 1) (rounded to the type); integers small, so that
// loop bounds and indices drawn at random stay reasonable; pred fair coins.
Expected<Tensor> RandomTensor(const ir::Shape& shape, uint64_t stream) {
  if (shape.IsTuple()) {
    std::vector<Tensor> elements;
    for (int64_t i = 0; i < shape.tuple_size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(Tensor element, RandomTensor(shape.tuple_element(i), stream * 31 + i));
      elements.push_back(std::move(element));
    }
    return Tensor::Tuple(std::move(elements));
  }
  LOOM_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Zeros(shape));
  SplitMix64 random(stream);
  // The values are on a grid of 2^-24, exact in f32: the common float types
  // round them from float with the fast conversions, bit for bit as SetDouble.
  std::byte* data = tensor.mutable_bytes().data();
  switch (shape.type()) {
    case ir::PrimitiveType::kF32:
      for (int64_t i = 0; i < tensor.ElementCount(); ++i) {
        reinterpret_cast<float*>(data)[i] = static_cast<float>(random.NextSigned());
      }
      return tensor;
    case ir::PrimitiveType::kBF16:
      for (int64_t i = 0; i < tensor.ElementCount(); ++i) {
        reinterpret_cast<uint16_t*>(data)[i] =
            cpu::FloatToBf16(static_cast<float>(random.NextSigned()));
      }
      return tensor;
    case ir::PrimitiveType::kF16:
      for (int64_t i = 0; i < tensor.ElementCount(); ++i) {
        reinterpret_cast<uint16_t*>(data)[i] =
            cpu::FloatToF16(static_cast<float>(random.NextSigned()));
      }
      return tensor;
    default:
      break;
  }
  for (int64_t i = 0; i < tensor.ElementCount(); ++i) {
    if (ir::IsFloatingPoint(shape.type())) {
      tensor.SetDouble(i, random.NextSigned());
    } else if (shape.type() == ir::PrimitiveType::kPred) {
      tensor.SetInt(i, static_cast<int64_t>(random.Next() & 1));
    } else if (ir::IsUnsignedInteger(shape.type())) {
      tensor.SetInt(i, static_cast<int64_t>(random.Next() % 16));
    } else {
      tensor.SetInt(i, static_cast<int64_t>(random.Next() % 16) - 8);
    }
  }
  return tensor;
}

uint64_t StreamOf(uint64_t seed, int64_t device, int64_t parameter) {
  SplitMix64 mix(seed ^ (static_cast<uint64_t>(device) << 32) ^ static_cast<uint64_t>(parameter));
  return mix.Next();
}

void CollectLeaves(const Tensor& tensor, std::vector<const Tensor*>& leaves) {
  if (!tensor.IsTuple()) {
    leaves.push_back(&tensor);
    return;
  }
  for (const Tensor& element : tensor.tuple_elements()) CollectLeaves(element, leaves);
}

Error OnDevice(int64_t device, const Error& error) {
  return Error{fmt::format("device {}: {}", device, error.message), error.loc};
}

}  // namespace

int64_t DeviceMemoryBound(const ir::Module& module) {
  int64_t bytes = 0;
  for (const auto& computation : module.computations()) {
    for (const auto& instruction : computation->instructions()) {
      bytes = SaturatingAdd(bytes, instruction->shape().ByteSize());
    }
  }
  return bytes;
}

MemoryBudget MemoryThisProcessMayUse() {
  const int64_t page = sysconf(_SC_PAGE_SIZE);
  MemoryBudget budget{static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * page / 2,
                      "half of this machine's physical memory"};
  // An address-space or data limit (ulimit -v / -d) leaves what the process
  // has not mapped yet.
  int64_t mapped = 0;
  if (std::ifstream statm("/proc/self/statm"); statm >> mapped) mapped *= page;
  for (const auto& [resource, name] : {std::pair{RLIMIT_AS, "the address-space limit (ulimit -v)"},
                                       std::pair{RLIMIT_DATA, "the data-size limit (ulimit -d)"}}) {
    rlimit limit{};
    if (getrlimit(resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) continue;
    const auto cap =
        static_cast<int64_t>(std::min<rlim_t>(limit.rlim_cur, std::numeric_limits<int64_t>::max()));
    const int64_t left = std::max<int64_t>(0, cap - mapped);
    if (left < budget.bytes) budget = MemoryBudget{left, name};
  }
  return budget;
}

Status CheckMemory(const ir::Module& module, int64_t devices, MemoryBudget budget) {
  if (budget.bytes <= 0 && budget.what.empty()) budget = MemoryThisProcessMayUse();
  const int64_t per_device = DeviceMemoryBound(module);
  devices = std::max<int64_t>(devices, 1);
  if (per_device > budget.bytes / devices) {
    return Error{fmt::format(
        "module {} may hold up to {} per device, {} for {} device(s) on this machine: more "
        "than the {} this run may use ({})",
        module.name(), FormatBytes(per_device), FormatBytes(SaturatingMul(per_device, devices)),
        devices, FormatBytes(budget.bytes), budget.what)};
  }
  return OkStatus();
}

Expected<ir::DeviceGrid> GridFor(const ir::Module& module, int64_t devices) {
  if (devices < 1) return Error{"the device count must be at least 1"};
  LOOM_ASSIGN_OR_RETURN(const ir::DeviceGrid least, ir::DeviceGridOf(module));
  if (module.num_partitions() || module.replica_count()) {
    if (least.size() != devices) {
      return Error{fmt::format(
          "module {} runs on {} replica(s) x {} partition(s) = {} devices, "
          "not {}",
          module.name(), least.replica_count, least.partition_count, least.size(), devices)};
    }
    return least;
  }
  // Without counts in the header, the module runs on any multiple of its
  // replicas at least as large as what its groups name: partitions fill the rest.
  if (devices % least.replica_count != 0 || devices < least.size()) {
    return Error{fmt::format("module {} needs a multiple of {} devices, at least {}; got {}",
                             module.name(), least.replica_count, least.size(), devices)};
  }
  return ir::DeviceGrid{least.replica_count, devices / least.replica_count};
}

Expected<std::vector<Tensor>> DeviceInputs(const ir::Module& module, int64_t device,
                                           const RunOptions& options) {
  if (module.entry() == nullptr) return Error{"module has no entry computation"};
  std::vector<Tensor> inputs;
  for (const ir::Instruction* parameter : module.entry()->parameters()) {
    if (parameter == nullptr) return Error{"entry parameters are not numbered 0..n-1"};
    const int64_t number = *parameter->parameter_number();
    if (options.inputs_dir.empty()) {
      LOOM_ASSIGN_OR_RETURN(
          Tensor input, RandomTensor(parameter->shape(), StreamOf(options.seed, device, number)));
      inputs.push_back(std::move(input));
      continue;
    }
    namespace fs = std::filesystem;
    const fs::path dir(options.inputs_dir);
    fs::path path = dir / fmt::format("device{}", device) / fmt::format("param{}.npy", number);
    if (!fs::exists(path)) path = dir / fmt::format("param{}.npy", number);
    LOOM_ASSIGN_OR_RETURN(Tensor input, ReadNpy(path.string(), parameter->shape()));
    inputs.push_back(std::move(input));
  }
  return inputs;
}

namespace {

Expected<DeviceResult> RunDeviceProgram(const ir::Module& module, const ir::DeviceGrid& grid,
                                        Communicator& comm, const RunOptions& options,
                                        TraceRecorder::Clock::time_point origin) {
  const int64_t device = comm.rank();
  Expected<std::vector<Tensor>> inputs = DeviceInputs(module, device, options);
  if (!inputs.ok()) return inputs.error();
  CollectiveRuntime collectives(comm, grid, options.native_collectives);
  TraceRecorder recorder(device, origin);
  DeviceContext context;
  context.replica_id = device / grid.partition_count;
  context.partition_id = device % grid.partition_count;
  context.collectives = &collectives;
  context.trace = options.trace ? &recorder : nullptr;
  context.loop_timeout = options.timeout;
  context.max_steps = options.max_steps;
  cpu::CpuDevice cpu_device(cpu::CpuDeviceOptions{options.deterministic});
  Executor executor(cpu_device, context);
  const ir::Computation& entry = *module.entry();
  if (Status prepared = executor.Prepare(entry); !prepared.ok()) {
    return prepared.error();
  }
  // With repeats, one warm-up run first (lowering is already done), then the
  // timed ones. The inputs are uploaded once; every run reads them (shared,
  // so no run updates them in place).
  std::vector<Value> uploaded;
  for (const ir::Instruction* parameter : entry.parameters()) {
    const auto number = static_cast<size_t>(*parameter->parameter_number());
    if (number >= inputs->size()) {
      return Error{fmt::format("parameter {} has no input", number)};
    }
    Tensor& input = (*inputs)[number];
    if (uploaded.size() <= number) uploaded.resize(number + 1);
    if (!input.IsTuple() && input.shape().Compatible(parameter->shape())) {
      // An array hands its bytes to the CPU device: no copy.
      uploaded[number] =
          Value::OfArray(Array{cpu::CpuDevice::Adopt(input.TakeBytes()), 0, &parameter->shape()});
      continue;
    }
    Expected<Value> value = executor.Upload(input, parameter->shape());
    if (!value.ok()) return value.error();
    uploaded[number] = std::move(value).value();
  }
  inputs->clear();
  const int runs = options.repeat > 1 ? options.repeat + 1 : 1;
  std::vector<double> seconds;
  Value output;
  for (int run = 0; run < runs; ++run) {
    // The last run takes the inputs over, so that its buffers die early.
    std::vector<Value> arguments = run + 1 == runs ? std::move(uploaded) : uploaded;
    if (run + 1 == runs) recorder.events().clear();  // the trace of the last run
    const auto start = std::chrono::steady_clock::now();
    Expected<Value> result = executor.Run(entry, std::move(arguments));
    const auto end = std::chrono::steady_clock::now();
    if (!result.ok()) return result.error();
    if (runs == 1 || run > 0) seconds.push_back(std::chrono::duration<double>(end - start).count());
    output = std::move(result).value();
  }
  Expected<Tensor> tensor = executor.Download(output);
  if (!tensor.ok()) return tensor.error();
  std::sort(seconds.begin(), seconds.end());
  DeviceResult result;
  result.device = device;
  result.output = std::move(tensor).value();
  result.seconds = seconds[seconds.size() / 2];
  result.trace = std::move(recorder.events());
  return result;
}

}  // namespace

Expected<DeviceResult> RunDevice(const ir::Module& module, const ir::DeviceGrid& grid,
                                 Communicator& comm, const RunOptions& options,
                                 TraceRecorder::Clock::time_point origin) {
  // Memory that runs out past CheckMemory's estimate is this device's error.
  Expected<DeviceResult> result =
      OutOfMemoryAsError([&] { return RunDeviceProgram(module, grid, comm, options, origin); });
  if (!result.ok()) return OnDevice(comm.rank(), result.error());
  return result;
}

Expected<std::vector<DeviceResult>> RunOnThreads(const ir::Module& module,
                                                 const ir::DeviceGrid& grid,
                                                 const RunOptions& options) {
  const int64_t n = grid.size();
  LOOM_RETURN_IF_ERROR(CheckMemory(module, n));
  auto world = InProcessWorld::Create(n, options.timeout);
  std::vector<std::optional<Expected<DeviceResult>>> results(static_cast<size_t>(n));
  std::mutex first_error_mutex;
  std::optional<Error> first_error;
  const auto origin = TraceRecorder::Clock::now();
  {
    std::vector<std::jthread> threads;
    for (int64_t d = 0; d < n; ++d) {
      threads.emplace_back([&, d] {
        std::unique_ptr<Communicator> comm = world->Connect(d);
        Expected<DeviceResult> result = RunDevice(module, grid, *comm, options, origin);
        if (!result.ok()) {
          {
            std::lock_guard lock(first_error_mutex);
            if (!first_error) first_error = result.error();
          }
          comm->Abort(result.error());
        }
        results[static_cast<size_t>(d)] = std::move(result);
      });
    }
  }
  if (first_error) return *first_error;
  std::vector<DeviceResult> outputs;
  for (auto& result : results) outputs.push_back(std::move(result->value()));
  return outputs;
}

std::vector<const Tensor*> OutputLeaves(const Tensor& output) {
  std::vector<const Tensor*> leaves;
  CollectLeaves(output, leaves);
  return leaves;
}

}  // namespace loom::exec
