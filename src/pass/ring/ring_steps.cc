#include "pass/ring/ring_steps.h"

#include <fmt/format.h>

#include <memory>

namespace loom::pass {

namespace {

// The loop state is (step, position, invariants..., state...).
constexpr int64_t kStepIndex = 0;
constexpr int64_t kPositionIndex = 1;
constexpr int64_t kFirstInvariant = 2;

std::vector<ir::Instruction*> Flatten(ir::Instruction* step, const RingValues& values) {
  std::vector<ir::Instruction*> elements = {step, values.position};
  elements.insert(elements.end(), values.invariants.begin(), values.invariants.end());
  elements.insert(elements.end(), values.state.begin(), values.state.end());
  return elements;
}

// Unpacks a loop-state tuple into the step, position, invariants and state.
Status UnpackInto(ir::Builder& builder, ir::Instruction* tuple, RingValues& values,
                  ir::Instruction** step) {
  LOOM_ASSIGN_OR_RETURN(*step, builder.GetTupleElement(tuple, kStepIndex));
  LOOM_ASSIGN_OR_RETURN(values.position, builder.GetTupleElement(tuple, kPositionIndex));
  int64_t index = kFirstInvariant;
  for (auto& value : values.invariants) {
    LOOM_ASSIGN_OR_RETURN(value, builder.GetTupleElement(tuple, index++));
  }
  for (auto& value : values.state) {
    LOOM_ASSIGN_OR_RETURN(value, builder.GetTupleElement(tuple, index++));
  }
  return Status{};
}

// A computation placed before `user` in the module, so that callees print
// before their callers.
ir::Computation* NewComputationBefore(ir::Module& module, ir::NameTable& names,
                                      std::string_view base, const ir::Computation& user) {
  auto computation = std::make_unique<ir::Computation>(names.UniqueComputation(base, module));
  return module.InsertComputationBefore(std::move(computation), &user);
}

Status EmitCondition(ir::Computation& condition, ir::NameTable& names, const ir::Shape& shape,
                     int64_t end) {
  ir::Builder builder(condition, names);
  ir::Instruction* state = builder.Parameter(0, shape, "state");
  LOOM_ASSIGN_OR_RETURN(ir::Instruction * step, builder.GetTupleElement(state, kStepIndex));
  LOOM_ASSIGN_OR_RETURN(ir::Instruction * more,
                        builder.Compare(step, builder.S32(end), ir::ComparisonDirection::kLt));
  condition.set_root(more);
  return Status{};
}

Status EmitBody(ir::Computation& body, ir::NameTable& names, const ir::Shape& shape,
                const StepFn& step_fn, RingValues values) {
  ir::Builder builder(body, names);
  ir::Instruction* state = builder.Parameter(0, shape, "state");
  ir::Instruction* step = nullptr;
  LOOM_RETURN_IF_ERROR(UnpackInto(builder, state, values, &step));
  LOOM_RETURN_IF_ERROR(step_fn(builder, step, values));
  LOOM_ASSIGN_OR_RETURN(ir::Instruction * next,
                        builder.Binary(ir::Opcode::kAdd, step, builder.S32(1)));
  body.set_root(builder.Tuple(Flatten(next, values)));
  builder.RemoveUnusedConstants();
  return Status{};
}

}  // namespace

Status EmitSteps(ir::Builder& builder, RingForm form, std::string_view loop_name, int64_t first,
                 int64_t count, const StepFn& step, RingValues& values) {
  if (form == RingForm::kUnrolled || count <= 1) {
    for (int64_t s = first; s < first + count; ++s) {
      LOOM_RETURN_IF_ERROR(step(builder, builder.S32(s), values));
    }
    return Status{};
  }
  ir::Computation& outer = builder.computation();
  ir::Module& module = *outer.parent();
  ir::Instruction* init = builder.Tuple(Flatten(builder.S32(first), values));
  ir::Computation* body = NewComputationBefore(
      module, builder.names(), fmt::format("windowed_dot_general_body_{}", loop_name), outer);
  ir::Computation* condition = NewComputationBefore(
      module, builder.names(), fmt::format("windowed_dot_general_cond_{}", loop_name), outer);
  LOOM_RETURN_IF_ERROR(EmitBody(*body, builder.names(), init->shape(), step, values));
  LOOM_RETURN_IF_ERROR(EmitCondition(*condition, builder.names(), init->shape(), first + count));
  ir::Instruction* loop = builder.While(init, condition, body);
  // Only the state comes out of the loop; the position and invariants stay
  // the values from before it.
  int64_t index = kFirstInvariant + static_cast<int64_t>(values.invariants.size());
  for (auto& value : values.state) {
    LOOM_ASSIGN_OR_RETURN(value, builder.GetTupleElement(loop, index++));
  }
  return Status{};
}

}  // namespace loom::pass
