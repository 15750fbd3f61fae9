#include "exec/reference/reference_interpreter.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <vector>

#include "exec/batch_norm.h"
#include "exec/float_elements.h"
#include "exec/linear_algebra.h"
#include "exec/literal.h"
#include "exec/random_bits.h"
#include "exec/reference/collective_ops.h"
#include "exec/reference/reference_dot.h"
#include "exec/scalar_ops.h"
#include "exec/trace.h"
#include "ir/async.h"
#include "ir/convolution.h"
#include "ir/gather_scatter.h"
#include "ir/linear_algebra.h"
#include "ir/reduce_precision.h"
#include "ir/reduce_window.h"
#include "ir/reduction.h"
#include "ir/shape_inference.h"
#include "ir/sort.h"

namespace loom::exec {
namespace {

using ir::Instruction;
using ir::Opcode;
using ir::PrimitiveType;
using scalar::BinaryFloat;
using scalar::BinaryInteger;
using scalar::CompareIntegers;
using scalar::CompareResult;
using scalar::IsUnsignedLike;
using scalar::UnaryFloat;
using scalar::UnaryInteger;

// "WHAT (%name) at line L", located at the instruction.
Error OpError(const Instruction& instruction, const std::string& what) {
  return Error{fmt::format("{} (%{}) at line {}", what, instruction.name(), instruction.loc().line),
               instruction.loc()};
}

// --- row-major index arithmetic ------------------------------------------------

std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int64_t d = static_cast<int64_t>(dims.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * dims[d + 1];
  }
  return strides;
}

int64_t Linear(const std::vector<int64_t>& index, const std::vector<int64_t>& strides) {
  int64_t linear = 0;
  for (size_t d = 0; d < index.size(); ++d) linear += index[d] * strides[d];
  return linear;
}

// Calls visit(index, linear) for every index of `dims` in row-major order.
template <typename Visit>
void ForEachIndex(const std::vector<int64_t>& dims, Visit&& visit) {
  for (int64_t size : dims) {
    if (size == 0) return;
  }
  std::vector<int64_t> index(dims.size(), 0);
  for (int64_t linear = 0;; ++linear) {
    visit(static_cast<const std::vector<int64_t>&>(index), linear);
    int64_t d = static_cast<int64_t>(dims.size()) - 1;
    for (; d >= 0; --d) {
      if (++index[d] < dims[d]) break;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

// A tensor of `shape` whose element at each index is the element of `source`
// at source_index(index) (same element type, copied bit for bit).
template <typename SourceIndex>
Expected<Tensor> GatherElements(const ir::Shape& shape, const Tensor& source,
                                SourceIndex&& source_index) {
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(shape));
  const std::vector<int64_t> strides = Strides(source.shape().dims());
  std::vector<int64_t> from(source.shape().dims().size());
  ForEachIndex(shape.dims(), [&](const std::vector<int64_t>& index, int64_t linear) {
    source_index(index, from);
    out.SetBits(linear, source.GetBits(Linear(from, strides)));
  });
  return out;
}

// Element `io` of `out` = op(a[ia], b[ib]); false for an op the type lacks.
bool BinaryElement(Opcode op, const Tensor& a, int64_t ia, const Tensor& b, int64_t ib, Tensor& out,
                   int64_t io) {
  const PrimitiveType type = a.type();
  if (ir::IsFloatingPoint(type)) {
    std::optional<double> value = BinaryFloat(op, a.GetDouble(ia), b.GetDouble(ib));
    if (!value) return false;
    out.SetDouble(io, *value);
    return true;
  }
  std::optional<int64_t> value = BinaryInteger(op, a.GetInt(ia), b.GetInt(ib), type);
  if (!value) return false;
  out.SetInt(io, *value);
  return true;
}

// The key under which XLA's TOTALORDER comparison orders a float.
int64_t TotalOrderKey(const Tensor& t, int64_t i) {
  return scalar::TotalOrderKey(t.GetBits(i), ir::PrimitiveTypeBits(t.type()));
}

// Whether compare(a[i], b[j]) holds, as HLO's compare defines it.
bool CompareElements(const Tensor& a, int64_t i, const Tensor& b, int64_t j,
                     ir::ComparisonDirection direction, bool total_order) {
  const PrimitiveType type = a.type();
  if (ir::IsFloatingPoint(type) && total_order) {
    const int64_t x = TotalOrderKey(a, i), y = TotalOrderKey(b, j);
    return CompareResult(direction, false, (x > y) - (x < y));
  }
  if (ir::IsFloatingPoint(type)) {
    const double x = a.GetDouble(i), y = b.GetDouble(j);
    return CompareResult(direction, std::isnan(x) || std::isnan(y), (x > y) - (x < y));
  }
  return CompareResult(direction, false, CompareIntegers(a.GetInt(i), b.GetInt(j), type));
}

// --- one evaluation of one computation --------------------------------------------

class Evaluation {
 public:
  Evaluation(const ReferenceInterpreter& interpreter, const DeviceContext& device,
             const InterpreterOptions& options)
      : interpreter_(interpreter), device_(device), options_(options) {}

  Expected<Tensor> Run(const ir::Computation& computation, std::span<const Tensor> arguments) {
    arguments_ = arguments;
    for (const auto& instruction : computation.instructions()) {
      const double start_us = device_.trace ? device_.trace->NowUs() : 0;
      LOOM_ASSIGN_OR_RETURN(Tensor value, Evaluate(*instruction));
      values_[instruction.get()] = std::move(value);
      if (device_.trace) RecordCompute(*instruction, start_us);
    }
    if (computation.root() == nullptr)
      return Error{"computation " + computation.name() + " has no root", SourceLoc{}};
    return std::move(MustFind(values_, computation.root()));
  }

 private:
  const Tensor& Operand(const Instruction& instruction, int64_t i) const {
    return MustFind(values_, instruction.operand(i));
  }

  Expected<Tensor> Call(const ir::Computation* computation, std::vector<Tensor> arguments,
                        const Instruction& caller) const {
    if (computation == nullptr) return OpError(caller, "missing called computation");
    return interpreter_.Run(*computation, arguments);
  }

  Expected<Tensor> Evaluate(const Instruction& instruction);
  Expected<Tensor> Parameter(const Instruction& instruction) const;
  Expected<Tensor> Unary(const Instruction& instruction) const;
  Expected<Tensor> Binary(const Instruction& instruction) const;
  Expected<Tensor> Compare(const Instruction& instruction) const;
  Expected<Tensor> Select(const Instruction& instruction) const;
  Expected<Tensor> Clamp(const Instruction& instruction) const;
  Expected<Tensor> Convert(const Instruction& instruction) const;
  Expected<Tensor> CopyBytes(const Instruction& instruction) const;
  Expected<Tensor> Broadcast(const Instruction& instruction) const;
  Expected<Tensor> Transpose(const Instruction& instruction) const;
  Expected<Tensor> Reverse(const Instruction& instruction) const;
  Expected<Tensor> Slice(const Instruction& instruction) const;
  Expected<std::vector<int64_t>> ClampedStarts(const Instruction& instruction, int64_t first,
                                               const std::vector<int64_t>& sizes) const;
  Expected<Tensor> DynamicSlice(const Instruction& instruction) const;
  Expected<Tensor> DynamicUpdateSlice(const Instruction& instruction) const;
  Expected<Tensor> Concatenate(const Instruction& instruction) const;
  Expected<Tensor> Pad(const Instruction& instruction) const;
  Expected<Tensor> Iota(const Instruction& instruction) const;
  Expected<std::vector<Tensor>> InitialAccumulators(const Instruction& instruction,
                                                    int64_t n) const;
  Status FoldElement(const Instruction& instruction, const ir::Computation& reducer,
                     const std::optional<Opcode>& simple, std::vector<Tensor>& accumulators,
                     int64_t out, int64_t in) const;
  Expected<Tensor> Reduce(const Instruction& instruction) const;
  Expected<Tensor> ReduceWindow(const Instruction& instruction) const;
  Expected<Tensor> SelectAndScatter(const Instruction& instruction) const;
  Expected<Tensor> Sort(const Instruction& instruction) const;
  Expected<Tensor> TopK(const Instruction& instruction) const;
  Expected<Tensor> TopKBy(const Instruction& instruction, int64_t k, const ir::SortKey& key) const;
  Expected<Tensor> CustomTopK(const Instruction& instruction) const;
  Expected<std::vector<Tensor>> SortedStably(const Instruction& instruction,
                                             const std::vector<const Tensor*>& operands,
                                             int64_t dimension, const ir::Computation& comparator,
                                             size_t compared) const;
  Expected<Tensor> ReducePrecision(const Instruction& instruction) const;
  Expected<Tensor> RngBitGenerator(const Instruction& instruction) const;
  Expected<Tensor> BatchNorm(const Instruction& instruction) const;
  Expected<Tensor> TriangularSolve(const Instruction& instruction) const;
  Expected<Tensor> StochasticConvert(const Instruction& instruction) const;
  Expected<Tensor> Cholesky(const Instruction& instruction) const;
  Expected<Tensor> Gather(const Instruction& instruction) const;
  Expected<Tensor> Scatter(const Instruction& instruction) const;
  Expected<Tensor> Dot(const Instruction& instruction) const;
  Expected<Tensor> Convolution(const Instruction& instruction) const;
  Expected<Tensor> GetTupleElement(const Instruction& instruction) const;
  Expected<Tensor> While(const Instruction& instruction) const;
  Expected<Tensor> Conditional(const Instruction& instruction) const;
  Expected<Tensor> CallOperands(const Instruction& instruction, std::string_view key) const;
  Expected<Tensor> DeviceId(int64_t id) const;
  Expected<Tensor> AsyncStart(const Instruction& instruction) const;
  Expected<Tensor> AsyncDone(const Instruction& instruction) const;
  // Collectives: the synchronous forms, -start (posts the transfers and
  // returns at once) and -done (waits for them).
  Expected<Tensor> Collective(const Instruction& instruction);
  Expected<Tensor> StartCollective(const Instruction& instruction, const Instruction& collective);
  Expected<Tensor> FinishCollective(const Instruction& instruction);
  std::vector<Tensor> OperandValues(const Instruction& instruction) const;
  void RecordCompute(const Instruction& instruction, double start_us) const;
  Expected<Tensor> Combine(const Instruction& collective, const Tensor& a, const Tensor& b) const;

  const ReferenceInterpreter& interpreter_;
  const DeviceContext& device_;
  const InterpreterOptions& options_;
  std::span<const Tensor> arguments_;
  std::unordered_map<const Instruction*, Tensor> values_;
  // Collectives started and not yet done, by their start instruction.
  std::unordered_map<const Instruction*, PendingPtr> pending_;
  // When each pending collective started, for the trace.
  std::unordered_map<const Instruction*, double> started_us_;
};

bool IsCollectiveLike(const Instruction& instruction) {
  const Opcode op = instruction.opcode();
  if (ir::IsCollective(op)) return true;
  switch (op) {
    case Opcode::kAllGatherDone:
    case Opcode::kAllReduceDone:
    case Opcode::kCollectivePermuteDone:
      return true;
    default:
      break;
  }
  // The generic async-start/-done wrapping of a collective.
  if (op == Opcode::kAsyncStart || op == Opcode::kAsyncDone || op == Opcode::kAsyncUpdate) {
    for (const ir::Computation* called : instruction.called_computations()) {
      if (called && called->root() && ir::IsCollective(called->root()->opcode())) return true;
    }
  }
  return false;
}

Expected<Tensor> Evaluation::Evaluate(const Instruction& instruction) {
  const Opcode op = instruction.opcode();
  if (instruction.operand_count() < ir::MinimumOperandCount(op)) {
    return OpError(instruction,
                   fmt::format("{} needs at least {} operands, has {}", ir::OpcodeName(op),
                               ir::MinimumOperandCount(op), instruction.operand_count()));
  }
  for (const Instruction* operand : instruction.operands()) {
    if (!values_.contains(operand)) {
      return OpError(instruction,
                     fmt::format("operand %{} is not defined before its use", operand->name()));
    }
  }
  if (ir::IsElementwiseUnary(op) || op == Opcode::kCopy) return Unary(instruction);
  if (op != Opcode::kCompare && ir::IsElementwiseBinary(op)) return Binary(instruction);
  switch (op) {
    case Opcode::kParameter:
      return Parameter(instruction);
    case Opcode::kConstant:
      return EvaluateConstant(instruction);
    case Opcode::kCompare:
      return Compare(instruction);
    case Opcode::kSelect:
      return Select(instruction);
    case Opcode::kClamp:
      return Clamp(instruction);
    case Opcode::kConvert:
      return Convert(instruction);
    case Opcode::kBitcastConvert:
    case Opcode::kReshape:
    case Opcode::kBitcast:
      return CopyBytes(instruction);
    case Opcode::kBroadcast:
      return Broadcast(instruction);
    case Opcode::kTranspose:
      return Transpose(instruction);
    case Opcode::kReverse:
      return Reverse(instruction);
    case Opcode::kSlice:
      return Slice(instruction);
    case Opcode::kDynamicSlice:
      return DynamicSlice(instruction);
    case Opcode::kDynamicUpdateSlice:
      return DynamicUpdateSlice(instruction);
    case Opcode::kConcatenate:
      return Concatenate(instruction);
    case Opcode::kPad:
      return Pad(instruction);
    case Opcode::kIota:
      return Iota(instruction);
    case Opcode::kReduce:
      return Reduce(instruction);
    case Opcode::kReduceWindow:
      return ReduceWindow(instruction);
    case Opcode::kSelectAndScatter:
      return SelectAndScatter(instruction);
    case Opcode::kSort:
      return Sort(instruction);
    case Opcode::kTopK:
      return TopK(instruction);
    case Opcode::kRngBitGenerator:
      return RngBitGenerator(instruction);
    case Opcode::kBatchNormTraining:
    case Opcode::kBatchNormInference:
    case Opcode::kBatchNormGrad:
      return BatchNorm(instruction);
    case Opcode::kTriangularSolve:
      return TriangularSolve(instruction);
    case Opcode::kStochasticConvert:
      return StochasticConvert(instruction);
    case Opcode::kCholesky:
      return Cholesky(instruction);
    case Opcode::kGather:
      return Gather(instruction);
    case Opcode::kScatter:
      return Scatter(instruction);
    case Opcode::kDot:
      return Dot(instruction);
    case Opcode::kConvolution:
      return Convolution(instruction);
    case Opcode::kTuple: {
      std::vector<Tensor> elements;
      for (int64_t i = 0; i < instruction.operand_count(); ++i)
        elements.push_back(Operand(instruction, i));
      return Tensor::Tuple(std::move(elements));
    }
    case Opcode::kGetTupleElement:
      return GetTupleElement(instruction);
    case Opcode::kWhile:
      return While(instruction);
    case Opcode::kConditional:
      return Conditional(instruction);
    case Opcode::kCall:
      return CallOperands(instruction, "to_apply");
    case Opcode::kFusion:
      return CallOperands(instruction, "calls");
    case Opcode::kOptimizationBarrier:
    case Opcode::kAddDependency:
      if (instruction.operand_count() < 1) return OpError(instruction, "missing operand");
      return Operand(instruction, 0);
    case Opcode::kAfterAll:
      return Tensor();  // a token carries no data
    case Opcode::kCopyStart: {
      // (the copy, the operand, a context): one memory space here.
      if (instruction.operand_count() < 1) return OpError(instruction, "missing operand");
      LOOM_ASSIGN_OR_RETURN(Tensor context, DeviceId(0));
      std::vector<Tensor> elements = {Operand(instruction, 0), Operand(instruction, 0),
                                      std::move(context)};
      return Tensor::Tuple(std::move(elements));
    }
    case Opcode::kCopyDone: {
      if (instruction.operand_count() < 1) return OpError(instruction, "missing operand");
      const Tensor& started = Operand(instruction, 0);
      if (!started.IsTuple() || started.tuple_elements().empty()) {
        return OpError(instruction, "copy-done takes a copy-start's tuple");
      }
      return started.tuple_elements()[0];
    }
    case Opcode::kGetDimensionSize:
      return DimensionSize(instruction);
    case Opcode::kPartitionId:
      return DeviceId(device_.partition_id);
    case Opcode::kReplicaId:
      return DeviceId(device_.replica_id);
    case Opcode::kCustomCall:
      if (ir::IsTopKCustomCall(instruction)) return CustomTopK(instruction);
      return Error{fmt::format("unsupported custom-call {} at line {} (%{})",
                               instruction.attrs().custom_call_target.value_or("?"),
                               instruction.loc().line, instruction.name()),
                   instruction.loc()};
    default:
      break;
  }
  if (IsCollectiveLike(instruction)) {
    if (device_.collectives == nullptr) {
      return OpError(instruction,
                     fmt::format("collective {} needs a communicator", ir::OpcodeName(op)));
    }
    return Collective(instruction);
  }
  switch (op) {
    case Opcode::kAsyncStart:
      return AsyncStart(instruction);
    case Opcode::kAsyncUpdate:
      return Operand(instruction, 0);
    case Opcode::kAsyncDone:
      return AsyncDone(instruction);
    default:
      break;
  }
  return OpError(instruction, fmt::format("unsupported op {}", ir::OpcodeName(op)));
}

Expected<Tensor> Evaluation::Parameter(const Instruction& instruction) const {
  const int64_t number = instruction.parameter_number().value_or(-1);
  if (number < 0 || number >= static_cast<int64_t>(arguments_.size())) {
    return OpError(instruction, fmt::format("parameter {} has no argument ({} given)", number,
                                            arguments_.size()));
  }
  const Tensor& argument = arguments_[number];
  if (!argument.shape().Compatible(instruction.shape())) {
    return OpError(instruction, fmt::format("parameter {} expects {}, got {}", number,
                                            instruction.shape().ToString(false),
                                            argument.shape().ToString(false)));
  }
  return argument;
}

// reduce-precision by value, not by bits (the CPU kernel works on the
// bits, as XLA does): x rounded to nearest-even at the narrower mantissa's
// quantum at x's exponent (never finer than the type's subnormal spacing),
// then flushed to zero or saturated to infinity by magnitude. A tie goes
// to the even encoding: with mantissa bits left, the even significand;
// with none, 1.5 * 2^e goes to the power of two whose biased exponent is
// even.
double ReducedPrecision(double x, int type_mantissa, int type_exponent,
                        const ir::ReducePrecision& reduce) {
  double r = x;
  if (reduce.mantissa_bits < type_mantissa) {
    const int bias = (1 << (type_exponent - 1)) - 1;
    const int type_min_exponent = 1 - bias;
    const int exponent = x == 0 ? type_min_exponent : std::max(std::ilogb(x), type_min_exponent);
    const int quantum = exponent - reduce.mantissa_bits;
    const double scaled = std::ldexp(x, -quantum);
    double rounded = std::nearbyint(scaled);
    if (reduce.mantissa_bits == 0 && std::fabs(scaled) == 1.5) {
      rounded = std::copysign((exponent + bias) % 2 == 0 ? 1.0 : 2.0, x);
    }
    r = std::ldexp(rounded, quantum);
  }
  if (reduce.exponent_bits < type_exponent) {
    const int reduced_bias = (1 << (reduce.exponent_bits - 1)) - 1;
    if (std::fabs(r) >= std::ldexp(1.0, reduced_bias + 1)) {
      return std::copysign(std::numeric_limits<double>::infinity(), x);
    }
    if (std::fabs(r) < std::ldexp(1.0, 1 - reduced_bias)) return std::copysign(0.0, x);
  }
  return r;
}

Expected<Tensor> Evaluation::ReducePrecision(const Instruction& instruction) const {
  LOOM_ASSIGN_OR_RETURN(const ir::ReducePrecision reduce, ir::ReducePrecisionOf(instruction));
  const Tensor& x = Operand(instruction, 0);
  const std::optional<int> mantissa = scalar::IeeeMantissaBits(x.type());
  if (!mantissa) {
    return OpError(instruction, fmt::format("reduce-precision of {} (f16, bf16, f32 or f64 only)",
                                            ir::PrimitiveTypeName(x.type())));
  }
  const int exponent = ir::PrimitiveTypeBits(x.type()) - 1 - *mantissa;
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(instruction.shape()));
  for (int64_t i = 0; i < out.ElementCount(); ++i) {
    const double value = x.GetDouble(i);
    if (!std::isnan(value)) {
      out.SetDouble(i, ReducedPrecision(value, *mantissa, exponent, reduce));
    } else if (reduce.mantissa_bits > 0) {
      out.SetBits(i, x.GetBits(i));  // the same NaN
    } else {
      out.SetDouble(i, std::numeric_limits<double>::infinity());
    }
  }
  return out;
}

Expected<Tensor> Evaluation::Unary(const Instruction& instruction) const {
  if (instruction.opcode() == Opcode::kReducePrecision) return ReducePrecision(instruction);
  const Tensor& x = Operand(instruction, 0);
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(instruction.shape()));
  const Opcode op = instruction.opcode();
  const PrimitiveType type = x.type();
  for (int64_t i = 0; i < out.ElementCount(); ++i) {
    if (op == Opcode::kIsFinite) {
      out.SetInt(i, std::isfinite(x.GetDouble(i)));
    } else if (ir::IsFloatingPoint(type)) {
      std::optional<double> value = UnaryFloat(op, x.GetDouble(i));
      if (!value)
        return OpError(instruction, fmt::format("unsupported op {} on floats", ir::OpcodeName(op)));
      out.SetDouble(i, *value);
    } else {
      std::optional<int64_t> value = UnaryInteger(op, x.GetInt(i), type);
      if (!value)
        return OpError(instruction,
                       fmt::format("unsupported op {} on integers", ir::OpcodeName(op)));
      out.SetInt(i, *value);
    }
  }
  return out;
}

Expected<Tensor> Evaluation::Binary(const Instruction& instruction) const {
  const Tensor& a = Operand(instruction, 0);
  const Tensor& b = Operand(instruction, 1);
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(instruction.shape()));
  if (a.ElementCount() != out.ElementCount() || b.ElementCount() != out.ElementCount()) {
    return OpError(instruction, "operand shapes differ from the result's");
  }
  for (int64_t i = 0; i < out.ElementCount(); ++i) {
    if (!BinaryElement(instruction.opcode(), a, i, b, i, out, i)) {
      return OpError(instruction,
                     fmt::format("unsupported op {} on {}", ir::OpcodeName(instruction.opcode()),
                                 ir::PrimitiveTypeName(a.type())));
    }
  }
  return out;
}

Expected<Tensor> Evaluation::Compare(const Instruction& instruction) const {
  const Tensor& a = Operand(instruction, 0);
  const Tensor& b = Operand(instruction, 1);
  if (!instruction.attrs().direction) return OpError(instruction, "compare without direction");
  const ir::ComparisonDirection direction = *instruction.attrs().direction;
  const ir::RawAttribute* kind = instruction.attrs().FindRaw("type");
  const bool total_order = kind != nullptr && kind->value == "TOTALORDER";
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(instruction.shape()));
  for (int64_t i = 0; i < out.ElementCount(); ++i) {
    out.SetInt(i, CompareElements(a, i, b, i, direction, total_order));
  }
  return out;
}

Expected<Tensor> Evaluation::Select(const Instruction& instruction) const {
  const Tensor& predicate = Operand(instruction, 0);
  const Tensor& on_true = Operand(instruction, 1);
  const Tensor& on_false = Operand(instruction, 2);
  if (on_true.IsTuple()) return predicate.GetInt(0) ? on_true : on_false;
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(instruction.shape()));
  const bool scalar_predicate = predicate.shape().rank() == 0;
  for (int64_t i = 0; i < out.ElementCount(); ++i) {
    const bool take_true = predicate.GetInt(scalar_predicate ? 0 : i) != 0;
    out.SetBits(i, (take_true ? on_true : on_false).GetBits(i));
  }
  return out;
}

Expected<Tensor> Evaluation::Clamp(const Instruction& instruction) const {
  const Tensor& low = Operand(instruction, 0);
  const Tensor& x = Operand(instruction, 1);
  const Tensor& high = Operand(instruction, 2);
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(instruction.shape()));
  const int64_t low_step = low.shape().rank() == 0 ? 0 : 1;
  const int64_t high_step = high.shape().rank() == 0 ? 0 : 1;
  for (int64_t i = 0; i < out.ElementCount(); ++i) {
    // clamp = minimum(maximum(x, low), high), with XLA's NaN propagation.
    BinaryElement(Opcode::kMaximum, x, i, low, i * low_step, out, i);
    BinaryElement(Opcode::kMinimum, out, i, high, i * high_step, out, i);
  }
  return out;
}

Expected<Tensor> Evaluation::Convert(const Instruction& instruction) const {
  const Tensor& x = Operand(instruction, 0);
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(instruction.shape()));
  // Floats and unsigned values go through double (exact for every source
  // type but u64/s64 above 2^53); signed integers through int64 so that
  // integer-to-integer converts wrap exactly.
  const bool through_int = ir::IsSignedInteger(x.type()) ||
                           (IsUnsignedLike(x.type()) && !ir::IsFloatingPoint(out.type()));
  for (int64_t i = 0; i < out.ElementCount(); ++i) {
    if (through_int) {
      out.SetInt(i, x.GetInt(i));
    } else {
      out.SetDouble(i, x.GetDouble(i));
    }
  }
  return out;
}

// stochastic-convert element by element (scalar::StochasticConvert), to
// signed integers only, as XLA's decomposer does.
Expected<Tensor> Evaluation::StochasticConvert(const Instruction& instruction) const {
  const Tensor& x = Operand(instruction, 0);
  const Tensor& random = Operand(instruction, 1);
  const ir::PrimitiveType to = instruction.shape().type();
  if (!ir::IsSignedInteger(to)) {
    return OpError(instruction, fmt::format("stochastic-convert to {} is not executable (XLA's "
                                            "decomposer converts to signed integers only)",
                                            ir::PrimitiveTypeName(to)));
  }
  Expected<ir::Shape> shape = ir::InferStochasticConvertShape(x.shape(), random.shape(), to);
  if (!shape.ok()) return OpError(instruction, shape.error().message);
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(*shape));
  for (int64_t i = 0; i < out.ElementCount(); ++i) {
    out.SetInt(i, scalar::StochasticConvert(x.GetDouble(i), random.GetBits(i), x.type(), to));
  }
  return out;
}

bool HasDefaultLayout(const ir::Shape& shape) {
  if (!shape.layout()) return true;
  const auto& order = shape.layout()->minor_to_major;
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] != static_cast<int64_t>(order.size() - 1 - i)) return false;
  }
  return true;
}

// reshape, bitcast and bitcast-convert of equal element widths: the same
// bytes under a new shape (row-major order is unchanged by a reshape).
Expected<Tensor> Evaluation::CopyBytes(const Instruction& instruction) const {
  const Tensor& x = Operand(instruction, 0);
  if (instruction.opcode() == Opcode::kBitcast &&
      !(HasDefaultLayout(x.shape()) && HasDefaultLayout(instruction.shape()))) {
    return OpError(instruction, "bitcast with a non-default layout is unsupported");
  }
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(instruction.shape()));
  if (out.bytes().size() != x.bytes().size()) {
    return OpError(instruction, fmt::format("{} from {} bytes to {} bytes is unsupported",
                                            ir::OpcodeName(instruction.opcode()), x.bytes().size(),
                                            out.bytes().size()));
  }
  std::copy(x.bytes().begin(), x.bytes().end(), out.mutable_bytes().begin());
  return out;
}

Expected<Tensor> Evaluation::Broadcast(const Instruction& instruction) const {
  const Tensor& x = Operand(instruction, 0);
  const std::vector<int64_t> dims = instruction.attrs().dimensions.value_or(std::vector<int64_t>{});
  if (static_cast<int64_t>(dims.size()) != x.shape().rank()) {
    return OpError(instruction, "broadcast dimensions do not match the operand's rank");
  }
  return GatherElements(instruction.shape(), x,
                        [&](const std::vector<int64_t>& index, std::vector<int64_t>& from) {
                          for (size_t k = 0; k < dims.size(); ++k) from[k] = index[dims[k]];
                        });
}

Expected<Tensor> Evaluation::Transpose(const Instruction& instruction) const {
  const Tensor& x = Operand(instruction, 0);
  const std::vector<int64_t> perm = instruction.attrs().dimensions.value_or(std::vector<int64_t>{});
  if (static_cast<int64_t>(perm.size()) != x.shape().rank()) {
    return OpError(instruction, "transpose dimensions do not match the operand's rank");
  }
  return GatherElements(instruction.shape(), x,
                        [&](const std::vector<int64_t>& index, std::vector<int64_t>& from) {
                          for (size_t k = 0; k < perm.size(); ++k) from[perm[k]] = index[k];
                        });
}

Expected<Tensor> Evaluation::Reverse(const Instruction& instruction) const {
  const Tensor& x = Operand(instruction, 0);
  const std::vector<int64_t> reversed =
      instruction.attrs().dimensions.value_or(std::vector<int64_t>{});
  const auto& dims = x.shape().dims();
  return GatherElements(instruction.shape(), x,
                        [&](const std::vector<int64_t>& index, std::vector<int64_t>& from) {
                          from = index;
                          for (int64_t d : reversed) from[d] = dims[d] - 1 - index[d];
                        });
}

Expected<Tensor> Evaluation::Slice(const Instruction& instruction) const {
  const Tensor& x = Operand(instruction, 0);
  if (!instruction.attrs().slice ||
      static_cast<int64_t>(instruction.attrs().slice->size()) != x.shape().rank()) {
    return OpError(instruction, "slice without one slice={...} entry per dimension");
  }
  const std::vector<ir::SliceDim>& slice = *instruction.attrs().slice;
  return GatherElements(instruction.shape(), x,
                        [&](const std::vector<int64_t>& index, std::vector<int64_t>& from) {
                          for (size_t d = 0; d < slice.size(); ++d)
                            from[d] = slice[d].start + index[d] * slice[d].stride;
                        });
}

// The start indices of a dynamic-(update-)slice, read from operands `first`..
// (one scalar per dimension) and clamped as XLA does: into [0, dim - size].
Expected<std::vector<int64_t>> Evaluation::ClampedStarts(const Instruction& instruction,
                                                         int64_t first,
                                                         const std::vector<int64_t>& sizes) const {
  const auto& dims = Operand(instruction, 0).shape().dims();
  if (instruction.operand_count() - first != static_cast<int64_t>(dims.size())) {
    return OpError(instruction, "expected one start index per dimension");
  }
  std::vector<int64_t> starts(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    const Tensor& index = Operand(instruction, first + static_cast<int64_t>(d));
    if (index.IsTuple() || index.ElementCount() != 1)
      return OpError(instruction, "start index is not a scalar");
    const int64_t start = index.GetInt(0);
    const int64_t limit = dims[d] - sizes[d];
    if (limit < 0) return OpError(instruction, "slice is larger than its operand");
    // Unsigned indices above 2^63 read as negative; they clamp high in XLA.
    const bool huge_unsigned = IsUnsignedLike(index.type()) && start < 0;
    starts[d] = huge_unsigned ? limit : std::clamp<int64_t>(start, 0, limit);
  }
  return starts;
}

Expected<Tensor> Evaluation::DynamicSlice(const Instruction& instruction) const {
  const Tensor& x = Operand(instruction, 0);
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> starts,
                        ClampedStarts(instruction, 1, instruction.shape().dims()));
  return GatherElements(instruction.shape(), x,
                        [&](const std::vector<int64_t>& index, std::vector<int64_t>& from) {
                          for (size_t d = 0; d < starts.size(); ++d) from[d] = starts[d] + index[d];
                        });
}

Expected<Tensor> Evaluation::DynamicUpdateSlice(const Instruction& instruction) const {
  Tensor out = Operand(instruction, 0);
  const Tensor& update = Operand(instruction, 1);
  if (update.shape().rank() != out.shape().rank())
    return OpError(instruction, "update rank differs");
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> starts,
                        ClampedStarts(instruction, 2, update.shape().dims()));
  const std::vector<int64_t> strides = Strides(out.shape().dims());
  std::vector<int64_t> to(starts.size());
  ForEachIndex(update.shape().dims(), [&](const std::vector<int64_t>& index, int64_t linear) {
    for (size_t d = 0; d < starts.size(); ++d) to[d] = starts[d] + index[d];
    out.SetBits(Linear(to, strides), update.GetBits(linear));
  });
  return out;
}

Expected<Tensor> Evaluation::Concatenate(const Instruction& instruction) const {
  const auto& dims_attr = instruction.attrs().dimensions;
  if (!dims_attr || dims_attr->size() != 1)
    return OpError(instruction, "concatenate needs dimensions={d}");
  const int64_t axis = dims_attr->front();
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(instruction.shape()));
  const std::vector<int64_t> strides = Strides(out.shape().dims());
  int64_t offset = 0;
  for (int64_t i = 0; i < instruction.operand_count(); ++i) {
    const Tensor& part = Operand(instruction, i);
    std::vector<int64_t> to;
    ForEachIndex(part.shape().dims(), [&](const std::vector<int64_t>& index, int64_t linear) {
      to = index;
      to[axis] += offset;
      out.SetBits(Linear(to, strides), part.GetBits(linear));
    });
    offset += part.shape().dim(axis);
  }
  return out;
}

Expected<Tensor> Evaluation::Pad(const Instruction& instruction) const {
  const Tensor& x = Operand(instruction, 0);
  const Tensor& padding_value = Operand(instruction, 1);
  if (!instruction.attrs().padding ||
      static_cast<int64_t>(instruction.attrs().padding->size()) != x.shape().rank()) {
    return OpError(instruction, "pad without one padding entry per dimension");
  }
  const std::vector<ir::PadDim>& padding = *instruction.attrs().padding;
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(instruction.shape()));
  for (int64_t i = 0; i < out.ElementCount(); ++i) out.SetBits(i, padding_value.GetBits(0));
  const auto& out_dims = out.shape().dims();
  const std::vector<int64_t> strides = Strides(out_dims);
  std::vector<int64_t> to(padding.size());
  // Each operand element lands at low + i * (interior + 1); negative low or
  // high padding cuts elements off, which then land outside and are dropped.
  ForEachIndex(x.shape().dims(), [&](const std::vector<int64_t>& index, int64_t linear) {
    for (size_t d = 0; d < padding.size(); ++d) {
      to[d] = padding[d].low + index[d] * (padding[d].interior + 1);
      if (to[d] < 0 || to[d] >= out_dims[d]) return;
    }
    out.SetBits(Linear(to, strides), x.GetBits(linear));
  });
  return out;
}

Expected<Tensor> Evaluation::Iota(const Instruction& instruction) const {
  const int64_t dimension = instruction.attrs().iota_dimension.value_or(0);
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(instruction.shape()));
  if (dimension < 0 || dimension >= std::max<int64_t>(out.shape().rank(), 1)) {
    return OpError(instruction, "iota_dimension out of range");
  }
  ForEachIndex(out.shape().dims(), [&](const std::vector<int64_t>& index, int64_t linear) {
    out.SetInt(linear, index.empty() ? 0 : index[dimension]);
  });
  return out;
}

Expected<Tensor> ScalarFrom(const Tensor& source, int64_t i) {
  LOOM_ASSIGN_OR_RETURN(Tensor scalar, Tensor::Zeros(ir::Shape(source.type(), {})));
  scalar.SetBits(0, source.GetBits(i));
  return scalar;
}

// reduce: each result element folds its inputs in row-major order of the
// reduced dimensions, acc = to_apply(acc, x), starting from the init value.
// The index vector of `indices` at batch index `batch` (the indices' index
// without index_vector_dim), entry by entry.
std::vector<int64_t> IndexVectorAt(const Tensor& indices, int64_t index_vector_dim,
                                   const std::vector<int64_t>& batch) {
  const std::vector<int64_t>& dims = indices.shape().dims();
  const auto rank = static_cast<int64_t>(dims.size());
  const int64_t length = index_vector_dim < rank ? dims[index_vector_dim] : 1;
  std::vector<int64_t> vector;
  for (int64_t k = 0; k < length; ++k) {
    std::vector<int64_t> at = batch;
    if (index_vector_dim < rank) at.insert(at.begin() + index_vector_dim, k);
    vector.push_back(indices.GetInt(Linear(at, Strides(dims))));
  }
  return vector;
}

bool In(const std::vector<int64_t>& dims, int64_t d) {
  return std::find(dims.begin(), dims.end(), d) != dims.end();
}

// The operand coordinates the batching dimensions give: operand dimension
// operand_dims[i] takes the batch index's entry for the indices' dimension
// indices_dims[i] (the batch index skips index_vector_dim).
void PlaceBatching(const std::vector<int64_t>& operand_dims,
                   const std::vector<int64_t>& indices_dims, int64_t index_vector_dim,
                   const std::vector<int64_t>& batch, std::vector<int64_t>& at) {
  for (size_t i = 0; i < operand_dims.size(); ++i) {
    const int64_t s = indices_dims[i];
    at[operand_dims[i]] = batch[s - (s > index_vector_dim ? 1 : 0)];
  }
}

// Each output element, straight from the definition: its batch dimensions
// pick an index vector, which places the clamped slice, and the batching
// dimensions' coordinates; its offset dimensions index the slice's other
// dimensions.
Expected<Tensor> Evaluation::Gather(const Instruction& instruction) const {
  LOOM_ASSIGN_OR_RETURN(const ir::GatherDimensions dims, ir::GatherDimensionsOf(instruction));
  const Tensor& operand = Operand(instruction, 0);
  const Tensor& indices = Operand(instruction, 1);
  const std::vector<int64_t>& operand_dims = operand.shape().dims();
  return GatherElements(
      instruction.shape(), operand,
      [&](const std::vector<int64_t>& out, std::vector<int64_t>& from) {
        std::vector<int64_t> batch, offsets;
        for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
          (In(dims.offset_dims, i) ? offsets : batch).push_back(out[i]);
        }
        const std::vector<int64_t> vector = IndexVectorAt(indices, dims.index_vector_dim, batch);
        std::fill(from.begin(), from.end(), 0);
        for (size_t k = 0; k < vector.size(); ++k) {
          const int64_t d = dims.start_index_map[k];
          const int64_t limit = operand_dims[d] - dims.slice_sizes[d];
          const bool huge_unsigned = scalar::IsUnsignedLike(indices.type()) && vector[k] < 0;
          from[d] = huge_unsigned ? limit : std::clamp<int64_t>(vector[k], 0, limit);
        }
        PlaceBatching(dims.operand_batching_dims, dims.start_indices_batching_dims,
                      dims.index_vector_dim, batch, from);
        size_t next = 0;
        for (int64_t d = 0; d < static_cast<int64_t>(from.size()); ++d) {
          if (!In(dims.collapsed_slice_dims, d) && !In(dims.operand_batching_dims, d)) {
            from[d] += offsets[next++];
          }
        }
      });
}

// Each update element in row-major order, combined into the operands by
// to_apply (the N operands' elements, then the N updates'); a window that
// does not fit in the operand is skipped whole.
Expected<Tensor> Evaluation::Scatter(const Instruction& instruction) const {
  const int64_t n = (instruction.operand_count() - 1) / 2;
  if (n < 1 || instruction.operand_count() != 2 * n + 1) {
    return OpError(instruction, "scatter takes N operands, indices and N updates");
  }
  LOOM_ASSIGN_OR_RETURN(const ir::ScatterDimensions dims, ir::ScatterDimensionsOf(instruction));
  const ir::Computation* combiner = instruction.called("to_apply");
  if (combiner == nullptr) return OpError(instruction, "scatter needs to_apply");
  std::vector<Tensor> outs;
  for (int64_t k = 0; k < n; ++k) outs.push_back(Operand(instruction, k));
  const Tensor& indices = Operand(instruction, n);
  const std::vector<int64_t>& operand_dims = outs[0].shape().dims();
  const std::vector<int64_t>& update_dims = Operand(instruction, n + 1).shape().dims();
  const std::vector<int64_t> strides = Strides(operand_dims);
  std::optional<Error> failure;
  ForEachIndex(update_dims, [&](const std::vector<int64_t>& index, int64_t linear) {
    if (failure) return;
    std::vector<int64_t> batch, window, window_sizes;
    for (int64_t i = 0; i < static_cast<int64_t>(index.size()); ++i) {
      if (In(dims.update_window_dims, i)) {
        window.push_back(index[i]);
        window_sizes.push_back(update_dims[i]);
      } else {
        batch.push_back(index[i]);
      }
    }
    const std::vector<int64_t> vector = IndexVectorAt(indices, dims.index_vector_dim, batch);
    std::vector<int64_t> to(operand_dims.size(), 0);
    for (size_t k = 0; k < vector.size(); ++k) to[dims.scatter_dims_to_operand_dims[k]] = vector[k];
    PlaceBatching(dims.input_batching_dims, dims.scatter_indices_batching_dims,
                  dims.index_vector_dim, batch, to);
    size_t next = 0;
    for (int64_t d = 0; d < static_cast<int64_t>(to.size()); ++d) {
      const bool walked = !In(dims.inserted_window_dims, d) && !In(dims.input_batching_dims, d);
      const int64_t size = walked ? window_sizes[next] : 1;
      if (to[d] < 0 || to[d] + size > operand_dims[d]) return;  // the window does not fit
      if (walked) to[d] += window[next++];
    }
    const int64_t at = Linear(to, strides);
    std::vector<Tensor> arguments;
    for (int64_t k = 0; k < 2 * n; ++k) {
      Expected<Tensor> scalar = k < n ? ScalarFrom(outs[k], at)
                                      : ScalarFrom(Operand(instruction, n + 1 + (k - n)), linear);
      if (!scalar.ok()) {
        failure = scalar.error();
        return;
      }
      arguments.push_back(std::move(scalar).value());
    }
    Expected<Tensor> result = Call(combiner, std::move(arguments), instruction);
    if (!result.ok()) {
      failure = result.error();
      return;
    }
    const bool tuple = result->IsTuple();
    if (tuple ? static_cast<int64_t>(result->tuple_elements().size()) != n : n != 1) {
      failure = OpError(instruction, fmt::format("to_apply must return {} values", n));
      return;
    }
    for (int64_t k = 0; k < n; ++k) {
      outs[k].SetBits(at, (tuple ? result->tuple_elements()[k] : *result).GetBits(0));
    }
  });
  if (failure) return *failure;
  if (n == 1) return std::move(outs[0]);
  return Tensor::Tuple(std::move(outs));
}

// The N accumulators of a reduce or reduce-window, every element at its
// init value (operand N + k).
Expected<std::vector<Tensor>> Evaluation::InitialAccumulators(const Instruction& instruction,
                                                              int64_t n) const {
  std::vector<Tensor> accumulators;
  for (int64_t k = 0; k < n; ++k) {
    const ir::Shape& shape =
        instruction.shape().IsTuple() ? instruction.shape().tuple_element(k) : instruction.shape();
    LOOM_ASSIGN_OR_RETURN(Tensor acc, Tensor::Zeros(shape));
    const Tensor& init = Operand(instruction, n + k);
    for (int64_t i = 0; i < acc.ElementCount(); ++i) acc.SetBits(i, init.GetBits(0));
    accumulators.push_back(std::move(acc));
  }
  return accumulators;
}

// Folds element `in` of the N inputs (operands 0..N-1) into element `out`
// of the accumulators: one op where the reducer is one (`simple`), else a
// call of to_apply on the accumulators' and the inputs' scalars.
Status Evaluation::FoldElement(const Instruction& instruction, const ir::Computation& reducer,
                               const std::optional<Opcode>& simple,
                               std::vector<Tensor>& accumulators, int64_t out, int64_t in) const {
  if (simple) {
    BinaryElement(*simple, accumulators[0], out, Operand(instruction, 0), in, accumulators[0], out);
    return OkStatus();
  }
  const auto n = static_cast<int64_t>(accumulators.size());
  std::vector<Tensor> arguments;
  for (int64_t k = 0; k < 2 * n; ++k) {
    LOOM_ASSIGN_OR_RETURN(Tensor scalar, k < n ? ScalarFrom(accumulators[k], out)
                                               : ScalarFrom(Operand(instruction, k - n), in));
    arguments.push_back(std::move(scalar));
  }
  LOOM_ASSIGN_OR_RETURN(Tensor result, Call(&reducer, std::move(arguments), instruction));
  if (result.IsTuple() ? static_cast<int64_t>(result.tuple_elements().size()) != n : n != 1) {
    return OpError(instruction, "to_apply returned the wrong number of values");
  }
  for (int64_t k = 0; k < n; ++k) {
    const Tensor& value = result.IsTuple() ? result.tuple_elements()[k] : result;
    accumulators[k].SetBits(out, value.GetBits(0));
  }
  return OkStatus();
}

Tensor ReduceResult(const Instruction& instruction, std::vector<Tensor> accumulators) {
  if (!instruction.shape().IsTuple()) return std::move(accumulators[0]);
  return Tensor::Tuple(std::move(accumulators));
}

Expected<Tensor> Evaluation::Reduce(const Instruction& instruction) const {
  const int64_t n = instruction.operand_count() / 2;
  const ir::Computation* reducer = instruction.called("to_apply");
  if (n == 0 || reducer == nullptr)
    return OpError(instruction, "reduce needs operands and to_apply");
  const std::vector<int64_t> reduced =
      instruction.attrs().dimensions.value_or(std::vector<int64_t>{});
  const auto& in_dims = Operand(instruction, 0).shape().dims();
  LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> accumulators, InitialAccumulators(instruction, n));
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < static_cast<int64_t>(in_dims.size()); ++d) {
    if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) kept.push_back(d);
  }
  const std::vector<int64_t> out_strides = Strides(accumulators[0].shape().dims());
  const std::optional<Opcode> simple =
      n == 1 ? ir::CommutativeBinaryReducer(*reducer) : std::nullopt;
  // Visiting inputs in row-major order visits each output's reduced indices in
  // row-major order too.
  Status status = OkStatus();
  ForEachIndex(in_dims, [&](const std::vector<int64_t>& index, int64_t linear) {
    if (!status.ok()) return;
    int64_t out_index = 0;
    for (size_t k = 0; k < kept.size(); ++k) out_index += index[kept[k]] * out_strides[k];
    status = FoldElement(instruction, *reducer, simple, accumulators, out_index, linear);
  });
  LOOM_RETURN_IF_ERROR(status);
  return ReduceResult(instruction, std::move(accumulators));
}

// Each result element folds the input elements its window's landing taps
// read, in row-major order of the taps (ir/reduce_window.h).
Expected<Tensor> Evaluation::ReduceWindow(const Instruction& instruction) const {
  const int64_t n = instruction.operand_count() / 2;
  const ir::Computation* reducer = instruction.called("to_apply");
  if (n == 0 || reducer == nullptr) {
    return OpError(instruction, "reduce-window needs operands and to_apply");
  }
  Expected<std::vector<ir::WindowDimension>> window = ir::ReduceWindowOf(instruction);
  if (!window.ok()) return OpError(instruction, window.error().message);
  LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> accumulators, InitialAccumulators(instruction, n));
  const std::vector<int64_t>& in_dims = Operand(instruction, 0).shape().dims();
  const std::vector<int64_t>& out_dims = accumulators[0].shape().dims();
  if (window->size() != in_dims.size() || out_dims.size() != in_dims.size()) {
    return OpError(instruction, "the window does not match the input's rank");
  }
  const std::optional<Opcode> simple =
      n == 1 ? ir::CommutativeBinaryReducer(*reducer) : std::nullopt;
  Status status = OkStatus();
  ir::ForEachWindowElement(
      ir::LandingTaps(*window, in_dims, out_dims), in_dims, out_dims, [&](int64_t out, int64_t in) {
        if (status.ok()) {
          status = FoldElement(instruction, *reducer, simple, accumulators, out, in);
        }
      });
  LOOM_RETURN_IF_ERROR(status);
  return ReduceResult(instruction, std::move(accumulators));
}

// Each source element selects one of its window's landing operand
// elements and scatters itself onto the result there, in the order of
// ir/select_and_scatter.h; both computations called element by element.
Expected<Tensor> Evaluation::SelectAndScatter(const Instruction& instruction) const {
  const ir::Computation* select = instruction.called("select");
  const ir::Computation* scatter = instruction.called("scatter");
  if (instruction.operand_count() != 3 || select == nullptr || scatter == nullptr) {
    return OpError(instruction, "select-and-scatter needs 3 operands, select and scatter");
  }
  Expected<std::vector<ir::WindowDimension>> window = ir::ReduceWindowOf(instruction);
  if (!window.ok()) return OpError(instruction, window.error().message);
  const Tensor& operand = Operand(instruction, 0);
  const Tensor& source = Operand(instruction, 1);
  LOOM_ASSIGN_OR_RETURN(Tensor result, Tensor::Zeros(instruction.shape()));
  const uint64_t init = Operand(instruction, 2).GetBits(0);
  for (int64_t i = 0; i < result.ElementCount(); ++i) result.SetBits(i, init);
  const std::vector<int64_t>& in_dims = operand.shape().dims();
  const std::vector<int64_t>& out_dims = source.shape().dims();
  if (window->size() != in_dims.size() || out_dims.size() != in_dims.size()) {
    return OpError(instruction, "the window does not match the operand's rank");
  }
  // Calls `computation` on element a of `x` and element b of `y`.
  const auto call = [&](const ir::Computation* computation, const Tensor& x, int64_t a,
                        const Tensor& y, int64_t b) -> Expected<Tensor> {
    std::vector<Tensor> arguments;
    LOOM_ASSIGN_OR_RETURN(Tensor first, ScalarFrom(x, a));
    LOOM_ASSIGN_OR_RETURN(Tensor second, ScalarFrom(y, b));
    arguments.push_back(std::move(first));
    arguments.push_back(std::move(second));
    return Call(computation, std::move(arguments), instruction);
  };
  int64_t window_at = -1, selected = -1;  // the source element, its selection
  const auto scatter_selected = [&]() -> Status {
    if (window_at < 0) return OkStatus();
    LOOM_ASSIGN_OR_RETURN(Tensor value, call(scatter, result, selected, source, window_at));
    result.SetBits(selected, value.GetBits(0));
    return OkStatus();
  };
  Status status = OkStatus();
  ir::ForEachWindowElement(ir::LandingTaps(*window, in_dims, out_dims), in_dims, out_dims,
                           [&](int64_t out, int64_t in) {
                             if (!status.ok()) return;
                             if (out != window_at) {
                               status = scatter_selected();
                               window_at = out;
                               selected = in;
                               return;
                             }
                             Expected<Tensor> keep = call(select, operand, selected, operand, in);
                             if (!keep.ok()) {
                               status = keep.error();
                             } else if (keep->GetBits(0) == 0) {
                               selected = in;
                             }
                           });
  LOOM_RETURN_IF_ERROR(status);
  LOOM_RETURN_IF_ERROR(scatter_selected());
  return result;
}

// Each slice along the dimension sorted stably by calls of the comparator
// (ir/sort.h); every operand permuted alike.
Expected<Tensor> Evaluation::Sort(const Instruction& instruction) const {
  const ir::Computation* comparator = instruction.called("to_apply");
  const std::vector<int64_t> dims = instruction.attrs().dimensions.value_or(std::vector<int64_t>{});
  const int64_t n = instruction.operand_count();
  if (n == 0 || comparator == nullptr || dims.size() != 1) {
    return OpError(instruction, "sort needs operands, one dimension and to_apply");
  }
  const ir::Shape& shape = Operand(instruction, 0).shape();
  if (dims[0] < 0 || dims[0] >= shape.rank()) return OpError(instruction, "bad sort dimension");
  std::vector<const Tensor*> operands;
  for (int64_t k = 0; k < n; ++k) operands.push_back(&Operand(instruction, k));
  LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> outs,
                        SortedStably(instruction, operands, dims[0], *comparator, operands.size()));
  if (n == 1) return std::move(outs[0]);
  return Tensor::Tuple(std::move(outs));
}

// The slices along `dimension` of `operands` sorted stably by calls of
// `comparator` on the first `compared` operands' elements, all permuted
// alike.
Expected<std::vector<Tensor>> Evaluation::SortedStably(const Instruction& instruction,
                                                       const std::vector<const Tensor*>& operands,
                                                       int64_t dimension,
                                                       const ir::Computation& comparator,
                                                       size_t compared) const {
  const ir::SortSlices slices = ir::SlicesAlong(operands[0]->shape().dims(), dimension);
  std::vector<Tensor> outs;
  for (const Tensor* operand : operands) outs.push_back(*operand);
  std::optional<Error> failure;
  // Whether position a of the slice at `start` goes before position b.
  const auto before = [&](int64_t start, int64_t a, int64_t b) {
    if (failure) return false;
    std::vector<Tensor> arguments;
    for (size_t k = 0; k < compared; ++k) {
      for (const int64_t j : {a, b}) {
        Expected<Tensor> scalar = ScalarFrom(*operands[k], start + j * slices.stride);
        if (!scalar.ok()) {
          failure = scalar.error();
          return false;
        }
        arguments.push_back(std::move(scalar).value());
      }
    }
    Expected<Tensor> verdict = Call(&comparator, std::move(arguments), instruction);
    if (!verdict.ok()) {
      failure = verdict.error();
      return false;
    }
    return verdict->GetBits(0) != 0;
  };
  std::vector<int64_t> order(static_cast<size_t>(slices.length));
  for (int64_t s = 0; s < slices.count && !failure; ++s) {
    const int64_t start = slices.Start(s);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return before(start, a, b); });
    for (size_t k = 0; k < operands.size(); ++k) {
      for (int64_t j = 0; j < slices.length; ++j) {
        outs[k].SetBits(
            start + j * slices.stride,
            operands[k]->GetBits(start + order[static_cast<size_t>(j)] * slices.stride));
      }
    }
  }
  if (failure) return *failure;
  return outs;
}

// XLA's custom-call TopK as its TopkDecomposer writes it out (ir/sort.h):
// the operand and an iota of positions along the last dimension sorted
// stably by the comparator (GT TOTALORDER without one), sliced to k.
Expected<Tensor> Evaluation::CustomTopK(const Instruction& instruction) const {
  Expected<ir::CustomTopK> topk = ir::CustomTopKOf(instruction);
  if (!topk.ok()) return topk.error();
  if (topk->comparator == nullptr) {
    return TopKBy(instruction, topk->k, ir::SortKey{0, ir::ComparisonDirection::kGt, true});
  }
  const Tensor& operand = Operand(instruction, 0);
  const ir::Shape& shape = operand.shape();
  LOOM_ASSIGN_OR_RETURN(Tensor positions,
                        Tensor::Zeros(ir::Shape(PrimitiveType::kS32, shape.dims())));
  const int64_t n = shape.dims().back();
  for (int64_t i = 0; i < positions.ElementCount(); ++i) positions.SetInt(i, i % n);
  LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> sorted,
                        SortedStably(instruction, {&operand, &positions}, shape.rank() - 1,
                                     *topk->comparator, topk->comparator->parameters().size() / 2));
  std::vector<Tensor> outs;
  const int64_t rows = n == 0 ? 0 : operand.ElementCount() / n;
  for (size_t part = 0; part < 2; ++part) {
    LOOM_ASSIGN_OR_RETURN(
        Tensor out, Tensor::Zeros(instruction.shape().tuple_element(static_cast<int64_t>(part))));
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t j = 0; j < topk->k; ++j) {
        out.SetBits(row * topk->k + j, sorted[part].GetBits(row * n + j));
      }
    }
    outs.push_back(std::move(out));
  }
  return Tensor::Tuple(std::move(outs));
}

// topk as the sort XLA's decomposer makes of it (ir/sort.h): each last-
// dimension slice's positions sorted stably by the compare, the first k
// kept with their elements.
Expected<Tensor> Evaluation::TopK(const Instruction& instruction) const {
  LOOM_ASSIGN_OR_RETURN(const ir::TopK topk, ir::TopKOf(instruction));
  return TopKBy(instruction, topk.k, ir::TopKSortKey(topk));
}

Expected<Tensor> Evaluation::TopKBy(const Instruction& instruction, int64_t k,
                                    const ir::SortKey& key) const {
  const ir::TopK topk{k, key.direction == ir::ComparisonDirection::kGt};
  const Tensor& operand = Operand(instruction, 0);
  Expected<ir::Shape> shape = ir::InferTopKShape(operand.shape(), topk.k);
  if (!shape.ok()) return OpError(instruction, shape.error().message);
  const int64_t length = operand.shape().dims().back();
  LOOM_ASSIGN_OR_RETURN(Tensor values, Tensor::Zeros(shape->tuple_element(0)));
  LOOM_ASSIGN_OR_RETURN(Tensor positions, Tensor::Zeros(shape->tuple_element(1)));
  std::vector<int64_t> order(static_cast<size_t>(length));
  const int64_t slices = length == 0 ? 0 : operand.ElementCount() / length;
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t start = s * length;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return CompareElements(operand, start + a, operand, start + b, key.direction,
                             key.total_order);
    });
    for (int64_t j = 0; j < topk.k; ++j) {
      const int64_t from = order[static_cast<size_t>(j)];
      values.SetBits(s * topk.k + j, operand.GetBits(start + from));
      positions.SetInt(s * topk.k + j, from);
    }
  }
  std::vector<Tensor> outs;
  outs.push_back(std::move(values));
  outs.push_back(std::move(positions));
  return Tensor::Tuple(std::move(outs));
}

// Element i of a draw, found from i alone: which block it is in, and which
// of the block's words.
uint64_t DrawnElement(const random::Draw& draw, const std::vector<int64_t>& dims, int64_t i) {
  const auto linear = static_cast<uint64_t>(i);
  if (draw.algorithm == ir::RngAlgorithm::kPhilox) {
    const std::array<uint32_t, 2> key = random::Words(draw.key);
    if (draw.width == 64) {
      const random::PhiloxWords w = random::Philox4x32(draw.counter.Plus(linear / 2).Words(), key);
      return random::Join(w[2 * (linear % 2)], w[2 * (linear % 2) + 1]);
    }
    return random::Philox4x32(draw.counter.Plus(linear / 4).Words(), key)[linear % 4];
  }
  const random::ThreeFryWords key = random::Words(draw.key);
  const auto block = [&](uint64_t c) {
    return random::ThreeFry2x32(random::Words(draw.counter.low + c), key);
  };
  if (draw.width == 64) {
    const random::ThreeFryWords w = block(linear);
    return random::Join(w[0], w[1]);
  }
  if (draw.split_dimension < 0) return block(0)[0];
  // The element's index with the split dimension halved: its block's index
  // in the halved array; the parity picks the word.
  std::vector<int64_t> index(dims.size());
  int64_t rest = i;
  for (size_t d = dims.size(); d-- > 0;) {
    index[d] = rest % dims[d];
    rest /= dims[d];
  }
  const auto s = static_cast<size_t>(draw.split_dimension);
  const int64_t word = index[s] % 2;
  index[s] /= 2;
  int64_t block_index = 0;
  for (size_t d = 0; d < dims.size(); ++d) {
    block_index = block_index * (d == s ? (dims[d] + 1) / 2 : dims[d]) + index[d];
  }
  return block(static_cast<uint64_t>(block_index))[static_cast<size_t>(word)];
}

// rng-bit-generator (ir/random.h), element by element.
Expected<Tensor> Evaluation::RngBitGenerator(const Instruction& instruction) const {
  Expected<ir::RngAlgorithm> algorithm = ir::RngAlgorithmOf(instruction);
  if (!algorithm.ok()) return algorithm.error();
  const Tensor& state = Operand(instruction, 0);
  Expected<ir::Shape> shape =
      ir::InferRngBitGeneratorShape(state.shape(), instruction.shape(), *algorithm);
  if (!shape.ok()) return OpError(instruction, shape.error().message);
  std::vector<uint64_t> words;
  for (int64_t i = 0; i < state.ElementCount(); ++i) words.push_back(state.GetBits(i));
  const ir::Shape& bits_shape = shape->tuple_element(1);
  const int width = ir::PrimitiveTypeBits(bits_shape.type());
  Expected<random::Draw> draw = random::PlanDraw(*algorithm, words, bits_shape.dims(), width);
  if (!draw.ok()) return OpError(instruction, draw.error().message);
  LOOM_ASSIGN_OR_RETURN(Tensor next, Tensor::Zeros(state.shape()));
  for (size_t i = 0; i < draw->next_state.size(); ++i) {
    next.SetBits(static_cast<int64_t>(i), draw->next_state[i]);
  }
  LOOM_ASSIGN_OR_RETURN(Tensor bits, Tensor::Zeros(bits_shape));
  for (int64_t i = 0; i < bits.ElementCount(); ++i) {
    bits.SetBits(i, DrawnElement(*draw, bits_shape.dims(), i) & scalar::WidthMask(width));
  }
  std::vector<Tensor> outs;
  outs.push_back(std::move(next));
  outs.push_back(std::move(bits));
  return Tensor::Tuple(std::move(outs));
}

// batch-norm-* through exec/batch_norm.h's loops on the generic
// conversions (the CPU kernel runs f32 and f64 natively).
Expected<Tensor> Evaluation::BatchNorm(const Instruction& instruction) const {
  Expected<ir::BatchNorm> attributes = ir::BatchNormOf(instruction);
  if (!attributes.ok()) return attributes.error();
  std::vector<const ir::Shape*> shapes;
  std::vector<const std::byte*> in;
  for (int64_t i = 0; i < instruction.operand_count(); ++i) {
    shapes.push_back(&Operand(instruction, i).shape());
    in.push_back(Operand(instruction, i).bytes().data());
  }
  Expected<ir::Shape> shape = ir::InferBatchNormShape(instruction.opcode(), shapes, *attributes);
  if (!shape.ok()) return OpError(instruction, shape.error().message);
  std::vector<Tensor> outs;
  for (const ir::Shape& each : shape->IsTuple() ? shape->tuple_elements() : std::vector{*shape}) {
    LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(each));
    outs.push_back(std::move(out));
  }
  const float_elements::AnyFloat e{shape->IsTuple() ? shape->tuple_element(0).type()
                                                    : shape->type()};
  const std::vector<int64_t>& dims = shapes[0]->dims();
  auto out = [&](size_t i) { return outs[i].mutable_bytes().data(); };
  switch (instruction.opcode()) {
    case Opcode::kBatchNormTraining:
      batch_norm::Training(e, dims, *attributes, in[0], in[1], in[2], out(0), out(1), out(2));
      return Tensor::Tuple(std::move(outs));
    case Opcode::kBatchNormInference:
      batch_norm::Inference(e, dims, *attributes, in[0], in[1], in[2], in[3], in[4], out(0));
      return std::move(outs[0]);
    default:
      batch_norm::Grad(e, dims, *attributes, in[0], in[1], in[2], in[3], in[4], out(0), out(1),
                       out(2));
      return Tensor::Tuple(std::move(outs));
  }
}

// triangular-solve and cholesky through exec/linear_algebra.h's loops on
// the generic conversions (the CPU kernels run f32 and f64 natively), of
// real floating-point matrices only: complex ones are not executable.
Status CheckRealFloats(const Instruction& instruction, const ir::Shape& shape) {
  if (ir::IsFloatingPoint(shape.type()) && IsExecutableType(shape.type())) return OkStatus();
  return OpError(instruction,
                 fmt::format("{} of {} is not executable", ir::OpcodeName(instruction.opcode()),
                             shape.ToString(false)));
}

Expected<Tensor> Evaluation::TriangularSolve(const Instruction& instruction) const {
  Expected<ir::TriangularSolveOptions> options = ir::TriangularSolveOptionsOf(instruction);
  if (!options.ok()) return options.error();
  const Tensor& a = Operand(instruction, 0);
  const Tensor& b = Operand(instruction, 1);
  Expected<ir::Shape> shape = ir::InferTriangularSolveShape(a.shape(), b.shape(), *options);
  if (!shape.ok()) return OpError(instruction, shape.error().message);
  LOOM_RETURN_IF_ERROR(CheckRealFloats(instruction, *shape));
  LOOM_ASSIGN_OR_RETURN(Tensor x, Tensor::Zeros(*shape));
  linear_algebra::TriangularSolve(float_elements::AnyFloat{shape->type()}, shape->dims(), *options,
                                  a.bytes().data(), b.bytes().data(), x.mutable_bytes().data());
  return x;
}

Expected<Tensor> Evaluation::Cholesky(const Instruction& instruction) const {
  Expected<ir::CholeskyOptions> options = ir::CholeskyOptionsOf(instruction);
  if (!options.ok()) return options.error();
  const Tensor& a = Operand(instruction, 0);
  Expected<ir::Shape> shape = ir::InferCholeskyShape(a.shape());
  if (!shape.ok()) return OpError(instruction, shape.error().message);
  LOOM_RETURN_IF_ERROR(CheckRealFloats(instruction, *shape));
  LOOM_ASSIGN_OR_RETURN(Tensor l, Tensor::Zeros(*shape));
  linear_algebra::Cholesky(float_elements::AnyFloat{shape->type()}, shape->dims(), *options,
                           a.bytes().data(), l.mutable_bytes().data());
  return l;
}

Expected<Tensor> Evaluation::Dot(const Instruction& instruction) const {
  const ir::DotDimensions dims = instruction.attrs().dot.value_or(ir::DotDimensions{});
  Expected<Tensor> out = ReferenceDot(Operand(instruction, 0), Operand(instruction, 1), dims,
                                      instruction.shape(), options_.deterministic);
  if (!out.ok()) return OpError(instruction, out.error().message);
  return out;
}

// Each output element as ir/convolution.h defines it, index by index: its
// taps in row-major order, in each its group's input features in
// increasing order, the products added in double (int64, wrapping, for
// integers) and rounded once.
Expected<Tensor> Evaluation::Convolution(const Instruction& instruction) const {
  Expected<ir::Convolution> parsed = ir::ConvolutionOf(instruction);
  if (!parsed.ok()) return OpError(instruction, parsed.error().message);
  const ir::Convolution& c = *parsed;
  const ir::ConvolutionDimensions& d = c.dims;
  const Tensor& input = Operand(instruction, 0);
  const Tensor& kernel = Operand(instruction, 1);
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(instruction.shape()));
  const std::vector<int64_t>& in_dims = input.shape().dims();
  const std::vector<int64_t>& kernel_dims = kernel.shape().dims();
  if (in_dims.size() != d.input_spatial.size() + 2 || kernel_dims.size() != in_dims.size() ||
      out.shape().rank() != static_cast<int64_t>(in_dims.size())) {
    return OpError(instruction, "convolution operands do not match dim_labels");
  }
  const std::vector<int64_t> in_strides = Strides(in_dims), kernel_strides = Strides(kernel_dims);
  const int64_t group_features = kernel_dims[d.kernel_input_feature];
  const int64_t group_outputs =
      kernel_dims[d.kernel_output_feature] / (c.feature_groups * c.batch_groups);
  const int64_t out_batch = out.shape().dim(d.output_batch);
  std::vector<int64_t> taps;
  for (const ir::WindowDimension& w : c.window) taps.push_back(w.size);
  const bool integer = ir::IsInteger(input.type());
  std::vector<int64_t> at(in_dims.size()), from(kernel_dims.size());
  ForEachIndex(out.shape().dims(), [&](const std::vector<int64_t>& y, int64_t linear) {
    const int64_t feature = y[d.output_feature], group = feature / group_outputs;
    at[d.input_batch] = y[d.output_batch] + (c.batch_groups > 1 ? group * out_batch : 0);
    from[d.kernel_output_feature] = feature;
    double sum = 0;
    uint64_t integer_sum = 0;
    ForEachIndex(taps, [&](const std::vector<int64_t>& tap, int64_t) {
      for (size_t k = 0; k < taps.size(); ++k) {
        const ir::WindowDimension& w = c.window[k];
        at[d.input_spatial[k]] =
            ir::InputPosition(w, in_dims[d.input_spatial[k]], y[d.output_spatial[k]], tap[k]);
        if (at[d.input_spatial[k]] < 0) return;
        from[d.kernel_spatial[k]] = w.reversal ? w.size - 1 - tap[k] : tap[k];
      }
      for (int64_t i = 0; i < group_features; ++i) {
        at[d.input_feature] = (c.feature_groups > 1 ? group * group_features : 0) + i;
        from[d.kernel_input_feature] = i;
        const int64_t a = Linear(at, in_strides), b = Linear(from, kernel_strides);
        if (integer) {
          integer_sum +=
              static_cast<uint64_t>(input.GetInt(a)) * static_cast<uint64_t>(kernel.GetInt(b));
        } else {
          sum += input.GetDouble(a) * kernel.GetDouble(b);
        }
      }
    });
    if (integer) {
      out.SetInt(linear, static_cast<int64_t>(integer_sum));
    } else {
      out.SetDouble(linear, sum);
    }
  });
  return out;
}

Expected<Tensor> Evaluation::GetTupleElement(const Instruction& instruction) const {
  const Tensor& tuple = Operand(instruction, 0);
  const int64_t index = instruction.attrs().tuple_index.value_or(-1);
  if (!tuple.IsTuple() || index < 0 ||
      index >= static_cast<int64_t>(tuple.tuple_elements().size())) {
    return OpError(instruction, fmt::format("tuple index {} out of range", index));
  }
  return tuple.tuple_elements()[index];
}

Expected<Tensor> Evaluation::While(const Instruction& instruction) const {
  const ir::Computation* condition = instruction.called("condition");
  const ir::Computation* body = instruction.called("body");
  if (condition == nullptr || body == nullptr)
    return OpError(instruction, "while needs condition and body");
  Tensor state = Operand(instruction, 0);
  while (true) {
    LOOM_ASSIGN_OR_RETURN(Tensor keep_going, Call(condition, {state}, instruction));
    if (keep_going.IsTuple() || keep_going.ElementCount() != 1) {
      return OpError(instruction, "while condition did not return a scalar pred");
    }
    if (keep_going.GetInt(0) == 0) return state;
    // A loop that never ends must not outlive a run another device aborted.
    if (device_.collectives != nullptr) {
      if (std::optional<Error> aborted = device_.collectives->comm().Aborted()) return *aborted;
    }
    LOOM_ASSIGN_OR_RETURN(state, Call(body, {std::move(state)}, instruction));
  }
}

Expected<Tensor> Evaluation::Conditional(const Instruction& instruction) const {
  const Tensor& selector = Operand(instruction, 0);
  if (selector.IsTuple() || selector.ElementCount() != 1)
    return OpError(instruction, "selector is not a scalar");
  const ir::Computation* branch = nullptr;
  if (selector.type() == PrimitiveType::kPred) {
    branch = instruction.called(selector.GetInt(0) ? "true_computation" : "false_computation");
    if (branch == nullptr) {  // pred form written with branch_computations={true, false}
      const ir::Computation* fallback = instruction.called("branch_computations");
      std::vector<ir::Computation*> all = instruction.called_computations();
      if (fallback && all.size() == 2) branch = all[selector.GetInt(0) ? 0 : 1];
    }
  } else {
    std::vector<ir::Computation*> branches = instruction.called_computations();
    if (branches.empty()) return OpError(instruction, "conditional without branches");
    // XLA runs the last branch for an out-of-range index.
    int64_t index = selector.GetInt(0);
    if (index < 0 || index >= static_cast<int64_t>(branches.size()))
      index = static_cast<int64_t>(branches.size()) - 1;
    branch = branches[index];
  }
  if (branch == nullptr) return OpError(instruction, "conditional branch not found");
  const int64_t branch_operand = instruction.operand_count() == 1 ? -1 : 0;
  int64_t operand_index = 1;
  if (selector.type() == PrimitiveType::kPred) {
    operand_index = selector.GetInt(0) ? 1 : 2;
  } else {
    std::vector<ir::Computation*> branches = instruction.called_computations();
    operand_index = 1 + (std::find(branches.begin(), branches.end(), branch) - branches.begin());
  }
  if (branch_operand < 0 || operand_index >= instruction.operand_count()) {
    return OpError(instruction, "conditional branch has no operand");
  }
  return Call(branch, {Operand(instruction, operand_index)}, instruction);
}

Expected<Tensor> Evaluation::CallOperands(const Instruction& instruction,
                                          std::string_view key) const {
  std::vector<Tensor> arguments;
  for (int64_t i = 0; i < instruction.operand_count(); ++i)
    arguments.push_back(Operand(instruction, i));
  return Call(instruction.called(key), std::move(arguments), instruction);
}

Expected<Tensor> Evaluation::DeviceId(int64_t id) const {
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(ir::Shape(PrimitiveType::kU32, {})));
  out.SetInt(0, id);
  return out;
}

// A single device runs the wrapped computation at once; the start's value
// is XLA's ((operands...), result, context...) tuple, contexts zero.
Expected<Tensor> Evaluation::AsyncStart(const Instruction& instruction) const {
  const ir::Shape& shape = instruction.shape();
  if (!shape.IsTuple() || shape.tuple_size() < 2)
    return OpError(instruction, "async-start shape is not a tuple");
  std::vector<Tensor> operands;
  for (int64_t i = 0; i < instruction.operand_count(); ++i)
    operands.push_back(Operand(instruction, i));
  LOOM_ASSIGN_OR_RETURN(Tensor result, Call(instruction.called("calls"), operands, instruction));
  std::vector<Tensor> elements = {Tensor::Tuple(std::move(operands)), std::move(result)};
  for (int64_t i = 2; i < shape.tuple_size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(Tensor context, Tensor::Zeros(shape.tuple_element(i)));
    elements.push_back(std::move(context));
  }
  return Tensor::Tuple(std::move(elements));
}

Expected<Tensor> Evaluation::AsyncDone(const Instruction& instruction) const {
  const Tensor& start = Operand(instruction, 0);
  if (!start.IsTuple() || start.tuple_elements().size() < 2) {
    return OpError(instruction, "async-done of a value that is not an async-start's");
  }
  return start.tuple_elements()[1];
}

std::vector<Tensor> Evaluation::OperandValues(const Instruction& instruction) const {
  std::vector<Tensor> operands;
  for (int64_t i = 0; i < instruction.operand_count(); ++i) {
    operands.push_back(Operand(instruction, i));
  }
  return operands;
}

Expected<Tensor> Evaluation::Collective(const Instruction& instruction) {
  switch (instruction.opcode()) {
    case Opcode::kAllGatherDone:
    case Opcode::kAllReduceDone:
    case Opcode::kCollectivePermuteDone:
    case Opcode::kAsyncDone:
      return FinishCollective(instruction);
    case Opcode::kAsyncUpdate:
      return Operand(instruction, 0);
    case Opcode::kAsyncStart: {
      const Instruction* wrapped = ir::WrappedCollective(instruction);
      if (wrapped == nullptr) {
        return OpError(instruction,
                       "async-start of a computation that is more than one "
                       "collective");
      }
      return StartCollective(instruction, *wrapped);
    }
    case Opcode::kAllGatherStart:
    case Opcode::kAllReduceStart:
    case Opcode::kCollectivePermuteStart:
      return StartCollective(instruction, instruction);
    default: {
      LOOM_RETURN_IF_ERROR(StartCollective(instruction, instruction).status());
      return FinishCollective(instruction);
    }
  }
}

// Posts the transfers of `collective` (the instruction itself, or the one an
// async-start wraps) and records them under `instruction`. The start's own
// value is the tuple of its operands: the result exists only at -done.
Expected<Tensor> Evaluation::StartCollective(const Instruction& instruction,
                                             const Instruction& collective) {
  std::vector<Tensor> operands = OperandValues(instruction);
  Reducer reducer = [this, &collective](const Tensor& a, const Tensor& b) -> Expected<Tensor> {
    return Combine(collective, a, b);
  };
  Expected<PendingPtr> pending =
      StartCollectiveOp(collective, operands, *device_.collectives, reducer);
  if (!pending.ok()) return OpError(instruction, pending.error().message);
  pending_[&instruction] = std::move(pending).value();
  if (device_.trace) started_us_[&instruction] = device_.trace->NowUs();
  return Tensor::Tuple(std::move(operands));
}

Expected<Tensor> Evaluation::FinishCollective(const Instruction& instruction) {
  const bool is_done = ir::IsAsyncDone(instruction.opcode());
  const Instruction* start = is_done ? ir::StartOf(instruction) : &instruction;
  auto it = pending_.find(start);
  if (it == pending_.end()) {
    return OpError(instruction, "completes no collective started in this computation");
  }
  PendingPtr pending = std::move(it->second);
  pending_.erase(it);
  Expected<Tensor> result = pending->Finish();
  if (!result.ok()) return OpError(instruction, result.error().message);
  if (device_.trace) {
    device_.trace->Add(start->name(), std::string(ir::OpcodeName(start->opcode())),
                       trace::Lane::kTransfers, started_us_[start], device_.trace->NowUs());
    started_us_.erase(start);
  }
  return result;
}

// Collectives show on the communication track; everything else, and the
// time a -done spends waiting, on the compute track.
void Evaluation::RecordCompute(const Instruction& instruction, double start_us) const {
  const Opcode op = instruction.opcode();
  if (op == Opcode::kParameter || op == Opcode::kConstant || op == Opcode::kGetTupleElement ||
      op == Opcode::kTuple) {
    return;  // bookkeeping, not work
  }
  if (IsCollectiveLike(instruction) && !ir::IsAsyncDone(op)) return;
  device_.trace->Add(instruction.name(), std::string(ir::OpcodeName(op)), trace::Lane::kCompute,
                     start_us, device_.trace->NowUs());
}

// Elementwise to_apply(a, b) over two same-shaped tensors, for the
// reductions of collectives: simple reducers directly, others by calling the
// computation once per element.
Expected<Tensor> Evaluation::Combine(const Instruction& collective, const Tensor& a,
                                     const Tensor& b) const {
  const ir::Computation* reducer = collective.called("to_apply");
  if (reducer == nullptr) return OpError(collective, "needs to_apply");
  Tensor out = a;
  if (std::optional<Opcode> simple = ir::CommutativeBinaryReducer(*reducer)) {
    for (int64_t i = 0; i < a.ElementCount(); ++i) {
      if (!BinaryElement(*simple, a, i, b, i, out, i)) {
        return OpError(collective, "reducer does not apply to this element type");
      }
    }
    return out;
  }
  for (int64_t i = 0; i < a.ElementCount(); ++i) {
    LOOM_ASSIGN_OR_RETURN(Tensor x, ScalarFrom(a, i));
    LOOM_ASSIGN_OR_RETURN(Tensor y, ScalarFrom(b, i));
    LOOM_ASSIGN_OR_RETURN(Tensor z, Call(reducer, {std::move(x), std::move(y)}, collective));
    if (z.IsTuple() || z.ElementCount() != 1) return OpError(collective, "reducer is not scalar");
    out.SetBits(i, z.GetBits(0));
  }
  return out;
}

}  // namespace

Expected<Tensor> ReferenceInterpreter::Run(const ir::Computation& computation,
                                           std::span<const Tensor> arguments) const {
  Evaluation evaluation(*this, device_, options_);
  return evaluation.Run(computation, arguments);
}

Expected<Tensor> ReferenceInterpreter::RunEntry(const ir::Module& module,
                                                std::span<const Tensor> arguments) const {
  if (module.entry() == nullptr) return Error{"module has no entry computation", SourceLoc{}};
  return Run(*module.entry(), arguments);
}

}  // namespace loom::exec
