// Turns the literal text of a `constant(...)` (as the IR keeps it) into a
// Tensor of the instruction's shape.
#pragma once

#include <string_view>

#include "exec/tensor.h"
#include "ir/instruction.h"
#include "support/status.h"

namespace loom::exec {

// Builds a tensor of `shape` from `literal`, read by ir::ReadLiteral (its
// syntax and the range of each element type are there): integers exactly,
// floats as double rounded to the element type, one scalar for a whole
// array broadcast. `{...}` (a literal elided by the printer), tuple and
// complex literals are errors.
Expected<Tensor> ParseLiteral(std::string_view literal, const ir::Shape& shape);

// ParseLiteral for a constant instruction; errors name the op and its line.
Expected<Tensor> EvaluateConstant(const ir::Instruction& constant);

// get-dimension-size of a static shape: the operand's size along
// `dimensions`, a scalar of the result's type.
Expected<Tensor> DimensionSize(const ir::Instruction& get_dimension_size);

}  // namespace loom::exec
