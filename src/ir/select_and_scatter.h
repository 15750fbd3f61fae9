// select-and-scatter: the gradient of a max-pooling (or min-pooling), as
// XLA writes it.
//
//   %dx = f32[8,32,32,64] select-and-scatter(f32[8,32,32,64] %x,
//       f32[8,16,16,64] %dy, f32[] %zero),
//       window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x0_1x0_1x0_0},
//       select=%ge, scatter=%add
//
// The window slides over the operand as reduce-window's does
// (ir/reduce_window.h); the source has one element per window position.
// The result, of the operand's shape, starts at the init value; for each
// source element in row-major order, the window's landing elements of the
// operand are walked in row-major order of the taps and one is selected:
// the first, replaced by each later element e for which select(selected,
// e) is false; then result[selected] = scatter(result[selected], source
// element). A window on which no tap lands scatters nothing. This is XLA's
// evaluator's order, so a scatter that rounds (f32 add) gives its bits.
#pragma once

#include <optional>

#include "ir/attributes.h"
#include "ir/computation.h"
#include "ir/instruction.h"

namespace loom::ir {

// The direction of a select `(a, b) -> compare(a, b)` over its two scalar
// parameters with the default comparison type (GE for a max-pooling's
// gradient), written the other way round too (compare(b, a), direction=LE
// is GE); nullopt for anything else.
std::optional<ComparisonDirection> SelectComparison(const Computation& select);

}  // namespace loom::ir
