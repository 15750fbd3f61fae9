// Trip counts of while loops that XLA writes as counted loops.
#pragma once

#include <cstdint>
#include <optional>

#include "ir/instruction.h"

namespace loom::analysis {

// The number of times the body of `while_instr` runs, when the loop has XLA's
// canonical counted form:
//
//   init  = tuple(..., s32[] constant(I), ...)            element k
//   cond  : ROOT compare(get-tuple-element(param, index=k), constant(L)), direction=LT
//   body  : ROOT tuple(..., add(get-tuple-element(param, index=k), constant(S)), ...)
//
// with S > 0. The trip count is max(0, ceil((L - I) / S)). The condition may
// also be `i <= L` (LE), or either comparison with its operands swapped
// (`L > i`, `L >= i`); the step may be a chain of adds of constants
// (`add(add(i, 1), 1)` steps by 2) with the constant on either side.
//
// Returns nullopt for anything else: `while_instr` not a while, a bound or
// init that is not an integer scalar constant, a step that is not a positive
// constant, a condition that depends on anything but the counter, or a trip
// count that does not fit in int64_t.
std::optional<int64_t> KnownTripCount(const ir::Instruction& while_instr);

}  // namespace loom::analysis
