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

}  // namespace loom::ir
