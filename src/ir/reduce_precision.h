// reduce-precision: a float rounded to a narrower format and kept in its
// own type, as XLA's EmitReducePrecisionIR (quiet_nans=false) defines it.
//
//   %r = f32[1024] reduce-precision(f32[1024] %x), exponent_bits=8, mantissa_bits=7
//
// The mantissa is rounded to `mantissa_bits` bits, to nearest with ties to
// even (a carry may raise the exponent); then, where the exponent has
// fewer bits than the type's, a magnitude at or above 2^(bias'+1) becomes
// an infinity of its sign and one below 2^(1-bias') a zero of its sign,
// bias' = 2^(exponent_bits-1) - 1: the narrower format's subnormals are
// flushed, not rounded. A NaN stays the same NaN (with no mantissa bits
// left it becomes +inf). So exponent_bits=8, mantissa_bits=7 is a round
// trip through bf16, and 5, 10 through f16 without its subnormals.
#pragma once

#include <cstdint>

#include "ir/instruction.h"
#include "support/status.h"

namespace loom::ir {

struct ReducePrecision {
  int exponent_bits = 0;  // >= 1
  int mantissa_bits = 0;  // >= 0
};
Expected<ReducePrecision> ReducePrecisionOf(const Instruction& reduce_precision);

}  // namespace loom::ir
