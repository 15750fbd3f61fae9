#include "ir/builder.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "ir/shape_inference.h"

namespace loom::ir {

NameTable::NameTable(const Module& module) {
  for (const auto& computation : module.computations()) {
    for (const auto& instruction : computation->instructions()) {
      names_.insert(instruction->name());
      if (instruction->attrs().channel_id) {
        next_channel_id_ = std::max(next_channel_id_, *instruction->attrs().channel_id + 1);
      }
    }
  }
}

std::string NameTable::Unique(std::string_view base) {
  std::string name(base);
  // Resume counting where the last name from this base stopped, so that
  // naming k values after one base costs O(k), not O(k^2).
  int64_t& suffix = next_suffix_[name];
  while (names_.count(name) != 0) name = fmt::format("{}.{}", base, ++suffix);
  names_.insert(name);
  return name;
}

std::string NameTable::UniqueComputation(std::string_view base, const Module& module) {
  std::string name(base);
  for (int64_t suffix = 1; module.FindComputation(name) != nullptr; ++suffix) {
    name = fmt::format("{}.{}", base, suffix);
  }
  return name;
}

Instruction* Builder::Insert(std::unique_ptr<Instruction> instruction) {
  instruction->set_name(names_.Unique(instruction->name()));
  if (before_ == nullptr) return computation_.AddInstruction(std::move(instruction));
  return computation_.InsertInstructionBefore(std::move(instruction), before_);
}

Instruction* Builder::Make(Opcode opcode, Shape shape, const std::vector<Instruction*>& operands,
                           std::string_view name) {
  auto instruction = std::make_unique<Instruction>(std::string(name), opcode, std::move(shape));
  for (Instruction* operand : operands) instruction->AppendOperand(operand);
  return Insert(std::move(instruction));
}

namespace {

// Names the instruction a factory builds after its first operand's stem
// (the name up to its first '.'), so that a printed ring reads as a family
// of values derived from the original (`x.next`, `x.next.1`, ...) without
// names growing a suffix per step.
std::string DerivedName(const Instruction* operand, std::string_view suffix) {
  std::string_view stem = operand->name();
  stem = stem.substr(0, stem.find('.'));
  return fmt::format("{}.{}", stem, suffix);
}

Error Internal(std::string_view what, const Error& error) {
  return Error{fmt::format("internal error building {}: {}", what, error.message)};
}

}  // namespace

Instruction* Builder::Parameter(int64_t number, Shape shape, std::string_view name) {
  Instruction* parameter = Make(Opcode::kParameter, std::move(shape), {}, name);
  parameter->set_parameter_number(number);
  return parameter;
}

void Builder::RemoveUnusedConstants() {
  for (auto it = s32_constants_.begin(); it != s32_constants_.end();) {
    Instruction* constant = it->second;
    if (computation_.root() != constant && computation_.Users(constant).empty()) {
      computation_.RemoveInstruction(constant);
      it = s32_constants_.erase(it);
    } else {
      ++it;
    }
  }
}

Instruction* Builder::S32(int64_t value) {
  if (auto it = s32_constants_.find(value); it != s32_constants_.end()) return it->second;
  Instruction* constant =
      Make(Opcode::kConstant, Shape(PrimitiveType::kS32, {}), {},
           value < 0 ? fmt::format("c.m{}", -value) : fmt::format("c{}", value));
  constant->set_literal(std::to_string(value));
  s32_constants_[value] = constant;
  return constant;
}

Instruction* Builder::S32Array(const std::vector<int64_t>& values) {
  Instruction* constant =
      Make(Opcode::kConstant, Shape(PrimitiveType::kS32, {static_cast<int64_t>(values.size())}), {},
           "table");
  constant->set_literal(fmt::format("{{{}}}", fmt::join(values, ", ")));
  return constant;
}

Expected<Instruction*> Builder::Zeros(const Shape& shape) {
  Instruction* zero = Make(Opcode::kConstant, Shape(shape.type(), {}), {}, "zero");
  zero->set_literal(shape.type() == PrimitiveType::kPred ? "false" : "0");
  if (shape.rank() == 0) return zero;
  Expected<Shape> broadcast =
      InferBroadcastShape(zero->shape(), Shape(shape.type(), shape.dims()), {});
  if (!broadcast.ok()) return Internal("broadcast", broadcast.error());
  Instruction* zeros = Make(Opcode::kBroadcast, std::move(*broadcast), {zero}, "zeros");
  zeros->mutable_attrs().dimensions = std::vector<int64_t>{};
  return zeros;
}

Instruction* Builder::PartitionId() {
  return Make(Opcode::kPartitionId, Shape(PrimitiveType::kU32, {}), {}, "partition");
}

Instruction* Builder::ReplicaId() {
  return Make(Opcode::kReplicaId, Shape(PrimitiveType::kU32, {}), {}, "replica");
}

Expected<Instruction*> Builder::Unary(Opcode opcode, Instruction* operand) {
  Expected<Shape> shape = InferElementwiseUnaryShape(opcode, operand->shape());
  if (!shape.ok()) return Internal(OpcodeName(opcode), shape.error());
  return Make(opcode, std::move(*shape), {operand}, DerivedName(operand, OpcodeName(opcode)));
}

Expected<Instruction*> Builder::Binary(Opcode opcode, Instruction* lhs, Instruction* rhs) {
  Expected<Shape> shape = InferElementwiseBinaryShape(opcode, lhs->shape(), rhs->shape());
  if (!shape.ok()) return Internal(OpcodeName(opcode), shape.error());
  return Make(opcode, std::move(*shape), {lhs, rhs}, OpcodeName(opcode));
}

Expected<Instruction*> Builder::Compare(Instruction* lhs, Instruction* rhs,
                                        ComparisonDirection direction) {
  Expected<Shape> shape = InferCompareShape(lhs->shape(), rhs->shape());
  if (!shape.ok()) return Internal("compare", shape.error());
  Instruction* compare = Make(Opcode::kCompare, std::move(*shape), {lhs, rhs}, "compare");
  compare->mutable_attrs().direction = direction;
  return compare;
}

Expected<Instruction*> Builder::Convert(Instruction* operand, PrimitiveType type) {
  Expected<Shape> shape = InferConvertShape(operand->shape(), type);
  if (!shape.ok()) return Internal("convert", shape.error());
  return Make(Opcode::kConvert, std::move(*shape), {operand}, DerivedName(operand, "convert"));
}

Expected<Instruction*> Builder::Reshape(Instruction* operand, std::vector<int64_t> dims) {
  Expected<Shape> shape =
      InferReshapeShape(operand->shape(), Shape(operand->shape().type(), std::move(dims)));
  if (!shape.ok()) return Internal("reshape", shape.error());
  return Make(Opcode::kReshape, std::move(*shape), {operand}, DerivedName(operand, "reshape"));
}

Expected<Instruction*> Builder::Transpose(Instruction* operand, std::vector<int64_t> permutation) {
  Expected<Shape> shape = InferTransposeShape(operand->shape(), permutation);
  if (!shape.ok()) return Internal("transpose", shape.error());
  Instruction* transpose =
      Make(Opcode::kTranspose, std::move(*shape), {operand}, DerivedName(operand, "transpose"));
  transpose->mutable_attrs().dimensions = std::move(permutation);
  return transpose;
}

Expected<Instruction*> Builder::Concatenate(const std::vector<Instruction*>& operands,
                                            int64_t dimension) {
  if (operands.empty()) return Error{"concatenate: no operands"};
  if (operands.size() == 1) return operands.front();
  std::vector<const Shape*> shapes;
  for (const Instruction* operand : operands) shapes.push_back(&operand->shape());
  Expected<Shape> shape = InferConcatenateShape(shapes, dimension);
  if (!shape.ok()) return Internal("concatenate", shape.error());
  Instruction* joined = Make(Opcode::kConcatenate, std::move(*shape), operands,
                             DerivedName(operands.front(), "join"));
  joined->mutable_attrs().dimensions = std::vector<int64_t>{dimension};
  return joined;
}

Expected<Instruction*> Builder::DynamicSlice(Instruction* operand,
                                             const std::vector<Instruction*>& starts,
                                             std::vector<int64_t> sizes) {
  std::vector<const Shape*> index_shapes;
  for (const Instruction* start : starts) index_shapes.push_back(&start->shape());
  Expected<Shape> shape = InferDynamicSliceShape(operand->shape(), index_shapes, sizes);
  if (!shape.ok()) return Internal("dynamic-slice", shape.error());
  std::vector<Instruction*> operands = {operand};
  operands.insert(operands.end(), starts.begin(), starts.end());
  Instruction* slice =
      Make(Opcode::kDynamicSlice, std::move(*shape), operands, DerivedName(operand, "block"));
  slice->mutable_attrs().dynamic_slice_sizes = std::move(sizes);
  return slice;
}

Expected<Instruction*> Builder::DynamicUpdateSlice(Instruction* operand, Instruction* update,
                                                   const std::vector<Instruction*>& starts) {
  std::vector<const Shape*> index_shapes;
  for (const Instruction* start : starts) index_shapes.push_back(&start->shape());
  Expected<Shape> shape =
      InferDynamicUpdateSliceShape(operand->shape(), update->shape(), index_shapes);
  if (!shape.ok()) return Internal("dynamic-update-slice", shape.error());
  std::vector<Instruction*> operands = {operand, update};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return Make(Opcode::kDynamicUpdateSlice, std::move(*shape), operands,
              DerivedName(operand, "update"));
}

Expected<Instruction*> Builder::Dot(Instruction* lhs, Instruction* rhs,
                                    const DotDimensions& dimensions, PrimitiveType result_type) {
  Expected<Shape> shape = InferDotShape(lhs->shape(), rhs->shape(), dimensions, result_type);
  if (!shape.ok()) return Internal("dot", shape.error());
  Instruction* dot = Make(Opcode::kDot, std::move(*shape), {lhs, rhs}, "partial");
  dot->mutable_attrs().dot = dimensions;
  return dot;
}

Expected<Instruction*> Builder::CollectivePermute(Instruction* operand,
                                                  std::vector<std::pair<int64_t, int64_t>> pairs,
                                                  std::optional<int64_t> channel_id) {
  Expected<Shape> shape = InferSameAsOperandsShape({&operand->shape()});
  if (!shape.ok()) return Internal("collective-permute", shape.error());
  Instruction* permute =
      Make(Opcode::kCollectivePermute, std::move(*shape), {operand}, DerivedName(operand, "next"));
  permute->mutable_attrs().source_target_pairs = std::move(pairs);
  permute->mutable_attrs().channel_id = channel_id;
  return permute;
}

Instruction* Builder::Tuple(const std::vector<Instruction*>& elements) {
  std::vector<const Shape*> shapes;
  for (const Instruction* element : elements) shapes.push_back(&element->shape());
  return Make(Opcode::kTuple, InferTupleShape(shapes), elements, "tuple");
}

Expected<Instruction*> Builder::GetTupleElement(Instruction* tuple, int64_t index) {
  Expected<Shape> shape = InferGetTupleElementShape(tuple->shape(), index);
  if (!shape.ok()) return Internal("get-tuple-element", shape.error());
  Instruction* element = Make(Opcode::kGetTupleElement, std::move(*shape), {tuple},
                              fmt::format("{}.{}", tuple->name(), index));
  element->mutable_attrs().tuple_index = index;
  return element;
}

Instruction* Builder::While(Instruction* init, Computation* condition, Computation* body) {
  Instruction* loop = Make(Opcode::kWhile, init->shape(), {init}, "ring");
  loop->mutable_attrs().called.push_back(CalledAttribute{"condition", {condition}, false});
  loop->mutable_attrs().called.push_back(CalledAttribute{"body", {body}, false});
  return loop;
}

Instruction* Builder::CloneUnaryWithShape(const Instruction& prototype, Instruction* operand,
                                          Shape shape) {
  Instruction* clone = Make(prototype.opcode(), std::move(shape), {operand},
                            DerivedName(operand, OpcodeName(prototype.opcode())));
  clone->mutable_attrs() = prototype.attrs();
  clone->mutable_attrs().control_predecessors.clear();
  return clone;
}

}  // namespace loom::ir
