#include "pass/ring/block_ops.h"

#include <algorithm>
#include <string>

#include "ir/computation.h"
#include "pass/ring/dimension_trace.h"

namespace loom::pass {

using ir::Builder;
using ir::Instruction;
using ir::Opcode;

std::optional<int64_t> ConstantS32(const Instruction* value) {
  if (value->opcode() != Opcode::kConstant || value->shape().type() != ir::PrimitiveType::kS32 ||
      value->shape().rank() != 0) {
    return std::nullopt;
  }
  return std::stoll(value->literal());
}

Expected<Instruction*> AddS32(Builder& builder, Instruction* lhs, Instruction* rhs, bool subtract) {
  const auto a = ConstantS32(lhs);
  const auto b = ConstantS32(rhs);
  if (a && b) return builder.S32(subtract ? *a - *b : *a + *b);
  if (b == 0) return lhs;
  return builder.Binary(subtract ? Opcode::kSubtract : Opcode::kAdd, lhs, rhs);
}

Expected<Instruction*> Block(Builder& builder, Instruction* position, Instruction* step,
                             int64_t n) {
  if (const auto s = ConstantS32(step); s && *s % n == 0) return position;
  LOOM_ASSIGN_OR_RETURN(Instruction * sum, AddS32(builder, position, step));
  return builder.Binary(Opcode::kRemainder, sum, builder.S32(n));
}

Expected<Instruction*> BlockAt(Builder& builder, Instruction* position, int64_t offset,
                               Instruction* step, int64_t n) {
  LOOM_ASSIGN_OR_RETURN(Instruction * shifted, AddS32(builder, step, builder.S32(offset)));
  return Block(builder, position, shifted, n);
}

Expected<Instruction*> Backwards(Builder& builder, Instruction* step, int64_t n) {
  return AddS32(builder, builder.S32(n), step, /*subtract=*/true);
}

Expected<Instruction*> Piece(Builder& builder, Instruction* block, int64_t pieces, int64_t piece) {
  if (pieces == 1) return block;
  if (const auto b = ConstantS32(block)) return builder.S32(*b * pieces + piece);
  LOOM_ASSIGN_OR_RETURN(Instruction * scaled,
                        builder.Binary(Opcode::kMultiply, block, builder.S32(pieces)));
  return AddS32(builder, scaled, builder.S32(piece));
}

Expected<std::vector<Instruction*>> BlockStarts(Builder& builder, int64_t rank, int64_t dim,
                                                Instruction* block, int64_t size) {
  std::vector<Instruction*> starts;
  Instruction* offset = block;
  if (const auto b = ConstantS32(block); b && size != 1) {
    offset = builder.S32(*b * size);
  } else if (size != 1) {
    LOOM_ASSIGN_OR_RETURN(offset, builder.Binary(Opcode::kMultiply, block, builder.S32(size)));
  }
  for (int64_t d = 0; d < rank; ++d) starts.push_back(d == dim ? offset : builder.S32(0));
  return starts;
}

Expected<Instruction*> SliceBlock(Builder& builder, Instruction* value, int64_t dim,
                                  Instruction* block, int64_t blocks) {
  std::vector<int64_t> sizes = value->shape().dims();
  const int64_t size = sizes[static_cast<size_t>(dim)] / blocks;
  sizes[static_cast<size_t>(dim)] = size;
  LOOM_ASSIGN_OR_RETURN(auto starts, BlockStarts(builder, value->shape().rank(), dim, block, size));
  return builder.DynamicSlice(value, starts, std::move(sizes));
}

Expected<Instruction*> UpdateBlock(Builder& builder, Instruction* into, Instruction* block,
                                   int64_t dim, Instruction* index) {
  LOOM_ASSIGN_OR_RETURN(
      auto starts, BlockStarts(builder, into->shape().rank(), dim, index, block->shape().dim(dim)));
  return builder.DynamicUpdateSlice(into, block, starts);
}

Expected<Instruction*> ProductBlock(Builder& builder, const Instruction& dot, Instruction* lhs,
                                    Instruction* rhs, const OutputDim& dim,
                                    const std::vector<Instruction*>& chain,
                                    const std::vector<int64_t>& chain_dims, Instruction* block,
                                    int64_t blocks) {
  if (dim.lhs_dim >= 0) {
    LOOM_ASSIGN_OR_RETURN(lhs, SliceBlock(builder, lhs, dim.lhs_dim, block, blocks));
  }
  if (dim.rhs_dim >= 0) {
    LOOM_ASSIGN_OR_RETURN(rhs, SliceBlock(builder, rhs, dim.rhs_dim, block, blocks));
  }
  LOOM_ASSIGN_OR_RETURN(Instruction * part, PartialDot(builder, dot, lhs, rhs, dot.shape().type()));
  return ReplayChainOnBlock(builder, chain, chain_dims, part, blocks);
}

Expected<Instruction*> PartialDot(Builder& builder, const Instruction& prototype, Instruction* lhs,
                                  Instruction* rhs, ir::PrimitiveType type) {
  LOOM_ASSIGN_OR_RETURN(Instruction * dot, builder.Dot(lhs, rhs, *prototype.attrs().dot, type));
  for (const auto& raw : prototype.attrs().raw) {
    if (raw.key != "sharding") dot->mutable_attrs().raw.push_back(raw);
  }
  return dot;
}

Expected<Instruction*> ReplayKeepingShape(Builder& builder, const std::vector<Instruction*>& chain,
                                          Instruction* value) {
  for (const Instruction* op : chain) {
    value = builder.CloneUnaryWithShape(*op, value,
                                        ir::Shape(op->shape().type(), value->shape().dims()));
  }
  return value;
}

void RemoveDeadChain(ir::Computation& computation, Instruction* last) {
  while (last != nullptr && last->opcode() != Opcode::kParameter &&
         computation.Users(last).empty() && computation.root() != last) {
    Instruction* next = last->operand_count() == 1 ? last->operand(0) : nullptr;
    computation.RemoveInstruction(last);
    last = next;
  }
}

void ReplaceByRewrite(Builder& builder, Instruction* replaced, Instruction* rewritten,
                      Instruction* dead_from) {
  ir::Computation& computation = builder.computation();
  builder.RemoveUnusedConstants();
  computation.ReplaceAllUsesWith(replaced, rewritten);
  computation.RemoveInstruction(replaced);
  RemoveDeadChain(computation, dead_from);
}

bool ChainHasOtherUsers(const Instruction& source, const std::vector<Instruction*>& chain,
                        const Instruction& consumer) {
  const Instruction* previous = &source;
  for (const Instruction* op : chain) {
    if (!UsedOnlyBy(*previous, *op)) return true;
    previous = op;
  }
  return !UsedOnlyBy(*previous, consumer);
}

bool UsedOnlyBy(const Instruction& value, const Instruction& user) {
  const ir::Computation& computation = *value.parent();
  if (computation.root() == &value) return false;
  const auto users = computation.Users(&value);
  return users.size() == 1 && users.front() == &user &&
         std::count(user.operands().begin(), user.operands().end(), &value) == 1;
}

bool HasControlDependencies(const Instruction& instruction) {
  if (!instruction.attrs().control_predecessors.empty()) return true;
  for (const auto& other : instruction.parent()->instructions()) {
    const auto& predecessors = other->attrs().control_predecessors;
    if (std::find(predecessors.begin(), predecessors.end(), &instruction) != predecessors.end()) {
      return true;
    }
  }
  return false;
}

bool IsPlainArray(const ir::Shape& shape) {
  return shape.IsArray() &&
         std::none_of(shape.dynamic().begin(), shape.dynamic().end(), [](bool d) { return d; });
}

}  // namespace loom::pass
