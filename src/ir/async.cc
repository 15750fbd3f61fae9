#include "ir/async.h"

#include "ir/computation.h"

namespace loom::ir {

const Instruction* StartOf(const Instruction& done) {
  const Instruction* start = done.operand_count() > 0 ? done.operand(0) : nullptr;
  while (start && start->opcode() == Opcode::kAsyncUpdate && start->operand_count() > 0) {
    start = start->operand(0);
  }
  return start;
}

const Computation* AsyncCallee(const Instruction& async_start) {
  return async_start.called("calls");
}

const Instruction* WrappedCollective(const Instruction& async_start) {
  const Computation* called = AsyncCallee(async_start);
  if (called == nullptr || called->root() == nullptr) return nullptr;
  const Instruction* root = called->root();
  if (!IsCollective(root->opcode())) return nullptr;
  for (int64_t i = 0; i < root->operand_count(); ++i) {
    const Instruction* operand = root->operand(i);
    if (operand->opcode() != Opcode::kParameter || operand->parameter_number() != i) return nullptr;
  }
  return root;
}

const Instruction* CollectiveOfStart(const Instruction& start) {
  switch (start.opcode()) {
    case Opcode::kAllGatherStart:
    case Opcode::kAllReduceStart:
    case Opcode::kCollectivePermuteStart:
      return &start;
    case Opcode::kAsyncStart:
      return WrappedCollective(start);
    default:
      return nullptr;
  }
}

const Shape& AsyncResultShape(const Instruction& start) {
  const Shape& shape = start.shape();
  if (start.opcode() == Opcode::kAllReduceStart) return shape;
  if (shape.IsTuple() && shape.tuple_size() >= 2) return shape.tuple_element(1);
  return shape;
}

Opcode SynchronousOpcode(Opcode opcode) {
  switch (opcode) {
    case Opcode::kAllGatherStart:
      return Opcode::kAllGather;
    case Opcode::kAllReduceStart:
      return Opcode::kAllReduce;
    case Opcode::kCollectivePermuteStart:
      return Opcode::kCollectivePermute;
    default:
      return opcode;
  }
}

std::optional<Opcode> CollectiveOpcodeOfStart(const Instruction& start) {
  const Instruction* collective = CollectiveOfStart(start);
  if (collective == nullptr) return std::nullopt;
  return SynchronousOpcode(collective->opcode());
}

std::optional<Opcode> CollectiveOpcodeOfDone(const Instruction& done) {
  if (!IsAsyncDone(done.opcode())) return std::nullopt;
  const Instruction* start = StartOf(done);
  if (start == nullptr) return std::nullopt;
  return CollectiveOpcodeOfStart(*start);
}

}  // namespace loom::ir
