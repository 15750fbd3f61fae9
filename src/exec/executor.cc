#include "exec/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <optional>
#include <unordered_set>

#include "exec/collective_runtime.h"
#include "exec/cpu/kernels.h"
#include "exec/literal.h"
#include "exec/trace.h"
#include "ir/async.h"
#include "ir/reduce_window.h"
#include "ir/reduction.h"
#include "ir/sort.h"

namespace loom::exec {
namespace {

using ir::Instruction;
using ir::Opcode;

// "WHAT (%name) at line L", located at the instruction.
Error OpError(const Instruction& instruction, const std::string& what) {
  return Error{fmt::format("{} (%{}) at line {}", what, instruction.name(), instruction.loc().line),
               instruction.loc()};
}

bool HasDefaultLayout(const ir::Shape& shape) {
  if (!shape.layout()) return true;
  const auto& order = shape.layout()->minor_to_major;
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] != static_cast<int64_t>(order.size() - 1 - i)) return false;
  }
  return true;
}

// Ops whose result is their operand's bytes under another shape.
bool IsAlias(const Instruction& instruction) {
  if (instruction.operand_count() < 1) return false;
  const ir::Shape& shape = instruction.shape();
  const ir::Shape& operand = instruction.operand(0)->shape();
  switch (instruction.opcode()) {
    case Opcode::kCopy:
    case Opcode::kOptimizationBarrier:
    case Opcode::kAddDependency:
      return true;
    case Opcode::kReshape:
    case Opcode::kBitcastConvert:
      return shape.IsArray() && operand.IsArray() && shape.ByteSize() == operand.ByteSize();
    case Opcode::kBitcast:
      return shape.IsArray() && operand.IsArray() && shape.ByteSize() == operand.ByteSize() &&
             HasDefaultLayout(shape) && HasDefaultLayout(operand);
    default:
      return false;
  }
}

// The byte offset of a slice that is one contiguous piece of its operand:
// stride 1 everywhere, every dimension after the first one it cuts taken
// whole, every dimension before it of size 1 in the result.
std::optional<int64_t> ContiguousSliceOffset(const Instruction& slice) {
  if (slice.operand_count() < 1) return std::nullopt;
  const ir::Shape& in = slice.operand(0)->shape();
  if (!slice.attrs().slice || !in.IsArray() ||
      static_cast<int64_t>(slice.attrs().slice->size()) != in.rank()) {
    return std::nullopt;
  }
  const std::vector<ir::SliceDim>& dims = *slice.attrs().slice;
  int64_t first_cut = in.rank();
  for (int64_t d = 0; d < in.rank(); ++d) {
    if (dims[d].start != 0 || dims[d].limit != in.dim(d) || dims[d].stride != 1) {
      first_cut = d;
      break;
    }
  }
  for (int64_t d = 0; d < in.rank(); ++d) {
    const int64_t size = slice.shape().dim(d);
    if (d < first_cut) continue;
    if (d == first_cut) {
      if (dims[d].stride != 1 && size > 1) return std::nullopt;
      continue;
    }
    if (dims[d].start != 0 || dims[d].limit != in.dim(d) || dims[d].stride != 1) {
      return std::nullopt;
    }
  }
  for (int64_t d = 0; d < first_cut; ++d) {
    // Dimensions before the cut are whole, so they must be of size 1 for the
    // piece to be contiguous (unless the cut is in the first dimension).
    if (first_cut < in.rank() && in.dim(d) != 1) return std::nullopt;
  }
  int64_t offset = 0, stride = ir::PrimitiveTypeBits(in.type()) / 8;
  for (int64_t d = in.rank() - 1; d >= 0; --d) {
    offset += dims[d].start * stride;
    stride *= in.dim(d);
  }
  return offset;
}

// The operand whose buffer an element-wise result may take over: one of the
// same element width and count.
int32_t ReusableOperand(const Instruction& instruction) {
  const Opcode op = instruction.opcode();
  std::vector<int64_t> candidates;
  if (ir::IsElementwiseUnary(op) || (ir::IsElementwiseBinary(op) && op != Opcode::kCompare) ||
      op == Opcode::kConvert) {
    for (int64_t i = 0; i < instruction.operand_count(); ++i) candidates.push_back(i);
  } else if (op == Opcode::kSelect) {
    candidates = {1, 2};
  } else if (op == Opcode::kClamp) {
    candidates = {1};
  } else if (op == Opcode::kDynamicUpdateSlice || op == Opcode::kScatter) {
    candidates = {0};
  }
  const ir::Shape& shape = instruction.shape();
  for (int64_t i : candidates) {
    if (i >= instruction.operand_count()) continue;
    const ir::Shape& operand = instruction.operand(i)->shape();
    if (operand.IsArray() && shape.IsArray() && operand.ElementCount() == shape.ElementCount() &&
        ir::PrimitiveTypeBits(operand.type()) == ir::PrimitiveTypeBits(shape.type())) {
      return static_cast<int32_t>(i);
    }
  }
  return -1;
}

bool IsSynchronousCollective(Opcode op) {
  switch (op) {
    case Opcode::kAllGather:
    case Opcode::kAllReduce:
    case Opcode::kReduceScatter:
    case Opcode::kAllToAll:
    case Opcode::kCollectivePermute:
      return true;
    default:
      return false;
  }
}

bool IsBookkeeping(StepKind kind) {
  switch (kind) {
    case StepKind::kParameter:
    case StepKind::kConstant:
    case StepKind::kAlias:
    case StepKind::kSliceAlias:
    case StepKind::kTuple:
    case StepKind::kGetTupleElement:
    case StepKind::kAsyncUpdate:
    case StepKind::kToken:
    case StepKind::kCollectiveStart:
    case StepKind::kCopyDone:
      return true;
    default:
      return false;
  }
}

int64_t SingleDimension(const Instruction& instruction) {
  const auto& dims = instruction.attrs().dimensions;
  return dims && dims->size() == 1 ? dims->front() : -1;
}

}  // namespace

// --- lowering ---------------------------------------------------------------------

Status Executor::Prepare(const ir::Computation& computation) {
  return Lower(computation, 0).status();
}

Expected<const Program*> Executor::Lower(const ir::Computation& computation, int depth) {
  if (auto it = programs_.find(&computation); it != programs_.end()) return it->second.get();
  if (depth > kMaxCallDepth) {
    return Error{fmt::format("computation {} is nested more than {} calls deep", computation.name(),
                             kMaxCallDepth)};
  }
  auto program = std::make_unique<Program>();
  program->computation = &computation;
  const auto& instructions = computation.instructions();
  std::unordered_map<const Instruction*, int32_t> slot_of;
  std::vector<int32_t> last_reader(instructions.size(), -1);
  for (size_t position = 0; position < instructions.size(); ++position) {
    const Instruction& instruction = *instructions[position];
    LOOM_ASSIGN_OR_RETURN(Step step, LowerStep(instruction, depth));
    for (const Instruction* operand : instruction.operands()) {
      auto found = slot_of.find(operand);
      if (found == slot_of.end()) {
        step.kind = StepKind::kUnsupported;
        step.error = OpError(instruction, fmt::format("operand %{} is not defined before its use",
                                                      operand->name()))
                         .message;
        step.operands.clear();
        break;
      }
      step.operands.push_back(found->second);
      last_reader[found->second] = static_cast<int32_t>(position);
    }
    if (instruction.opcode() == Opcode::kParameter && instruction.parameter_number()) {
      const auto number = static_cast<size_t>(*instruction.parameter_number());
      if (program->parameter_slots.size() <= number)
        program->parameter_slots.resize(number + 1, -1);
      program->parameter_slots[number] = static_cast<int32_t>(position);
    }
    slot_of[&instruction] = static_cast<int32_t>(position);
    program->steps.push_back(std::move(step));
  }
  if (computation.root() == nullptr) {
    return Error{"computation " + computation.name() + " has no root", SourceLoc{}};
  }
  program->root = MustFind(slot_of, computation.root());
  for (size_t slot = 0; slot < last_reader.size(); ++slot) {
    if (last_reader[slot] < 0 || static_cast<int32_t>(slot) == program->root) continue;
    std::vector<int32_t>& release = program->steps[last_reader[slot]].release;
    if (std::find(release.begin(), release.end(), slot) == release.end()) {
      release.push_back(static_cast<int32_t>(slot));
    }
  }
  const Program* lowered = program.get();
  programs_[&computation] = std::move(program);
  return lowered;
}

// XLA's custom-call TopK: the topk kernel where its comparator is one
// strict compare, else the comparator called through a stable sort.
Expected<Step> Executor::LowerTopKCustomCall(const Instruction& instruction, int depth) {
  Step step;
  step.instruction = &instruction;
  step.kind = StepKind::kUnsupported;
  Expected<ir::CustomTopK> topk = ir::CustomTopKOf(instruction);
  if (!topk.ok()) {
    step.error = topk.error().message;
    return step;
  }
  const ir::Shape& operand = instruction.operand(0)->shape();
  if (!IsExecutableType(operand.type())) {
    step.error = OpError(instruction, fmt::format("custom-call TopK of {} is not executable",
                                                  operand.ToString(false)))
                     .message;
    return step;
  }
  if (ir::CustomTopKSortKey(instruction, *topk)) {
    step.kind = StepKind::kTopK;
    return step;
  }
  LOOM_ASSIGN_OR_RETURN(const Program* comparator, Lower(*topk->comparator, depth + 1));
  step.called.push_back(comparator);
  step.kind = StepKind::kTopKByCalls;
  return step;
}

Expected<Step> Executor::LowerStep(const Instruction& instruction, int depth) {
  Step step;
  step.instruction = &instruction;
  const Opcode op = instruction.opcode();
  auto unsupported = [&](const Error& error) {
    step.kind = StepKind::kUnsupported;
    step.error = error.message;
    return step;
  };
  auto call = [&](const ir::Computation* callee) -> Status {
    if (callee == nullptr) return OpError(instruction, "missing called computation");
    LOOM_ASSIGN_OR_RETURN(const Program* program, Lower(*callee, depth + 1));
    step.called.push_back(program);
    return OkStatus();
  };
  if (instruction.operand_count() < ir::MinimumOperandCount(op)) {
    return unsupported(OpError(
        instruction, fmt::format("{} needs at least {} operands, has {}", ir::OpcodeName(op),
                                 ir::MinimumOperandCount(op), instruction.operand_count())));
  }
  switch (op) {
    case Opcode::kParameter:
      step.kind = StepKind::kParameter;
      return step;
    case Opcode::kConstant: {
      Expected<Tensor> literal = EvaluateConstant(instruction);
      if (!literal.ok()) return unsupported(literal.error());
      Expected<Value> value = Upload(*literal, instruction.shape());
      if (!value.ok()) return unsupported(OpError(instruction, value.error().message));
      step.kind = StepKind::kConstant;
      step.value = std::make_shared<const Value>(std::move(value).value());
      return step;
    }
    case Opcode::kGetDimensionSize: {
      // Shapes are static here: the size is known when lowering, a
      // constant of the result's type.
      Expected<Tensor> size = DimensionSize(instruction);
      if (!size.ok()) return unsupported(size.error());
      Expected<Value> value = Upload(*size, instruction.shape());
      if (!value.ok()) return unsupported(OpError(instruction, value.error().message));
      step.kind = StepKind::kConstant;
      step.value = std::make_shared<const Value>(std::move(value).value());
      return step;
    }
    case Opcode::kTuple:
      step.kind = StepKind::kTuple;
      return step;
    case Opcode::kGetTupleElement:
      step.kind = StepKind::kGetTupleElement;
      return step;
    case Opcode::kWhile: {
      step.kind = StepKind::kWhile;
      const Status condition = call(instruction.called("condition"));
      const Status body = condition.ok() ? call(instruction.called("body")) : condition;
      if (!body.ok()) return unsupported(OpError(instruction, "while needs condition and body"));
      return step;
    }
    case Opcode::kConditional: {
      step.kind = StepKind::kConditional;
      for (const ir::Computation* branch : instruction.called_computations()) {
        LOOM_RETURN_IF_ERROR(call(branch));
      }
      return step;
    }
    case Opcode::kCall:
    case Opcode::kFusion: {
      step.kind = StepKind::kCall;
      const Status status = call(instruction.called(op == Opcode::kCall ? "to_apply" : "calls"));
      if (!status.ok()) return unsupported(status.error());
      return step;
    }
    case Opcode::kAfterAll:
      step.kind = StepKind::kToken;
      return step;
    case Opcode::kCopyStart:
      // An asynchronous copy between memory spaces (XLA's prefetches and
      // host offloading): one memory here, so the copy shares the
      // operand's buffer, as copy does.
      step.kind = StepKind::kCopyStart;
      return step;
    case Opcode::kCopyDone:
      step.kind = StepKind::kCopyDone;
      return step;
    case Opcode::kPartitionId:
      step.kind = StepKind::kPartitionId;
      return step;
    case Opcode::kReplicaId:
      step.kind = StepKind::kReplicaId;
      return step;
    case Opcode::kCustomCall:
      if (ir::IsTopKCustomCall(instruction)) return LowerTopKCustomCall(instruction, depth);
      return unsupported(Error{fmt::format("unsupported custom-call {} at line {} (%{})",
                                           instruction.attrs().custom_call_target.value_or("?"),
                                           instruction.loc().line, instruction.name()),
                               instruction.loc()});
    case Opcode::kAsyncUpdate:
      step.kind = StepKind::kAsyncUpdate;
      return step;
    case Opcode::kAsyncStart:
      if (ir::WrappedCollective(instruction) != nullptr) {
        step.kind = StepKind::kCollectiveStart;
        return step;
      }
      if (const ir::Computation* callee = ir::AsyncCallee(instruction);
          callee != nullptr && callee->root() != nullptr &&
          ir::IsCollective(callee->root()->opcode())) {
        return unsupported(
            OpError(instruction, "async-start of a computation that is more than one collective"));
      }
      step.kind = StepKind::kAsyncStart;
      if (const Status status = call(ir::AsyncCallee(instruction)); !status.ok()) {
        return unsupported(status.error());
      }
      return step;
    case Opcode::kAsyncDone:
    case Opcode::kAllGatherDone:
    case Opcode::kAllReduceDone:
    case Opcode::kCollectivePermuteDone: {
      const Instruction* start = ir::StartOf(instruction);
      step.kind =
          start && ir::CollectiveOfStart(*start) ? StepKind::kCollectiveDone : StepKind::kAsyncDone;
      return step;
    }
    case Opcode::kAllGatherStart:
    case Opcode::kAllReduceStart:
    case Opcode::kCollectivePermuteStart:
      step.kind = StepKind::kCollectiveStart;
      return step;
    default:
      break;
  }
  if (IsSynchronousCollective(op)) {
    step.kind = StepKind::kCollective;
    return step;
  }
  if (ir::IsCollective(op)) {
    return unsupported(OpError(
        instruction, fmt::format("collective {} is not executed by Loom", ir::OpcodeName(op))));
  }
  if (IsAlias(instruction)) {
    step.kind = StepKind::kAlias;
    return step;
  }
  if (op == Opcode::kSlice) {
    if (std::optional<int64_t> offset = ContiguousSliceOffset(instruction)) {
      step.kind = StepKind::kSliceAlias;
      step.alias_offset = *offset;
      return step;
    }
  }
  if (op == Opcode::kSort && !device_.Supports(instruction)) {
    step.kind = StepKind::kSort;
    if (!call(instruction.called("to_apply")).ok()) {
      return unsupported(OpError(instruction, "sort needs to_apply"));
    }
    return step;
  }
  if (op == Opcode::kTopK) {
    const ir::Shape& operand = instruction.operand(0)->shape();
    if (!operand.IsArray() || !IsExecutableType(operand.type())) {
      return unsupported(OpError(
          instruction, fmt::format("topk of {} is not executable", operand.ToString(false))));
    }
    step.kind = StepKind::kTopK;
    return step;
  }
  if (op == Opcode::kRngBitGenerator) {
    const ir::Shape& shape = instruction.shape();
    if (!shape.IsTuple() || shape.tuple_size() != 2 ||
        !IsExecutableType(shape.tuple_element(1).type())) {
      return unsupported(
          OpError(instruction,
                  fmt::format("rng-bit-generator of {} is not executable", shape.ToString(false))));
    }
    step.kind = StepKind::kRngBitGenerator;
    return step;
  }
  if (op == Opcode::kBatchNormTraining || op == Opcode::kBatchNormInference ||
      op == Opcode::kBatchNormGrad) {
    const ir::Shape& operand = instruction.operand(0)->shape();
    if (!operand.IsArray() || !IsExecutableType(operand.type())) {
      return unsupported(OpError(
          instruction,
          fmt::format("{} of {} is not executable", ir::OpcodeName(op), operand.ToString(false))));
    }
    step.kind = StepKind::kBatchNorm;
    return step;
  }
  if (op == Opcode::kTriangularSolve || op == Opcode::kCholesky) {
    const ir::Shape& shape = instruction.shape();
    if (!shape.IsArray() || !ir::IsFloatingPoint(shape.type()) || !IsExecutableType(shape.type())) {
      return unsupported(OpError(
          instruction,
          fmt::format("{} of {} is not executable", ir::OpcodeName(op), shape.ToString(false))));
    }
    step.kind = StepKind::kArrayKernel;
    return step;
  }
  if (op == Opcode::kStochasticConvert) {
    const ir::PrimitiveType to = instruction.shape().type();
    if (!ir::IsSignedInteger(to)) {
      return unsupported(
          OpError(instruction, fmt::format("stochastic-convert to {} is not executable (XLA's "
                                           "decomposer converts to signed integers only)",
                                           ir::PrimitiveTypeName(to))));
    }
    if (!IsExecutableType(instruction.operand(0)->shape().type())) {
      return unsupported(OpError(instruction, "stochastic-convert of " +
                                                  instruction.operand(0)->shape().ToString(false) +
                                                  " is not executable"));
    }
    step.kind = StepKind::kArrayKernel;
    return step;
  }
  if (op == Opcode::kSelectAndScatter && !device_.Supports(instruction)) {
    step.kind = StepKind::kSelectAndScatter;
    if (!call(instruction.called("select")).ok() || !call(instruction.called("scatter")).ok()) {
      return unsupported(OpError(instruction, "select-and-scatter needs select and scatter"));
    }
    return step;
  }
  if ((op == Opcode::kReduce || op == Opcode::kReduceWindow || op == Opcode::kScatter) &&
      !device_.Supports(instruction)) {
    step.kind = op == Opcode::kReduce         ? StepKind::kReduce
                : op == Opcode::kReduceWindow ? StepKind::kReduceWindow
                                              : StepKind::kScatter;
    const Status status = call(instruction.called("to_apply"));
    if (!status.ok()) {
      return unsupported(
          OpError(instruction, fmt::format("{} needs operands and to_apply", ir::OpcodeName(op))));
    }
    return step;
  }
  if (!device_.Supports(instruction)) {
    const ir::Shape& shape = instruction.shape();
    if (shape.IsArray() && !IsExecutableType(shape.type())) {
      return unsupported(OpError(instruction, fmt::format("element type {} is not executable",
                                                          ir::PrimitiveTypeName(shape.type()))));
    }
    return unsupported(OpError(instruction, fmt::format("unsupported op {}", ir::OpcodeName(op))));
  }
  step.kind = StepKind::kDeviceOp;
  step.reuse_operand = ReusableOperand(instruction);
  return step;
}

// --- host and device values ---------------------------------------------------------

Expected<Value> Executor::Upload(const Tensor& tensor, const ir::Shape& shape) {
  if (shape.IsTuple()) {
    if (!tensor.IsTuple() ||
        static_cast<int64_t>(tensor.tuple_elements().size()) != shape.tuple_size()) {
      return Error{fmt::format("expected a value of {}, got {}", shape.ToString(false),
                               tensor.shape().ToString(false))};
    }
    std::vector<Value> elements;
    for (int64_t i = 0; i < shape.tuple_size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(Value element,
                            Upload(tensor.tuple_elements()[i], shape.tuple_element(i)));
      elements.push_back(std::move(element));
    }
    return Value::OfTuple(&shape, std::move(elements));
  }
  if (!tensor.shape().Compatible(shape)) {
    return Error{fmt::format("expected a value of {}, got {}", shape.ToString(false),
                             tensor.shape().ToString(false))};
  }
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBuffer> buffer, device_.Allocate(shape.ByteSize()));
  Array array{std::move(buffer), 0, &shape};
  LOOM_RETURN_IF_ERROR(device_.CopyFromHost(tensor.bytes(), array));
  return Value::OfArray(std::move(array));
}

Expected<Tensor> Executor::Download(const Value& value) {
  if (value.is_tuple()) {
    std::vector<Tensor> elements;
    for (const Value& element : value.elements()) {
      LOOM_ASSIGN_OR_RETURN(Tensor tensor, Download(element));
      elements.push_back(std::move(tensor));
    }
    return Tensor::Tuple(std::move(elements));
  }
  if (!value.defined()) return Tensor();  // a token
  std::vector<std::byte> bytes(static_cast<size_t>(value.array().bytes()));
  LOOM_RETURN_IF_ERROR(device_.CopyToHost(value.array(), bytes));
  ir::Shape shape = *value.shape();
  shape.set_layout(std::nullopt);
  return Tensor::FromBytes(shape, std::move(bytes));
}

// --- running ------------------------------------------------------------------------

// One run of one program: its slots, and the collectives it has in flight.
class Executor::Evaluation {
 public:
  Evaluation(Executor& executor, const Program& program, int depth)
      : executor_(executor),
        device_(executor.device_),
        context_(executor.context_),
        program_(program),
        depth_(depth),
        slots_(program.steps.size()) {}

  ~Evaluation() { DrainInFlight(); }

  // Runs the program; on an error while collectives are in flight, first
  // ends the run on every device with that error, so that the peers report
  // the cause, not that this device stopped.
  Expected<Value> Run(std::vector<Value> arguments);

 private:
  Expected<Value> RunSteps(std::vector<Value> arguments);
  // A collective between its start and its done: what it reads and writes
  // stays alive until then.
  struct InFlight {
    std::vector<Value> operands;
    Value result;
    std::vector<std::unique_ptr<PostedPermute>> permutes;
    std::vector<CollectiveWorker::Ticket> tickets;
    double started_us = 0;
  };

  Expected<Value> RunStep(const Step& step, std::vector<Value> in);
  Expected<Value> DeviceOp(const Step& step, std::vector<Value>& in);
  Expected<Value> While(const Step& step, Value state);
  Expected<Value> Conditional(const Step& step, const std::vector<Value>& in);
  // An element of a host array, for a per-element call.
  struct Element {
    const cpu::HostArray* array;
    int64_t at;
  };
  // Of callee `callee` of the step (0: its only one, or select-and-scatter's
  // select; 1: its scatter).
  Expected<std::vector<const ir::Shape*>> ScalarParameters(const Step& step, int64_t count,
                                                           size_t callee = 0);
  Status CallOnElements(const Step& step, const std::vector<const ir::Shape*>& parameters,
                        std::span<const Element> arguments, std::span<const Element> results,
                        size_t callee = 0);
  struct Accumulators {
    std::vector<Array> arrays;
    std::vector<cpu::HostArray> views, inputs;
    Value Result(const ir::Shape& result_shape) &&;
  };
  Expected<Accumulators> NewAccumulators(const Instruction& instruction,
                                         const std::vector<Value>& in);
  Status FoldByCall(const Step& step, const std::vector<const ir::Shape*>& parameters,
                    Accumulators& accumulators, int64_t out, int64_t in,
                    std::vector<Element>& arguments);
  Expected<Value> GeneralReduce(const Step& step, const std::vector<Value>& in);
  Expected<Value> GeneralReduceWindow(const Step& step, const std::vector<Value>& in);
  Expected<Value> GeneralSelectAndScatter(const Step& step, const std::vector<Value>& in);
  Expected<Value> GeneralSort(const Step& step, const std::vector<Value>& in);
  Expected<Value> TopK(const Step& step, const std::vector<Value>& in);
  Expected<Value> TopKByCalls(const Step& step, const std::vector<Value>& in);
  Status SortByCalls(const Step& step, std::span<const cpu::HostArray> operands,
                     std::span<const cpu::HostArray> results, int64_t dimension, size_t compared);
  Expected<Value> RngBitGenerator(const Step& step, const std::vector<Value>& in);
  Expected<Value> BatchNorm(const Step& step, const std::vector<Value>& in);
  Expected<Value> ArrayKernel(const Step& step, const std::vector<Value>& in);
  Expected<Value> GeneralScatter(const Step& step, const std::vector<Value>& in);
  Expected<Value> AsyncStart(const Step& step, std::vector<Value> in);
  Expected<Value> DeviceId(int64_t id);
  Expected<Array> NewArray(const ir::Shape& shape);
  // A new array for each element of the instruction's tuple result, and a
  // host view of each.
  struct TupleOutputs {
    std::vector<Value> elements;
    std::vector<cpu::HostArray> views;
  };
  Expected<TupleOutputs> NewTupleOutputs(const Instruction& instruction);
  Expected<int64_t> ReadScalar(const Value& value, const Instruction& at);
  Status PostCollective(const Instruction& start, const Instruction& collective,
                        std::vector<Value> operands, const ir::Shape& result_shape);
  Expected<Value> FinishCollective(const Instruction& start);
  Expected<cpu::HostArray> HostArrayOf(const Array& array, const Instruction& at);
  // Host views of `in`, which must all be arrays.
  Expected<std::vector<cpu::HostArray>> HostArraysOf(const std::vector<Value>& in,
                                                     const Instruction& at);
  Expected<ReduceBytes> ReducerOf(const Instruction& collective, ir::PrimitiveType type);
  Expected<std::function<Status()>> RingJob(const Instruction& collective, uint64_t tag,
                                            const Group& group, std::span<const std::byte> input,
                                            std::span<std::byte> output, const ir::Shape& in_shape);
  std::function<Status()> NativeJob(const Instruction& collective, const Group& group,
                                    std::span<const std::byte> input, std::span<std::byte> output,
                                    const ir::Shape& in_shape);
  void DrainInFlight();
  void Record(const Step& step, double start_us) const;

  Executor& executor_;
  Device& device_;
  const DeviceContext& context_;
  const Program& program_;
  const int depth_;
  std::vector<Value> slots_;
  std::unordered_map<const Instruction*, InFlight> in_flight_;
};

Expected<Value> Executor::Execute(const Program& program, std::vector<Value> arguments, int depth) {
  if (depth > kMaxCallDepth) {
    return Error{fmt::format("calls nest more than {} deep at computation {}", kMaxCallDepth,
                             program.computation->name())};
  }
  Evaluation evaluation(*this, program, depth);
  return evaluation.Run(std::move(arguments));
}

Expected<Value> Executor::Run(const ir::Computation& computation, std::vector<Value> arguments) {
  LOOM_ASSIGN_OR_RETURN(const Program* program, Lower(computation, 0));
  steps_run_ = 0;
  return Execute(*program, std::move(arguments), 0);
}

Expected<Value> Executor::Evaluation::Run(std::vector<Value> arguments) {
  Expected<Value> result = RunSteps(std::move(arguments));
  if (!result.ok() && !in_flight_.empty() && context_.collectives != nullptr) {
    Communicator& comm = context_.collectives->comm();
    comm.Abort(Error{fmt::format("device {}: {}", comm.rank(), result.error().message),
                     result.error().loc});
  }
  return result;
}

Expected<Value> Executor::Evaluation::RunSteps(std::vector<Value> arguments) {
  for (size_t number = 0; number < program_.parameter_slots.size(); ++number) {
    const int32_t slot = program_.parameter_slots[number];
    if (slot < 0) continue;
    const Instruction& parameter = *program_.steps[slot].instruction;
    if (number >= arguments.size()) {
      return OpError(parameter, fmt::format("parameter {} has no argument ({} given)", number,
                                            arguments.size()));
    }
    if (!arguments[number].shape()->Compatible(parameter.shape())) {
      return OpError(parameter, fmt::format("parameter {} expects {}, got {}", number,
                                            parameter.shape().ToString(false),
                                            arguments[number].shape()->ToString(false)));
    }
  }
  for (size_t position = 0; position < program_.steps.size(); ++position) {
    const Step& step = program_.steps[position];
    if (context_.max_steps > 0 && ++executor_.steps_run_ > context_.max_steps) {
      return OpError(*step.instruction, fmt::format("the run exceeds its budget of {} instructions",
                                                    context_.max_steps));
    }
    const double start_us = context_.trace ? context_.trace->NowUs() : 0;
    std::vector<Value> in;
    in.reserve(step.operands.size());
    for (int32_t slot : step.operands) in.push_back(slots_[slot]);
    for (int32_t slot : step.release) slots_[slot] = Value();
    Expected<Value> result = step.kind == StepKind::kParameter
                                 ? std::move(arguments[*step.instruction->parameter_number()])
                                 : RunStep(step, std::move(in));
    if (!result.ok()) return result.error();
    slots_[position] = std::move(result).value();
    if (context_.trace) Record(step, start_us);
  }
  if (!in_flight_.empty()) {
    return OpError(*in_flight_.begin()->first, "a collective started here is never done");
  }
  return std::move(slots_[program_.root]);
}

Expected<Value> Executor::Evaluation::RunStep(const Step& step, std::vector<Value> in) {
  const Instruction& instruction = *step.instruction;
  switch (step.kind) {
    case StepKind::kParameter:
      return Error{"parameters are bound before the steps run"};
    case StepKind::kConstant:
      return *step.value;
    case StepKind::kDeviceOp:
      return DeviceOp(step, in);
    case StepKind::kAlias:
      if (in[0].is_tuple() || !in[0].defined()) return in[0];
      return Value::OfArray(
          Array{in[0].array().buffer, in[0].array().offset, &instruction.shape()});
    case StepKind::kSliceAlias:
      return Value::OfArray(Array{in[0].array().buffer, in[0].array().offset + step.alias_offset,
                                  &instruction.shape()});
    case StepKind::kTuple:
      return Value::OfTuple(&instruction.shape(), std::move(in));
    case StepKind::kGetTupleElement: {
      const int64_t index = instruction.attrs().tuple_index.value_or(-1);
      if (!in[0].is_tuple() || index < 0 ||
          index >= static_cast<int64_t>(in[0].elements().size())) {
        return OpError(instruction, fmt::format("tuple index {} out of range", index));
      }
      return in[0].elements()[index];
    }
    case StepKind::kWhile:
      return While(step, std::move(in[0]));
    case StepKind::kConditional:
      return Conditional(step, in);
    case StepKind::kCall:
      return executor_.Execute(*step.called[0], std::move(in), depth_ + 1);
    case StepKind::kReduce:
      return GeneralReduce(step, in);
    case StepKind::kReduceWindow:
      return GeneralReduceWindow(step, in);
    case StepKind::kSelectAndScatter:
      return GeneralSelectAndScatter(step, in);
    case StepKind::kSort:
      return GeneralSort(step, in);
    case StepKind::kScatter:
      return GeneralScatter(step, in);
    case StepKind::kTopK:
      return TopK(step, in);
    case StepKind::kTopKByCalls:
      return TopKByCalls(step, in);
    case StepKind::kRngBitGenerator:
      return RngBitGenerator(step, in);
    case StepKind::kBatchNorm:
      return BatchNorm(step, in);
    case StepKind::kArrayKernel:
      return ArrayKernel(step, in);
    case StepKind::kAsyncStart:
      return AsyncStart(step, std::move(in));
    case StepKind::kAsyncUpdate:
      return in[0];
    case StepKind::kAsyncDone: {
      if (!in[0].is_tuple() || in[0].elements().size() < 2) {
        return OpError(instruction, "async-done of a value that is not an async-start's");
      }
      return in[0].elements()[1];
    }
    case StepKind::kCollective: {
      if (context_.collectives == nullptr) {
        return OpError(instruction, fmt::format("collective {} needs a communicator",
                                                ir::OpcodeName(instruction.opcode())));
      }
      LOOM_RETURN_IF_ERROR(
          PostCollective(instruction, instruction, std::move(in), instruction.shape()));
      return FinishCollective(instruction);
    }
    case StepKind::kCollectiveStart: {
      if (context_.collectives == nullptr) {
        return OpError(instruction, fmt::format("collective {} needs a communicator",
                                                ir::OpcodeName(instruction.opcode())));
      }
      const Instruction* collective = ir::CollectiveOfStart(instruction);
      Value operands = Value::OfTuple(&instruction.shape(), in);
      LOOM_RETURN_IF_ERROR(PostCollective(instruction, *collective, std::move(in),
                                          ir::AsyncResultShape(instruction)));
      // The start's own value is the tuple of its operands: the result
      // exists only at the done.
      return operands;
    }
    case StepKind::kCollectiveDone: {
      const Instruction* start = ir::StartOf(instruction);
      if (start == nullptr || !in_flight_.contains(start)) {
        return OpError(instruction, "completes no collective started in this computation");
      }
      return FinishCollective(*start);
    }
    case StepKind::kPartitionId:
      return DeviceId(context_.partition_id);
    case StepKind::kReplicaId:
      return DeviceId(context_.replica_id);
    case StepKind::kToken:
      return Value::OfTuple(&instruction.shape(), {});
    case StepKind::kCopyStart: {
      const ir::Shape& shape = instruction.shape();
      if (!shape.IsTuple() || shape.tuple_size() != 3 || in[0].is_tuple() || !in[0].defined()) {
        return OpError(instruction, "copy-start takes an array to (copy, operand, context)");
      }
      LOOM_ASSIGN_OR_RETURN(Value context, DeviceId(0));
      Value copy = Value::OfArray(
          Array{in[0].array().buffer, in[0].array().offset, &shape.tuple_element(0)});
      return Value::OfTuple(&shape, {std::move(copy), in[0], std::move(context)});
    }
    case StepKind::kCopyDone:
      if (!in[0].is_tuple() || in[0].elements().empty()) {
        return OpError(instruction, "copy-done takes a copy-start's tuple");
      }
      return in[0].elements()[0];
    case StepKind::kUnsupported:
      return Error{step.error, instruction.loc()};
  }
  return OpError(instruction, "unknown step");
}

Expected<Array> Executor::Evaluation::NewArray(const ir::Shape& shape) {
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBuffer> buffer, device_.Allocate(shape.ByteSize()));
  return Array{std::move(buffer), 0, &shape};
}

Expected<Value> Executor::Evaluation::DeviceOp(const Step& step, std::vector<Value>& in) {
  const Instruction& instruction = *step.instruction;
  std::vector<Array> operands;
  operands.reserve(in.size());
  for (const Value& value : in) {
    if (value.is_tuple() || !value.defined()) {
      return OpError(instruction, "an operand of an array op is a tuple");
    }
    operands.push_back(value.array());
  }
  Array result;
  // The operand's buffer is ours alone when this step was its last reader
  // (its slot is released) and no other value names it.
  if (step.reuse_operand >= 0 && operands[step.reuse_operand].buffer.use_count() == 2) {
    // Two references: `in` and `operands`, both of this step.
    result = Array{operands[step.reuse_operand].buffer, operands[step.reuse_operand].offset,
                   &instruction.shape()};
  } else {
    LOOM_ASSIGN_OR_RETURN(result, NewArray(instruction.shape()));
  }
  LOOM_RETURN_IF_ERROR(device_.Run(instruction, operands, result));
  return Value::OfArray(std::move(result));
}

Expected<int64_t> Executor::Evaluation::ReadScalar(const Value& value, const Instruction& at) {
  if (value.is_tuple() || !value.defined() || value.array().shape->ElementCount() != 1) {
    return OpError(at, "expected a scalar");
  }
  const Array& array = value.array();
  std::vector<std::byte> bytes(static_cast<size_t>(array.bytes()));
  LOOM_RETURN_IF_ERROR(device_.CopyToHost(array, bytes));
  return LoadInt(bytes.data(), array.type(), 0);
}

Expected<Value> Executor::Evaluation::While(const Step& step, Value state) {
  const Instruction& instruction = *step.instruction;
  const Program& condition = *step.called[0];
  const Program& body = *step.called[1];
  const auto started = std::chrono::steady_clock::now();
  for (int64_t trips = 0;; ++trips) {
    if (context_.loop_timeout.count() > 0 &&
        std::chrono::steady_clock::now() - started > context_.loop_timeout) {
      return OpError(instruction,
                     fmt::format("the while loop ran longer than the timeout of {} ms ({} "
                                 "trips): a loop that never ends, or raise --timeout",
                                 context_.loop_timeout.count(), trips));
    }
    LOOM_ASSIGN_OR_RETURN(Value keep_going, executor_.Execute(condition, {state}, depth_ + 1));
    Expected<int64_t> flag = ReadScalar(keep_going, instruction);
    if (!flag.ok()) return OpError(instruction, "while condition did not return a scalar pred");
    if (*flag == 0) return state;
    // A loop that never ends must not outlive a run another device aborted.
    if (context_.collectives != nullptr) {
      if (std::optional<Error> aborted = context_.collectives->comm().Aborted()) return *aborted;
    }
    std::vector<Value> arguments;
    arguments.push_back(std::move(state));
    LOOM_ASSIGN_OR_RETURN(state, executor_.Execute(body, std::move(arguments), depth_ + 1));
  }
}

Expected<Value> Executor::Evaluation::Conditional(const Step& step, const std::vector<Value>& in) {
  const Instruction& instruction = *step.instruction;
  LOOM_ASSIGN_OR_RETURN(const int64_t selector, ReadScalar(in[0], instruction));
  const std::vector<ir::Computation*> branches = instruction.called_computations();
  if (branches.empty()) return OpError(instruction, "conditional without branches");
  int64_t branch = 0;
  if (instruction.operand(0)->shape().type() == ir::PrimitiveType::kPred) {
    // true_computation= / false_computation=, or branch_computations={true, false}.
    const ir::Computation* chosen =
        instruction.called(selector ? "true_computation" : "false_computation");
    if (chosen == nullptr && branches.size() == 2) chosen = branches[selector ? 0 : 1];
    if (chosen == nullptr) return OpError(instruction, "conditional branch not found");
    branch = std::find(branches.begin(), branches.end(), chosen) - branches.begin();
    // The operand of the true branch comes first in either form.
    const int64_t operand = selector ? 1 : 2;
    if (operand >= static_cast<int64_t>(in.size())) {
      return OpError(instruction, "conditional branch has no operand");
    }
    return executor_.Execute(*step.called[branch], {in[operand]}, depth_ + 1);
  }
  // XLA runs the last branch for an out-of-range index.
  branch = selector < 0 || selector >= static_cast<int64_t>(branches.size())
               ? static_cast<int64_t>(branches.size()) - 1
               : selector;
  if (branch + 1 >= static_cast<int64_t>(in.size())) {
    return OpError(instruction, "conditional branch has no operand");
  }
  return executor_.Execute(*step.called[branch], {in[branch + 1]}, depth_ + 1);
}

Expected<Value> Executor::Evaluation::DeviceId(int64_t id) {
  static const ir::Shape kU32(ir::PrimitiveType::kU32, {});
  LOOM_ASSIGN_OR_RETURN(Array array, NewArray(kU32));
  const auto value = static_cast<uint32_t>(id);
  LOOM_RETURN_IF_ERROR(device_.CopyFromHost(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(&value), sizeof(value)),
      array));
  return Value::OfArray(std::move(array));
}

// A single device runs the wrapped computation at once; the start's value
// is XLA's ((operands...), result, context...) tuple, contexts zero.
Expected<Value> Executor::Evaluation::AsyncStart(const Step& step, std::vector<Value> in) {
  const Instruction& instruction = *step.instruction;
  const ir::Shape& shape = instruction.shape();
  if (!shape.IsTuple() || shape.tuple_size() < 2) {
    return OpError(instruction, "async-start shape is not a tuple");
  }
  Value operands = Value::OfTuple(&shape.tuple_element(0), in);
  LOOM_ASSIGN_OR_RETURN(Value result,
                        executor_.Execute(*step.called[0], std::move(in), depth_ + 1));
  std::vector<Value> elements = {std::move(operands), std::move(result)};
  for (int64_t i = 2; i < shape.tuple_size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(Tensor zeros, Tensor::Zeros(shape.tuple_element(i)));
    LOOM_ASSIGN_OR_RETURN(Value context, executor_.Upload(zeros, shape.tuple_element(i)));
    elements.push_back(std::move(context));
  }
  return Value::OfTuple(&shape, std::move(elements));
}

// The shapes of the first `count` parameters of the step's callee, each a
// scalar it reads.
// The attribute that names callee `index` of a step that calls on elements.
static std::string_view CalleeRole(const Step& step, size_t index) {
  if (step.kind == StepKind::kSelectAndScatter) return index == 0 ? "select" : "scatter";
  return "to_apply";
}

Expected<std::vector<const ir::Shape*>> Executor::Evaluation::ScalarParameters(const Step& step,
                                                                               int64_t count,
                                                                               size_t index) {
  const Program& callee = *step.called[index];
  std::vector<const ir::Shape*> shapes;
  for (int64_t k = 0; k < count; ++k) {
    const int32_t slot = k < static_cast<int64_t>(callee.parameter_slots.size())
                             ? callee.parameter_slots[static_cast<size_t>(k)]
                             : -1;
    if (slot < 0) {
      return OpError(*step.instruction, fmt::format("{} must read {} scalar parameters",
                                                    CalleeRole(step, index), count));
    }
    shapes.push_back(&callee.steps[static_cast<size_t>(slot)].instruction->shape());
  }
  return shapes;
}

// One call of the step's callee on scalars: its arguments the elements
// `arguments`, its results (one value, or a tuple of as many) written to the
// elements `results`.
Status Executor::Evaluation::CallOnElements(const Step& step,
                                            const std::vector<const ir::Shape*>& parameters,
                                            std::span<const Element> arguments,
                                            std::span<const Element> results, size_t callee) {
  std::vector<Value> values;
  for (size_t k = 0; k < arguments.size(); ++k) {
    const cpu::HostArray& source = *arguments[k].array;
    LOOM_ASSIGN_OR_RETURN(Array scalar, NewArray(*parameters[k]));
    const int64_t width = source.element_bytes();
    LOOM_RETURN_IF_ERROR(
        device_.CopyFromHost(std::span<const std::byte>(source.data + arguments[k].at * width,
                                                        static_cast<size_t>(width)),
                             scalar));
    values.push_back(Value::OfArray(std::move(scalar)));
  }
  LOOM_ASSIGN_OR_RETURN(Value result,
                        executor_.Execute(*step.called[callee], std::move(values), depth_ + 1));
  const size_t returned = result.is_tuple() ? result.elements().size() : 1;
  if (returned != results.size()) {
    return OpError(*step.instruction,
                   fmt::format("{} returned {} values, not {}", CalleeRole(step, callee), returned,
                               results.size()));
  }
  for (size_t k = 0; k < results.size(); ++k) {
    const Value& value = result.is_tuple() ? result.elements()[k] : result;
    const cpu::HostArray& target = *results[k].array;
    const int64_t width = target.element_bytes();
    LOOM_RETURN_IF_ERROR(device_.CopyToHost(
        value.array(),
        std::span<std::byte>(target.data + results[k].at * width, static_cast<size_t>(width))));
  }
  return OkStatus();
}

// The accumulators of a reduce or reduce-window with N inputs (operands
// 0..N-1) and N init values: each a new array of the result's k-th shape
// with every element at init value k, and host views of them and of the
// inputs.
Expected<Executor::Evaluation::Accumulators> Executor::Evaluation::NewAccumulators(
    const Instruction& instruction, const std::vector<Value>& in) {
  const auto n = static_cast<int64_t>(in.size()) / 2;
  if (n == 0 || static_cast<int64_t>(in.size()) != 2 * n) {
    return OpError(instruction, fmt::format("{} takes N inputs and N init values",
                                            ir::OpcodeName(instruction.opcode())));
  }
  const ir::Shape& result_shape = instruction.shape();
  Accumulators accumulators;
  for (int64_t k = 0; k < n; ++k) {
    const ir::Shape& shape = result_shape.IsTuple() ? result_shape.tuple_element(k) : result_shape;
    LOOM_ASSIGN_OR_RETURN(Array acc, NewArray(shape));
    LOOM_ASSIGN_OR_RETURN(cpu::HostArray acc_view, HostArrayOf(acc, instruction));
    if (in[k].is_tuple() || in[n + k].is_tuple()) {
      return OpError(instruction,
                     fmt::format("{} of a tuple", ir::OpcodeName(instruction.opcode())));
    }
    LOOM_ASSIGN_OR_RETURN(cpu::HostArray input, HostArrayOf(in[k].array(), instruction));
    LOOM_ASSIGN_OR_RETURN(cpu::HostArray init, HostArrayOf(in[n + k].array(), instruction));
    const int64_t width = acc_view.element_bytes();
    for (int64_t i = 0; i < acc_view.elements(); ++i) {
      std::memcpy(acc_view.data + i * width, init.data, static_cast<size_t>(width));
    }
    accumulators.arrays.push_back(std::move(acc));
    accumulators.views.push_back(acc_view);
    accumulators.inputs.push_back(input);
  }
  return accumulators;
}

// Calls the reducer of `step` on element `out` of the accumulators and
// element `in` of the inputs, into the accumulators.
Status Executor::Evaluation::FoldByCall(const Step& step,
                                        const std::vector<const ir::Shape*>& parameters,
                                        Accumulators& accumulators, int64_t out, int64_t in,
                                        std::vector<Element>& arguments) {
  const auto n = static_cast<int64_t>(accumulators.views.size());
  for (int64_t k = 0; k < n; ++k) {
    arguments[k] = {&accumulators.views[k], out};
    arguments[n + k] = {&accumulators.inputs[k], in};
  }
  return CallOnElements(step, parameters, arguments,
                        std::span<const Element>(arguments).first(static_cast<size_t>(n)));
}

Value Executor::Evaluation::Accumulators::Result(const ir::Shape& result_shape) && {
  if (!result_shape.IsTuple()) return Value::OfArray(std::move(arrays[0]));
  std::vector<Value> elements;
  for (Array& acc : arrays) elements.push_back(Value::OfArray(std::move(acc)));
  return Value::OfTuple(&result_shape, std::move(elements));
}

// reduce with a reducer the device cannot run as one op (several inputs, or
// a computation of more than one op): each result element folds its inputs
// in row-major order of the reduced dimensions, acc = to_apply(acc, x),
// starting from the init values, calling the reducer once per input.
Expected<Value> Executor::Evaluation::GeneralReduce(const Step& step,
                                                    const std::vector<Value>& in) {
  const Instruction& instruction = *step.instruction;
  LOOM_ASSIGN_OR_RETURN(Accumulators accumulators, NewAccumulators(instruction, in));
  const auto n = static_cast<int64_t>(accumulators.views.size());
  const std::vector<int64_t> reduced =
      instruction.attrs().dimensions.value_or(std::vector<int64_t>{});
  const ir::Shape& in_shape = *accumulators.inputs[0].shape;
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < in_shape.rank(); ++d) {
    if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) kept.push_back(d);
  }
  std::vector<int64_t> out_strides(kept.size(), 1);
  for (int64_t k = static_cast<int64_t>(kept.size()) - 2; k >= 0; --k) {
    out_strides[k] = out_strides[k + 1] * in_shape.dim(kept[k + 1]);
  }
  // The reducer's arguments: n accumulators, then n inputs.
  LOOM_ASSIGN_OR_RETURN(const std::vector<const ir::Shape*> parameters,
                        ScalarParameters(step, 2 * n));
  std::vector<Element> arguments(static_cast<size_t>(2 * n));
  std::vector<int64_t> index(static_cast<size_t>(in_shape.rank()), 0);
  for (int64_t linear = 0; linear < in_shape.ElementCount(); ++linear) {
    int64_t out_index = 0;
    for (size_t k = 0; k < kept.size(); ++k) out_index += index[kept[k]] * out_strides[k];
    LOOM_RETURN_IF_ERROR(FoldByCall(step, parameters, accumulators, out_index, linear, arguments));
    for (int64_t d = in_shape.rank() - 1; d >= 0; --d) {
      if (++index[d] < in_shape.dim(d)) break;
      index[d] = 0;
    }
  }
  return std::move(accumulators).Result(instruction.shape());
}

// reduce-window the device cannot run as one op (several inputs, or a
// reducer of more than one op): a call of the reducer per landing tap, in
// the reference's order (ir/reduce_window.h).
Expected<Value> Executor::Evaluation::GeneralReduceWindow(const Step& step,
                                                          const std::vector<Value>& in) {
  const Instruction& instruction = *step.instruction;
  LOOM_ASSIGN_OR_RETURN(Accumulators accumulators, NewAccumulators(instruction, in));
  const auto n = static_cast<int64_t>(accumulators.views.size());
  Expected<std::vector<ir::WindowDimension>> window = ir::ReduceWindowOf(instruction);
  if (!window.ok()) return OpError(instruction, window.error().message);
  const std::vector<int64_t>& in_dims = accumulators.inputs[0].shape->dims();
  const std::vector<int64_t>& out_dims = accumulators.views[0].shape->dims();
  if (window->size() != in_dims.size() || out_dims.size() != in_dims.size()) {
    return OpError(instruction, "the window does not match the input's rank");
  }
  LOOM_ASSIGN_OR_RETURN(const std::vector<const ir::Shape*> parameters,
                        ScalarParameters(step, 2 * n));
  std::vector<Element> arguments(static_cast<size_t>(2 * n));
  Status status = OkStatus();
  ir::ForEachWindowElement(
      ir::LandingTaps(*window, in_dims, out_dims), in_dims, out_dims, [&](int64_t out, int64_t at) {
        if (status.ok()) {
          status = FoldByCall(step, parameters, accumulators, out, at, arguments);
        }
      });
  LOOM_RETURN_IF_ERROR(status);
  return std::move(accumulators).Result(instruction.shape());
}

// select-and-scatter the device cannot run as one op (a select other than
// one compare, or a scatter of more than one op): a call of select per
// landing tap after a window's first, one of scatter per window, in the
// reference's order (ir/select_and_scatter.h).
Expected<Value> Executor::Evaluation::GeneralSelectAndScatter(const Step& step,
                                                              const std::vector<Value>& in) {
  const Instruction& instruction = *step.instruction;
  if (in.size() != 3 || in[0].is_tuple() || in[1].is_tuple() || in[2].is_tuple()) {
    return OpError(instruction, "select-and-scatter takes an operand, a source and an init value");
  }
  LOOM_ASSIGN_OR_RETURN(cpu::HostArray operand, HostArrayOf(in[0].array(), instruction));
  LOOM_ASSIGN_OR_RETURN(cpu::HostArray source, HostArrayOf(in[1].array(), instruction));
  LOOM_ASSIGN_OR_RETURN(cpu::HostArray init, HostArrayOf(in[2].array(), instruction));
  LOOM_ASSIGN_OR_RETURN(Array out, NewArray(instruction.shape()));
  LOOM_ASSIGN_OR_RETURN(cpu::HostArray result, HostArrayOf(out, instruction));
  const ir::Shape pred(ir::PrimitiveType::kPred, {});
  LOOM_ASSIGN_OR_RETURN(Array keep_array, NewArray(pred));
  LOOM_ASSIGN_OR_RETURN(cpu::HostArray keep, HostArrayOf(keep_array, instruction));
  const int64_t width = result.element_bytes();
  for (int64_t i = 0; i < result.elements(); ++i) {
    std::memcpy(result.data + i * width, init.data, static_cast<size_t>(width));
  }
  Expected<std::vector<ir::WindowDimension>> window = ir::ReduceWindowOf(instruction);
  if (!window.ok()) return OpError(instruction, window.error().message);
  const std::vector<int64_t>& in_dims = operand.shape->dims();
  const std::vector<int64_t>& out_dims = source.shape->dims();
  if (window->size() != in_dims.size() || out_dims.size() != in_dims.size()) {
    return OpError(instruction, "the window does not match the operand's rank");
  }
  LOOM_ASSIGN_OR_RETURN(const std::vector<const ir::Shape*> select, ScalarParameters(step, 2, 0));
  LOOM_ASSIGN_OR_RETURN(const std::vector<const ir::Shape*> scatter, ScalarParameters(step, 2, 1));
  int64_t window_at = -1, selected = -1;
  const auto scatter_selected = [&]() -> Status {
    if (window_at < 0) return OkStatus();
    const Element arguments[] = {{&result, selected}, {&source, window_at}};
    const Element onto[] = {{&result, selected}};
    return CallOnElements(step, scatter, arguments, onto, 1);
  };
  Status status = OkStatus();
  ir::ForEachWindowElement(ir::LandingTaps(*window, in_dims, out_dims), in_dims, out_dims,
                           [&](int64_t o, int64_t i) {
                             if (!status.ok()) return;
                             if (o != window_at) {
                               status = scatter_selected();
                               window_at = o;
                               selected = i;
                               return;
                             }
                             const Element arguments[] = {{&operand, selected}, {&operand, i}};
                             const Element verdict[] = {{&keep, 0}};
                             status = CallOnElements(step, select, arguments, verdict, 0);
                             if (status.ok() && keep.data[0] == std::byte{0}) selected = i;
                           });
  LOOM_RETURN_IF_ERROR(status);
  LOOM_RETURN_IF_ERROR(scatter_selected());
  return Value::OfArray(std::move(out));
}

// sort the device cannot run as one op (several operands, or a comparator
// of more than one compare): on host views, by the CPU kernel where the
// comparator is one compare, else stably by a call of it per comparison.
Expected<Value> Executor::Evaluation::GeneralSort(const Step& step, const std::vector<Value>& in) {
  const Instruction& instruction = *step.instruction;
  std::vector<Array> outs;
  std::vector<cpu::HostArray> operands, results;
  for (const Value& value : in) {
    if (value.is_tuple()) return OpError(instruction, "sort of a tuple");
    LOOM_ASSIGN_OR_RETURN(cpu::HostArray operand, HostArrayOf(value.array(), instruction));
    LOOM_ASSIGN_OR_RETURN(Array out, NewArray(*operand.shape));
    LOOM_ASSIGN_OR_RETURN(cpu::HostArray result, HostArrayOf(out, instruction));
    operands.push_back(operand);
    results.push_back(result);
    outs.push_back(std::move(out));
  }
  const ir::Computation* comparator = instruction.called("to_apply");
  const std::vector<int64_t> dims = instruction.attrs().dimensions.value_or(std::vector<int64_t>{});
  if (operands.empty() || comparator == nullptr || dims.size() != 1 || dims[0] < 0 ||
      dims[0] >= operands[0].shape->rank()) {
    return OpError(instruction, "sort needs operands, one dimension and to_apply");
  }
  if (const std::optional<ir::SortKey> key = ir::SimpleSortComparator(*comparator)) {
    LOOM_RETURN_IF_ERROR(cpu::Sort(instruction, *key, operands, results));
  } else {
    LOOM_RETURN_IF_ERROR(SortByCalls(step, operands, results, dims[0], operands.size()));
  }
  if (!instruction.shape().IsTuple()) return Value::OfArray(std::move(outs[0]));
  std::vector<Value> elements;
  for (Array& out : outs) elements.push_back(Value::OfArray(std::move(out)));
  return Value::OfTuple(&instruction.shape(), std::move(elements));
}

// Each slice along `dimension` of `operands` sorted stably into `results`
// by calling the step's comparator on the first `compared` operands'
// elements (2 scalars each); every operand permuted alike. The same
// std::stable_sort over the same answers as the reference's: its order.
Status Executor::Evaluation::SortByCalls(const Step& step, std::span<const cpu::HostArray> operands,
                                         std::span<const cpu::HostArray> results, int64_t dimension,
                                         size_t compared) {
  const Instruction& instruction = *step.instruction;
  const auto n = static_cast<int64_t>(compared);
  LOOM_ASSIGN_OR_RETURN(const std::vector<const ir::Shape*> parameters,
                        ScalarParameters(step, 2 * n));
  const ir::Shape pred(ir::PrimitiveType::kPred, {});
  LOOM_ASSIGN_OR_RETURN(Array verdict_array, NewArray(pred));
  LOOM_ASSIGN_OR_RETURN(cpu::HostArray verdict, HostArrayOf(verdict_array, instruction));
  const ir::SortSlices slices = ir::SlicesAlong(operands[0].shape->dims(), dimension);
  std::vector<Element> arguments(static_cast<size_t>(2 * n));
  const Element onto[] = {{&verdict, 0}};
  Status status = OkStatus();
  std::vector<int64_t> order(static_cast<size_t>(slices.length));
  for (int64_t s = 0; s < slices.count && status.ok(); ++s) {
    const int64_t start = slices.Start(s);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      if (!status.ok()) return false;
      for (int64_t k = 0; k < n; ++k) {
        arguments[2 * k] = {&operands[k], start + a * slices.stride};
        arguments[2 * k + 1] = {&operands[k], start + b * slices.stride};
      }
      status = CallOnElements(step, parameters, arguments, onto);
      return status.ok() && verdict.data[0] != std::byte{0};
    });
    for (size_t k = 0; k < operands.size(); ++k) {
      const int64_t width = operands[k].element_bytes();
      for (int64_t j = 0; j < slices.length; ++j) {
        std::memcpy(results[k].data + (start + j * slices.stride) * width,
                    operands[k].data + (start + order[j] * slices.stride) * width,
                    static_cast<size_t>(width));
      }
    }
  }
  return status;
}

// topk, and XLA's custom-call TopK whose comparator is one strict compare,
// on host views by the CPU kernel: its values and positions.
Expected<Value> Executor::Evaluation::TopK(const Step& step, const std::vector<Value>& in) {
  const Instruction& instruction = *step.instruction;
  const ir::Shape& shape = instruction.shape();
  if (in.size() != 1 || in[0].is_tuple() || !shape.IsTuple() || shape.tuple_size() != 2) {
    return OpError(instruction, "topk takes an array and returns (values, positions)");
  }
  int64_t k = 0;
  std::optional<ir::SortKey> key;
  if (instruction.opcode() == Opcode::kTopK) {
    LOOM_ASSIGN_OR_RETURN(const ir::TopK topk, ir::TopKOf(instruction));
    k = topk.k;
    key = ir::TopKSortKey(topk);
  } else {
    LOOM_ASSIGN_OR_RETURN(const ir::CustomTopK topk, ir::CustomTopKOf(instruction));
    k = topk.k;
    key = ir::CustomTopKSortKey(instruction, topk);
  }
  if (!key) return OpError(instruction, "topk's comparator is not one strict compare");
  LOOM_ASSIGN_OR_RETURN(cpu::HostArray operand, HostArrayOf(in[0].array(), instruction));
  LOOM_ASSIGN_OR_RETURN(TupleOutputs outs, NewTupleOutputs(instruction));
  LOOM_RETURN_IF_ERROR(cpu::TopK(instruction, k, *key, operand, outs.views[0], outs.views[1]));
  return Value::OfTuple(&shape, std::move(outs.elements));
}

// XLA's custom-call TopK with any other comparator, as its TopkDecomposer
// writes it out: the operand and an iota of positions sorted stably by
// calls of the comparator (on the values alone when it takes two
// parameters), each row's k first kept.
Expected<Value> Executor::Evaluation::TopKByCalls(const Step& step, const std::vector<Value>& in) {
  const Instruction& instruction = *step.instruction;
  LOOM_ASSIGN_OR_RETURN(const ir::CustomTopK topk, ir::CustomTopKOf(instruction));
  if (in.size() != 1 || in[0].is_tuple() || topk.comparator == nullptr) {
    return OpError(instruction, "custom-call TopK takes an array and a comparator");
  }
  LOOM_ASSIGN_OR_RETURN(cpu::HostArray operand, HostArrayOf(in[0].array(), instruction));
  const ir::Shape& shape = *operand.shape;
  const ir::Shape positions_shape(ir::PrimitiveType::kS32, shape.dims());
  LOOM_ASSIGN_OR_RETURN(Array positions_array, NewArray(positions_shape));
  LOOM_ASSIGN_OR_RETURN(cpu::HostArray positions, HostArrayOf(positions_array, instruction));
  const int64_t n = shape.dims().back();
  if (n > int64_t{INT32_MAX}) return OpError(instruction, "topk's positions outgrow s32");
  for (int64_t i = 0; i < positions.elements(); ++i) {
    positions.as<int32_t>()[i] = static_cast<int32_t>(i % n);
  }
  std::vector<Array> sorted_arrays;
  std::vector<cpu::HostArray> sorted;
  for (const ir::Shape* each : {&shape, &positions_shape}) {
    LOOM_ASSIGN_OR_RETURN(Array array, NewArray(*each));
    LOOM_ASSIGN_OR_RETURN(cpu::HostArray view, HostArrayOf(array, instruction));
    sorted_arrays.push_back(std::move(array));
    sorted.push_back(view);
  }
  const cpu::HostArray operands[] = {operand, positions};
  const size_t compared = topk.comparator->parameters().size() / 2;
  LOOM_RETURN_IF_ERROR(SortByCalls(step, operands, sorted, shape.rank() - 1, compared));
  LOOM_ASSIGN_OR_RETURN(TupleOutputs outs, NewTupleOutputs(instruction));
  const int64_t rows = n == 0 ? 0 : operand.elements() / n;
  for (size_t part = 0; part < 2; ++part) {
    const int64_t width = sorted[part].element_bytes();
    for (int64_t row = 0; row < rows; ++row) {
      std::memcpy(outs.views[part].data + row * topk.k * width, sorted[part].data + row * n * width,
                  static_cast<size_t>(topk.k * width));
    }
  }
  return Value::OfTuple(&instruction.shape(), std::move(outs.elements));
}

// rng-bit-generator on host views by the CPU kernel: the next state and
// the bits.
Expected<Value> Executor::Evaluation::RngBitGenerator(const Step& step,
                                                      const std::vector<Value>& in) {
  const Instruction& instruction = *step.instruction;
  const ir::Shape& shape = instruction.shape();
  if (in.size() != 1 || in[0].is_tuple() || !shape.IsTuple() || shape.tuple_size() != 2) {
    return OpError(instruction, "rng-bit-generator takes a state and returns (state, bits)");
  }
  LOOM_ASSIGN_OR_RETURN(cpu::HostArray state, HostArrayOf(in[0].array(), instruction));
  LOOM_ASSIGN_OR_RETURN(TupleOutputs outs, NewTupleOutputs(instruction));
  LOOM_RETURN_IF_ERROR(cpu::RngBitGenerator(instruction, state, outs.views[0], outs.views[1]));
  return Value::OfTuple(&shape, std::move(outs.elements));
}

// batch-norm-* on host views by the CPU kernel (exec/batch_norm.h).
Expected<Value> Executor::Evaluation::BatchNorm(const Step& step, const std::vector<Value>& in) {
  const Instruction& instruction = *step.instruction;
  LOOM_ASSIGN_OR_RETURN(const std::vector<cpu::HostArray> operands, HostArraysOf(in, instruction));
  if (!instruction.shape().IsTuple()) {
    LOOM_ASSIGN_OR_RETURN(Array out, NewArray(instruction.shape()));
    LOOM_ASSIGN_OR_RETURN(cpu::HostArray view, HostArrayOf(out, instruction));
    LOOM_RETURN_IF_ERROR(cpu::BatchNorm(instruction, operands, std::span(&view, 1)));
    return Value::OfArray(std::move(out));
  }
  LOOM_ASSIGN_OR_RETURN(TupleOutputs outs, NewTupleOutputs(instruction));
  LOOM_RETURN_IF_ERROR(cpu::BatchNorm(instruction, operands, outs.views));
  return Value::OfTuple(&instruction.shape(), std::move(outs.elements));
}

// triangular-solve, cholesky (exec/linear_algebra.h) and stochastic-convert
// into a fresh array by the CPU kernels, which read their operands to the
// end.
Expected<Value> Executor::Evaluation::ArrayKernel(const Step& step, const std::vector<Value>& in) {
  const Instruction& instruction = *step.instruction;
  LOOM_ASSIGN_OR_RETURN(const std::vector<cpu::HostArray> operands, HostArraysOf(in, instruction));
  const Opcode op = instruction.opcode();
  const size_t operand_count = op == Opcode::kCholesky ? 1 : 2;
  if (operands.size() != operand_count) {
    return OpError(instruction, fmt::format("{} takes {} operands, got {}", ir::OpcodeName(op),
                                            operand_count, operands.size()));
  }
  LOOM_ASSIGN_OR_RETURN(Array out, NewArray(instruction.shape()));
  LOOM_ASSIGN_OR_RETURN(cpu::HostArray result, HostArrayOf(out, instruction));
  switch (op) {
    case Opcode::kCholesky:
      LOOM_RETURN_IF_ERROR(cpu::Cholesky(instruction, operands[0], result));
      break;
    case Opcode::kTriangularSolve:
      LOOM_RETURN_IF_ERROR(cpu::TriangularSolve(instruction, operands[0], operands[1], result));
      break;
    default:
      LOOM_RETURN_IF_ERROR(cpu::StochasticConvert(instruction, operands[0], operands[1], result));
      break;
  }
  return Value::OfArray(std::move(out));
}

Expected<Executor::Evaluation::TupleOutputs> Executor::Evaluation::NewTupleOutputs(
    const Instruction& instruction) {
  TupleOutputs outs;
  for (const ir::Shape& element : instruction.shape().tuple_elements()) {
    LOOM_ASSIGN_OR_RETURN(Array out, NewArray(element));
    LOOM_ASSIGN_OR_RETURN(cpu::HostArray view, HostArrayOf(out, instruction));
    outs.views.push_back(view);
    outs.elements.push_back(Value::OfArray(std::move(out)));
  }
  return outs;
}

// scatter the device cannot run as one op (several operands, or a combiner
// of more than one op): each update element that lands, in the order the
// device's scatter combines them, calls the combiner on the N operands'
// current elements and the N updates' (cpu::ForEachScatterElement).
Expected<Value> Executor::Evaluation::GeneralScatter(const Step& step,
                                                     const std::vector<Value>& in) {
  const Instruction& instruction = *step.instruction;
  const int64_t n = static_cast<int64_t>(in.size() - 1) / 2;
  if (n < 1 || static_cast<int64_t>(in.size()) != 2 * n + 1) {
    return OpError(instruction, "scatter takes N operands, indices and N updates");
  }
  for (const Value& value : in) {
    if (value.is_tuple()) return OpError(instruction, "scatter of a tuple");
  }
  std::vector<Array> outs;
  std::vector<cpu::HostArray> out_views, updates;
  for (int64_t k = 0; k < n; ++k) {
    LOOM_ASSIGN_OR_RETURN(cpu::HostArray operand, HostArrayOf(in[k].array(), instruction));
    LOOM_ASSIGN_OR_RETURN(Array out, NewArray(*operand.shape));
    LOOM_ASSIGN_OR_RETURN(cpu::HostArray view, HostArrayOf(out, instruction));
    std::memcpy(view.data, operand.data, static_cast<size_t>(operand.bytes()));
    outs.push_back(std::move(out));
    out_views.push_back(view);
    LOOM_ASSIGN_OR_RETURN(cpu::HostArray update, HostArrayOf(in[n + 1 + k].array(), instruction));
    updates.push_back(update);
  }
  LOOM_ASSIGN_OR_RETURN(const cpu::HostArray indices, HostArrayOf(in[n].array(), instruction));
  // The combiner's arguments: n operand elements, then n update elements.
  LOOM_ASSIGN_OR_RETURN(const std::vector<const ir::Shape*> parameters,
                        ScalarParameters(step, 2 * n));
  std::vector<Element> arguments(static_cast<size_t>(2 * n));
  LOOM_RETURN_IF_ERROR(cpu::ForEachScatterElement(
      instruction, *out_views[0].shape, indices, *updates[0].shape,
      [&](int64_t update, int64_t element) {
        for (int64_t k = 0; k < n; ++k) {
          arguments[k] = {&out_views[k], element};
          arguments[n + k] = {&updates[k], update};
        }
        return CallOnElements(step, parameters, arguments,
                              std::span<const Element>(arguments).first(n));
      }));
  if (!instruction.shape().IsTuple()) return Value::OfArray(std::move(outs[0]));
  std::vector<Value> elements;
  for (Array& out : outs) elements.push_back(Value::OfArray(std::move(out)));
  return Value::OfTuple(&instruction.shape(), std::move(elements));
}

// --- collectives ---------------------------------------------------------------------

Expected<cpu::HostArray> Executor::Evaluation::HostArrayOf(const Array& array,
                                                           const Instruction& at) {
  const std::span<std::byte> view = device_.HostView(array);
  if (view.data() == nullptr) {
    return OpError(at, fmt::format("device {} has no host view of its memory", device_.name()));
  }
  return cpu::HostArray{view.data(), array.shape};
}

Expected<std::vector<cpu::HostArray>> Executor::Evaluation::HostArraysOf(
    const std::vector<Value>& in, const Instruction& at) {
  std::vector<cpu::HostArray> views;
  for (const Value& value : in) {
    if (value.is_tuple()) {
      return OpError(at, fmt::format("{} takes arrays, got a tuple", ir::OpcodeName(at.opcode())));
    }
    LOOM_ASSIGN_OR_RETURN(cpu::HostArray view, HostArrayOf(value.array(), at));
    views.push_back(view);
  }
  return views;
}

// The collective's reducer on host bytes of `type`: one op as a typed
// element-wise kernel, anything else by running the computation per element.
Expected<ReduceBytes> Executor::Evaluation::ReducerOf(const Instruction& collective,
                                                      ir::PrimitiveType type) {
  const ir::Computation* reducer = collective.called("to_apply");
  if (reducer == nullptr) return OpError(collective, "needs to_apply");
  const int64_t width = ir::PrimitiveTypeBits(type) / 8;
  if (std::optional<Opcode> simple = ir::CommutativeBinaryReducer(*reducer)) {
    return ReduceBytes([op = *simple, type, width](std::span<std::byte> out,
                                                   std::span<const std::byte> a,
                                                   std::span<const std::byte> b) -> Status {
      const ir::Shape flat(type, {static_cast<int64_t>(out.size()) / width});
      return cpu::Combine(op, {const_cast<std::byte*>(a.data()), &flat},
                          {const_cast<std::byte*>(b.data()), &flat}, {out.data(), &flat});
    });
  }
  // Element by element through a reducer of its own: the worker thread runs
  // it, on a program lowered here, with an executor of its own.
  LOOM_RETURN_IF_ERROR(executor_.Prepare(*reducer));
  Device* device = &device_;
  const Program* program = MustFind(executor_.programs_, reducer).get();
  return ReduceBytes([device, program, type, width, &collective](
                         std::span<std::byte> out, std::span<const std::byte> a,
                         std::span<const std::byte> b) -> Status {
    static const DeviceContext kNoPeers;
    Executor scalar_executor(*device, kNoPeers);
    const ir::Shape scalar(type, {});
    for (size_t i = 0; i * width < out.size(); ++i) {
      std::vector<Value> arguments;
      for (std::span<const std::byte> source : {a, b}) {
        LOOM_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBuffer> buffer, device->Allocate(width));
        Array array{std::move(buffer), 0, &scalar};
        LOOM_RETURN_IF_ERROR(device->CopyFromHost(source.subspan(i * width, width), array));
        arguments.push_back(Value::OfArray(std::move(array)));
      }
      LOOM_ASSIGN_OR_RETURN(Value z, scalar_executor.Execute(*program, std::move(arguments), 1));
      if (z.is_tuple() || !z.defined() || z.array().bytes() != width) {
        return OpError(collective, "reducer is not scalar");
      }
      LOOM_RETURN_IF_ERROR(device->CopyToHost(z.array(), out.subspan(i * width, width)));
    }
    return OkStatus();
  });
}

// Loom's own algorithm for `collective` on one operand (a ring, or the
// pairwise exchange of all-to-all), run on the device's worker.
Expected<std::function<Status()>> Executor::Evaluation::RingJob(const Instruction& collective,
                                                                uint64_t tag, const Group& group,
                                                                std::span<const std::byte> input,
                                                                std::span<std::byte> output,
                                                                const ir::Shape& in_shape) {
  Communicator& comm = context_.collectives->comm();
  const Opcode op = collective.opcode();
  const int64_t width = ir::PrimitiveTypeBits(in_shape.type()) / 8;
  if (op == Opcode::kAllReduce || op == Opcode::kAllReduceStart) {
    LOOM_ASSIGN_OR_RETURN(ReduceBytes reduce, ReducerOf(collective, in_shape.type()));
    return std::function<Status()>([&comm, tag, group, input, width, reduce, output] {
      return RingAllReduce(comm, tag, group, input, width, reduce, output);
    });
  }
  LOOM_ASSIGN_OR_RETURN(const Slabs slabs, SlabsOf(in_shape, SingleDimension(collective)));
  switch (op) {
    case Opcode::kReduceScatter: {
      LOOM_ASSIGN_OR_RETURN(ReduceBytes reduce, ReducerOf(collective, in_shape.type()));
      return std::function<Status()>([&comm, tag, group, input, slabs, width, reduce, output] {
        return RingReduceScatter(comm, tag, group, input, slabs, width, reduce, output);
      });
    }
    case Opcode::kAllToAll:
      return std::function<Status()>([&comm, tag, group, input, slabs, output] {
        return PairwiseAllToAll(comm, tag, group, input, slabs, output);
      });
    case Opcode::kAllGather:
    case Opcode::kAllGatherStart:
      return std::function<Status()>([&comm, tag, group, input, slabs, output] {
        return RingAllGather(comm, tag, group, input, slabs, output);
      });
    default:
      return OpError(collective,
                     fmt::format("collective {} is not executed by Loom", ir::OpcodeName(op)));
  }
}

// The transport's own collective for `collective`, when the runtime wants
// them and this one qualifies (an all-gather; an all-reduce or reduce-scatter
// of an f32 or f64 sum); else an empty job.
std::function<Status()> Executor::Evaluation::NativeJob(const Instruction& collective,
                                                        const Group& group,
                                                        std::span<const std::byte> input,
                                                        std::span<std::byte> output,
                                                        const ir::Shape& in_shape) {
  CollectiveRuntime& runtime = *context_.collectives;
  NativeCollectives* native = runtime.native();
  if (native == nullptr) return {};
  Expected<std::vector<Group>> groups = ir::ParticipantGroups(collective, runtime.grid());
  if (!groups.ok()) return {};
  const Opcode op = collective.opcode();
  const int64_t dimension = SingleDimension(collective);
  if (op == Opcode::kAllGather || op == Opcode::kAllGatherStart) {
    Expected<Slabs> slabs = SlabsOf(in_shape, dimension);
    if (!slabs.ok()) return {};
    const int64_t me = std::find(group.begin(), group.end(), runtime.comm().rank()) - group.begin();
    return [native, groups = *groups, group, me, input, slabs = *slabs, output] {
      return NativeAllGather(*native, groups, group, me, input, slabs, output);
    };
  }
  const ir::Computation* reducer = collective.called("to_apply");
  const bool sum = reducer != nullptr && ir::CommutativeBinaryReducer(*reducer) == Opcode::kAdd;
  const bool is_double = in_shape.type() == ir::PrimitiveType::kF64;
  if (!sum || (!is_double && in_shape.type() != ir::PrimitiveType::kF32)) return {};
  if (op == Opcode::kAllReduce || op == Opcode::kAllReduceStart) {
    return [native, groups = *groups, is_double, input, output] {
      return NativeAllReduceSum(*native, groups, is_double, input, output);
    };
  }
  if (op == Opcode::kReduceScatter) {
    Expected<Slabs> slabs = SlabsOf(in_shape, dimension);
    if (!slabs.ok()) return {};
    const auto n = static_cast<int64_t>(group.size());
    return [native, groups = *groups, n, is_double, input, slabs = *slabs, output] {
      return NativeReduceScatterSum(*native, groups, n, is_double, input, slabs, output);
    };
  }
  return {};
}

Status Executor::Evaluation::PostCollective(const Instruction& start, const Instruction& collective,
                                            std::vector<Value> operands,
                                            const ir::Shape& result_shape) {
  CollectiveRuntime& runtime = *context_.collectives;
  Communicator& comm = runtime.comm();
  const Opcode op = collective.opcode();
  InFlight flight;
  if (context_.trace) flight.started_us = context_.trace->NowUs();
  const bool variadic = result_shape.IsTuple();
  std::vector<Array> results;
  std::vector<cpu::HostArray> in_views, out_views;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (operands[i].is_tuple() || !operands[i].defined()) {
      return OpError(start, "a collective's operand is a tuple");
    }
    const ir::Shape* shape = &result_shape;
    if (result_shape.IsTuple()) {
      if (static_cast<int64_t>(i) >= result_shape.tuple_size()) {
        return OpError(start, "the result has fewer elements than the collective has operands");
      }
      shape = &result_shape.tuple_element(static_cast<int64_t>(i));
    }
    LOOM_ASSIGN_OR_RETURN(Array result, NewArray(*shape));
    LOOM_ASSIGN_OR_RETURN(cpu::HostArray in_view, HostArrayOf(operands[i].array(), start));
    LOOM_ASSIGN_OR_RETURN(cpu::HostArray out_view, HostArrayOf(result, start));
    in_views.push_back(in_view);
    out_views.push_back(out_view);
    results.push_back(std::move(result));
  }
  auto bytes_of = [](const cpu::HostArray& a) {
    return std::span<std::byte>(a.data, static_cast<size_t>(a.bytes()));
  };
  auto at = [&](Status status) -> Status {
    if (status.ok()) return status;
    return OpError(start, status.error().message);
  };
  if (op == Opcode::kCollectivePermute || op == Opcode::kCollectivePermuteStart) {
    Expected<std::vector<std::pair<int64_t, int64_t>>> pairs =
        ir::GlobalSourceTargetPairs(collective, runtime.grid());
    if (!pairs.ok()) return at(pairs.status());
    for (size_t i = 0; i < operands.size(); ++i) {
      Expected<std::unique_ptr<PostedPermute>> permute = PostedPermute::Post(
          comm, runtime.NextTag(), *pairs, bytes_of(in_views[i]), bytes_of(out_views[i]));
      if (!permute.ok()) return at(permute.status());
      flight.permutes.push_back(std::move(permute).value());
    }
  } else {
    Expected<Group> group = ir::ParticipantGroupOf(collective, runtime.grid(), comm.rank());
    if (!group.ok()) return at(group.status());
    CollectiveWorker& worker = runtime.worker();
    if (op == Opcode::kAllToAll && !collective.attrs().dimensions) {
      // The tuple form: element i goes to member i.
      std::vector<std::span<const std::byte>> sends;
      std::vector<std::span<std::byte>> receives;
      for (size_t i = 0; i < operands.size(); ++i) {
        sends.push_back(bytes_of(in_views[i]));
        receives.push_back(bytes_of(out_views[i]));
      }
      flight.tickets.push_back(
          worker.Submit([&comm, tag = runtime.NextTag(), group = *group, sends, receives] {
            return PairwiseAllToAllTuple(comm, tag, group, sends, receives);
          }));
    } else {
      for (size_t i = 0; i < operands.size(); ++i) {
        const uint64_t tag = runtime.NextTag();
        const std::span<const std::byte> input = bytes_of(in_views[i]);
        const std::span<std::byte> output = bytes_of(out_views[i]);
        const ir::Shape& in_shape = *in_views[i].shape;
        std::function<Status()> job = NativeJob(collective, *group, input, output, in_shape);
        if (!job) {
          Expected<std::function<Status()>> ring =
              RingJob(collective, tag, *group, input, output, in_shape);
          if (!ring.ok()) return at(ring.status());
          job = std::move(ring).value();
        }
        flight.tickets.push_back(worker.Submit(std::move(job)));
      }
    }
  }
  std::vector<Value> result_values;
  for (Array& result : results) result_values.push_back(Value::OfArray(std::move(result)));
  flight.result = variadic ? Value::OfTuple(&result_shape, std::move(result_values))
                           : std::move(result_values.front());
  flight.operands = std::move(operands);
  in_flight_[&start] = std::move(flight);
  return OkStatus();
}

Expected<Value> Executor::Evaluation::FinishCollective(const Instruction& start) {
  auto it = in_flight_.find(&start);
  if (it == in_flight_.end()) {
    return OpError(start, "completes no collective started in this computation");
  }
  InFlight flight = std::move(it->second);
  in_flight_.erase(it);
  Status status;
  for (auto& permute : flight.permutes) {
    if (Status finished = permute->Finish(); status.ok() && !finished.ok()) status = finished;
  }
  for (auto& ticket : flight.tickets) {
    if (Status finished = ticket.Wait(); status.ok() && !finished.ok()) status = finished;
  }
  if (!status.ok()) return OpError(start, status.error().message);
  if (context_.trace) {
    context_.trace->Add(start.name(), std::string(ir::OpcodeName(start.opcode())),
                        trace::Lane::kTransfers, flight.started_us, context_.trace->NowUs());
  }
  return std::move(flight.result);
}

// On an early return, collectives in flight still read and write their
// buffers: abort the run (so that their waits end) and wait for them.
void Executor::Evaluation::DrainInFlight() {
  if (in_flight_.empty()) return;
  if (context_.collectives != nullptr) {
    context_.collectives->comm().Abort(Error{fmt::format(
        "device {}: stopped with collectives in flight", context_.collectives->comm().rank())});
  }
  for (auto& [start, flight] : in_flight_) {
    for (auto& permute : flight.permutes) (void)permute->Finish();
    for (auto& ticket : flight.tickets) (void)ticket.Wait();
  }
  in_flight_.clear();
}

// Collectives show on the communication track; everything else, and the
// time a -done spends waiting, on the compute track.
void Executor::Evaluation::Record(const Step& step, double start_us) const {
  if (IsBookkeeping(step.kind)) return;
  const Instruction& instruction = *step.instruction;
  context_.trace->Add(instruction.name(), std::string(ir::OpcodeName(instruction.opcode())),
                      trace::Lane::kCompute, start_us, context_.trace->NowUs());
}

}  // namespace loom::exec
