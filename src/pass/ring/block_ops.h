// The index arithmetic and block operations every decomposition emits: a
// device's block (position + step) mod N as an s32[] (folded to a constant
// when the step is one), the slice of one block along a dimension, the
// dynamic-update-slice that puts a block back, a dot like the original on
// new operands, and the check-and-clean-up helpers the matchers share.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ir/builder.h"
#include "ir/instruction.h"
#include "pass/ring/dot_geometry.h"
#include "support/status.h"

namespace loom::pass {

// The value of an s32[] constant (unrolled steps are constants, so their
// index arithmetic folds away and the printed ring stays readable).
std::optional<int64_t> ConstantS32(const ir::Instruction* value);

// lhs + rhs (or lhs - rhs), folded when both are constants.
Expected<ir::Instruction*> AddS32(ir::Builder& builder, ir::Instruction* lhs, ir::Instruction* rhs,
                                  bool subtract = false);

// (position + step) mod n, for a non-negative step and n > 0.
Expected<ir::Instruction*> Block(ir::Builder& builder, ir::Instruction* position,
                                 ir::Instruction* step, int64_t n);
// (position + offset + step) mod n.
Expected<ir::Instruction*> BlockAt(ir::Builder& builder, ir::Instruction* position, int64_t offset,
                                   ir::Instruction* step, int64_t n);
// n - step, for a step counting down the other way round the ring.
Expected<ir::Instruction*> Backwards(ir::Builder& builder, ir::Instruction* step, int64_t n);

// Piece `piece` of `pieces` of block `block`, as an index among the
// block-count * pieces finer blocks: block * pieces + piece (folded when
// the block is a constant).
Expected<ir::Instruction*> Piece(ir::Builder& builder, ir::Instruction* block, int64_t pieces,
                                 int64_t piece);

// Start indices selecting block `block` (of size `size`) along `dim`.
Expected<std::vector<ir::Instruction*>> BlockStarts(ir::Builder& builder, int64_t rank, int64_t dim,
                                                    ir::Instruction* block, int64_t size);
// Block `block` of `blocks` along `dim` of `value`.
Expected<ir::Instruction*> SliceBlock(ir::Builder& builder, ir::Instruction* value, int64_t dim,
                                      ir::Instruction* block, int64_t blocks);
// `into` with `block` written at block index `index` along `dim`.
Expected<ir::Instruction*> UpdateBlock(ir::Builder& builder, ir::Instruction* into,
                                       ir::Instruction* block, int64_t dim, ir::Instruction* index);

// A dot like `prototype` (dimensions, precision, ...) on new operands.
Expected<ir::Instruction*> PartialDot(ir::Builder& builder, const ir::Instruction& prototype,
                                      ir::Instruction* lhs, ir::Instruction* rhs,
                                      ir::PrimitiveType type);

// Block `block` of `blocks` along output dimension `dim` of `dot`'s product,
// computed from the operand slices that make it (lhs and rhs stand for the
// dot's operands), then `chain` replayed on it (`chain_dims`: the
// dimension in each chain result, as dimension_trace.h's TraceChain).
Expected<ir::Instruction*> ProductBlock(ir::Builder& builder, const ir::Instruction& dot,
                                        ir::Instruction* lhs, ir::Instruction* rhs,
                                        const OutputDim& dim,
                                        const std::vector<ir::Instruction*>& chain,
                                        const std::vector<int64_t>& chain_dims,
                                        ir::Instruction* block, int64_t blocks);

// Ops that keep every dimension where it is (convert, copy; see
// KeepsDimensions in chunked_reduction.h) replayed in turn on `value`,
// whatever its shape.
Expected<ir::Instruction*> ReplayKeepingShape(ir::Builder& builder,
                                              const std::vector<ir::Instruction*>& chain,
                                              ir::Instruction* value);

// Removes what a rewrite left without users, from `last` back along its
// operand chain, stopping at the first value still in use.
void RemoveDeadChain(ir::Computation& computation, ir::Instruction* last);

// Replaces `replaced` by `rewritten` (the builder's last value), then drops
// what is left unused: the builder's spare constants, `replaced`, and the
// chain of values from `dead_from` up its operands.
void ReplaceByRewrite(ir::Builder& builder, ir::Instruction* replaced, ir::Instruction* rewritten,
                      ir::Instruction* dead_from);

// `value` has `user` as its one user, once, and is not the root.
bool UsedOnlyBy(const ir::Instruction& value, const ir::Instruction& user);
// Some value of `source`, then `chain` (each op the user of the one before)
// has a user besides the next one, the last's being `consumer`.
bool ChainHasOtherUsers(const ir::Instruction& source, const std::vector<ir::Instruction*>& chain,
                        const ir::Instruction& consumer);
bool HasControlDependencies(const ir::Instruction& instruction);
// An array without dynamic dimensions.
bool IsPlainArray(const ir::Shape& shape);

}  // namespace loom::pass
