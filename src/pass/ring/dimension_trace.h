// Following one dimension of a value through the shape-changing ops that may
// sit between a collective and its dot (reshape, bitcast, convert, copy,
// transpose), so that the ring can replay those ops on each shard.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ir/builder.h"
#include "ir/instruction.h"
#include "support/status.h"

namespace loom::pass {

// The product of the dimensions before `dim`: how many row-major slabs a
// cut along `dim` falls into (1: blocks along `dim` are contiguous).
int64_t ElementsBefore(const std::vector<int64_t>& dims, int64_t dim);

// Ops the rewrite can see through: one operand, and each element of the
// result comes from one element of the operand.
bool IsTraceableOp(const ir::Instruction& op);

// The result dimension that carries operand dimension `dim` of `op` cut into
// `blocks` contiguous blocks: block b of the operand along `dim` must be
// exactly block b of the result along that dimension. nullopt when no result
// dimension does (a reshape that merges a more major dimension into it, a
// bitcast with a non-default layout, ...).
std::optional<int64_t> TraceDimension(const ir::Instruction& op, int64_t dim, int64_t blocks);

// The traceable ops directly above `value` (`value` itself first if it is
// one), in data-flow order, and the value they start from.
struct ChainAbove {
  ir::Instruction* source = nullptr;
  std::vector<ir::Instruction*> chain;  // source's user first
};
ChainAbove TraceableChainAbove(ir::Instruction* value);

// Dimension `dim` of the chain's input traced through each op of `chain`
// (TraceDimension, cut into `blocks`): the dimension in each op's result,
// or the first op it cannot be traced through.
struct ChainTrace {
  std::vector<int64_t> dims;
  const ir::Instruction* stuck = nullptr;
};
ChainTrace TraceChain(const std::vector<ir::Instruction*>& chain, int64_t dim, int64_t blocks);

// `op` applied to one block of its operand: the result is op's shape with
// dimension `result_dim` divided by `blocks`.
Expected<ir::Instruction*> ReplayOnBlock(ir::Builder& builder, const ir::Instruction& op,
                                         ir::Instruction* block, int64_t result_dim,
                                         int64_t blocks);

// Every op of `chain` replayed in turn on `block`, `dims` its TraceChain.
Expected<ir::Instruction*> ReplayChainOnBlock(ir::Builder& builder,
                                              const std::vector<ir::Instruction*>& chain,
                                              const std::vector<int64_t>& dims,
                                              ir::Instruction* block, int64_t blocks);

}  // namespace loom::pass
