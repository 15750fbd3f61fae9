#include "ir/batch_norm.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <string>

namespace loom::ir {
namespace {

const char* OperandNames(Opcode op) {
  switch (op) {
    case Opcode::kBatchNormTraining:
      return "an operand, a scale and an offset";
    case Opcode::kBatchNormInference:
      return "an operand, a scale, an offset, a mean and a variance";
    default:
      return "an operand, a scale, a mean, a variance and a grad_output";
  }
}

size_t OperandCount(Opcode op) { return op == Opcode::kBatchNormTraining ? 3 : 5; }

// The attribute `key`'s text, or an error at the instruction.
Expected<const RawAttribute*> Required(const Instruction& batch_norm, std::string_view key) {
  const RawAttribute* raw = batch_norm.attrs().FindRaw(key);
  if (raw == nullptr) {
    return Error{
        fmt::format("%{}: {} needs {}=", batch_norm.name(), OpcodeName(batch_norm.opcode()), key),
        batch_norm.loc()};
  }
  return raw;
}

}  // namespace

Expected<BatchNorm> BatchNormOf(const Instruction& batch_norm) {
  BatchNorm result;
  LOOM_ASSIGN_OR_RETURN(const RawAttribute* feature, Required(batch_norm, "feature_index"));
  const std::optional<int64_t> index = ParseInteger(feature->value);
  // An operand that is no array is the shape check's to report.
  const Shape* operand = batch_norm.operand_count() > 0 ? &batch_norm.operand(0)->shape() : nullptr;
  const bool is_array = operand != nullptr && operand->IsArray();
  const int64_t rank = is_array ? operand->rank() : 0;
  if (!index || *index < 0 || (is_array && *index >= rank)) {
    return Error{fmt::format("%{}: feature_index={} is not a dimension of the rank-{} operand",
                             batch_norm.name(), feature->value, rank),
                 feature->loc};
  }
  result.feature_index = *index;
  LOOM_ASSIGN_OR_RETURN(const RawAttribute* epsilon, Required(batch_norm, "epsilon"));
  const std::string& text = epsilon->value;
  float value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || !std::isfinite(value)) {
    return Error{fmt::format("%{}: epsilon={} is not a finite float", batch_norm.name(), text),
                 epsilon->loc};
  }
  result.epsilon = value;
  return result;
}

Expected<Shape> InferBatchNormShape(Opcode op, const std::vector<const Shape*>& operands,
                                    const BatchNorm& attributes) {
  if (operands.size() != OperandCount(op)) {
    return Error{fmt::format("{} takes {}, got {} operands", OpcodeName(op), OperandNames(op),
                             operands.size())};
  }
  const Shape& operand = *operands[0];
  if (!operand.IsArray() || !IsFloatingPoint(operand.type()) ||
      attributes.feature_index >= operand.rank()) {
    return Error{fmt::format("{} normalizes a floating-point array with feature_index={}, got {}",
                             OpcodeName(op), attributes.feature_index, operand.ToString(false))};
  }
  const Shape feature(operand.type(), {operand.dim(attributes.feature_index)});
  for (size_t i = 1; i < operands.size(); ++i) {
    const bool is_grad_output = op == Opcode::kBatchNormGrad && i == 4;
    const Shape& expected = is_grad_output ? operand : feature;
    if (!operands[i]->Compatible(expected)) {
      return Error{fmt::format("{}'s operand {} must be {}, got {}", OpcodeName(op), i,
                               expected.ToString(false), operands[i]->ToString(false))};
    }
  }
  if (op == Opcode::kBatchNormInference) return operand;
  return Shape::Tuple({operand, feature, feature});
}

}  // namespace loom::ir
