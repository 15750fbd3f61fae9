#include "ir/shape_inference.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace loom::ir {
namespace {

Error Fail(std::string message) { return Error{std::move(message), {}}; }

std::string Str(const Shape& shape) { return shape.ToString(/*print_layout=*/false); }

bool InRange(int64_t index, int64_t size) { return index >= 0 && index < size; }
bool IsScalar(const Shape& shape) { return shape.IsArray() && shape.rank() == 0; }

std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t result = 0;
  if (__builtin_mul_overflow(a, b, &result)) return std::nullopt;
  return result;
}

std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t result = 0;
  if (__builtin_add_overflow(a, b, &result)) return std::nullopt;
  return result;
}

Status ExpectArray(const Shape& shape, std::string_view what) {
  if (shape.IsArray()) return OkStatus();
  return Fail(fmt::format("{} must be an array, got {}", what, Str(shape)));
}

// `what DIM is out of range for SHAPE (rank R)` unless 0 <= dim < rank.
Status ExpectDimensionInRange(int64_t dimension, const Shape& shape, std::string_view what) {
  if (InRange(dimension, shape.rank())) return OkStatus();
  return Fail(fmt::format("{} {} is out of range for {} (rank {})", what, dimension, Str(shape),
                          shape.rank()));
}

// Dimension numbers that must be distinct and in range for `shape`; marks
// them in `seen` (sized to the rank).
Status MarkDimensions(const std::vector<int64_t>& dimensions, const Shape& shape,
                      std::string_view what, std::vector<bool>& seen) {
  for (int64_t dimension : dimensions) {
    LOOM_RETURN_IF_ERROR(ExpectDimensionInRange(dimension, shape, what));
    if (seen[static_cast<size_t>(dimension)]) {
      return Fail(fmt::format("{} {} appears more than once", what, dimension));
    }
    seen[static_cast<size_t>(dimension)] = true;
  }
  return OkStatus();
}

PrimitiveType ComplexComponentType(PrimitiveType type) {
  return type == PrimitiveType::kC128 ? PrimitiveType::kF64 : PrimitiveType::kF32;
}

bool IsIntegerOrPred(PrimitiveType type) { return IsInteger(type) || type == PrimitiveType::kPred; }

Status ExpectElementType(bool ok, Opcode opcode, std::string_view kind, const Shape& operand) {
  if (ok) return OkStatus();
  return Fail(fmt::format("{} needs {} operands, got {}", OpcodeName(opcode), kind, Str(operand)));
}

// The index operands of dynamic-slice and dynamic-update-slice: one integer
// scalar per dimension of `operand` (all of one type), or a single integer
// vector of `rank` elements (the form older dumps use).
Status CheckStartIndices(const Shape& operand, const std::vector<const Shape*>& indices) {
  const int64_t rank = operand.rank();
  if (indices.size() == 1 && indices[0]->IsArray() && indices[0]->rank() == 1) {
    const Shape& vector = *indices[0];
    if (!IsInteger(vector.type()) || vector.dim(0) != rank) {
      return Fail(
          fmt::format("the start index vector must be an integer vector of {} elements "
                      "(one per operand dimension), got {}",
                      rank, Str(vector)));
    }
    return OkStatus();
  }
  if (static_cast<int64_t>(indices.size()) != rank) {
    return Fail(fmt::format("{} takes {} start indices (one per dimension), got {}", Str(operand),
                            rank, indices.size()));
  }
  for (size_t i = 0; i < indices.size(); ++i) {
    const Shape& index = *indices[i];
    if (!IsScalar(index) || !IsInteger(index.type())) {
      return Fail(fmt::format("start index {} must be an integer scalar, got {}", i, Str(index)));
    }
    if (index.type() != indices[0]->type()) {
      return Fail(fmt::format("start indices have different types: {} and {}", Str(*indices[0]),
                              Str(index)));
    }
  }
  return OkStatus();
}

}  // namespace

Status ValidateShape(const Shape& shape) {
  // An explicit stack: shapes built by code (not the parser) may nest deeply.
  std::vector<const Shape*> pending = {&shape};
  while (!pending.empty()) {
    const Shape* current = pending.back();
    pending.pop_back();
    if (current->IsTuple()) {
      for (const Shape& element : current->tuple_elements()) pending.push_back(&element);
      continue;
    }
    if (current->dynamic().size() != current->dims().size()) {
      return Fail("a shape's dynamic-dimension flags do not match its rank");
    }
    if (!current->IsArray()) {
      if (current->rank() != 0) {
        return Fail(fmt::format("{} has dimensions", PrimitiveTypeName(current->type())));
      }
      continue;
    }
    int64_t bits = PrimitiveTypeBits(current->type());
    for (int64_t dim : current->dims()) {
      if (dim < 0) return Fail(fmt::format("{} has a negative dimension", Str(*current)));
      std::optional<int64_t> product = CheckedMul(bits, dim);
      if (!product) return Fail(fmt::format("{} holds more than 2^63 bits", Str(*current)));
      bits = *product;
    }
    // minor_to_major, where given, orders every dimension exactly once.
    if (current->layout() && !current->layout()->minor_to_major.empty()) {
      const std::vector<int64_t>& order = current->layout()->minor_to_major;
      std::vector<bool> seen(current->dims().size(), false);
      bool ok = order.size() == seen.size();
      for (size_t i = 0; ok && i < order.size(); ++i) {
        ok = InRange(order[i], current->rank()) && !seen[static_cast<size_t>(order[i])];
        if (ok) seen[static_cast<size_t>(order[i])] = true;
      }
      if (!ok) {
        return Fail(fmt::format("layout {{{}}} of {} is not a permutation of its dimensions",
                                fmt::join(order, ","), Str(*current)));
      }
    }
  }
  return OkStatus();
}

Expected<int64_t> CheckedElementCount(const Shape& shape) {
  LOOM_RETURN_IF_ERROR(ExpectArray(shape, "the shape"));
  int64_t count = 1;
  for (int64_t dim : shape.dims()) {
    std::optional<int64_t> product = CheckedMul(count, dim);
    if (!product || dim < 0) return Fail(fmt::format("{} has too many elements", Str(shape)));
    count = *product;
  }
  return count;
}

// --- elementwise ---------------------------------------------------------------

Expected<Shape> InferElementwiseUnaryShape(Opcode opcode, const Shape& operand) {
  if (opcode == Opcode::kCopy) return operand;  // copy takes tuples too
  LOOM_RETURN_IF_ERROR(ExpectArray(operand, "the operand"));
  const PrimitiveType type = operand.type();
  const bool floating = IsFloatingPoint(type);
  const bool complex = IsComplex(type);
  switch (opcode) {
    case Opcode::kIsFinite:
      LOOM_RETURN_IF_ERROR(ExpectElementType(floating, opcode, "floating-point", operand));
      return Shape(PrimitiveType::kPred, operand.dims());
    case Opcode::kReal:
    case Opcode::kImag:
      LOOM_RETURN_IF_ERROR(
          ExpectElementType(floating || complex, opcode, "floating-point or complex", operand));
      return Shape(complex ? ComplexComponentType(type) : type, operand.dims());
    case Opcode::kAbs:
      LOOM_RETURN_IF_ERROR(
          ExpectElementType(type != PrimitiveType::kPred, opcode, "numeric", operand));
      return Shape(complex ? ComplexComponentType(type) : type, operand.dims());
    case Opcode::kNot:
      LOOM_RETURN_IF_ERROR(
          ExpectElementType(IsIntegerOrPred(type), opcode, "pred or integer", operand));
      break;
    case Opcode::kClz:
    case Opcode::kPopulationCount:
      LOOM_RETURN_IF_ERROR(ExpectElementType(IsInteger(type), opcode, "integer", operand));
      break;
    case Opcode::kCeil:
    case Opcode::kFloor:
    case Opcode::kRoundNearestAfz:
    case Opcode::kRoundNearestEven:
    case Opcode::kReducePrecision:
      LOOM_RETURN_IF_ERROR(ExpectElementType(floating, opcode, "floating-point", operand));
      break;
    case Opcode::kCos:
    case Opcode::kSin:
    case Opcode::kTan:
    case Opcode::kExp:
    case Opcode::kExpm1:
    case Opcode::kLog:
    case Opcode::kLog1p:
    case Opcode::kSqrt:
    case Opcode::kRsqrt:
    case Opcode::kCbrt:
    case Opcode::kTanh:
    case Opcode::kLogistic:
    case Opcode::kErf:
      LOOM_RETURN_IF_ERROR(
          ExpectElementType(floating || complex, opcode, "floating-point or complex", operand));
      break;
    case Opcode::kNegate:
    case Opcode::kSign:
      LOOM_RETURN_IF_ERROR(
          ExpectElementType(type != PrimitiveType::kPred, opcode, "numeric", operand));
      break;
    default:
      break;
  }
  return Shape(type, operand.dims());
}

Expected<Shape> InferElementwiseBinaryShape(Opcode opcode, const Shape& lhs, const Shape& rhs) {
  LOOM_RETURN_IF_ERROR(ExpectArray(lhs, "lhs"));
  LOOM_RETURN_IF_ERROR(ExpectArray(rhs, "rhs"));
  if (lhs.dims() != rhs.dims()) {
    return Fail(fmt::format("operands have different shapes: {} and {}", Str(lhs), Str(rhs)));
  }
  if (lhs.type() != rhs.type()) {
    return Fail(
        fmt::format("operands have different element types: {} and {}", Str(lhs), Str(rhs)));
  }
  const PrimitiveType type = lhs.type();
  switch (opcode) {
    case Opcode::kAnd:
    case Opcode::kOr:
    case Opcode::kXor:
      LOOM_RETURN_IF_ERROR(
          ExpectElementType(IsIntegerOrPred(type), opcode, "pred or integer", lhs));
      break;
    case Opcode::kShiftLeft:
    case Opcode::kShiftRightArithmetic:
    case Opcode::kShiftRightLogical:
      LOOM_RETURN_IF_ERROR(ExpectElementType(IsInteger(type), opcode, "integer", lhs));
      break;
    case Opcode::kAtan2:
      LOOM_RETURN_IF_ERROR(ExpectElementType(IsFloatingPoint(type) || IsComplex(type), opcode,
                                             "floating-point or complex", lhs));
      break;
    case Opcode::kComplex: {
      const bool f32 = type == PrimitiveType::kF32;
      LOOM_RETURN_IF_ERROR(
          ExpectElementType(f32 || type == PrimitiveType::kF64, opcode, "f32 or f64", lhs));
      return Shape(f32 ? PrimitiveType::kC64 : PrimitiveType::kC128, lhs.dims());
    }
    default:
      break;
  }
  return Shape(type, lhs.dims());
}

Expected<Shape> InferCompareShape(const Shape& lhs, const Shape& rhs) {
  LOOM_RETURN_IF_ERROR(ExpectArray(lhs, "lhs"));
  LOOM_RETURN_IF_ERROR(ExpectArray(rhs, "rhs"));
  if (lhs.dims() != rhs.dims() || lhs.type() != rhs.type()) {
    return Fail(
        fmt::format("compares {} with {}: operands must have the same shape", Str(lhs), Str(rhs)));
  }
  return Shape(PrimitiveType::kPred, lhs.dims());
}

Expected<Shape> InferSelectShape(const Shape& pred, const Shape& on_true, const Shape& on_false) {
  LOOM_RETURN_IF_ERROR(ExpectArray(pred, "the predicate"));
  LOOM_RETURN_IF_ERROR(ExpectArray(on_true, "on_true"));
  LOOM_RETURN_IF_ERROR(ExpectArray(on_false, "on_false"));
  if (pred.type() != PrimitiveType::kPred) {
    return Fail(fmt::format("the predicate must have element type pred, got {}", Str(pred)));
  }
  if (!on_true.Compatible(on_false)) {
    return Fail(fmt::format("on_true {} and on_false {} differ", Str(on_true), Str(on_false)));
  }
  if (pred.rank() != 0 && pred.dims() != on_true.dims()) {
    return Fail(fmt::format("the predicate {} must be a scalar or have the dimensions of {}",
                            Str(pred), Str(on_true)));
  }
  return Shape(on_true.type(), on_true.dims());
}

Expected<Shape> InferClampShape(const Shape& min, const Shape& operand, const Shape& max) {
  LOOM_RETURN_IF_ERROR(ExpectArray(min, "min"));
  LOOM_RETURN_IF_ERROR(ExpectArray(operand, "the operand"));
  LOOM_RETURN_IF_ERROR(ExpectArray(max, "max"));
  for (const auto& [bound, name] : {std::pair{&min, "min"}, std::pair{&max, "max"}}) {
    if (bound->type() != operand.type() ||
        (bound->rank() != 0 && bound->dims() != operand.dims())) {
      return Fail(fmt::format("{} {} must be a scalar or shape of the operand {}", name,
                              Str(*bound), Str(operand)));
    }
  }
  return Shape(operand.type(), operand.dims());
}

Expected<Shape> InferMapShape(const std::vector<const Shape*>& operands,
                              PrimitiveType result_type) {
  if (operands.empty()) return Fail("map needs at least one operand");
  for (size_t i = 0; i < operands.size(); ++i) {
    LOOM_RETURN_IF_ERROR(ExpectArray(*operands[i], fmt::format("operand {}", i)));
    if (operands[i]->dims() != operands[0]->dims()) {
      return Fail(fmt::format("operand {} {} has different dimensions from operand 0 {}", i,
                              Str(*operands[i]), Str(*operands[0])));
    }
  }
  if (!IsArrayType(result_type)) return Fail("to_apply must return an array element type");
  return Shape(result_type, operands[0]->dims());
}

// --- shape manipulation --------------------------------------------------------

Expected<Shape> InferBroadcastShape(const Shape& operand, const Shape& output,
                                    const std::vector<int64_t>& dimensions) {
  LOOM_RETURN_IF_ERROR(ExpectArray(operand, "the operand"));
  LOOM_RETURN_IF_ERROR(ExpectArray(output, "the result"));
  if (static_cast<int64_t>(dimensions.size()) != operand.rank()) {
    return Fail(fmt::format("dimensions has {} entries but the operand {} has rank {}",
                            dimensions.size(), Str(operand), operand.rank()));
  }
  std::vector<bool> seen(static_cast<size_t>(output.rank()), false);
  LOOM_RETURN_IF_ERROR(MarkDimensions(dimensions, output, "output dimension", seen));
  for (size_t i = 0; i < dimensions.size(); ++i) {
    const int64_t size = operand.dim(static_cast<int64_t>(i));
    const int64_t output_size = output.dim(dimensions[i]);
    if (size != output_size) {
      return Fail(
          fmt::format("operand dimension {} (size {}) maps to output dimension {} of size {}", i,
                      size, dimensions[i], output_size));
    }
  }
  return Shape(operand.type(), output.dims());
}

Expected<Shape> InferReshapeShape(const Shape& operand, const Shape& output) {
  LOOM_RETURN_IF_ERROR(ExpectArray(operand, "the operand"));
  LOOM_RETURN_IF_ERROR(ExpectArray(output, "the result"));
  LOOM_ASSIGN_OR_RETURN(const int64_t in, CheckedElementCount(operand));
  LOOM_ASSIGN_OR_RETURN(const int64_t out, CheckedElementCount(output));
  if (in != out) {
    return Fail(fmt::format("the operand {} has {} elements but the result {} has {}", Str(operand),
                            in, Str(output), out));
  }
  return Shape(operand.type(), output.dims());
}

Expected<Shape> InferBitcastShape(const Shape& operand, const Shape& output) {
  LOOM_RETURN_IF_ERROR(ExpectArray(operand, "the operand"));
  LOOM_RETURN_IF_ERROR(ExpectArray(output, "the result"));
  LOOM_ASSIGN_OR_RETURN(const int64_t in, CheckedElementCount(operand));
  LOOM_ASSIGN_OR_RETURN(const int64_t out, CheckedElementCount(output));
  const std::optional<int64_t> in_bits = CheckedMul(in, PrimitiveTypeBits(operand.type()));
  const std::optional<int64_t> out_bits = CheckedMul(out, PrimitiveTypeBits(output.type()));
  if (!in_bits || !out_bits) return Fail("the bitcast's size overflows");
  if (*in_bits != *out_bits) {
    return Fail(fmt::format("the operand {} holds {} bits but the result {} holds {}", Str(operand),
                            *in_bits, Str(output), *out_bits));
  }
  return Shape(output.type(), output.dims());
}

Expected<Shape> InferTransposeShape(const Shape& operand, const std::vector<int64_t>& permutation) {
  LOOM_RETURN_IF_ERROR(ExpectArray(operand, "the operand"));
  bool ok = static_cast<int64_t>(permutation.size()) == operand.rank();
  std::vector<bool> seen(permutation.size(), false);
  std::vector<int64_t> dims;
  for (size_t i = 0; ok && i < permutation.size(); ++i) {
    const int64_t source = permutation[i];
    ok = InRange(source, operand.rank()) && !seen[static_cast<size_t>(source)];
    if (ok) {
      seen[static_cast<size_t>(source)] = true;
      dims.push_back(operand.dim(source));
    }
  }
  if (!ok) {
    return Fail(fmt::format("dimensions={{{}}} is not a permutation of the {} dimensions of {}",
                            fmt::join(permutation, ","), operand.rank(), Str(operand)));
  }
  return Shape(operand.type(), std::move(dims));
}

Expected<Shape> InferReverseShape(const Shape& operand, const std::vector<int64_t>& dimensions) {
  LOOM_RETURN_IF_ERROR(ExpectArray(operand, "the operand"));
  std::vector<bool> seen(static_cast<size_t>(operand.rank()), false);
  LOOM_RETURN_IF_ERROR(MarkDimensions(dimensions, operand, "dimension", seen));
  return Shape(operand.type(), operand.dims());
}

Expected<Shape> InferSliceShape(const Shape& operand, const std::vector<SliceDim>& slice) {
  LOOM_RETURN_IF_ERROR(ExpectArray(operand, "the operand"));
  if (static_cast<int64_t>(slice.size()) != operand.rank()) {
    return Fail(fmt::format("slice has {} dimensions but the operand {} has rank {}", slice.size(),
                            Str(operand), operand.rank()));
  }
  std::vector<int64_t> dims;
  for (size_t i = 0; i < slice.size(); ++i) {
    const auto [start, limit, stride] = slice[i];
    const int64_t size = operand.dim(static_cast<int64_t>(i));
    if (start < 0) return Fail(fmt::format("slice dimension {}: start {} is negative", i, start));
    if (start > limit) {
      return Fail(
          fmt::format("slice dimension {}: start {} is greater than limit {}", i, start, limit));
    }
    if (limit > size) {
      return Fail(fmt::format("slice dimension {}: limit {} exceeds the dimension size {} of {}", i,
                              limit, size, Str(operand)));
    }
    if (stride <= 0) {
      return Fail(fmt::format("slice dimension {}: stride {} must be positive", i, stride));
    }
    const int64_t length = limit - start;  // 0 <= length <= size: no overflow
    dims.push_back(length / stride + (length % stride != 0 ? 1 : 0));
  }
  return Shape(operand.type(), std::move(dims));
}

Expected<Shape> InferDynamicSliceShape(const Shape& operand,
                                       const std::vector<const Shape*>& indices,
                                       const std::vector<int64_t>& sizes) {
  LOOM_RETURN_IF_ERROR(ExpectArray(operand, "the operand"));
  LOOM_RETURN_IF_ERROR(CheckStartIndices(operand, indices));
  if (static_cast<int64_t>(sizes.size()) != operand.rank()) {
    return Fail(fmt::format("dynamic_slice_sizes has {} entries but the operand {} has rank {}",
                            sizes.size(), Str(operand), operand.rank()));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t size = operand.dim(static_cast<int64_t>(i));
    if (sizes[i] < 0 || sizes[i] > size) {
      return Fail(fmt::format("slice size {} in dimension {} is outside [0, {}] for {}", sizes[i],
                              i, size, Str(operand)));
    }
  }
  return Shape(operand.type(), sizes);
}

Expected<Shape> InferDynamicUpdateSliceShape(const Shape& operand, const Shape& update,
                                             const std::vector<const Shape*>& indices) {
  LOOM_RETURN_IF_ERROR(ExpectArray(operand, "the operand"));
  LOOM_RETURN_IF_ERROR(ExpectArray(update, "the update"));
  LOOM_RETURN_IF_ERROR(CheckStartIndices(operand, indices));
  if (update.type() != operand.type()) {
    return Fail(fmt::format("the update {} and the operand {} have different element types",
                            Str(update), Str(operand)));
  }
  if (update.rank() != operand.rank()) {
    return Fail(fmt::format("the update {} and the operand {} have different ranks", Str(update),
                            Str(operand)));
  }
  for (int64_t i = 0; i < update.rank(); ++i) {
    if (update.dim(i) > operand.dim(i)) {
      return Fail(fmt::format("the update {} does not fit in the operand {} in dimension {}",
                              Str(update), Str(operand), i));
    }
  }
  return Shape(operand.type(), operand.dims());
}

Expected<Shape> InferConcatenateShape(const std::vector<const Shape*>& operands,
                                      int64_t dimension) {
  if (operands.empty()) return Fail("concatenate needs at least one operand");
  const Shape& first = *operands[0];
  for (size_t i = 0; i < operands.size(); ++i) {
    LOOM_RETURN_IF_ERROR(ExpectArray(*operands[i], fmt::format("operand {}", i)));
  }
  LOOM_RETURN_IF_ERROR(ExpectDimensionInRange(dimension, first, "dimension"));
  std::vector<int64_t> dims = first.dims();
  for (size_t i = 1; i < operands.size(); ++i) {
    const Shape& operand = *operands[i];
    if (operand.type() != first.type() || operand.rank() != first.rank()) {
      return Fail(fmt::format("operand {} {} does not match operand 0 {} in element type and rank",
                              i, Str(operand), Str(first)));
    }
    for (int64_t d = 0; d < first.rank(); ++d) {
      if (d != dimension && operand.dim(d) != first.dim(d)) {
        return Fail(fmt::format("operand {} {} differs from operand 0 {} in dimension {}", i,
                                Str(operand), Str(first), d));
      }
    }
    const std::optional<int64_t> sum =
        CheckedAdd(dims[static_cast<size_t>(dimension)], operand.dim(dimension));
    if (!sum) return Fail("the concatenated dimension overflows");
    dims[static_cast<size_t>(dimension)] = *sum;
  }
  return Shape(first.type(), std::move(dims));
}

Expected<Shape> InferPadShape(const Shape& operand, const Shape& padding_value,
                              const std::vector<PadDim>& padding) {
  LOOM_RETURN_IF_ERROR(ExpectArray(operand, "the operand"));
  if (!IsScalar(padding_value) || padding_value.type() != operand.type()) {
    return Fail(fmt::format("the padding value {} must be a scalar of the operand's type ({})",
                            Str(padding_value), Str(operand)));
  }
  if (static_cast<int64_t>(padding.size()) != operand.rank()) {
    return Fail(fmt::format("padding has {} dimensions but the operand {} has rank {}",
                            padding.size(), Str(operand), operand.rank()));
  }
  std::vector<int64_t> dims;
  for (size_t i = 0; i < padding.size(); ++i) {
    const auto [low, high, interior] = padding[i];
    const int64_t size = operand.dim(static_cast<int64_t>(i));
    if (interior < 0) {
      return Fail(
          fmt::format("padding dimension {}: interior padding {} is negative", i, interior));
    }
    std::optional<int64_t> total = CheckedMul(interior, size > 0 ? size - 1 : 0);
    if (total) total = CheckedAdd(*total, size);
    if (total) total = CheckedAdd(*total, low);
    if (total) total = CheckedAdd(*total, high);
    if (!total) return Fail(fmt::format("padding dimension {}: the padded size overflows", i));
    if (*total < 0) {
      return Fail(fmt::format("padding dimension {}: the padded size {} is negative", i, *total));
    }
    dims.push_back(*total);
  }
  return Shape(operand.type(), std::move(dims));
}

Expected<Shape> InferConvertShape(const Shape& operand, PrimitiveType type) {
  LOOM_RETURN_IF_ERROR(ExpectArray(operand, "the operand"));
  if (!IsArrayType(type)) {
    return Fail(fmt::format("cannot convert to {}", PrimitiveTypeName(type)));
  }
  return Shape(type, operand.dims());
}

Expected<Shape> InferStochasticConvertShape(const Shape& operand, const Shape& random,
                                            PrimitiveType type) {
  LOOM_RETURN_IF_ERROR(ExpectArray(operand, "the operand"));
  LOOM_RETURN_IF_ERROR(ExpectArray(random, "the random bits"));
  if (!IsFloatingPoint(operand.type())) {
    return Fail(fmt::format("stochastic-convert rounds a floating-point operand, got {}",
                            operand.ToString(false)));
  }
  if (!IsUnsignedInteger(random.type()) ||
      PrimitiveTypeBits(random.type()) != PrimitiveTypeBits(operand.type())) {
    return Fail(
        fmt::format("stochastic-convert's random bits must be unsigned integers as wide as "
                    "the operand {}, got {}",
                    operand.ToString(false), random.ToString(false)));
  }
  if (random.dims() != operand.dims()) {
    return Fail(fmt::format("stochastic-convert's random bits {} must have the operand's shape {}",
                            random.ToString(false), operand.ToString(false)));
  }
  if (!IsArrayType(type)) {
    return Fail(fmt::format("cannot convert to {}", PrimitiveTypeName(type)));
  }
  return Shape(type, operand.dims());
}

Expected<Shape> InferBitcastConvertShape(const Shape& operand, PrimitiveType type) {
  LOOM_RETURN_IF_ERROR(ExpectArray(operand, "the operand"));
  if (!IsArrayType(type)) {
    return Fail(fmt::format("cannot bitcast-convert to {}", PrimitiveTypeName(type)));
  }
  const int64_t in_bits = PrimitiveTypeBits(operand.type());
  const int64_t out_bits = PrimitiveTypeBits(type);
  std::vector<int64_t> dims = operand.dims();
  if (in_bits == out_bits) return Shape(type, std::move(dims));
  if (in_bits > out_bits) {
    if (in_bits % out_bits != 0) {
      return Fail(
          fmt::format("cannot bitcast-convert {} to {}", Str(operand), PrimitiveTypeName(type)));
    }
    dims.push_back(in_bits / out_bits);  // the narrower type adds a minor dimension
    return Shape(type, std::move(dims));
  }
  const int64_t ratio = out_bits / in_bits;
  if (out_bits % in_bits != 0 || dims.empty() || dims.back() != ratio) {
    return Fail(
        fmt::format("bitcast-convert of {} to the wider type {} needs a last dimension of "
                    "size {}",
                    Str(operand), PrimitiveTypeName(type), ratio));
  }
  dims.pop_back();
  return Shape(type, std::move(dims));
}

Expected<Shape> InferIotaShape(const Shape& output, int64_t iota_dimension) {
  if (!output.IsArray() || output.rank() == 0) {
    return Fail(fmt::format("iota needs an array shape of rank 1 or more, got {}", Str(output)));
  }
  LOOM_RETURN_IF_ERROR(ExpectDimensionInRange(iota_dimension, output, "iota_dimension"));
  return Shape(output.type(), output.dims());
}

Expected<Shape> InferGetTupleElementShape(const Shape& operand, int64_t index) {
  if (!operand.IsTuple()) {
    return Fail(fmt::format("the operand {} is not a tuple", Str(operand)));
  }
  if (!InRange(index, operand.tuple_size())) {
    return Fail(fmt::format("index {} is out of range for a tuple of {} elements", index,
                            operand.tuple_size()));
  }
  return operand.tuple_element(index);
}

Shape InferTupleShape(const std::vector<const Shape*>& operands) {
  std::vector<Shape> elements;
  elements.reserve(operands.size());
  for (const Shape* operand : operands) elements.push_back(*operand);
  return Shape::Tuple(std::move(elements));
}

Expected<Shape> InferGetDimensionSizeShape(const Shape& operand, int64_t dimension) {
  LOOM_RETURN_IF_ERROR(ExpectArray(operand, "the operand"));
  LOOM_RETURN_IF_ERROR(ExpectDimensionInRange(dimension, operand, "dimension"));
  return Shape(PrimitiveType::kS32, {});
}

// --- reductions and contractions ----------------------------------------------

Expected<Shape> InferReduceShape(const std::vector<const Shape*>& inputs,
                                 const std::vector<PrimitiveType>& accumulator_types,
                                 const std::vector<int64_t>& dimensions) {
  if (inputs.empty()) return Fail("reduce needs at least one input");
  if (accumulator_types.size() != inputs.size()) {
    return Fail(fmt::format("to_apply reduces {} value(s) but reduce has {} input(s)",
                            accumulator_types.size(), inputs.size()));
  }
  const Shape& first = *inputs[0];
  for (size_t i = 0; i < inputs.size(); ++i) {
    LOOM_RETURN_IF_ERROR(ExpectArray(*inputs[i], fmt::format("input {}", i)));
    if (inputs[i]->dims() != first.dims()) {
      return Fail(fmt::format("input {} {} has different dimensions from input 0 {}", i,
                              Str(*inputs[i]), Str(first)));
    }
  }
  std::vector<bool> reduced(static_cast<size_t>(first.rank()), false);
  LOOM_RETURN_IF_ERROR(MarkDimensions(dimensions, first, "reduced dimension", reduced));
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < first.rank(); ++d) {
    if (!reduced[static_cast<size_t>(d)]) kept.push_back(first.dim(d));
  }
  std::vector<Shape> results;
  for (PrimitiveType type : accumulator_types) {
    if (!IsArrayType(type)) return Fail("to_apply must return scalars");
    results.emplace_back(type, kept);
  }
  if (results.size() == 1) return results[0];
  return Shape::Tuple(std::move(results));
}

Expected<Shape> InferDotShape(const Shape& lhs, const Shape& rhs, const DotDimensions& dimensions,
                              PrimitiveType result_type) {
  LOOM_RETURN_IF_ERROR(ExpectArray(lhs, "lhs"));
  LOOM_RETURN_IF_ERROR(ExpectArray(rhs, "rhs"));
  if (!IsArrayType(result_type)) {
    return Fail(
        fmt::format("a dot's result must be an array, not {}", PrimitiveTypeName(result_type)));
  }
  const auto& [lhs_batch, rhs_batch, lhs_contracting, rhs_contracting] = dimensions;
  if (lhs_batch.size() != rhs_batch.size()) {
    return Fail(fmt::format("lhs_batch_dims has {} dimension(s) but rhs_batch_dims has {}",
                            lhs_batch.size(), rhs_batch.size()));
  }
  if (lhs_contracting.size() != rhs_contracting.size()) {
    return Fail(
        fmt::format("lhs_contracting_dims has {} dimension(s) but rhs_contracting_dims has {}",
                    lhs_contracting.size(), rhs_contracting.size()));
  }
  std::vector<bool> lhs_used(static_cast<size_t>(lhs.rank()), false);
  std::vector<bool> rhs_used(static_cast<size_t>(rhs.rank()), false);
  LOOM_RETURN_IF_ERROR(MarkDimensions(lhs_batch, lhs, "lhs dimension", lhs_used));
  LOOM_RETURN_IF_ERROR(MarkDimensions(lhs_contracting, lhs, "lhs dimension", lhs_used));
  LOOM_RETURN_IF_ERROR(MarkDimensions(rhs_batch, rhs, "rhs dimension", rhs_used));
  LOOM_RETURN_IF_ERROR(MarkDimensions(rhs_contracting, rhs, "rhs dimension", rhs_used));
  for (size_t i = 0; i < lhs_batch.size(); ++i) {
    if (lhs.dim(lhs_batch[i]) != rhs.dim(rhs_batch[i])) {
      return Fail(
          fmt::format("batch dimension sizes differ: lhs dimension {} is {}, rhs dimension "
                      "{} is {}",
                      lhs_batch[i], lhs.dim(lhs_batch[i]), rhs_batch[i], rhs.dim(rhs_batch[i])));
    }
  }
  for (size_t i = 0; i < lhs_contracting.size(); ++i) {
    if (lhs.dim(lhs_contracting[i]) != rhs.dim(rhs_contracting[i])) {
      return Fail(
          fmt::format("contracting dimension sizes differ: lhs dimension {} is {}, rhs "
                      "dimension {} is {}",
                      lhs_contracting[i], lhs.dim(lhs_contracting[i]), rhs_contracting[i],
                      rhs.dim(rhs_contracting[i])));
    }
  }
  std::vector<int64_t> dims;
  for (int64_t d : lhs_batch) dims.push_back(lhs.dim(d));
  for (int64_t d = 0; d < lhs.rank(); ++d) {
    if (!lhs_used[static_cast<size_t>(d)]) dims.push_back(lhs.dim(d));
  }
  for (int64_t d = 0; d < rhs.rank(); ++d) {
    if (!rhs_used[static_cast<size_t>(d)]) dims.push_back(rhs.dim(d));
  }
  return Shape(result_type, std::move(dims));
}

// --- collectives ---------------------------------------------------------------

namespace {

std::string OperandLabel(size_t i, size_t count) {
  return count == 1 ? "the operand" : fmt::format("operand {}", i);
}

Shape SingleOrTuple(std::vector<Shape> shapes) {
  if (shapes.size() == 1) return std::move(shapes[0]);
  return Shape::Tuple(std::move(shapes));
}

}  // namespace

Expected<Shape> InferAllGatherShape(const std::vector<const Shape*>& operands, int64_t dimension,
                                    int64_t shard_count) {
  if (operands.empty()) return Fail("all-gather needs at least one operand");
  if (shard_count <= 0) return Fail(fmt::format("invalid shard count {}", shard_count));
  std::vector<Shape> results;
  for (size_t i = 0; i < operands.size(); ++i) {
    const Shape& operand = *operands[i];
    const std::string label = OperandLabel(i, operands.size());
    LOOM_RETURN_IF_ERROR(ExpectArray(operand, label));
    LOOM_RETURN_IF_ERROR(ExpectDimensionInRange(dimension, operand, "dimension"));
    std::vector<int64_t> dims = operand.dims();
    const std::optional<int64_t> gathered =
        CheckedMul(dims[static_cast<size_t>(dimension)], shard_count);
    if (!gathered) return Fail("the gathered dimension overflows");
    dims[static_cast<size_t>(dimension)] = *gathered;
    results.emplace_back(operand.type(), std::move(dims));
  }
  return SingleOrTuple(std::move(results));
}

Expected<Shape> InferReduceScatterShape(const std::vector<const Shape*>& operands,
                                        int64_t dimension, int64_t shard_count) {
  if (operands.empty()) return Fail("reduce-scatter needs at least one operand");
  if (shard_count <= 0) return Fail(fmt::format("invalid shard count {}", shard_count));
  std::vector<Shape> results;
  for (size_t i = 0; i < operands.size(); ++i) {
    const Shape& operand = *operands[i];
    const std::string label = OperandLabel(i, operands.size());
    LOOM_RETURN_IF_ERROR(ExpectArray(operand, label));
    LOOM_RETURN_IF_ERROR(ExpectDimensionInRange(dimension, operand, "dimension"));
    std::vector<int64_t> dims = operand.dims();
    const int64_t size = dims[static_cast<size_t>(dimension)];
    if (size % shard_count != 0) {
      return Fail(
          fmt::format("dimension {} of {} (size {}) is not divisible by the {} devices of "
                      "a replica group",
                      dimension, label, size, shard_count));
    }
    dims[static_cast<size_t>(dimension)] = size / shard_count;
    results.emplace_back(operand.type(), std::move(dims));
  }
  return SingleOrTuple(std::move(results));
}

Expected<Shape> InferSameAsOperandsShape(const std::vector<const Shape*>& operands) {
  if (operands.empty()) return Fail("needs at least one operand");
  std::vector<Shape> results;
  for (const Shape* operand : operands) results.push_back(*operand);
  return SingleOrTuple(std::move(results));
}

Expected<Shape> InferAllToAllShape(const Shape& operand, int64_t dimension, int64_t split_count) {
  LOOM_RETURN_IF_ERROR(ExpectArray(operand, "the operand"));
  LOOM_RETURN_IF_ERROR(ExpectDimensionInRange(dimension, operand, "dimension"));
  if (split_count <= 0) return Fail(fmt::format("invalid split count {}", split_count));
  const int64_t size = operand.dim(dimension);
  if (size % split_count != 0) {
    return Fail(
        fmt::format("dimension {} of the operand {} (size {}) is not divisible by the {} "
                    "devices of a replica group",
                    dimension, Str(operand), size, split_count));
  }
  return Shape(operand.type(), operand.dims());
}

}  // namespace loom::ir
