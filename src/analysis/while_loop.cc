#include "analysis/while_loop.h"

#include <charconv>
#include <limits>
#include <string>

#include "ir/computation.h"

namespace loom::analysis {
namespace {

using ir::Instruction;
using ir::Opcode;

// Trip-count arithmetic runs in 128 bits so that `L - I`, `L + 1` and a chain
// of steps cannot overflow before the final range check.
using Wide = __int128;

bool IsIntegerScalar(const ir::Shape& shape) {
  return shape.IsArray() && shape.rank() == 0 && ir::IsInteger(shape.type());
}

// The value of an integer scalar `constant`, or nullopt.
std::optional<int64_t> IntegerConstant(const Instruction* instruction) {
  if (instruction->opcode() != Opcode::kConstant || !IsIntegerScalar(instruction->shape())) {
    return std::nullopt;
  }
  const std::string& text = instruction->literal();
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [parsed_end, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || parsed_end != end) return std::nullopt;
  return value;
}

// True when `instruction` is the integer scalar
// `get-tuple-element(parameter(0), index=index)` of its computation: the
// loop counter as the condition or the body reads it.
bool IsCounter(const Instruction* instruction, int64_t index) {
  if (instruction->opcode() != Opcode::kGetTupleElement || instruction->operand_count() != 1 ||
      instruction->attrs().tuple_index != index || !IsIntegerScalar(instruction->shape())) {
    return false;
  }
  const Instruction* tuple = instruction->operand(0);
  return tuple->opcode() == Opcode::kParameter && tuple->parameter_number() == 0;
}

// The counter's tuple index if `instruction` reads one (see IsCounter).
std::optional<int64_t> CounterIndex(const Instruction* instruction) {
  const std::optional<int64_t>& index = instruction->attrs().tuple_index;
  if (!index || !IsCounter(instruction, *index)) return std::nullopt;
  return index;
}

// What the condition tests: the loop runs while element `index` of the state
// is below `limit` (exclusive).
struct LoopBound {
  int64_t index = 0;
  Wide limit = 0;
};

std::optional<LoopBound> BoundOf(const ir::Computation& condition) {
  const Instruction* compare = condition.root();
  if (compare == nullptr || compare->opcode() != Opcode::kCompare ||
      compare->operand_count() != 2 || !compare->attrs().direction) {
    return std::nullopt;
  }
  const Instruction* lhs = compare->operand(0);
  const Instruction* rhs = compare->operand(1);
  const ir::ComparisonDirection direction = *compare->attrs().direction;
  // `i < L` and `L > i` run while i < L; `i <= L` and `L >= i` while i < L + 1.
  bool counter_on_left = true;
  bool inclusive = false;
  switch (direction) {
    case ir::ComparisonDirection::kLt:
      break;
    case ir::ComparisonDirection::kLe:
      inclusive = true;
      break;
    case ir::ComparisonDirection::kGt:
      counter_on_left = false;
      break;
    case ir::ComparisonDirection::kGe:
      counter_on_left = false;
      inclusive = true;
      break;
    default:
      return std::nullopt;
  }
  const Instruction* counter = counter_on_left ? lhs : rhs;
  const Instruction* bound = counter_on_left ? rhs : lhs;
  std::optional<int64_t> index = CounterIndex(counter);
  std::optional<int64_t> limit = IntegerConstant(bound);
  if (!index || !limit) return std::nullopt;
  return LoopBound{*index, Wide{*limit} + (inclusive ? 1 : 0)};
}

// How much the body adds to counter element `index` per trip: its root tuple
// must hold, at `index`, the counter plus a chain of integer constants.
std::optional<Wide> StepOf(const ir::Computation& body, int64_t index) {
  const Instruction* root = body.root();
  if (root == nullptr || root->opcode() != Opcode::kTuple || index < 0 ||
      index >= root->operand_count()) {
    return std::nullopt;
  }
  Wide step = 0;
  const Instruction* value = root->operand(index);
  while (!IsCounter(value, index)) {
    if (value->opcode() != Opcode::kAdd || value->operand_count() != 2) return std::nullopt;
    if (std::optional<int64_t> rhs = IntegerConstant(value->operand(1))) {
      step += *rhs;
      value = value->operand(0);
    } else if (std::optional<int64_t> lhs = IntegerConstant(value->operand(0))) {
      step += *lhs;
      value = value->operand(1);
    } else {
      return std::nullopt;
    }
  }
  return step;
}

// The counter's initial value: element `index` of the while's operand, which
// must be a `tuple` of which that element is an integer constant.
std::optional<int64_t> InitOf(const Instruction& while_instr, int64_t index) {
  if (while_instr.operand_count() != 1) return std::nullopt;
  const Instruction* init = while_instr.operand(0);
  if (init->opcode() != Opcode::kTuple || index < 0 || index >= init->operand_count()) {
    return std::nullopt;
  }
  return IntegerConstant(init->operand(index));
}

}  // namespace

std::optional<int64_t> KnownTripCount(const ir::Instruction& while_instr) {
  if (while_instr.opcode() != Opcode::kWhile) return std::nullopt;
  const ir::Computation* condition = while_instr.called("condition");
  const ir::Computation* body = while_instr.called("body");
  if (condition == nullptr || body == nullptr) return std::nullopt;

  std::optional<LoopBound> bound = BoundOf(*condition);
  if (!bound) return std::nullopt;
  std::optional<Wide> step = StepOf(*body, bound->index);
  if (!step || *step <= 0) return std::nullopt;
  std::optional<int64_t> init = InitOf(while_instr, bound->index);
  if (!init) return std::nullopt;

  const Wide distance = bound->limit - *init;
  if (distance <= 0) return 0;
  const Wide trips = (distance + *step - 1) / *step;
  if (trips > std::numeric_limits<int64_t>::max()) return std::nullopt;
  return static_cast<int64_t>(trips);
}

}  // namespace loom::analysis
