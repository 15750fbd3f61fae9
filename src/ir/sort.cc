#include "ir/sort.h"

#include <fmt/format.h>

namespace loom::ir {

std::optional<SortKey> SimpleSortComparator(const Computation& comparator) {
  const Instruction* root = comparator.root();
  if (root == nullptr || root->opcode() != Opcode::kCompare || root->operand_count() != 2 ||
      !root->attrs().direction) {
    return std::nullopt;
  }
  // Nothing but the parameters and the compare.
  if (comparator.instruction_count() != static_cast<int64_t>(comparator.parameters().size()) + 1) {
    return std::nullopt;
  }
  const Instruction* a = root->operand(0);
  const Instruction* b = root->operand(1);
  if (a->opcode() != Opcode::kParameter || b->opcode() != Opcode::kParameter ||
      !a->parameter_number() || !b->parameter_number()) {
    return std::nullopt;
  }
  const int64_t first = *a->parameter_number(), second = *b->parameter_number();
  if (first / 2 != second / 2 || first == second) return std::nullopt;
  SortKey key;
  key.operand = first / 2;
  key.direction =
      first % 2 == 0 ? *root->attrs().direction : SwappedDirection(*root->attrs().direction);
  const RawAttribute* type = root->attrs().FindRaw("type");
  key.total_order = type != nullptr && type->value == "TOTALORDER";
  return key;
}

SortSlices SlicesAlong(const std::vector<int64_t>& dims, int64_t dimension) {
  SortSlices slices;
  int64_t elements = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    elements *= dims[d];
    if (static_cast<int64_t>(d) > dimension) slices.stride *= dims[d];
  }
  slices.length = dims[static_cast<size_t>(dimension)];
  slices.count = slices.length == 0 ? 0 : elements / slices.length;
  return slices;
}

Expected<TopK> TopKOf(const Instruction& topk) {
  TopK result;
  const RawAttribute* k = topk.attrs().FindRaw("k");
  const std::optional<int64_t> parsed = k == nullptr ? std::nullopt : ParseInteger(k->value);
  if (!parsed || *parsed < 0) {
    return Error{fmt::format("%{}: topk needs k=N, N >= 0", topk.name()),
                 k == nullptr ? topk.loc() : k->loc};
  }
  result.k = *parsed;
  if (const RawAttribute* largest = topk.attrs().FindRaw("largest")) {
    if (largest->value != "true" && largest->value != "false") {
      return Error{
          fmt::format("%{}: largest={} is neither true nor false", topk.name(), largest->value),
          largest->loc};
    }
    result.largest = largest->value == "true";
  }
  return result;
}

SortKey TopKSortKey(const TopK& topk) {
  return SortKey{0, topk.largest ? ComparisonDirection::kGt : ComparisonDirection::kLt, true};
}

Expected<Shape> InferTopKShape(const Shape& operand, int64_t k) {
  if (!operand.IsArray() || operand.rank() == 0 || k > operand.dims().back()) {
    return Error{
        fmt::format("topk takes an array of rank 1 or more whose last dimension holds "
                    "k={}, got {}",
                    k, operand.ToString(false))};
  }
  std::vector<int64_t> dims = operand.dims();
  dims.back() = k;
  return Shape::Tuple({Shape(operand.type(), dims), Shape(PrimitiveType::kS32, dims)});
}

bool IsTopKCustomCall(const Instruction& instruction) {
  return instruction.opcode() == Opcode::kCustomCall &&
         instruction.attrs().custom_call_target.value_or("") == "TopK";
}

Expected<CustomTopK> CustomTopKOf(const Instruction& topk) {
  const auto error = [&](const std::string& what) {
    return Error{fmt::format("%{}: custom-call TopK {}", topk.name(), what), topk.loc()};
  };
  const Shape& declared = topk.shape();
  if (topk.operand_count() != 1 || !declared.IsTuple() || declared.tuple_size() != 2 ||
      !declared.tuple_element(0).IsArray() || declared.tuple_element(0).rank() == 0) {
    return error("takes one array and returns (values, s32 positions)");
  }
  CustomTopK result;
  result.k = declared.tuple_element(0).dims().back();
  const Shape& operand = topk.operand(0)->shape();
  Expected<Shape> inferred = InferTopKShape(operand, result.k);
  if (!inferred.ok()) {
    return Error{fmt::format("%{}: custom-call TopK is a topk, and {}", topk.name(),
                             inferred.error().message),
                 topk.loc()};
  }
  if (!declared.Compatible(*inferred)) {
    return error(fmt::format("of {} returns {}, not {}", operand.ToString(false),
                             inferred->ToString(false), declared.ToString(false)));
  }
  result.comparator = topk.called("to_apply");
  if (result.comparator == nullptr) return result;
  const std::vector<Instruction*>& parameters = result.comparator->parameters();
  const Shape value(operand.type(), {}), position(PrimitiveType::kS32, {});
  bool fits = parameters.size() == 2 || parameters.size() == 4;
  for (size_t i = 0; fits && i < parameters.size(); ++i) {
    fits = parameters[i]->shape().Compatible(i < 2 ? value : position);
  }
  const Instruction* root = result.comparator->root();
  if (!fits || root == nullptr || !root->shape().Compatible(Shape(PrimitiveType::kPred, {}))) {
    return error(fmt::format("needs a comparator of two {0} (and two s32) to pred[], got %{1}",
                             value.ToString(false), result.comparator->name()));
  }
  return result;
}

std::optional<SortKey> CustomTopKSortKey(const Instruction& topk, const CustomTopK& custom) {
  if (custom.comparator == nullptr) return SortKey{0, ComparisonDirection::kGt, true};
  std::optional<SortKey> key = SimpleSortComparator(*custom.comparator);
  if (!key || key->operand != 0) return std::nullopt;
  if (key->direction != ComparisonDirection::kGt && key->direction != ComparisonDirection::kLt) {
    return std::nullopt;
  }
  // Without TOTALORDER a float compare is no strict order over NaNs: the
  // stable sort's answer is its own.
  if (!key->total_order && IsFloatingPoint(topk.operand(0)->shape().type())) return std::nullopt;
  key->total_order = true;  // the same order for integers
  return key;
}

}  // namespace loom::ir
