// Asynchronous ops, in one place: which start a done completes, what an
// async-start wraps, and the shape of an asynchronous collective's result.
//
//   %s = (f32[8], f32[32]) all-gather-start(%x), ...      // (operand, result)
//   %d = f32[32] all-gather-done(%s)
//   %s = f32[8] all-reduce-start(%x), ...                 // the result's shape
//   %s = (f32[8], f32[8], u32[], u32[]) collective-permute-start(%x), ...
//   %s = ((f32[8]), f32[32], u32[]) async-start(%x), calls=%wrapped
//   %u = ((f32[8]), f32[32], u32[]) async-update(%s)
//   %d = f32[32] async-done(%u)
#pragma once

#include <optional>

#include "ir/instruction.h"

namespace loom::ir {

// The start instruction a -done or async-done completes, through any
// async-update in between; null when there is none.
const Instruction* StartOf(const Instruction& done);

// The computation an async-start runs (its `calls=`), or null.
const Computation* AsyncCallee(const Instruction& async_start);

// The collective an async-start wraps: the root of its callee, when that is
// a collective applied to the callee's parameters in order; else null.
const Instruction* WrappedCollective(const Instruction& async_start);

// The collective a start (all-gather-start, all-reduce-start,
// collective-permute-start, or an async-start that wraps one) runs: the
// start itself, or the wrapped one; null for anything else.
const Instruction* CollectiveOfStart(const Instruction& start);

// The collective a -start begins (all-gather-start: all-gather, ...); any
// other opcode unchanged.
Opcode SynchronousOpcode(Opcode opcode);

// The collective an asynchronous start runs (an all-gather-start, or an
// async-start wrapping an all-to-all, ...) as its synchronous opcode, or
// the one a done completing such a start runs; nullopt for anything else.
std::optional<Opcode> CollectiveOpcodeOfStart(const Instruction& start);
std::optional<Opcode> CollectiveOpcodeOfDone(const Instruction& done);

// The shape of what a start's done yields: element 1 of the start's tuple
// (all-gather-start, collective-permute-start, async-start), or the start's
// own shape (all-reduce-start).
const Shape& AsyncResultShape(const Instruction& start);

}  // namespace loom::ir
